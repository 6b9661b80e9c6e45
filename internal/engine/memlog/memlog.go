// Package memlog is an in-memory implementation of the engine's log
// (engine.Log) with fault hooks, so that the committer, the tailer, lease
// expiry and compaction can be tested without ZooKeeper or a JVM.
//
// A Store is the shared state — what one ZooKeeper root holds: the log
// entries, the head, lease tokens, pipeline markers, members, the election
// and base generations. Each Client is one instance's session on it; two
// clients on one store are two instances on one root. The semantics follow
// zkstore's: a commit is one atomic step that checks its predecessor, claims
// the next position (a position already taken resolves by writer tag to
// Committed or Conflict), checks the guards, sets the pipeline marker and
// creates or deletes lease tokens; ephemeral state (pipeline markers, the
// election node, the member) belongs to the session and goes when it
// expires.
//
// Faults: a commit hook (SetCommitFault) can lose the compare-and-swap to a
// foreign writer, lose a commit's outcome after applying it or before,
// make ZooKeeper unavailable for it, or drop the connection under it
// (sent again as zkstore sends it); ExpireSession ends a client's session;
// SetConnected takes its connection away and back; SetUnavailable fails
// every call; RollBack takes the store back to an older entry, as a
// restore from a backup does.
//
// Everything is safe for concurrent use. Entries are stored encoded (the
// zkstore codec), so readers never share memory with writers.
package memlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Fault is what a commit hook makes of one commit.
type Fault int

const (
	// NoFault lets the commit proceed.
	NoFault Fault = iota
	// LoseCAS makes another writer take the next log position first: a
	// foreign entry putting ForeignKey is appended after the head, and the
	// commit's outcome is Conflict (or Refused, for a commit pipelined
	// behind one that has not landed).
	LoseCAS
	// UnknownApplied applies the commit and then loses its answer: Commit
	// returns zkstore.ErrUnknownOutcome, as zkstore does when its context
	// ends before ZooKeeper answers a re-sent multi.
	UnknownApplied
	// UnknownLost loses the commit and its answer: nothing is written and
	// Commit returns zkstore.ErrUnknownOutcome.
	UnknownLost
	// Unavailable fails the commit with zkstore.ErrUnavailable; nothing is
	// written.
	Unavailable
	// Blip drops the connection with the commit on its way, before it
	// reaches the log (a ZooKeeper connection reset), and sends it again as
	// zkstore does: after a reconnect delay (random, up to BlipDelay)
	// and, for a commit with a Predecessor, once that one's outcome is
	// known — not at all if it provably did not land (Refused,
	// PrevMissing). A commit sent again that finds neither its
	// predecessor entry nor its own has an unknown outcome
	// (zkstore.ErrUnknownOutcome), as on ZooKeeper.
	Blip
)

// BlipDelay bounds the reconnect delay of a Blip.
const BlipDelay = 20 * time.Millisecond

// ForeignKey is the key the foreign writer of LoseCAS puts.
const ForeignKey = "memlog/foreign"

// Options configures a Store.
type Options struct {
	// ClusterID is the cluster identity (0: 1).
	ClusterID uint64
	// MaxEntryBytes is the entry budget reported to the engine (0: zkstore's
	// default). Larger entries are stored whole, as zkstore stores them in
	// chunks; only entries above MaxChunkedBytes fail.
	MaxEntryBytes int
	// MaxChunkedBytes bounds one entry (0: 64 MiB, zkstore's bound).
	MaxChunkedBytes int
	// Root is the name Root reports ("": "/memlog").
	Root string
	// SessionTimeout is the session timeout every client asks for (0:
	// zkstore's default), GrantedTimeout what it is granted (0: what it
	// asks for); TickTime the tick Grant reports (0: 2 s; negative:
	// unknown, as from servers that refuse conf).
	SessionTimeout, GrantedTimeout, TickTime time.Duration
}

type stored struct {
	data []byte
	zxid int64
	rev  int64 // the head's revision after the entry
}

// marker is a pipeline marker: ephemeral, of session, at version (the
// number of times it was set).
type marker struct {
	session int64
	version int32
}

type leaseToken struct {
	version int32
	mtime   time.Time
}

// mtimeNow is a znode's modification time as ZooKeeper records it: the
// wall clock in milliseconds, with no monotonic reading (so a comparison
// with it is a wall-clock one, as on ZooKeeper).
func mtimeNow() time.Time { return time.UnixMilli(time.Now().UnixMilli()) }

type candidate struct {
	seq      int64
	memberID uint64
	session  int64
	path     string
}

