package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// The read lease (Config.ReadLease, --read-lease): the leader instance
// answers linearizable reads — its own, and the ReadIndex of the others —
// from its view, with no ZooKeeper round trip, while it can prove that no
// other instance can have committed since.
//
// Two things give that proof. First, exclusion: the leader takes the read
// lease znode, ephemeral to its session (zkstore.TakeReadLease), and every
// commit that does not carry the leader's fence carries the precondition
// that the znode does not exist (zkstore.ReadLeaseAbsent, added by the
// committer), so while the leader's session lives only fenced commits —
// the leader's — can land. Second, liveness: a ZooKeeper transaction of
// the leader's session (a commit or a barrier round) sent after the znode
// was taken, on the session's current connection, and within the proof
// window before the read arrived, landed. The window follows what
// ZooKeeper granted the session — the granted timeout and the tick — and
// is half of how long the session can outlive such a transaction by the
// ZooKeeper leader's clock (proofwindow.go has the argument and what it
// assumes: clock rates within a factor of two, no suspended VM). Without a
// window (the tick unknown, or too long for the timeout granted) the read
// lease is refused and reads take the barrier. That transaction also read
// the log at a position (liveProof.lsn) holding every commit that landed
// before the znode was taken; commits since are the leader's own, applied
// to its view before they are acknowledged. So the answer is the view, once
// it has applied that position.
//
// A commit that meets the znode is refused (zkstore.Held) and nothing is
// written: a follower then sends the write to the leader again instead of
// committing it itself; any other caller gets etcd's "not leader". Every
// instance sharing a root with a read-lease leader must run a build that
// adds the precondition (this one or later): an older build's commit is not
// stopped by the znode.

// readLease is the read lease of one instance (above): whether it holds
// it, and why it is refused. Safe for concurrent use; run is its loop,
// while Config.ReadLease.
type readLease struct {
	*core
	live  *liveness
	marks *flightMarks
	rb    *rollbackGuard
	held  atomic.Pointer[heldLease] // the read lease, while held
	// refused says why the read lease is refused (nil: it is not).
	refused atomic.Pointer[string]
}

// heldLease is the read lease as this instance took it.
type heldLease struct {
	session int64
	fence   string    // the election znode it was taken under
	taken   time.Time // after ZooKeeper confirmed the znode
}

// index returns the position a linearizable read arriving now must
// wait for, and true, if this instance holds the read lease with a fresh
// proof (see above); false sends the read down the safe path. A commit of
// this instance that was sent before the read arrived may have landed — and
// be read on another instance already — before this one learns it, so the
// answer waits until every such commit has settled (and, if it landed, is
// applied). Errors: ctx's, or ErrGRPCStopped when the engine closes.
func (r *readLease) index(ctx context.Context) (int64, bool, error) {
	h := r.held.Load()
	if h == nil {
		return 0, false, nil
	}
	now := time.Now()
	leader, fence, _ := r.election.State()
	sid, connected := r.store.Session()
	if !leader || !connected || fence.Path() != h.fence || sid != h.session {
		return 0, false, nil
	}
	p := r.live.fresh(sid, now)
	if p == nil || !p.sent.After(h.taken) {
		return 0, false, nil
	}
	if err := r.marks.waitSettled(ctx, r.ctx.Done()); err != nil {
		return 0, false, err
	}
	r.metrics.linearizableReads.WithLabelValues("lease").Inc()
	return max(p.lsn, r.view.State().LSN), true, nil
}

// flightMarks counts the committer's commits sent and settled (answered
// or requeued, in the order they were sent). Safe for concurrent use.
type flightMarks struct {
	mu            sync.Mutex
	sent, settled uint64
	advanced      chan struct{} // closed when settled grows
}

// send records a commit handed to the log.
func (m *flightMarks) send() {
	m.mu.Lock()
	m.sent++
	m.mu.Unlock()
}

