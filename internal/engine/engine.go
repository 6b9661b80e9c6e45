package engine

import (
	"context"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/watchbridge"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Engine is one zketcd instance's engine: the concerns of the instance,
// each a type of its own on the shared core, and the etcd API over them.
// Its methods are safe for concurrent use.
type Engine struct {
	*core
	rb         *rollbackGuard // ZooKeeper's data going back: halting (rollback.go)
	live       *liveness      // the leader proof window (proofwindow.go)
	tail       *tailer        // the log applied to the view (tail.go)
	commit     *committer     // the group committer (committer.go)
	reads      *readLease     // the read lease (readlease.go)
	fwd        *forwarder     // write forwarding and ReadIndex (forward.go)
	leases     *lessor        // lease expiry and renewals (lessor.go)
	compaction *compaction    // physical compaction and upkeep (compaction.go)
	corrupt    *corruptChecker
	member     *memberRecord
	moving     *movingLog        // the log, switched by a move (move.go)
	leading    *movingLeadership // the candidacy, switched by a move
	origins    *origins          // forwarded requests in the log (origins.go)
	space      *space            // the bytes the root holds (DB size), see space.go
	pages      pageCounts        // counts of paginated ranges (pagecount.go)
	// quota is --quota-backend-bytes as set now (SetQuotaBackendBytes).
	quota atomic.Int64
	// internalToken is the secret callers of the internal endpoint present.
	internalToken string

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Leader reports whether this instance is the elected leader, and the
// member ID of the current leader (0 if unknown).
func (b *Engine) Leader() (bool, uint64) {
	leader, _, id := b.election.State()
	return leader, id
}

// MemberID returns this instance's member ID.
func (b *Engine) MemberID() uint64 { return b.memberID }

// ClusterID returns the cluster ID stored in the root's meta znode.
func (b *Engine) ClusterID() uint64 { return b.store.Meta().ClusterID }

// State returns the view's applied position: log entry, revision and
// compacted revision.
func (b *Engine) State() revision.State { return b.view.State() }

// Snapshot returns a consistent copy of the view: every retained version
// of every key and the leases, at one applied position. It costs a copy of
// the whole view (the read lock is held meanwhile).
func (b *Engine) Snapshot() *revision.Snapshot { return b.view.Snapshot() }

// OnCompact registers f (nil: none) to run with a copy of the view's state
// before every compaction it applies (see revision.View.OnCompact: under
// the view's write lock, so f must not block). The copy holds every version
// the compaction removes: f must call dropped once it no longer holds it
// (from any goroutine; calls after the first do nothing). Until then the
// trim of the compacted versions frees nothing, so the compaction loop
// returns freed memory (Config.AfterCompaction) only once no copy is held:
// one release after the observer's work, never one beside it.
func (b *Engine) OnCompact(f func(before *revision.Snapshot, rev int64, dropped func())) {
	b.compaction.observe(f)
}

// NewWatchStream opens a watch stream on the instance's hub, holding at
// most maxWatchers watchers (0: no bound).
func (b *Engine) NewWatchStream(maxWatchers int) *watchbridge.Stream {
	return b.hub.NewStream(maxWatchers)
}

// WatchStats returns a snapshot of the watch hub's watchers.
func (b *Engine) WatchStats() watchbridge.Stats { return b.hub.Stats() }

// Session returns the ZooKeeper session ID and whether it is connected.
func (b *Engine) Session() (id int64, connected bool) { return b.store.Session() }

// Members lists the live instances on this root (their member znodes).
func (b *Engine) Members() ([]*pb.Member, error) {
	members, err := b.store.Members()
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Member, len(members))
	for i, m := range members {
		out[i] = &pb.Member{ID: m.ID, Name: m.Name, ClientURLs: m.ClientURLs, PeerURLs: m.PeerURLs}
	}
	return out, nil
}

// HeadLSN returns the log position of the last head the tailer saw.
func (b *Engine) HeadLSN() int64 { return b.Head().LSN }

// Term returns the ZooKeeper epoch of the last head the tailer saw (the
// high 32 bits of its zxid): etcd's raft term.
func (b *Engine) Term() uint64 { return uint64(b.Head().Zxid >> 32) }

// Head returns the last head the tailer saw.
func (b *Engine) Head() zkstore.Head { return b.tail.head() }

// LeaseCount returns how many leases the view holds (a tenant's lease
// limit counts them).
func (b *Engine) LeaseCount() int { return b.view.LeaseCount() }

// SetMaxWatchers bounds the watchers of all the instance's watch streams
// together (0: no bound; a tenant's watcher limit). Watchers already
// there stay; a watch created beyond the bound is refused with etcd's
// "too many requests".
func (b *Engine) SetMaxWatchers(n int) { b.hub.SetMaxWatchers(n) }

// InternalToken is the secret callers of this instance's internal
// endpoint present (advertised in its member znode).
func (b *Engine) InternalToken() string { return b.internalToken }

// servable fails every request of a halted instance with etcd's corrupt
// cluster error (the log and the health check say why).
func (b *Engine) servable() error { return b.rb.servable() }

// Servable returns nil, or etcd's corrupt-cluster error once the instance
// halted (Health says why).
func (b *Engine) Servable() error { return b.rb.servable() }

// Halted returns a channel closed when the instance halts: watch streams
// end then, since no event follows and the history they saw is not the
// cluster's, and Health returns the error (wrapping ErrHalted) that says
// what happened and what to do. It is how the gRPC layer learns of a halt.
func (b *Engine) Halted() <-chan struct{} { return b.rb.halted }