type member struct {
	m       zkstore.Member
	session int64
}

// Store is the shared state of one root.
type Store struct {
	opts Options

	mu           sync.Mutex
	zxid         int64
	entries      map[int64]stored
	head         zkstore.Head
	headCh       chan struct{}      // closed at the next head change
	tokens       map[string]*marker // pipeline markers, by name
	leases       map[int64]*leaseToken
	members      map[uint64]member
	election     []*candidate
	electionCh   chan struct{} // closed at the next election change
	seq          int64
	base         zkstore.Base
	bases        map[string][]byte
	baseAttempts int                     // base generations prepared: each gets a path of its own
	prepared     map[string]zkstore.Base // generation path -> the description it was prepared after
	sessions     int64
	fault        func(zkstore.CommitRequest) Fault
	down         bool
	quorum       int   // QuorumHead calls
	watches      int   // WatchHead calls
	commits      int   // commits that wrote an entry
	readLease    int64 // session holding the read lease znode (0: none)
	answer       func(zkstore.CommitRequest, zkstore.Outcome)
}

// New returns a store holding the sentinel entry 1 (revision 1, the empty
// store), as a fresh zkstore root does.
func New(opts Options) *Store {
	if opts.ClusterID == 0 {
		opts.ClusterID = 1
	}
	if opts.MaxEntryBytes <= 0 {
		opts.MaxEntryBytes = zkstore.DefaultMaxEntryBytes
	}
	if opts.MaxChunkedBytes <= 0 {
		opts.MaxChunkedBytes = 64 << 20
	}
	if opts.Root == "" {
		opts.Root = "/memlog"
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = zkstore.DefaultSessionTimeout
	}
	if opts.GrantedTimeout <= 0 {
		opts.GrantedTimeout = opts.SessionTimeout
	}
	if opts.TickTime == 0 {
		opts.TickTime = 2 * time.Second
	}
	s := &Store{
		opts:       opts,
		entries:    map[int64]stored{},
		headCh:     make(chan struct{}),
		tokens:     map[string]*marker{},
		leases:     map[int64]*leaseToken{},
		members:    map[uint64]member{},
		electionCh: make(chan struct{}),
		bases:      map[string][]byte{},
		prepared:   map[string]zkstore.Base{},
		base:       zkstore.Base{},
	}
	s.zxid = 1
	s.entries[1] = stored{data: zkstore.EncodeEntry(&revision.Entry{LSN: 1}), zxid: 1, rev: 1}
	s.head = zkstore.Head{LSN: 1, Rev: 1, Zxid: 1}
	return s
}

// SetCommitFault installs fn, called (without the store's lock) before
// every commit of every client; nil removes it.
func (s *Store) SetCommitFault(fn func(zkstore.CommitRequest) Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = fn
}

// SetUnavailable makes every call of every client fail with
// zkstore.ErrUnavailable (true) or work again (false).
func (s *Store) SetUnavailable(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// QuorumCalls returns how many QuorumHead calls (barrier rounds) were made.
func (s *Store) QuorumCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quorum
}

// HeadWatches returns how many times a client set a watch on the head
// (WatchHead calls).
func (s *Store) HeadWatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches
}

// Commits returns how many commits wrote an entry (foreign ones included).
func (s *Store) Commits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

// Entry returns the entry at lsn, decoded, or false if there is none.
func (s *Store) Entry(lsn int64) (*revision.Entry, bool) {
	s.mu.Lock()
	st, ok := s.entries[lsn]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	e, err := zkstore.DecodeEntry(st.data)
	if err != nil {
		return nil, false
	}
	e.LSN, e.Zxid = lsn, st.zxid
	return e, true
}

// HeadNow returns the head.
func (s *Store) HeadNow() zkstore.Head {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}

// LeaseTokenExists reports whether lease id's renewal token exists.
func (s *Store) LeaseTokenExists(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases[id] != nil
}

// AppendForeign appends an entry of another writer holding ops (their
// revisions must follow the head's) and returns its position.
func (s *Store) AppendForeign(ops []revision.Op) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendForeignLocked(ops)
}

func (s *Store) appendForeignLocked(ops []revision.Op) int64 {
	lsn := s.head.LSN + 1
	rev := s.head.Rev
	for _, op := range ops {
		if op.Kind == revision.OpTxn {
			rev = op.Rev
		}
	}
	e := &revision.Entry{LSN: lsn, Writer: revision.WriterTag{Nonce: 0xf0e1, Seq: uint64(lsn)}, Ops: ops}
	s.writeLocked(e, zkstore.EncodeEntry(e), rev)
	return lsn
}

