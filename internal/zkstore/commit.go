package zkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/revision"
)

// Outcome is what became of a Commit.
type Outcome int

const (
	// Committed: the entry is durable at its LSN.
	Committed Outcome = iota
	// Conflict: another writer's entry holds the LSN. Nothing of ours was
	// written; catch up and evaluate again.
	Conflict
	// Behind: the predecessor entry no longer exists (it was compacted), so
	// the caller's view is too old to write; nothing was written.
	Behind
	// Refused: a guard did not hold (a fence was lost, a lease was renewed
	// meanwhile); nothing was written.
	Refused
	// Held: an absent guard did not hold: the znode it names exists (the
	// leader instance holds a read lease); nothing was written.
	Held
)

// Guard is a precondition of a commit: a znode must exist with a version,
// or (an absent guard) must not exist.
type Guard struct {
	path    string
	version int32
	absent  bool
}

// NewAbsentGuard returns the precondition that no znode exists at path.
// ZooKeeper has no such check: the multi creates the znode and deletes it
// again, and the create fails while it exists. For other implementations
// of the log.
func NewAbsentGuard(path string) Guard { return Guard{path: path, absent: true} }

// Absent reports whether the guard requires its znode not to exist.
func (g Guard) Absent() bool { return g.absent }

// ReadLeaseAbsent is the precondition of every commit that does not carry
// the leader's fence: no instance holds a read lease (--read-lease), so no
// leader can be answering reads from memory that this commit would make
// stale.
func (s *Store) ReadLeaseAbsent() Guard { return NewAbsentGuard(s.l.readLease()) }

// NewGuard returns the precondition that the znode at path exists at
// version (-1: any version). For other implementations of the log.
func NewGuard(path string, version int32) Guard { return Guard{path: path, version: version} }

// Path and Version are what the guard checks.
func (g Guard) Path() string   { return g.path }
func (g Guard) Version() int32 { return g.version }

// LeaseGuard requires the renewal token of lease id to be at version (it was
// not renewed since the caller read it).
func (s *Store) LeaseGuard(id int64, version int32) Guard {
	return Guard{path: s.l.lease(id), version: version}
}

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case Conflict:
		return "conflict"
	case Behind:
		return "behind"
	case Refused:
		return "refused"
	case Held:
		return "held"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// CommitResult describes a Commit that returned without error.
type CommitResult struct {
	Outcome Outcome
	// Zxid of the ZooKeeper transaction that wrote the entry (Committed).
	Zxid int64
	// Size of the encoded entry in bytes.
	Size int
	// MarkerVersion is the pipeline marker's version the commit left
	// (Committed with a Marker), unless MarkerUnknown says it is not
	// known: a commit with AnyVersion found in the log by its writer tag
	// (its answer was lost) left a version nobody read, and the marker
	// may have been set again since. A commit found in the log that
	// required a version (Marker.Version, or Create) left that version
	// +1 (or 0): its multi applied whole.
	MarkerVersion int32
	MarkerUnknown bool
	// MarkerMissed says a Refused commit failed on its marker op: the
	// marker was not at the version it required (the commit it is chained
	// on did not land, or had not landed yet when this one arrived) or,
	// for a create, existed already. MarkerGone says the marker did not
	// exist: it vanished with an expired session, or was never created.
	MarkerMissed, MarkerGone bool
	// PrevMissing says a Refused commit with Pipelined set found no entry
	// Prev: the commit it follows failed, or had not landed yet when this
	// one arrived.
	PrevMissing bool
}

// AnyVersion in a Marker: the commit sets the marker whatever its version.
const AnyVersion int32 = -1

// Marker is the pipeline marker op of a commit. A writer that keeps several
// commits in flight owns one marker, an ephemeral znode of its session
// (<root>/tokens/<name>): every commit it sends sets the marker at the
// version the commit before it left, so a commit lands only if the one it
// is chained on landed before it, whoever else writes the log meanwhile.
// A failed commit fails every commit chained on it; the marker is the only
// thing the pipeline leaves in ZooKeeper, and it goes with the session.
type Marker struct {
	// Name names the marker, unique to its writer (e.g. "<nonce>-m").
	Name string
	// Version is the version the marker must be at: the commit sets it to
	// Version+1; AnyVersion: any (CommitResult.MarkerVersion tells the
	// version left). Ignored with Create.
	Version int32
	// Create: the marker must not exist; the commit creates it, ephemeral,
	// at version 0.
	Create bool
}