// settle records that the oldest unsettled commit settled.
func (m *flightMarks) settle() {
	m.mu.Lock()
	m.settled++
	if m.advanced != nil {
		close(m.advanced)
		m.advanced = nil
	}
	m.mu.Unlock()
}

// waitSettled waits until every commit sent before the call settled.
func (m *flightMarks) waitSettled(ctx context.Context, closed <-chan struct{}) error {
	m.mu.Lock()
	target := m.sent
	for m.settled < target {
		if m.advanced == nil {
			m.advanced = make(chan struct{})
		}
		ch := m.advanced
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-closed:
			return rpctypes.ErrGRPCStopped
		}
		m.mu.Lock()
	}
	m.mu.Unlock()
	return nil
}

// run takes the read lease while this instance leads and its
// session's grant allows a proof window, and gives it up when it stops
// leading or the window goes (a new session or fence takes it anew). A
// lease refused for want of a window is logged with the values and listed
// by Warnings.
func (r *readLease) run() {
	lg := r.log.WithField("component", "read-lease")
	release := func(why string) {
		if r.held.Swap(nil) != nil {
			// Forgotten first: no read uses it once the znode may be gone.
			if err := r.store.ReleaseReadLease(); err != nil {
				lg.WithError(err).Debug("release the read lease (it goes with the session)")
			}
			lg.WithField("why", why).Info("read lease given up")
		}
		if r.refused.Load() == nil {
			r.metrics.readLease.Set(0)
		}
	}
	refuse := func(err error) {
		msg := "--read-lease refused: " + err.Error()
		r.metrics.readLease.Set(-1)
		if old := r.refused.Swap(&msg); old == nil || *old != msg {
			lg.WithError(err).Error("read lease refused: linearizable reads take a zookeeper round trip until the grant allows a proof window")
		}
	}
	retry := time.NewTicker(500 * time.Millisecond)
	defer retry.Stop()
	for {
		changed, sessCh := r.election.Changed(), r.store.SessionChanged()
		leader, fence, _ := r.election.State()
		sid, connected := r.store.Session()
		g := r.store.Grant()
		window, werr := proofWindow(g, r.cfg.LeaderProofWindow)
		switch {
		case g.Session == sid && werr != nil:
			release("no proof window")
			refuse(werr)
		case g.Session == sid:
			if r.refused.Swap(nil) != nil {
				lg.WithFields(logrus.Fields{"granted_timeout": g.Timeout, "tick": g.Tick, "window": window}).Info("read lease allowed again: the grant allows a proof window")
			}
		}
		switch h := r.held.Load(); {
		case !leader || r.rb.servable() != nil:
			release("not the leader")
		case !connected || g.Session != sid || werr != nil:
		case h != nil && h.session == sid && h.fence == fence.Path():
		default:
			r.held.Store(nil)
			got, err := r.store.TakeReadLease(r.memberID)
			switch {
			case err == nil && got == sid:
				r.held.Store(&heldLease{session: sid, fence: fence.Path(), taken: time.Now()})
				r.metrics.readLease.Set(1)
				lg.WithFields(logrus.Fields{"session": sid, "window": window, "granted_timeout": g.Timeout,
					"requested_timeout": g.Requested, "tick": g.Tick, "tick_from": g.TickFrom}).Info("read lease taken: linearizable reads answered from memory")
			case errors.Is(err, zkstore.ErrLeaseHeld):
				lg.Debug("read lease still held by another session (a previous leader's, until it ends)")
			case err != nil:
				lg.WithError(err).Debug("take the read lease")
			}
		}
		select {
		case <-r.ctx.Done():
			release("closing")
			return
		case <-changed:
		case <-sessCh:
		case <-retry.C:
		}
	}
}

// warnings is a --read-lease this instance refuses because its
// session's grant allows no proof window (with the values), for Warnings.
func (r *readLease) warnings() []string {
	if msg := r.refused.Load(); msg != nil {
		return []string{*msg}
	}
	return nil
}