// RollBack makes the store what an older copy of it holds, as a ZooKeeper
// ensemble restored from a backup taken at entry lsn: the entries after lsn
// vanish and the head moves back to lsn (its revision and zxid), and head
// watches fire. Later commits reuse those positions (with new zxids). Lease
// tokens, members, the election and base generations are left as they
// are; sessions are not ended. It fails, changing nothing, for an lsn the
// store does not hold.
func (s *Store) RollBack(lsn int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.entries[lsn]
	if !ok {
		return fmt.Errorf("memlog: roll back to entry %d: %w", lsn, zkstore.ErrEntryMissing)
	}
	for n := range s.entries {
		if n > lsn {
			delete(s.entries, n)
		}
	}
	s.head = zkstore.Head{LSN: lsn, Rev: at.rev, Zxid: at.zxid}
	close(s.headCh)
	s.headCh = make(chan struct{})
	return nil
}

// AppendForeignPut appends another writer's put of ForeignKey at the
// revision after the head's, atomically with reading the head, and returns
// its position.
func (s *Store) AppendForeignPut() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.foreignPutLocked()
}

// foreignPut is LoseCAS's entry: a put of ForeignKey at the next revision.
func (s *Store) foreignPutLocked() int64 {
	rev := s.head.Rev + 1
	return s.appendForeignLocked([]revision.Op{{Kind: revision.OpTxn, Rev: rev, Changes: []revision.Change{
		{Key: []byte(ForeignKey), Value: []byte(strconv.FormatInt(rev, 10))},
	}}})
}

func (s *Store) writeLocked(e *revision.Entry, data []byte, rev int64) int64 {
	s.zxid++
	s.entries[e.LSN] = stored{data: data, zxid: s.zxid, rev: rev}
	s.head = zkstore.Head{LSN: e.LSN, Rev: rev, Zxid: s.zxid}
	close(s.headCh)
	s.headCh = make(chan struct{})
	s.commits++
	return s.zxid
}

func errUnavailable(what string) error {
	return fmt.Errorf("%s: %w (injected)", what, zkstore.ErrUnavailable)
}

// guardHolds reports whether the znode a guard names exists at its version.
func (s *Store) guardHoldsLocked(g zkstore.Guard) bool {
	p := g.Path()
	var version int32
	switch {
	case strings.HasPrefix(p, "/leases/"):
		id, err := strconv.ParseUint(strings.TrimPrefix(p, "/leases/"), 16, 64)
		if err != nil {
			return false
		}
		t := s.leases[int64(id)]
		if t == nil {
			return false
		}
		version = t.version
	case strings.HasPrefix(p, "/election/"):
		found := false
		for _, c := range s.election {
			found = found || c.path == p
		}
		if !found {
			return false
		}
	case strings.HasPrefix(p, "/tokens/"):
		if _, ok := s.tokens[strings.TrimPrefix(p, "/tokens/")]; !ok {
			return false
		}
	default:
		return false
	}
	return g.Version() == -1 || g.Version() == version
}

// dropSessionLocked deletes the ephemeral state of session: its pipeline
// markers, members and election candidates.
func (s *Store) dropSessionLocked(session int64) {
	if s.readLease == session {
		s.readLease = 0
	}
	for name, mk := range s.tokens {
		if mk.session == session {
			delete(s.tokens, name)
		}
	}
	for id, m := range s.members {
		if m.session == session {
			delete(s.members, id)
		}
	}
	kept := s.election[:0]
	for _, cand := range s.election {
		if cand.session != session {
			kept = append(kept, cand)
		}
	}
	s.election = kept
}

func (s *Store) electionChangedLocked() {
	close(s.electionCh)
	s.electionCh = make(chan struct{})
}

// Client is one instance's session on a store. It implements engine.Log.
type Client struct {
	s *Store

	mu        sync.Mutex
	session   int64
	connected bool
	sessionCh chan struct{} // closed at the next session change
	granted   time.Duration // the current connection's grant
	minGrant  time.Duration // the session's least
	since     time.Time     // the current connection's start
	member    *zkstore.Member
	elections []*Election
	closed    bool
}

// Client opens a new session on the store.
func (s *Store) Client() *Client {
	s.mu.Lock()
	s.sessions++
	id := s.sessions
	s.mu.Unlock()
	t := s.opts.GrantedTimeout
	return &Client{s: s, session: id, connected: true, sessionCh: make(chan struct{}), granted: t, minGrant: t, since: time.Now()}
}

