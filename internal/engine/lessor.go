package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// lessor keeps the leases alive and expires them: on the leader, the
// deadlines of its term (leaseClock), renewed in memory by keepalives
// while its session is proved alive (liveness), and the expiry loop that
// revokes a lease whose deadline passed with its token unmoved; on any
// instance, keepalives renewed through the lease tokens, batched. Lease
// requests (lease.go) are the engine's; the lessor is what keeps time.
// Safe for concurrent use; run and renewLoop are its loops.
type lessor struct {
	*core
	commit *committer
	live   *liveness
	clock  leaseClock // the leader's lease deadlines
	// renewals are the keepalives renewed through the tokens (renewLoop).
	renewals    chan *renewal
	expiryScans atomic.Int64 // scans of the expiry loop done (for tests)
}

// now is the time source of lease expiry: Config.Now, or time.Now. Lease
// deadlines are its readings plus a TTL, compared with later readings, so
// they run on the monotonic clock and a wall-clock step moves none.
func (l *lessor) now() time.Time {
	if l.cfg.Now != nil {
		return l.cfg.Now()
	}
	return time.Now()
}

// defaultExpiryTick is how often the leader looks for leases past their
// deadline (Config.expiryTick in tests).
const defaultExpiryTick = 250 * time.Millisecond

// firstTTL is how long lease id lives from a leader's first look at its
// token: its granted TTL, or the remaining TTL checkpointed in the log (a
// lease copied from etcd with its time left, see package mirror) while the
// token was never renewed (version 0). A checkpointed lease is renewed only
// through its token (see LeaseRenew), so a token at version 0 proves no
// keepalive reached it since the checkpoint.
func (l *lessor) firstTTL(id, granted int64, tok zkstore.LeaseToken) time.Duration {
	ttl := granted
	if tok.Version == 0 {
		_ = l.view.Read(func(r revision.Reader) error {
			if l := r.Lease(id); l != nil && l.RemainingTTL > 0 && l.RemainingTTL < ttl {
				ttl = l.RemainingTTL
			}
			return nil
		})
	}
	return time.Duration(ttl) * time.Second
}

// run runs lease expiry while this instance is the leader. Deadlines
// use the monotonic clock from when the leader first read each lease's
// token; a lease expires only if, for a whole TTL since, its token did not
// move and the leader did not renew it in memory, so it never expires
// early, also across leader changes: a new leader starts every lease's
// clock anew (as etcd does on promotion), and renewals the old leader kept
// in memory were each answered before the old leader's session could end
// (see LeaseRenew), so before the new leader's clock started.
func (l *lessor) run() {
	lg := l.log.WithField("component", "lease-expiry")
	tick := l.cfg.expiryTick
	if tick <= 0 {
		tick = defaultExpiryTick
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		changed := l.election.Changed()
		leader, fence, _ := l.election.State()
		if !leader {
			l.clock.begin("")
			select {
			case <-changed:
			case <-l.ctx.Done():
				return
			}
			continue
		}
		l.clock.begin(fence.Path())
		l.expireDue(lg, fence)
		l.expiryScans.Add(1)
		select {
		case <-t.C:
		case <-changed:
		case <-l.ctx.Done():
			return
		}
	}
}

