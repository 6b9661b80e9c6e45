package engine

import (
	"context"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Log is the replicated log the engine runs on: *zkstore.Store on
// ZooKeeper, memlog in memory for tests. It is composed of one small
// interface per role below; the data types are zkstore's and so are the
// error values (every error of a call that could not reach the log wraps
// zkstore.ErrUnavailable). Implementations are safe for concurrent use.
// Package logtest holds the behaviour every implementation must share, run
// against both.
type Log interface {
	LogIdentity
	LogSession
	EntryCommitter
	ReadLeaseHolder
	HeadReader
	EntryReader
	MemberRegistry
	Elector
	LeaseTokens
	BaseStore
}

// LogIdentity is what a log is, fixed for its lifetime.
type LogIdentity interface {
	// Meta is the cluster identity (a non-zero ClusterID, the same for
	// every client of one log).
	Meta() zkstore.Meta
	// MaxEntryBytes is the byte budget of one entry: a batch is cut before
	// it. Larger entries still commit (as chunks), up to a hard bound.
	MaxEntryBytes() int
	// Root names the log's root (what the loss file of a rollback records).
	Root() string
}

// LogSession is the client's session on the log. Ephemeral state (the
// member, election candidates, the pipeline marker, the read lease) belongs to
// the session and goes with it.
type LogSession interface {
	// Session reports the client session and whether it is connected.
	Session() (id int64, connected bool)
	// SessionChanged returns a channel closed at the next change of
	// connection state or session (the history is checked again then).
	SessionChanged() <-chan struct{}
	// Grant is what the log granted the session (its timeout, the tick;
	// see zkstore.Grant): what bounds the leader proof window.
	Grant() zkstore.Grant
	// Close ends the session: its ephemeral state goes at once, and later
	// calls fail with an error wrapping zkstore.ErrUnavailable. Safe to
	// call more than once.
	Close()
}

// EntryCommitter appends entries. Commit is the log's compare-and-swap:
// req.Entry lands at req.Prev+1 only if entry Prev exists and Prev+1 does
// not, every guard holds, the pipeline marker (req.Marker, if set) is at
// req.Marker.Version (it is then set, its version +1) or, to be created,
// does not exist (it is created, ephemeral, at version 0), each lease the
// entry grants has no token yet (one is created at version 0) and each it
// revokes has one (deleted), all in one atomic step that also moves the
// head to {Prev+1, req.Rev}. Otherwise nothing is written and the outcome
// says why: Behind (entry Prev is gone; Refused with PrevMissing instead if
// req.Pipelined), Conflict (another writer's entry holds Prev+1), Refused
// (a guard, the marker or a lease op failed; MarkerMissed if the marker
// was at another version or existed, MarkerGone if it did not exist),
// Held (an absent guard's znode exists). A position already holding an
// entry with req's writer tag is Committed: that is how a commit whose
// answer was lost is resolved, so an entry is never written twice. Such a
// commit reports the marker's version it left only when its op tells it (a
// create left 0, a set at v left v+1); one at AnyVersion reports
// MarkerUnknown, never a version nobody read.
//
// The pipeline marker is the contract that makes a pipeline safe: a
// writer's commits each set its marker at the version the one before left,
// so a commit lands only if the one it is chained on landed, whatever other
// writers do; a failed commit fails every commit chained on it, and the
// marker goes with the session. Commits chained through After/Sending are
// handed to the log in order (see zkstore.CommitRequest); one that still
// overtakes its predecessor is refused (PrevMissing or MarkerMissed),
// nothing written, and may be sent again as it is once that one landed.
// After a lost connection a commit with a Predecessor is sent again only
// once that one's outcome is known, and not at all if it provably did not
// land (Refused, PrevMissing: nothing written), so that re-sends reach the
// log in the pipeline's order too and none is left of unknown outcome for
// arriving before its predecessor.
//
// Errors: zkstore.ErrEntryTooLarge above the hard bound,
// zkstore.ErrUnavailable (nothing was written), zkstore.ErrUnknownOutcome
// (the context ended while unresolved: the entry may be in the log, its
// writer tag tells).
type EntryCommitter interface {
	Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error)
	// LeaseGuard is the precondition that lease id's renewal token exists
	// at version.
	LeaseGuard(id int64, version int32) zkstore.Guard
	// ReadLeaseAbsent is the precondition, on every commit without the
	// leader's fence, that no session holds the read lease (Held
	// otherwise, even for the holder's own commits).
	ReadLeaseAbsent() zkstore.Guard
}

// ReadLeaseHolder takes and gives up the read lease: one session at a
// time holds it, until it releases it or the session ends.
type ReadLeaseHolder interface {
	// TakeReadLease takes the read lease for the current session (keeping
	// it if this session holds it) and returns the session;
	// zkstore.ErrLeaseHeld if another session holds it.
	TakeReadLease(memberID uint64) (session int64, err error)
	// ReleaseReadLease gives it up if this session holds it (else nothing).
	ReleaseReadLease() error
}

