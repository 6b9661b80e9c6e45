package engine

import (
	"hash/crc64"
	"sync"

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
type origins struct {
	mu        sync.Mutex
	cur, prev map[revision.WriterTag]originAt
}

type originAt struct{ lsn, rev int64 }

// record indexes the OpOrigin ops of e.
func (o *origins) record(e *revision.Entry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range e.Ops {
		op := &e.Ops[i]
		if op.Kind != revision.OpOrigin {
			continue
		}
		if o.cur == nil || len(o.cur) >= originGeneration {
			o.prev, o.cur = o.cur, make(map[revision.WriterTag]originAt)
		}
		o.cur[op.Origin] = originAt{lsn: e.LSN, rev: op.Rev}
	}
}

// lookup reports where the request tagged tag was committed, if the index
// holds it.
func (o *origins) lookup(tag revision.WriterTag) (lsn, rev int64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.cur[tag]
	if !ok {
		at, ok = o.prev[tag]
	}
	return at.lsn, at.rev, ok
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