func (l *lessor) expireDue(lg *logrus.Entry, fence zkstore.Fence) {
	c := &l.clock
	ttls := l.view.LeaseTTLs()
	var baseline, due []int64
	c.mu.Lock()
	if c.fence != fence.Path() {
		c.mu.Unlock()
		return // the term changed meanwhile
	}
	for id := range c.deadlines {
		if _, ok := ttls[id]; !ok {
			delete(c.deadlines, id)
		}
	}
	now := l.now()
	for id := range ttls {
		d := c.deadlines[id]
		switch {
		case d == nil && c.granting[id] > 0:
			// Granted here, not yet answered: endGrant starts its clock.
		case d == nil || !d.known:
			baseline = append(baseline, id)
		case !d.expiring && !now.Before(d.deadline):
			due = append(due, id)
		}
	}
	c.mu.Unlock()
	// locked runs fn on lease id's deadline if the term is still fence's.
	locked := func(id int64, fn func(d *leaseDeadline)) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.fence == fence.Path() {
			fn(c.deadlines[id])
		}
	}
	for _, id := range baseline {
		// Baseline: the token as it is now. A renewal may have happened
		// up to the moment the read returned, so the clock starts then.
		l.metrics.leaseTokenReads.Inc()
		tok, ok, err := l.store.ReadLeaseToken(id)
		if err != nil {
			lg.WithError(err).Debug("read lease token")
			return
		}
		if !ok {
			continue // revoked meanwhile; the view will catch up
		}
		at := l.now().Add(l.firstTTL(id, ttls[id], tok))
		c.mu.Lock()
		if c.fence == fence.Path() {
			if d := c.deadlines[id]; d == nil {
				c.deadlines[id] = &leaseDeadline{version: tok.Version, known: true, deadline: at}
			} else { // renewed in memory meanwhile: keep the later deadline
				d.version, d.known = tok.Version, true
				if at.After(d.deadline) {
					d.deadline = at
				}
			}
		}
		c.mu.Unlock()
	}
	for _, id := range due {
		full := time.Duration(ttls[id]) * time.Second
		// The lease as the view holds it, taken before its token is read:
		// the expiry commits only if the batch still holds this very
		// lease, not one revoked and granted again under the same ID
		// (whose new token is at version 0 again).
		lease := l.viewLease(id)
		if lease == nil {
			continue
		}
		l.metrics.leaseTokenReads.Inc()
		tok, ok, err := l.store.ReadLeaseToken(id)
		if err != nil {
			lg.WithError(err).Debug("read lease token")
			return
		}
		if !ok {
			continue
		}
		expire := false
		locked(id, func(d *leaseDeadline) {
			switch {
			case d == nil || d.expiring:
			case tok.Version != d.version:
				// Renewed through the token since the baseline, at the
				// latest just now.
				d.version, d.deadline = tok.Version, l.now().Add(full)
			case l.now().Before(d.deadline):
				// Renewed in memory while the token was read.
			default:
				d.expiring, expire = true, true
			}
		})
		if !expire {
			continue
		}
		err = l.expire(id, lease, tok.Version, fence)
		locked(id, func(d *leaseDeadline) {
			if d == nil {
				return
			}
			d.expiring = false
			if err != nil {
				// Refused: renewed through the token (or leadership lost)
				// while expiring. Take a new baseline, with a whole TTL
				// from then.
				d.known = false
			}
		})
		if err != nil {
			lg.WithError(err).WithField("lease", fmt.Sprintf("%x", id)).Debug("lease expiry not committed")
			continue
		}
		lg.WithField("lease", fmt.Sprintf("%x", id)).Debug("lease expired")
		l.metrics.leaseExpired()
		locked(id, func(*leaseDeadline) { delete(c.deadlines, id) })
	}
}

// errLeaseGrantedAgain refuses an expiry whose lease was revoked and
// granted again under its ID since the expiry was decided.
var errLeaseGrantedAgain = errors.New("lease granted again since its expiry was decided")

// viewLease returns lease id as this instance's view holds it (nil if none).
// Each grant the view applies is a new *revision.Lease, so the pointer names
// one grant of the ID.
func (l *lessor) viewLease(id int64) *revision.Lease {
	var lease *revision.Lease
	_ = l.view.Read(func(r revision.Reader) error {
		lease = r.Lease(id)
		return nil
	})
	return lease
}

// expire revokes lease id (deleting its keys in one revision), provided the
// batch still holds lease (the grant the expiry was decided for), its token
// is still at version and this instance still holds the leadership.
func (l *lessor) expire(id int64, lease *revision.Lease, version int32, fence zkstore.Fence) error {
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	p := &proposal{
		ctx: ctx, size: 64, done: make(chan struct{}),
		eval: func(bt *revision.Batch) error {
			// Refused under CORRUPT, as etcd's lessor's revocations are.
			if err := translate.AlarmGate(bt.Alarms(), &pb.LeaseRevokeRequest{ID: id}); err != nil {
				return err
			}
			if bt.Lease(id) != lease {
				return errLeaseGrantedAgain
			}
			_, err := translate.LeaseRevoke(bt, id)
			return err
		},
		guards: func() []zkstore.Guard {
			return []zkstore.Guard{l.store.LeaseGuard(id, version), fence.Guard()}
		},
	}
	return l.commit.submit(ctx, p)
}