// Left returns the version the marker is at right after a commit with this
// op landed: 0 for a create, Version+1 for a set at Version; known is false
// for AnyVersion, whose landing is the only witness of the version it left.
func (m *Marker) Left() (version int32, known bool) {
	switch {
	case m.Create:
		return 0, true
	case m.Version == AnyVersion:
		return 0, false
	}
	return m.Version + 1, true
}

// foundInLog fills in what res says of the marker for a commit of req found
// in the log by its writer tag (its own answer was lost): see
// CommitResult.MarkerVersion.
func foundInLog(req CommitRequest, res *CommitResult) {
	if req.Marker == nil {
		return
	}
	v, known := req.Marker.Left()
	res.MarkerVersion, res.MarkerUnknown = v, !known
}

// maxChunkedEntryBytes bounds one entry written as chunks: the multi that
// commits it checks every chunk, and a check costs a path's bytes.
const maxChunkedEntryBytes = 64 << 20

// ErrUnknownOutcome is returned by Commit when ctx ended while ZooKeeper had
// not yet told whether a sent commit was applied. The entry may or may not
// be in the log; the tailer will find out.
var ErrUnknownOutcome = errors.New("commit outcome unknown")

// CommitRequest describes one commit.
type CommitRequest struct {
	// Prev is the log position the entry follows; Entry.LSN is Prev+1.
	Prev  int64
	Entry *revision.Entry
	// Rev is the revision after the entry (written to the head).
	Rev int64
	// Guards are extra preconditions.
	Guards []Guard
	// Marker, if not nil, is the commit's pipeline marker op: it chains
	// the commit on the one before it (see Marker).
	Marker *Marker
	// After, if not nil, is the Sending of the commit this one is chained
	// on: Commit hands its multi to the connection only once After is
	// closed, so that ZooKeeper receives a pipeline's commits in the order
	// they were chained (almost always: the client gives no completion of
	// the hand-over, so a commit can still overtake its predecessor; it is
	// then refused with PrevMissing, nothing written). Sending, if not
	// nil, is closed by Commit right before it hands the multi over (or
	// when it returns without sending).
	After   <-chan struct{}
	Sending chan struct{}
	// Pipelined says entry Prev is a commit of ours still in flight: if it
	// is missing, the outcome is Refused (it failed, or ZooKeeper received
	// this commit first), not Behind.
	Pipelined bool
	// Predecessor, if not nil, is the commit this one is chained on: the
	// one whose landing leaves the marker at Marker.Version. After a lost
	// connection Commit sends this commit again only once the
	// predecessor's outcome is known, so that ZooKeeper receives the
	// re-sent commits of a pipeline in their order too: sent on their own
	// backoffs, a follow-on commit could arrive first, find no entry Prev
	// and stay of unknown outcome. If the predecessor provably did not
	// land, this commit is not sent again: its marker op needs the version
	// only the predecessor sets, so it cannot have landed either; the
	// outcome is Refused with PrevMissing, nothing written.
	Predecessor *Predecessor
}

// Predecessor is what a chained commit knows of the commit it is chained
// on (CommitRequest.Predecessor).
type Predecessor struct {
	// Done is closed once the predecessor's outcome is known (its Commit
	// returned).
	Done <-chan struct{}
	// Landed, called only once Done is closed, reports whether the
	// predecessor's entry was written, and whether that is known (see
	// Landed).
	Landed func() (landed, known bool)
}

// Landed tells what a Commit's result says of its entry: written (landed),
// provably not written, or unknown (known false: ErrUnknownOutcome, or an
// error that does not say nothing was written).
func Landed(res CommitResult, err error) (landed, known bool) {
	switch {
	case err == nil:
		return res.Outcome == Committed, true
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrEntryTooLarge):
		return false, true
	}
	return false, false
}