// Grant reports the session's grant: Options.GrantedTimeout (or what
// SetGranted set) and Options.TickTime.
func (c *Client) Grant() zkstore.Grant {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := zkstore.Grant{Session: c.session, Requested: c.s.opts.SessionTimeout, Timeout: c.granted,
		MinTimeout: c.minGrant, Since: c.since}
	if t := c.s.opts.TickTime; t > 0 {
		g.Tick, g.TickFrom = t, "declared"
	} else {
		g.TickErr = errors.New("conf is not allowed (memlog)")
	}
	return g
}

// SetGranted reconnects the session as to a server that grants timeout:
// the connection starts anew, with that grant.
func (c *Client) SetGranted(timeout time.Duration) {
	c.mu.Lock()
	c.granted, c.minGrant, c.since = timeout, min(c.minGrant, timeout), time.Now()
	close(c.sessionCh)
	c.sessionCh = make(chan struct{})
	c.mu.Unlock()
}

// ExpireSession ends the client's session as ZooKeeper does when it
// expires: its pipeline marker, election node and member znode vanish. The
// client then has a new session, on which the member is registered again
// and its elections campaign again (at the end of the queue).
func (c *Client) ExpireSession() {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.mu.Lock()
	old := c.session
	s.sessions++
	c.session = s.sessions
	c.granted, c.minGrant, c.since = s.opts.GrantedTimeout, s.opts.GrantedTimeout, time.Now()
	s.dropSessionLocked(old)
	if c.member != nil {
		s.members[c.member.ID] = member{m: *c.member, session: c.session}
	}
	for _, e := range c.elections {
		if !e.closed {
			e.cand = s.newCandidateLocked(e.memberID, c.session)
		}
	}
	s.electionChangedLocked()
	s.mu.Unlock()
	close(c.sessionCh)
	c.sessionCh = make(chan struct{})
}

// SetConnected takes the client's connection away (false) or gives it back
// (true); the session survives. While disconnected, Session reports it and
// the client's elections report no leadership.
func (c *Client) SetConnected(connected bool) {
	c.mu.Lock()
	c.connected = connected
	if connected {
		c.since = time.Now()
	}
	close(c.sessionCh)
	c.sessionCh = make(chan struct{})
	c.mu.Unlock()
	c.s.mu.Lock()
	c.s.electionChangedLocked()
	c.s.mu.Unlock()
}

// check returns an error when the store is down or the client closed or
// disconnected.
func (c *Client) check(what string) error {
	c.mu.Lock()
	ok := c.connected && !c.closed
	c.mu.Unlock()
	c.s.mu.Lock()
	down := c.s.down
	c.s.mu.Unlock()
	if down || !ok {
		return errUnavailable(what)
	}
	return nil
}

// Meta returns the cluster identity.
func (c *Client) Meta() zkstore.Meta { return zkstore.Meta{Format: 1, ClusterID: c.s.opts.ClusterID} }

// MaxEntryBytes returns the configured entry budget.
func (c *Client) MaxEntryBytes() int { return c.s.opts.MaxEntryBytes }

// Root returns the store's name (Options.Root).
func (c *Client) Root() string { return c.s.opts.Root }

// Session returns the session ID and whether the client is connected.
func (c *Client) Session() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session, c.connected && !c.closed
}

// SessionChanged returns a channel closed at the next session change
// (ExpireSession) or connection change (SetConnected).
func (c *Client) SessionChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionCh
}

// Close ends the session: its ephemeral state goes at once.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	old := c.session
	c.mu.Unlock()
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropSessionLocked(old)
	s.electionChangedLocked()
}

