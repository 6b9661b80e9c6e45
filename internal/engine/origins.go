package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc64"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
)

// originGeneration bounds one generation of the origin index: the index
// keeps the tags of the last one to two generations of forwarded requests
// applied (about 13 MB at most). A forward whose outcome is unknown is
// resolved within a leader change, while few entries are committed, so the
// tags it needs are still there.
const originGeneration = 1 << 17

// origins indexes the OpOrigin ops of the entries applied: which forwarded
// requests the log holds, at which position and revision. It is updated
// before the view applies an entry (so it is never behind the view the
// committer evaluates on: a tag the view holds is found), and safe for
// concurrent use.
//
// It is bounded, so it also knows what it no longer holds: every tag of
// an entry at or after from. Tags of older entries may be gone — dropped
// with an old generation, or never read because the view was rebuilt from
// a base generation (a snapshot) taken after them (setFrom). A request
// re-sent with its tag says where it can be (after the position its origin
// had applied before it first sent it): if that is before from, a miss
// proves nothing, and the request must not be evaluated again (lookup's
// tagUnknown).
type origins struct {
	mu sync.Mutex
	// gen is the tags of one generation (0: originGeneration).
	gen       int
	cur, prev map[revision.WriterTag]originAt
	// curMax and prevMax are the highest positions recorded in cur and
	// prev; from is the first position whose every tag is held.
	curMax, prevMax, from int64
}

type originAt struct{ lsn, rev int64 }

// tagVerdict is what the index knows of a tag.
type tagVerdict int

const (
	// tagAbsent: the log holds no entry with the tag (up to the entries
	// recorded).
	tagAbsent tagVerdict = iota
	// tagFound: committed at the position lookup returns.
	tagFound
	// tagUnknown: not held, but it may be in an entry the index no longer
	// holds.
	tagUnknown
)

// record indexes the OpOrigin ops of e.
func (o *origins) record(e *revision.Entry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range e.Ops {
		op := &e.Ops[i]
		if op.Kind != revision.OpOrigin {
			continue
		}
		gen := o.gen
		if gen <= 0 {
			gen = originGeneration
		}
		if o.cur == nil || len(o.cur) >= gen {
			if o.prev != nil {
				o.from = max(o.from, o.prevMax+1) // prev's tags are dropped
			}
			o.prev, o.prevMax = o.cur, o.curMax
			o.cur = make(map[revision.WriterTag]originAt)
		}
		o.cur[op.Origin] = originAt{lsn: e.LSN, rev: op.Rev}
		o.curMax = e.LSN
	}
}

// setFrom records that the entries before lsn were not all read (the view
// was rebuilt from a base generation at lsn-1): their tags may be missing.
func (o *origins) setFrom(lsn int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.from = max(o.from, lsn)
}

// lookup reports where the request bound to tag (boundTag), which its
// origin sent under sent, was committed (tagFound), or whether it is in no
// entry after after (tagAbsent) or cannot be told (tagUnknown: the index
// no longer holds every entry after after). after 0 means the request
// cannot be anywhere the index does not hold (its first send; or an origin
// that does not tell): a miss is tagAbsent. An entry holding sent itself
// was written by a leader of an older build, which bound no tag: the
// request is found there too.
func (o *origins) lookup(tag, sent revision.WriterTag, after int64) (lsn, rev int64, v tagVerdict) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.find(tag)
	if !ok && sent.Seq&boundSeq == 0 {
		at, ok = o.find(sent)
	}
	switch {
	case ok:
		return at.lsn, at.rev, tagFound
	case after > 0 && after+1 < o.from:
		return 0, 0, tagUnknown
	}
	return 0, 0, tagAbsent
}

// find looks tag up in both generations (the caller holds mu).
func (o *origins) find(tag revision.WriterTag) (originAt, bool) {
	at, ok := o.cur[tag]
	if !ok {
		at, ok = o.prev[tag]
	}
	return at, ok
}

// boundSeq marks a bound tag (boundTag) in its sequence number: no
// origin's own sequence number (a count from 1 per process) reaches it, so
// a tag in the log without it was written unbound, by a leader of an older
// build.
const boundSeq = 1 << 63

// boundTag is the tag a forwarded request is served, committed and indexed
// under by the leader: the tag its origin sent (sent) bound to what the
// request is — its kind (rpc, its etcd method), its bytes and the
// credential of its caller as the origin sent it — by a digest in the
// sequence number (boundSeq set; the origin's nonce kept). A tag in the log, or a call the leader is serving
// or answered, then answers only the very request of the very caller its
// origin sent under it: another request sent under the same tag (forged
// by a holder of the internal endpoint's token, who can read the origin's
// nonce and last sequence number in ZooKeeper's data) has another bound
// tag, is evaluated and committed as itself, and never answers the
// origin's. caller's Use (a proof of use, renewed per request) is not part
// of it. Errors: a request that cannot be marshaled.
func boundTag(sent revision.WriterTag, rpc string, req proto.Message, caller auth.Caller) (revision.WriterTag, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return revision.WriterTag{}, fmt.Errorf("zketcd: marshal the forwarded %s: %w", rpc, err)
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, part := range [][]byte{[]byte("zketcd forwarded request"), binary.BigEndian.AppendUint64(nil, sent.Nonce),
		binary.BigEndian.AppendUint64(nil, sent.Seq), []byte(rpc), body, []byte(caller.Token), []byte(caller.CertCN)} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write(part)
	}
	return revision.WriterTag{Nonce: sent.Nonce, Seq: binary.BigEndian.Uint64(h.Sum(nil)) | boundSeq}, nil
}

var fpTable = crc64.MakeTable(crc64.ECMA)

// authFingerprint identifies an encoded auth state: a forwarded write is
// evaluated only on the auth state its origin checked its permissions on.
func authFingerprint(state []byte) uint64 {
	if len(state) == 0 {
		return 0
	}
	return crc64.Checksum(state, fpTable) | 1
}