// Commit appends req.Entry to the log in one multi: check that entry Prev
// exists, create entry Prev+1, set the head to {Prev+1, Rev}. It returns the
// zxid of the commit.
//
// A multi whose connection dropped is re-sent byte for byte until ZooKeeper
// answers; if entry Prev+1 then exists, its writer tag tells whether it is
// ours. So an entry is never written twice and a failure is never reported
// for an entry that was written. Errors: ErrEntryTooLarge, ErrUnavailable
// (nothing was written), ErrUnknownOutcome (ctx ended while unresolved).
//
// The same multi creates the renewal token of every lease the entry grants,
// deletes that of every lease it revokes, checks every guard, and sets (or
// creates) the pipeline marker; if one of those fails, nothing is written
// and the outcome is Refused.
func (s *Store) Commit(ctx context.Context, req CommitRequest) (CommitResult, error) {
	lsn := req.Prev + 1
	if req.Entry.LSN != lsn {
		return CommitResult{}, fmt.Errorf("commit: entry LSN %d does not follow %d", req.Entry.LSN, req.Prev)
	}
	data := EncodeEntryFormat(req.Entry, s.Format())
	res := CommitResult{Size: len(data)}
	out, zxid, err := s.commit(ctx, req, data, &res)
	res.Outcome, res.Zxid = out, zxid
	return res, err
}

// failedOp returns the index of the op that failed a multi, or -1. Ops after
// it report a runtime inconsistency, ops before it nothing.
func failedOp(mr []zk.MultiResponse) int {
	for i, r := range mr {
		if errors.Is(r.Error, zk.ErrNodeExists) || errors.Is(r.Error, zk.ErrNoNode) ||
			errors.Is(r.Error, zk.ErrBadVersion) || errors.Is(r.Error, zk.ErrNotEmpty) ||
			errors.Is(r.Error, zk.ErrNoAuth) {
			return i
		}
	}
	return -1
}

