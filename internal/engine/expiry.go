package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// defaultExpiryTick is how often the leader looks for leases past their
// deadline (Config.expiryTick in tests).
const defaultExpiryTick = 250 * time.Millisecond

// leaseDeadline is the leader's view of one lease: when it expires unless
// its token moved past version or the leader renewed it in memory.
type leaseDeadline struct {
	deadline time.Time // monotonic
	version  int32
	known    bool // version has been read
	expiring bool // an expiry commit is in flight: no renewal in memory
}

// leaseClock holds the leader's lease deadlines for one leadership term
// (fence): the expiry loop and keepalives answered in memory (lease.go)
// share it. A new term starts every lease's clock anew. Safe for concurrent
// use; no I/O happens under mu.
type leaseClock struct {
	mu        sync.Mutex
	fence     string // election znode of the term; "" when not leader
	deadlines map[int64]*leaseDeadline
	// granting counts this instance's grants in flight per lease ID (see
	// startGrant): the expiry loop takes no baseline of such a lease, whose
	// clock endGrant starts.
	granting map[int64]int
}

// begin makes fence the current term; a different one drops every deadline.
func (c *leaseClock) begin(fence string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fence == c.fence {
		return
	}
	c.fence, c.deadlines = fence, nil
	if fence != "" {
		c.deadlines = map[int64]*leaseDeadline{}
	}
}

// renew extends lease id's deadline to at least now+ttl in term fence,
// beginning that term if the expiry loop has not yet (a renewal's deadline
// only ever postpones an expiry). It reports false, changing nothing, when
// fence is empty, the lease is being expired, or it is checkpointed and its
// token is not known to have moved (see firstTTL): the caller then renews
// through the token.
func (c *leaseClock) renew(fence string, id int64, ttl time.Duration, now time.Time, checkpointed bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fence == "" {
		return false
	}
	if fence != c.fence {
		c.fence, c.deadlines = fence, map[int64]*leaseDeadline{}
	}
	d := c.deadlines[id]
	switch {
	case checkpointed && (d == nil || !d.known || d.version == 0):
		return false
	case d == nil:
		c.deadlines[id] = &leaseDeadline{deadline: now.Add(ttl)}
	case d.expiring:
		return false
	case now.Add(ttl).After(d.deadline):
		d.deadline = now.Add(ttl)
	}
	return true
}

// startGrant records that this instance commits (or serves) a grant of
// lease id; every call is paired with one endGrant. Until then the expiry
// loop reads no baseline token for the lease (its commit may have landed
// and the view applied it before endGrant runs), so a lease the leader
// granted costs no ZooKeeper read: deferring a baseline only ever postpones
// an expiry.
func (c *leaseClock) startGrant(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.granting == nil {
		c.granting = map[int64]int{}
	}
	c.granting[id]++
}

// endGrant ends a startGrant. If the grant committed (ok) and this
// instance leads in term fence, it starts the clock of lease id, granted by
// a commit that landed before now, at a whole ttl from now, beginning that
// term if the expiry loop has not yet (as renew does): no keepalive of the
// lease can be older than its grant, so the deadline is never early, and
// the expiry loop needs no baseline read of the token. The token is as the
// grant created it (version 0); were it renewed through the token since (a
// follower's fallback keepalive), the loop finds the version moved when the
// deadline passes and takes a new one, and an expiry is guarded by the
// version it read. A deadline left by an earlier lease of the same ID
// (revoked, granted again before the loop dropped it) is moved to at least
// now+ttl. A lease being expired is left alone.
func (c *leaseClock) endGrant(fence string, id int64, ttl time.Duration, now time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.granting[id]--; c.granting[id] <= 0 {
		delete(c.granting, id)
	}
	if !ok || fence == "" {
		return
	}
	if fence != c.fence {
		c.fence, c.deadlines = fence, map[int64]*leaseDeadline{}
	}
	d := c.deadlines[id]
	switch {
	case d == nil:
		c.deadlines[id] = &leaseDeadline{known: true, deadline: now.Add(ttl)}
	case d.expiring:
	default:
		d.version, d.known = 0, true
		if now.Add(ttl).After(d.deadline) {
			d.deadline = now.Add(ttl)
		}
	}
}

