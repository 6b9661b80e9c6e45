package engine

import (
	"sync"
	"time"
)

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