func (s *Store) commit(ctx context.Context, req CommitRequest, data []byte, res *CommitResult) (Outcome, int64, error) {
	lsn := req.Prev + 1
	data, chunks, err := s.storedData(lsn, req.Entry.Writer, data)
	if err != nil {
		return 0, 0, err
	}
	if err := s.ensureBucket(lsn); err != nil {
		return 0, 0, err
	}
	t := &commitTry{s: s, req: req, res: res, m: multiOps(s.l, s.acl, req, data, chunks), lsn: lsn, lg: s.log.WithField("lsn", lsn)}
	var sending sync.Once
	handOver := func() {
		if req.Sending != nil {
			sending.Do(func() { close(req.Sending) })
		}
	}
	defer handOver()
	if req.After != nil {
		select {
		case <-req.After:
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("entry %d: %w: %v", lsn, ErrUnavailable, ctx.Err())
		case <-s.closed:
			return 0, 0, fmt.Errorf("entry %d: %w: store closed", lsn, ErrUnavailable)
		}
	}
	backoff := 20 * time.Millisecond
	pred := req.Predecessor
	for {
		if t.unknown && pred != nil {
			// Sent again only behind the commit it is chained on.
			if refused, err := t.behind(ctx, pred); refused || err != nil {
				return Refused, 0, err
			}
			pred = nil
		}
		mr, err := bounded(s, func() ([]zk.MultiResponse, error) {
			handOver()
			return s.conn.Multi(t.m.ops...)
		})
		switch r, next := t.outcome(mr, err); next {
		case settled:
			return r.out, r.zxid, r.err
		case retryNow:
			continue
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("entry %d: %w: %v", lsn, ErrUnknownOutcome, ctx.Err())
		case <-s.closed:
			return 0, 0, fmt.Errorf("entry %d: %w: store closed", lsn, ErrUnknownOutcome)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// commitTry is one commit across its sends (Store.commit): the multi, and
// whether a send may have landed without its answer (unknown), after which
// every answer is read in that light.
type commitTry struct {
	s       *Store
	req     CommitRequest
	res     *CommitResult
	m       commitOps
	lsn     int64
	lg      *logrus.Entry
	unknown bool
}

// settledAs is a commit's outcome as an answer settled it: its Outcome and
// zxid, or its error.
type settledAs struct {
	out  Outcome
	zxid int64
	err  error
}

// next is what a commit does after an answer (commitTry.outcome).
type next int

const (
	settled    next = iota // the outcome (or error) is known
	retryNow               // send again at once
	retryLater             // send again after a backoff
)

// behind waits, before a commit of unknown outcome is sent again, for the
// commit it is chained on: if that one is known not to have landed,
// neither did this one (refused, with res.PrevMissing). Errors: ctx's or
// the store's closing, wrapping ErrUnknownOutcome.
func (t *commitTry) behind(ctx context.Context, pred *Predecessor) (refused bool, err error) {
	select {
	case <-pred.Done:
	case <-ctx.Done():
		return false, fmt.Errorf("entry %d: %w: %v", t.lsn, ErrUnknownOutcome, ctx.Err())
	case <-t.s.closed:
		return false, fmt.Errorf("entry %d: %w: store closed", t.lsn, ErrUnknownOutcome)
	}
	landed, known := pred.Landed()
	req := t.req
	chained := req.Pipelined && req.Marker != nil && !req.Marker.Create && req.Marker.Version != AnyVersion
	if known && !landed && chained {
		t.lg.Debug("the commit this one is chained on did not land: neither did this one")
		t.res.PrevMissing = true
		return true, nil
	}
	return false, nil
}

// outcome classifies ZooKeeper's answer to one send of the multi (mr,
// err): the commit's outcome, or a send again.
func (t *commitTry) outcome(mr []zk.MultiResponse, err error) (settledAs, next) {
	opErr := func(i int) error {
		if i < len(mr) {
			return mr[i].Error
		}
		return nil
	}
	switch failed := failedOp(mr); {
	case err == nil:
		return t.committed(mr)
	case errors.Is(opErr(opCreateEntry), zk.ErrNodeExists) || (errors.Is(err, zk.ErrNodeExists) && len(mr) == 0):
		// The position is taken: by this commit (a send whose answer was
		// lost) or by another writer.
		out, zxid, rerr := t.s.resolve(t.req, t.res)
		if rerr == nil {
			if t.unknown {
				t.lg.WithField("outcome", out).Info("resolved commit of unknown outcome by its writer tag")
			}
			return settledAs{out: out, zxid: zxid}, settled
		}
		if !errors.Is(rerr, ErrUnavailable) {
			return settledAs{err: rerr}, settled
		}
		t.unknown = true // could not read it back yet
	case failed >= opFirstGuard:
		return t.refused(mr, failed)
	case errors.Is(opErr(opCreateEntry), zk.ErrNoNode):
		// The bucket is missing (a multi applies nothing when one op fails).
		t.s.forgetBucket(t.lsn)
		if err := t.s.ensureBucket(t.lsn); err != nil && !t.unknown {
			return settledAs{err: err}, settled
		}
		return settledAs{}, retryNow
	case errors.Is(opErr(opCheckPrev), zk.ErrNoNode) || (errors.Is(err, zk.ErrNoNode) && len(mr) == 0):
		return t.prevGone()
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrSessionExpired), isNoAnswer(err):
		if !t.unknown {
			t.lg.WithError(err).Warn("connection lost during commit; re-sending the same multi until ZooKeeper answers")
		}
		t.unknown = true
	case errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrClosing):
		if !t.unknown {
			return settledAs{err: t.s.wrap("commit", err)}, settled
		}
	default:
		// A definite failure: a failed multi changed nothing.
		if !t.unknown {
			return settledAs{err: t.s.wrap("commit", err)}, settled
		}
		t.lg.WithError(err).Warn("commit retry failed")
	}
	return settledAs{}, retryLater
}

// committed is the outcome of a multi that succeeded: the head's zxid, and
// the marker's version it left.
func (t *commitTry) committed(mr []zk.MultiResponse) (settledAs, next) {
	if len(mr) <= opSetHead || mr[opSetHead].Stat == nil {
		return settledAs{err: fmt.Errorf("commit entry %d: malformed multi response", t.lsn)}, settled
	}
	if mk := t.m.marker; mk >= 0 {
		switch {
		case t.req.Marker.Create:
			t.res.MarkerVersion = 0
		case mk < len(mr) && mr[mk].Stat != nil:
			t.res.MarkerVersion = mr[mk].Stat.Version
		default:
			foundInLog(t.req, t.res) // no stat: what the op itself tells
		}
	}
	return settledAs{out: Committed, zxid: mr[opSetHead].Stat.Mzxid}, settled
}

// refused is the outcome of a multi one of whose later ops (a chunk, a
// guard, the marker, a lease op: index failed) failed: Refused, or Held
// for an absent guard's znode that exists — unless a send whose answer was
// lost landed before.
func (t *commitTry) refused(mr []zk.MultiResponse, failed int) (settledAs, next) {
	if t.unknown {
		// Our earlier attempt may have landed (and deleted a revoked
		// lease's token): look at entry lsn.
		if out, zxid, rerr := t.s.resolve(t.req, t.res); rerr == nil {
			return settledAs{out: out, zxid: zxid}, settled
		}
	}
	if failed == t.m.marker {
		t.res.MarkerGone = errors.Is(mr[failed].Error, zk.ErrNoNode)
		t.res.MarkerMissed = !t.res.MarkerGone
	}
	t.lg.WithField("op", fmt.Sprintf("%T %v", t.m.ops[failed], mr[failed].Error)).Debug("commit refused by a guard")
	if t.m.absent[failed] && errors.Is(mr[failed].Error, zk.ErrNodeExists) {
		return settledAs{out: Held}, settled
	}
	return settledAs{out: Refused}, settled
}

// prevGone is the outcome of a multi whose previous entry is missing:
// Behind (a view behind a compaction), Refused for a pipelined commit
// whose predecessor did not land, or, for a send of unknown outcome, what
// the log holds at the position.
func (t *commitTry) prevGone() (settledAs, next) {
	if !t.unknown && t.req.Pipelined {
		t.res.PrevMissing = true
		return settledAs{out: Refused}, settled
	}
	if !t.unknown {
		return settledAs{out: Behind}, settled
	}
	// Our earlier attempt may have landed and been compacted since.
	out, zxid, rerr := t.s.resolve(t.req, t.res)
	if rerr == nil {
		return settledAs{out: out, zxid: zxid}, settled
	}
	if errors.Is(rerr, ErrEntryMissing) {
		return settledAs{out: Behind, err: fmt.Errorf("entry %d: %w", t.lsn, ErrUnknownOutcome)}, settled
	}
	return settledAs{}, retryLater
}

// storedData is what entry lsn's znode holds for the encoded entry data:
// data itself within the byte budget, else an indirect record naming the
// chunks it writes first (returned too). Errors: ErrEntryTooLarge above
// maxChunkedEntryBytes, the chunks' writes.
func (s *Store) storedData(lsn int64, w revision.WriterTag, data []byte) ([]byte, []string, error) {
	if len(data) <= s.cfg.MaxEntryBytes {
		return data, nil, nil
	}
	if len(data) > maxChunkedEntryBytes {
		return nil, nil, fmt.Errorf("%w: %d bytes > %d", ErrEntryTooLarge, len(data), maxChunkedEntryBytes)
	}
	chunks, err := s.writeChunks(lsn, w, data)
	if err != nil {
		return nil, nil, err
	}
	return encodeIndirect(chunks, len(data), crc32.Checksum(data, crcTable)), chunks, nil
}

// The first ops of every commit's multi, by index (multiOps).
const (
	opCheckPrev   = iota // check that entry Prev exists
	opCreateEntry        // create entry Prev+1: the compare-and-swap
	opSetHead            // set the head to the new entry
	opFirstGuard         // chunks, guards, the marker and lease ops follow
)

// commitOps is the multi of one commit and what some of its ops mean.
type commitOps struct {
	ops []any
	// absent marks the ops that fail only while an absent guard's znode
	// exists (the outcome is then Held, not Refused).
	absent map[int]bool
	// marker is the index of the pipeline marker op (-1: none): its
	// failure means the commit before this one did not land (yet).
	marker int
}

// multiOps returns the ZooKeeper multi that commits req, whose entry is
// stored as data at entry Prev+1 (the encoded entry, or the indirect record
// naming chunks): check that entry Prev exists, create entry Prev+1, set
// the head to {Prev+1, Rev} — the first three ops, which Commit's outcome
// decoding relies on — then check that each chunk exists, check each
// guard (an absent guard creates and deletes its znode), set (or create,
// ephemeral) the pipeline marker, and create or delete the renewal token of each
// lease the entry grants or revokes. Guards come before the lease ops: a
// revoke deletes the token a guard checks. It does no I/O.
func multiOps(l layout, acl []zk.ACL, req CommitRequest, data []byte, chunks []string) commitOps {
	lsn := req.Prev + 1
	headData, _ := json.Marshal(Head{LSN: lsn, Rev: req.Rev})
	m := commitOps{absent: map[int]bool{}, marker: -1}
	m.ops = make([]any, opFirstGuard, opFirstGuard+len(chunks)+2*len(req.Guards)+1)
	m.ops[opCheckPrev] = &zk.CheckVersionRequest{Path: l.entry(req.Prev), Version: -1}
	m.ops[opCreateEntry] = &zk.CreateRequest{Path: l.entry(lsn), Data: data, Acl: acl}
	m.ops[opSetHead] = &zk.SetDataRequest{Path: l.head(), Data: headData, Version: -1}
	for _, name := range chunks {
		m.ops = append(m.ops, &zk.CheckVersionRequest{Path: l.chunk(name), Version: -1})
	}
	for _, g := range req.Guards {
		if g.absent {
			m.absent[len(m.ops)] = true
			m.ops = append(m.ops, &zk.CreateRequest{Path: g.path, Acl: acl}, &zk.DeleteRequest{Path: g.path, Version: -1})
			continue
		}
		m.ops = append(m.ops, &zk.CheckVersionRequest{Path: g.path, Version: g.version})
	}
	if mk := req.Marker; mk != nil {
		m.marker = len(m.ops)
		if mk.Create {
			m.ops = append(m.ops, &zk.CreateRequest{Path: l.token(mk.Name), Flags: zk.FlagEphemeral, Acl: acl})
		} else {
			m.ops = append(m.ops, &zk.SetDataRequest{Path: l.token(mk.Name), Data: []byte{}, Version: mk.Version})
		}
	}
	for _, op := range req.Entry.Ops {
		switch op.Kind {
		case revision.OpLeaseGrant:
			m.ops = append(m.ops, &zk.CreateRequest{Path: l.lease(op.Lease), Acl: acl})
		case revision.OpLeaseRevoke:
			m.ops = append(m.ops, &zk.DeleteRequest{Path: l.lease(op.Lease), Version: -1})
		}
	}
	return m
}

// resolve reads entry req.Prev+1 and tells whether req's writer wrote it;
// if so, res says what the commit left of the marker (foundInLog).
func (s *Store) resolve(req CommitRequest, res *CommitResult) (Outcome, int64, error) {
	e, _, err := s.readEntry(req.Prev + 1)
	if err != nil {
		return 0, 0, err
	}
	if e.Writer == req.Entry.Writer {
		foundInLog(req, res)
		return Committed, e.Zxid, nil
	}
	return Conflict, 0, nil
}

func (s *Store) ensureBucket(lsn int64) error {
	b := lsn >> bucketShift
	s.mu.Lock()
	known := s.buckets[b]
	s.mu.Unlock()
	if known {
		return nil
	}
	_, err := s.conn.Create(s.l.bucket(lsn), nil, 0, s.acl)
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return s.wrap("create log bucket", err)
	}
	s.mu.Lock()
	s.buckets[b] = true
	s.mu.Unlock()
	if lsn&(1<<bucketShift-1) == 0 {
		s.log.WithFields(logrus.Fields{"bucket": b}).Debug("created log bucket")
	}
	return nil
}

func (s *Store) forgetBucket(lsn int64) {
	s.mu.Lock()
	delete(s.buckets, lsn>>bucketShift)
	s.mu.Unlock()
}