// deadline returns lease id's deadline in the current term, if this
// instance leads and has one.
func (c *leaseClock) deadline(id int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.deadlines[id]; d != nil {
		return d.deadline, true
	}
	return time.Time{}, false
}

// firstTTL is how long lease id lives from a leader's first look at its
// token: its granted TTL, or the remaining TTL checkpointed in the log (a
// lease copied from etcd with its time left, see package mirror) while the
// token was never renewed (version 0). A checkpointed lease is renewed only
// through its token (see LeaseRenew), so a token at version 0 proves no
// keepalive reached it since the checkpoint.
func (b *Engine) firstTTL(id, granted int64, tok zkstore.LeaseToken) time.Duration {
	ttl := granted
	if tok.Version == 0 {
		_ = b.view.Read(func(r revision.Reader) error {
			if l := r.Lease(id); l != nil && l.RemainingTTL > 0 && l.RemainingTTL < ttl {
				ttl = l.RemainingTTL
			}
			return nil
		})
	}
	return time.Duration(ttl) * time.Second
}

// expireLoop runs lease expiry while this instance is the leader. Deadlines
// use the monotonic clock from when the leader first read each lease's
// token; a lease expires only if, for a whole TTL since, its token did not
// move and the leader did not renew it in memory, so it never expires
// early, also across leader changes: a new leader starts every lease's
// clock anew (as etcd does on promotion), and renewals the old leader kept
// in memory were each answered before the old leader's session could end
// (see LeaseRenew), so before the new leader's clock started.
func (b *Engine) expireLoop() {
	lg := b.log.WithField("component", "lease-expiry")
	tick := b.cfg.expiryTick
	if tick <= 0 {
		tick = defaultExpiryTick
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		changed := b.election.Changed()
		leader, fence, _ := b.election.State()
		if !leader {
			b.leases.begin("")
			select {
			case <-changed:
			case <-b.ctx.Done():
				return
			}
			continue
		}
		b.leases.begin(fence.Path())
		b.expireDue(lg, fence)
		b.expiryScans.Add(1)
		select {
		case <-t.C:
		case <-changed:
		case <-b.ctx.Done():
			return
		}
	}
}

func (b *Engine) expireDue(lg *logrus.Entry, fence zkstore.Fence) {
	c := &b.leases
	ttls := b.view.LeaseTTLs()
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
	now := b.now()
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
		b.metrics.leaseTokenReads.Inc()
		tok, ok, err := b.store.ReadLeaseToken(id)
		if err != nil {
			lg.WithError(err).Debug("read lease token")
			return
		}
		if !ok {
			continue // revoked meanwhile; the view will catch up
		}
		at := b.now().Add(b.firstTTL(id, ttls[id], tok))
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
		lease := b.viewLease(id)
		if lease == nil {
			continue
		}
		b.metrics.leaseTokenReads.Inc()
		tok, ok, err := b.store.ReadLeaseToken(id)
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
				d.version, d.deadline = tok.Version, b.now().Add(full)
			case b.now().Before(d.deadline):
				// Renewed in memory while the token was read.
			default:
				d.expiring, expire = true, true
			}
		})
		if !expire {
			continue
		}
		err = b.expire(id, lease, tok.Version, fence)
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
		b.metrics.leaseExpired()
		locked(id, func(*leaseDeadline) { delete(c.deadlines, id) })
	}
}

// errLeaseGrantedAgain refuses an expiry whose lease was revoked and
// granted again under its ID since the expiry was decided.
var errLeaseGrantedAgain = errors.New("lease granted again since its expiry was decided")

// viewLease returns lease id as this instance's view holds it (nil if none).
// Each grant the view applies is a new *revision.Lease, so the pointer names
// one grant of the ID.
func (b *Engine) viewLease(id int64) *revision.Lease {
	var l *revision.Lease
	_ = b.view.Read(func(r revision.Reader) error {
		l = r.Lease(id)
		return nil
	})
	return l
}

// expire revokes lease id (deleting its keys in one revision), provided the
// batch still holds lease (the grant the expiry was decided for), its token
// is still at version and this instance still holds the leadership.
func (b *Engine) expire(id int64, lease *revision.Lease, version int32, fence zkstore.Fence) error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
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
			return []zkstore.Guard{b.store.LeaseGuard(id, version), fence.Guard()}
		},
	}
	return b.submit(ctx, p)
}