// Commit appends req.Entry at req.Prev+1 with zkstore's outcomes.
func (c *Client) Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error) {
	lsn := req.Prev + 1
	if req.Entry.LSN != lsn {
		return zkstore.CommitResult{}, fmt.Errorf("commit: entry LSN %d does not follow %d", req.Entry.LSN, req.Prev)
	}
	if err := ctx.Err(); err != nil {
		return zkstore.CommitResult{}, errUnavailable("commit")
	}
	sent := false
	handOver := func() { // see zkstore.CommitRequest.Sending
		if !sent && req.Sending != nil {
			sent = true
			close(req.Sending)
		}
	}
	defer handOver()
	if req.After != nil {
		select {
		case <-req.After:
		case <-ctx.Done():
			return zkstore.CommitResult{}, errUnavailable("commit")
		}
	}
	data := zkstore.EncodeEntry(req.Entry)
	res := zkstore.CommitResult{Size: len(data)}
	if len(data) > c.s.opts.MaxChunkedBytes {
		return res, fmt.Errorf("%w: %d bytes > %d", zkstore.ErrEntryTooLarge, len(data), c.s.opts.MaxChunkedBytes)
	}
	if err := c.check("commit"); err != nil {
		return res, err
	}
	c.s.mu.Lock()
	hook := c.s.fault
	c.s.mu.Unlock()
	fault := NoFault
	if hook != nil {
		fault = hook(req)
	}
	c.mu.Lock()
	session := c.session
	c.mu.Unlock()
	s := c.s
	if fault == Blip {
		handOver()
		return c.resend(ctx, req, data, session, res)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch fault {
	case Unavailable:
		return res, errUnavailable("commit")
	case UnknownLost:
		return res, fmt.Errorf("entry %d: %w (injected)", lsn, zkstore.ErrUnknownOutcome)
	case LoseCAS:
		// The foreign writer takes the next position after the head: this
		// commit's own (Conflict) or, for a commit pipelined further, its
		// predecessor's (the predecessor then never lands: Refused).
		s.foreignPutLocked()
	}
	out, zxid := s.commitLocked(req, data, session, &res)
	handOver()
	res.Outcome, res.Zxid = out, zxid
	if fault == UnknownApplied {
		return zkstore.CommitResult{}, fmt.Errorf("entry %d: %w (injected)", lsn, zkstore.ErrUnknownOutcome)
	}
	if answer := s.answer; answer != nil {
		s.mu.Unlock()
		answer(req, out) // the commit is in the log (and visible) before its answer
		s.mu.Lock()
	}
	return res, nil
}

// resend sends req again after a Blip lost its first send (see Blip).
func (c *Client) resend(ctx context.Context, req zkstore.CommitRequest, data []byte, session int64, res zkstore.CommitResult) (zkstore.CommitResult, error) {
	lsn := req.Prev + 1
	select {
	case <-time.After(rand.N(BlipDelay)):
	case <-ctx.Done():
		return res, fmt.Errorf("entry %d: %w: %v", lsn, zkstore.ErrUnknownOutcome, ctx.Err())
	}
	if p := req.Predecessor; p != nil {
		select {
		case <-p.Done:
		case <-ctx.Done():
			return res, fmt.Errorf("entry %d: %w: %v", lsn, zkstore.ErrUnknownOutcome, ctx.Err())
		}
		chained := req.Pipelined && req.Marker != nil && !req.Marker.Create && req.Marker.Version != zkstore.AnyVersion
		if landed, known := p.Landed(); known && !landed && chained {
			res.Outcome, res.PrevMissing = zkstore.Refused, true
			return res, nil
		}
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	_, prev := s.entries[req.Prev]
	_, own := s.entries[lsn]
	if !prev && !own {
		// zkstore: the predecessor entry missing after a lost answer is
		// either a commit never written or one compacted away since.
		return zkstore.CommitResult{}, fmt.Errorf("entry %d: %w (predecessor missing on re-send)", lsn, zkstore.ErrUnknownOutcome)
	}
	out, zxid := s.commitLocked(req, data, session, &res)
	res.Outcome, res.Zxid = out, zxid
	return res, nil
}

// SetAnswerHook makes every commit call fn after it was applied to the log
// (other clients read it already) and before its answer returns; fn may
// block to delay the answer. nil removes the hook.
func (s *Store) SetAnswerHook(fn func(zkstore.CommitRequest, zkstore.Outcome)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = fn
}

func (s *Store) commitLocked(req zkstore.CommitRequest, data []byte, session int64, res *zkstore.CommitResult) (zkstore.Outcome, int64) {
	lsn := req.Prev + 1
	if _, ok := s.entries[req.Prev]; !ok {
		if req.Pipelined {
			res.PrevMissing = true
			return zkstore.Refused, 0
		}
		return zkstore.Behind, 0
	}
	if st, taken := s.entries[lsn]; taken {
		e, err := zkstore.DecodeEntry(st.data)
		if err == nil && e.Writer == req.Entry.Writer {
			if mk := req.Marker; mk != nil {
				// Found by its writer tag, as zkstore resolves a commit
				// whose answer was lost: the version it left, if its op
				// tells (CommitResult.MarkerVersion).
				v, known := mk.Left()
				res.MarkerVersion, res.MarkerUnknown = v, !known
			}
			return zkstore.Committed, st.zxid
		}
		return zkstore.Conflict, 0
	}
	for _, g := range req.Guards {
		if g.Absent() {
			if g.Path() == readLeasePath && s.readLease != 0 {
				return zkstore.Held, 0
			}
			continue
		}
		if !s.guardHoldsLocked(g) {
			return zkstore.Refused, 0
		}
	}
	if mk := req.Marker; mk != nil {
		cur, ok := s.tokens[mk.Name]
		switch {
		case mk.Create && ok, !mk.Create && ok && mk.Version != zkstore.AnyVersion && cur.version != mk.Version:
			res.MarkerMissed = true
			return zkstore.Refused, 0
		case !mk.Create && !ok:
			res.MarkerGone = true
			return zkstore.Refused, 0
		}
	}
	granted := map[int64]bool{}
	for _, op := range req.Entry.Ops {
		switch op.Kind {
		case revision.OpLeaseGrant:
			if s.leases[op.Lease] != nil || granted[op.Lease] {
				return zkstore.Refused, 0
			}
			granted[op.Lease] = true
		case revision.OpLeaseRevoke:
			if s.leases[op.Lease] == nil && !granted[op.Lease] {
				return zkstore.Refused, 0
			}
		}
	}
	// Every check held: apply it all.
	if mk := req.Marker; mk != nil {
		if mk.Create {
			s.tokens[mk.Name] = &marker{session: session}
		} else {
			s.tokens[mk.Name].version++
		}
		res.MarkerVersion = s.tokens[mk.Name].version
	}
	now := mtimeNow()
	for _, op := range req.Entry.Ops {
		switch op.Kind {
		case revision.OpLeaseGrant:
			s.leases[op.Lease] = &leaseToken{mtime: now}
		case revision.OpLeaseRevoke:
			delete(s.leases, op.Lease)
		}
	}
	return zkstore.Committed, s.writeLocked(req.Entry, data, req.Rev)
}

// readLeasePath names the read lease znode in guards.
const readLeasePath = "/readlease"

// ReadLeaseAbsent requires that no session holds the read lease.
func (c *Client) ReadLeaseAbsent() zkstore.Guard { return zkstore.NewAbsentGuard(readLeasePath) }

// TakeReadLease takes the read lease for the client's session (kept if it
// holds it already); zkstore.ErrLeaseHeld if another session does.
func (c *Client) TakeReadLease(uint64) (int64, error) {
	c.mu.Lock()
	sid, up := c.session, c.connected && !c.closed
	c.mu.Unlock()
	if !up {
		return 0, errUnavailable("take the read lease")
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, errUnavailable("take the read lease")
	}
	if s.readLease != 0 && s.readLease != sid {
		return 0, zkstore.ErrLeaseHeld
	}
	s.readLease = sid
	return sid, nil
}

// ReleaseReadLease drops the read lease if the client's session holds it.
func (c *Client) ReleaseReadLease() error {
	c.mu.Lock()
	sid := c.session
	c.mu.Unlock()
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readLease == sid {
		s.readLease = 0
	}
	return nil
}

// ReadLeaseHolder returns the session holding the read lease (0: none).
func (s *Store) ReadLeaseHolder() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readLease
}

// LeaseGuard requires lease id's token to be at version.
func (c *Client) LeaseGuard(id int64, version int32) zkstore.Guard {
	return zkstore.NewGuard(fmt.Sprintf("/leases/%016x", uint64(id)), version)
}

// Head returns the head.
func (c *Client) Head() (zkstore.Head, error) {
	if err := c.check("read head"); err != nil {
		return zkstore.Head{}, err
	}
	return c.s.HeadNow(), nil
}

// SyncHead returns the head (the store has one copy, so every read is
// synced).
func (c *Client) SyncHead() (zkstore.Head, error) { return c.Head() }

// QuorumHead returns the head and counts a barrier round.
func (c *Client) QuorumHead() (zkstore.Head, error) {
	if err := c.check("quorum read of head"); err != nil {
		return zkstore.Head{}, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.quorum++
	return c.s.head, nil
}

// WatchHead returns the head and a channel closed at its next change.
func (c *Client) WatchHead() (zkstore.Head, <-chan struct{}, error) {
	if err := c.check("watch head"); err != nil {
		return zkstore.Head{}, nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.watches++
	return c.s.head, c.s.headCh, nil
}

// ReadEntries calls fn for entries from..to in order. Errors:
// zkstore.ErrEntryMissing for a position without an entry (truncated),
// zkstore.ErrUnavailable, fn's error.
func (c *Client) ReadEntries(ctx context.Context, from, to int64, _ int, fn func(e *revision.Entry, size int) error) error {
	for lsn := from; lsn <= to; lsn++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.check("read log entry"); err != nil {
			return err
		}
		c.s.mu.Lock()
		st, ok := c.s.entries[lsn]
		c.s.mu.Unlock()
		if !ok {
			return fmt.Errorf("entry %d: %w", lsn, zkstore.ErrEntryMissing)
		}
		e, err := zkstore.DecodeEntry(st.data)
		if err != nil {
			return fmt.Errorf("entry %d: %w", lsn, err)
		}
		e.LSN, e.Zxid = lsn, st.zxid // the position is the znode's name, not in the data
		if err := fn(e, len(st.data)); err != nil {
			return err
		}
	}
	return nil
}

// RegisterMember publishes m on this session (and on every later one).
func (c *Client) RegisterMember(m zkstore.Member) error {
	if err := c.check("register member"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.member = &m
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.members[m.ID] = member{m: m, session: c.session}
	return nil
}

// Members lists the members of live sessions by ID.
func (c *Client) Members() ([]zkstore.Member, error) {
	if err := c.check("list members"); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	out := make([]zkstore.Member, 0, len(c.s.members))
	for _, m := range c.s.members {
		out = append(out, m.m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *Store) newCandidateLocked(memberID uint64, session int64) *candidate {
	s.seq++
	cand := &candidate{seq: s.seq, memberID: memberID, session: session, path: fmt.Sprintf("/election/n_%010d", s.seq)}
	s.election = append(s.election, cand)
	s.electionChangedLocked()
	return cand
}

// Election is a client's part in the store's election: the candidate with
// the lowest sequence number leads.
type Election struct {
	c        *Client
	memberID uint64
	cand     *candidate // guarded by the store's lock
	closed   bool       // guarded by the store's lock
}

// Campaign joins the election as memberID.
func (c *Client) Campaign(memberID uint64) zkstore.Leadership {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	e := &Election{c: c, memberID: memberID, cand: c.s.newCandidateLocked(memberID, c.session)}
	c.elections = append(c.elections, e)
	return e
}

// State reports whether e leads, its fence and the leader's member ID.
func (e *Election) State() (bool, zkstore.Fence, uint64) {
	_, connected := e.c.Session()
	s := e.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.closed || !connected || len(s.election) == 0 {
		return false, zkstore.NewFence(""), 0
	}
	leader := s.election[0]
	return leader == e.cand, zkstore.NewFence(e.cand.path), leader.memberID
}

// Changed returns a channel closed at the next change of the election.
func (e *Election) Changed() <-chan struct{} {
	s := e.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.electionCh
}

// Close withdraws e's candidate.
func (e *Election) Close() {
	s := e.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	kept := s.election[:0]
	for _, cand := range s.election {
		if cand != e.cand {
			kept = append(kept, cand)
		}
	}
	s.election = kept
	s.electionChangedLocked()
}

// ReadLeaseToken reads lease id's renewal token.
func (c *Client) ReadLeaseToken(id int64) (zkstore.LeaseToken, bool, error) {
	if err := c.check("read lease token"); err != nil {
		return zkstore.LeaseToken{}, false, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	t := c.s.leases[id]
	if t == nil {
		return zkstore.LeaseToken{}, false, nil
	}
	return zkstore.LeaseToken{Version: t.version, Renewed: t.mtime}, true, nil
}

// RenewLeases advances the tokens of ids that exist.
func (c *Client) RenewLeases(ids []int64) (map[int64]bool, error) {
	if err := c.check("renew leases"); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	renewed := make(map[int64]bool, len(ids))
	now := mtimeNow()
	for _, id := range ids {
		if t := c.s.leases[id]; t != nil {
			t.version++
			t.mtime = now
			renewed[id] = true
		}
	}
	return renewed, nil
}

// ReadBase returns the current base generation (Gen 0: none).
func (c *Client) ReadBase() (zkstore.Base, error) {
	if err := c.check("read compact"); err != nil {
		return zkstore.Base{}, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.base, nil
}

// LoadBase decodes the snapshot b names. Errors: zkstore.ErrBaseChanged if
// it was collected, an error for b without a generation.
func (c *Client) LoadBase(_ context.Context, b zkstore.Base) (*revision.Snapshot, error) {
	if err := c.check("load base"); err != nil {
		return nil, err
	}
	if b.Gen == 0 {
		return nil, errors.New("no base generation")
	}
	c.s.mu.Lock()
	data, ok := c.s.bases[b.Path]
	c.s.mu.Unlock()
	if !ok {
		return nil, zkstore.ErrBaseChanged
	}
	return zkstore.DecodeSnapshot(data)
}

// PrepareBase stores snap as a new generation (not yet current), at a path
// of its own, as zkstore writes each attempt.
func (c *Client) PrepareBase(_ context.Context, snap *revision.Snapshot, prev zkstore.Base, nonce uint64) (zkstore.Base, error) {
	if err := c.check("write base"); err != nil {
		return zkstore.Base{}, err
	}
	data := zkstore.EncodeSnapshot(snap)
	nb := zkstore.Base{
		Gen: snap.State.LSN, Rev: snap.State.Rev, CompactRev: snap.State.CompactRev,
		Size: len(data), Chunks: 1, PrevGen: prev.Gen, PrevPath: prev.Path,
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.baseAttempts++
	nb.Path = fmt.Sprintf("/base/%020d-%016x-%d", snap.State.LSN, nonce, c.s.baseAttempts)
	c.s.bases[nb.Path] = data
	c.s.prepared[nb.Path] = prev
	return nb, nil
}

// PublishBase makes nb current if fence holds and the description nb was
// prepared after is still current, unchanged (zkstore checks the version
// of the description: a FreeCompacted since makes it fail too).
func (c *Client) PublishBase(fence zkstore.Fence, nb zkstore.Base) (zkstore.Base, error) {
	if err := c.check("make base current"); err != nil {
		return zkstore.Base{}, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if !c.s.guardHoldsLocked(fence.Guard()) {
		return zkstore.Base{}, fmt.Errorf("make base current: fence %q lost", fence.Path())
	}
	if nb.Gen == 0 && nb.Path == "" {
		// A log generation (zkstore.LogGeneration): nothing was written;
		// it follows a description without a generation.
		if c.s.base.Gen != 0 {
			return zkstore.Base{}, fmt.Errorf("make base current: a generation was published meanwhile")
		}
		c.s.base = nb
		return nb, nil
	}
	if prev, ok := c.s.prepared[nb.Path]; !ok || !reflect.DeepEqual(prev, c.s.base) {
		return zkstore.Base{}, fmt.Errorf("make base current: the description of generation %q changed meanwhile", nb.PrevPath)
	}
	delete(c.s.prepared, nb.Path)
	c.s.base = nb
	return nb, nil
}

// TruncateLog deletes the entries below lsn, under fence.
func (c *Client) TruncateLog(_ context.Context, fence zkstore.Fence, lsn int64) (int, error) {
	if err := c.check("delete log entries"); err != nil {
		return 0, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if !c.s.guardHoldsLocked(fence.Guard()) {
		return 0, fmt.Errorf("delete log entries: fence %q lost", fence.Path())
	}
	n := 0
	for l := range c.s.entries {
		if l < lsn {
			delete(c.s.entries, l)
			n++
		}
	}
	return n, nil
}

// CollectBases deletes every generation but cur and its predecessor.
func (c *Client) CollectBases(_ context.Context, fence zkstore.Fence, cur zkstore.Base) (int, error) {
	if err := c.check("delete base generations"); err != nil {
		return 0, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if !c.s.guardHoldsLocked(fence.Guard()) {
		return 0, fmt.Errorf("delete base generations: fence %q lost", fence.Path())
	}
	n := 0
	for p := range c.s.bases {
		if p != cur.Path && p != cur.PrevPath {
			delete(c.s.bases, p)
			delete(c.s.prepared, p)
			n++
		}
	}
	return n, nil
}

// FreeCompacted deletes the entries below cur.Gen and cur's previous
// generation, and records that in the description if cur is still current
// (zkstore.ErrBaseChanged otherwise).
func (c *Client) FreeCompacted(_ context.Context, cur zkstore.Base) (zkstore.Base, int, error) {
	if err := c.check("free compacted history"); err != nil {
		return zkstore.Base{}, 0, err
	}
	if cur.Gen == 0 {
		return cur, 0, nil
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	n := 0
	for l := range c.s.entries {
		if l < cur.Gen {
			delete(c.s.entries, l)
			n++
		}
	}
	if cur.PrevPath != "" {
		delete(c.s.bases, cur.PrevPath)
	}
	if !reflect.DeepEqual(c.s.base, cur) {
		return zkstore.Base{}, n, zkstore.ErrBaseChanged
	}
	nb := cur
	nb.PrevGen, nb.PrevPath, nb.PrevSize, nb.LogBytes, nb.PrevRaw, nb.LogRaw = cur.Gen, "", 0, 0, 0, 0
	c.s.base = nb
	return nb, n, nil
}

// CollectChunks deletes nothing: the store keeps large entries whole.
func (c *Client) CollectChunks(context.Context, zkstore.Fence, int64) (int, error) {
	return 0, c.check("list chunks")
}

// Generations returns how many base generations the store holds.
func (s *Store) Generations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bases)
}

// EntryCount returns how many log entries the store holds.
func (s *Store) EntryCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
