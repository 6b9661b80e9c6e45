package engine

import (
	"context"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Log is the replicated log the engine runs on: *zkstore.Store on
// ZooKeeper, memlog in memory for tests. The data types are
// zkstore's; their contracts (exactly-once Commit resolved by writer tag,
// guards, fences, errors wrapping zkstore.ErrUnavailable,
// zkstore.ErrEntryMissing, zkstore.ErrBaseChanged, zkstore.ErrUnknownOutcome)
// are documented there. Implementations are safe for concurrent use.
type Log interface {
	// Meta is the cluster identity; MaxEntryBytes the byte budget of one
	// entry (a batch is cut before it).
	Meta() zkstore.Meta
	MaxEntryBytes() int
	// Root names the log's root (what the loss file of a rollback records).
	Root() string
	// Session reports the client session and whether it is connected;
	// SessionChanged returns a channel closed at the next change of
	// connection state or session (the history is checked again then).
	Session() (id int64, connected bool)
	SessionChanged() <-chan struct{}
	// Grant is what ZooKeeper granted the session (its timeout, the tick;
	// see zkstore.Grant): what bounds the leader proof window.
	Grant() zkstore.Grant
	// Close ends the session.
	Close()

	// Commit appends req.Entry at req.Prev+1, exactly once.
	Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error)
	// LeaseGuard is the precondition that lease id's renewal token is
	// still at version.
	LeaseGuard(id int64, version int32) zkstore.Guard
	// ReadLeaseAbsent is the precondition, on every commit without the
	// leader's fence, that no instance holds the read lease.
	ReadLeaseAbsent() zkstore.Guard
	// TakeReadLease takes the read lease for the current session and
	// returns it (zkstore.ErrLeaseHeld: another session holds it);
	// ReleaseReadLease gives it up if this session holds it.
	TakeReadLease(memberID uint64) (session int64, err error)
	ReleaseReadLease() error

	// Head reads the head; SyncHead after a sync with the leader;
	// QuorumHead after a quorum round trip (the linearizable barrier).
	Head() (zkstore.Head, error)
	SyncHead() (zkstore.Head, error)
	QuorumHead() (zkstore.Head, error)
	// WatchHead reads the head and returns a channel closed at its next
	// change.
	WatchHead() (zkstore.Head, <-chan struct{}, error)
	// ReadEntries calls fn for every entry from..to in order, reading
	// window entries in flight.
	ReadEntries(ctx context.Context, from, to int64, window int, fn func(e *revision.Entry, size int) error) error

	// RegisterMember publishes this instance (again after a new session);
	// Members lists the live ones.
	RegisterMember(m zkstore.Member) error
	Members() ([]zkstore.Member, error)
	// Campaign joins the election of the leader instance.
	Campaign(memberID uint64) zkstore.Leadership

	// ReadLeaseToken and RenewLeases read and advance lease renewal tokens.
	ReadLeaseToken(id int64) (tok zkstore.LeaseToken, ok bool, err error)
	RenewLeases(ids []int64) (map[int64]bool, error)

	// Base generations (physical compaction): the current one, loading it,
	// writing a new one, publishing it under a fence, and deleting what it
	// made obsolete.
	ReadBase() (zkstore.Base, error)
	LoadBase(ctx context.Context, b zkstore.Base) (*revision.Snapshot, error)
	PrepareBase(ctx context.Context, snap *revision.Snapshot, prev zkstore.Base, nonce uint64) (zkstore.Base, error)
	PublishBase(fence zkstore.Fence, nb zkstore.Base) (zkstore.Base, error)
	TruncateLog(ctx context.Context, fence zkstore.Fence, lsn int64) (int, error)
	CollectBases(ctx context.Context, fence zkstore.Fence, cur zkstore.Base) (int, error)
	CollectChunks(ctx context.Context, fence zkstore.Fence, graceMillis int64) (int, error)
	// FreeCompacted deletes, without waiting for the next compaction, the
	// log below the current generation and the generation before it (etcd's
	// defragment); any instance may call it.
	FreeCompacted(ctx context.Context, cur zkstore.Base) (zkstore.Base, int, error)
}

var _ Log = (*zkstore.Store)(nil)

// inspectFunc opens a fresh session on the log, for reads only, that
// creates nothing: it fails with an error wrapping zkstore.ErrNoRoot when
// the root is gone. ZooKeeper refuses for good the session of a client that
// saw a newer zxid than its own (its data went back), so rollback detection
// reads through such a session (see rollback.go). The caller closes the
// Log it returns.
type inspectFunc func(ctx context.Context) (Log, error)