// renewHere is LeaseRenew on this instance (in memory on the leader,
// through the token on a follower; see LeaseRenew).
func (l *lessor) renewHere(ctx context.Context, id int64) (int64, error) {
	var ttl int64
	checkpointed := false
	_ = l.view.Read(func(r revision.Reader) error {
		if l := r.Lease(id); l != nil {
			ttl, checkpointed = l.TTL, l.RemainingTTL > 0
		}
		return nil
	})
	if ttl == 0 {
		return 0, nil
	}
	renewed, err := l.renewInMemory(ctx, id, time.Duration(ttl)*time.Second, checkpointed)
	if err != nil {
		return 0, err
	}
	if renewed {
		l.metrics.renewalsInMemory.Inc()
		return ttl, nil
	}
	req := &renewal{id: id, done: make(chan struct{})}
	select {
	case l.renewals <- req:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-l.ctx.Done():
		return 0, rpctypes.ErrGRPCStopped
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if req.err != nil {
		return 0, stopped(req.err)
	}
	if !req.renewed {
		return 0, nil
	}
	return ttl, nil
}

// renewInMemory renews lease id in the leader's memory (see LeaseRenew). It
// reports false when this instance is not the leader or cannot prove it
// still was after the renewal: the caller renews through the token then.
func (l *lessor) renewInMemory(ctx context.Context, id int64, ttl time.Duration, checkpointed bool) (bool, error) {
	if l.cfg.RelaxedReads {
		return false, nil
	}
	leader, fence, _ := l.election.State()
	sid, connected := l.store.Session()
	if !leader || !connected || !l.clock.renew(fence.Path(), id, ttl, l.now(), checkpointed) {
		return false, nil
	}
	if l.live.fresh(sid, time.Now()) != nil {
		return l.stillLeads(fence, sid), nil
	}
	if _, err := l.barrier.wait(ctx); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil // no proof: the token path decides
	}
	return l.stillLeads(fence, sid), nil
}

// stillLeads reports whether this instance leads with fence on session sid.
func (l *lessor) stillLeads(fence zkstore.Fence, sid int64) bool {
	leader, now, _ := l.election.State()
	cur, connected := l.store.Session()
	return leader && connected && now.Path() == fence.Path() && cur == sid
}

type renewal struct {
	id      int64
	renewed bool
	err     error
	done    chan struct{}
}

// renewLoop batches renewals: everything queued while one multi is in
// flight goes into the next.
func (l *lessor) renewLoop() {
	for {
		var batch []*renewal
		select {
		case r := <-l.renewals:
			batch = append(batch, r)
		case <-l.ctx.Done():
			return
		}
	drain:
		for len(batch) < 1024 {
			select {
			case r := <-l.renewals:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		seen := map[int64]bool{}
		var ids []int64
		for _, r := range batch {
			if !seen[r.id] {
				seen[r.id] = true
				ids = append(ids, r.id)
			}
		}
		renewed, err := l.store.RenewLeases(ids)
		if err == nil {
			l.metrics.renewals.Add(float64(len(batch)))
			l.metrics.renewalMultis.Inc()
			l.metrics.renewalTokens.Add(float64(len(ids)))
		}
		for _, r := range batch {
			r.renewed, r.err = renewed[r.id], err
			close(r.done)
		}
	}
}

// endGrant ends the clock.startGrant of lease id's grant, with the TTL it
// was granted and whether it committed, in the term this instance leads
// now (if any).
func (l *lessor) endGrant(id, ttl int64, ok bool) {
	fence := ""
	if leader, f, _ := l.election.State(); leader {
		fence = f.Path()
	}
	l.clock.endGrant(fence, id, time.Duration(ttl)*time.Second, l.now(), ok)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
