package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/watchbridge"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Engine is one zketcd instance's engine. Its methods are safe for
// concurrent use.
type Engine struct {
	cfg      Config
	log      *logrus.Entry
	store    Log
	view     *revision.View
	memberID uint64
	host     string // this instance's host (host.go), advertised in its member znode
	metrics  *metrics
	sizing   *sizing
	pages    pageCounts // counts of paginated ranges (pagecount.go)
	// maxEntryBytes is the log's entry budget: a batch is cut before it.
	maxEntryBytes int

	applyMu sync.Mutex // serializes View.Apply with the hub's notification
	hub     *watchbridge.Hub

	election    zkstore.Leadership
	renewals    chan *renewal
	compactKick chan struct{}
	releaseKick chan struct{} // a compaction observer dropped its copy (OnCompact)
	copiesHeld  atomic.Int64  // copies of the view compaction observers hold
	leases      leaseClock    // the leader's lease deadlines (expiry.go)
	expiryScans atomic.Int64  // scans of the expiry loop done (for tests)
	submitted   atomic.Int64  // proposals handed to the committer (for tests)
	// pendingWrites counts the writes received and not answered yet
	// (etcd_server_proposals_pending; etcdmetrics.go).
	pendingWrites atomic.Int64
	proof         atomic.Pointer[liveProof] // newest proof that the session was alive (lease.go)
	// readLeaseRefused says why the read lease is refused (nil: it is not).
	readLeaseRefused atomic.Pointer[string]
	readLease        atomic.Pointer[heldLease] // the read lease, while held (readlease.go)
	flights          flightMarks               // the committer's commits sent and settled (readlease.go)

	nonce         uint64
	internalToken string
	proposals     chan *proposal
	barrier       barrier
	kick          chan struct{} // wakes the tailer
	origins       origins       // forwarded requests in the log (origins.go)
	fwd           forwarding    // write forwarding and ReadIndex (forward.go)

	space    space        // the bytes the root holds (DB size), see space.go
	check    corruptCheck // the published member and the corruption check, see corrupt.go
	lastHead atomic.Pointer[headSeen]
	// ownLanded is when the committer last landed a commit, in
	// nanoseconds since opened (monotonic; tail.go's deferRearm).
	ownLanded atomic.Int64
	opened    time.Time
	rb        *rollbackGuard // see rollback.go
	inspect   inspectFunc    // nil: no fresh sessions for rollback checks

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// headSeen is the last head the view was caught up with, and when.
type headSeen struct {
	head zkstore.Head
	at   time.Time
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
	if f == nil {
		b.view.OnCompact(nil)
		return
	}
	b.view.OnCompact(func(before *revision.Snapshot, rev int64) {
		b.copiesHeld.Add(1)
		var once sync.Once
		f(before, rev, func() { once.Do(b.copyDropped) })
	})
}

// copyDropped counts a copy of the view (OnCompact) dropped and asks the
// compaction loop for a memory release.
func (b *Engine) copyDropped() {
	b.copiesHeld.Add(-1)
	select {
	case b.releaseKick <- struct{}{}:
	default: // one is pending: it releases this copy's memory too
	}
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
func (b *Engine) Head() zkstore.Head {
	if hs := b.lastHead.Load(); hs != nil {
		return hs.head
	}
	return zkstore.Head{}
}