// HeadReader reads the head: the position and revision of the last entry.
type HeadReader interface {
	// Head reads the head (no barrier: it may lag other clients' commits).
	Head() (zkstore.Head, error)
	// SyncHead reads it after a sync with the log's leader: every commit
	// acknowledged before the call is at or below it.
	SyncHead() (zkstore.Head, error)
	// QuorumHead reads it after a quorum round trip (the linearizable
	// barrier): as SyncHead, also through a server cut off from its quorum.
	QuorumHead() (zkstore.Head, error)
	// WatchHead reads the head and returns a channel that fires (a value
	// or a close: receive once) at its next change or when the watch is
	// lost; either way the caller reads again.
	WatchHead() (zkstore.Head, <-chan struct{}, error)
}

// EntryReader reads the log.
type EntryReader interface {
	// ReadEntries calls fn for every entry from..to in order, with its
	// position (LSN), the zxid of the commit that wrote it and its encoded
	// size, reading window entries in flight; from > to reads nothing.
	// Errors: zkstore.ErrEntryMissing for a position without an entry
	// (truncated), zkstore.ErrUnavailable, the context's, fn's.
	ReadEntries(ctx context.Context, from, to int64, window int, fn func(e *revision.Entry, size int) error) error
}

// MemberRegistry publishes the live instances.
type MemberRegistry interface {
	// RegisterMember publishes m on this session (replacing what this
	// member published before, and again on every later session).
	RegisterMember(m zkstore.Member) error
	// Members lists the members of live sessions, ordered by ID.
	Members() ([]zkstore.Member, error)
}

// Elector runs the election of the leader instance.
type Elector interface {
	// Campaign joins the election as memberID (possibly asynchronously:
	// the candidate has joined once its State reports a leader).
	// Candidates lead in the order they joined; a candidate that
	// withdraws (Close) or whose
	// session ends makes way for the next. The leader's fence, as a
	// commit guard, holds only while its candidacy lasts.
	Campaign(memberID uint64) zkstore.Leadership
}

// LeaseTokens reads and advances lease renewal tokens (created and
// deleted by the commits that grant and revoke leases).
type LeaseTokens interface {
	// ReadLeaseToken reads lease id's token; ok is false if it has none.
	ReadLeaseToken(id int64) (tok zkstore.LeaseToken, ok bool, err error)
	// RenewLeases advances the version of every token of ids that exists
	// and reports those it renewed.
	RenewLeases(ids []int64) (map[int64]bool, error)
}

// BaseStore holds base generations (physical compaction): a snapshot of
// the view at a log position (Gen), below which the log may be deleted.
type BaseStore interface {
	// ReadBase reads the current generation's description (Gen 0: none).
	ReadBase() (zkstore.Base, error)
	// LoadBase reads the snapshot b describes. Errors:
	// zkstore.ErrBaseChanged if it was deleted meanwhile (read the base
	// again), an error for b without a generation.
	LoadBase(ctx context.Context, b zkstore.Base) (*revision.Snapshot, error)
	// PrepareBase writes snap as a new generation after prev (the
	// description read before), not current yet.
	PrepareBase(ctx context.Context, snap *revision.Snapshot, prev zkstore.Base, nonce uint64) (zkstore.Base, error)
	// PublishBase makes nb current, provided fence holds and the
	// description is still the one nb was prepared after (an error, and
	// nothing changes, otherwise).
	PublishBase(fence zkstore.Fence, nb zkstore.Base) (zkstore.Base, error)
	// TruncateLog deletes the entries below lsn, under fence, and returns
	// how many.
	TruncateLog(ctx context.Context, fence zkstore.Fence, lsn int64) (int, error)
	// CollectBases deletes every generation but cur and the one before it,
	// under fence.
	CollectBases(ctx context.Context, fence zkstore.Fence, cur zkstore.Base) (int, error)
	// CollectChunks deletes the chunks of large entries that no entry
	// references (older than graceMillis, for positions beyond the head),
	// under fence.
	CollectChunks(ctx context.Context, fence zkstore.Fence, graceMillis int64) (int, error)
	// FreeCompacted deletes, without waiting for the next compaction, the
	// log below the current generation cur and the generation before it
	// (etcd's defragment), records that in the description and returns it;
	// zkstore.ErrBaseChanged if cur is no longer current. Any instance may
	// call it; cur without a generation frees nothing.
	FreeCompacted(ctx context.Context, cur zkstore.Base) (zkstore.Base, int, error)
}

// History is what reading a log back needs (recovery, Replay): its head,
// its entries and its base generations.
type History interface {
	HeadReader
	EntryReader
	BaseStore
}

// zkstore's Store is the log on ZooKeeper (memlog's conformance is checked
// by the engine's tests, which import it).
var _ Log = (*zkstore.Store)(nil)

// inspectFunc opens a fresh session on the log, for reads only, that
// creates nothing: it fails with an error wrapping zkstore.ErrNoRoot when
// the root is gone. ZooKeeper refuses for good the session of a client that
// saw a newer zxid than its own (its data went back), so rollback detection
// reads through such a session (see rollback.go). The caller closes the
// Log it returns.
type inspectFunc func(ctx context.Context) (Log, error)
