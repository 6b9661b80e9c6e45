package tenant

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// DefaultMaxWait is how long a request over its tenant's rate may wait for
// room before it is refused: bursts a little above the rate are smoothed,
// a flood is refused at once.
const DefaultMaxWait = 500 * time.Millisecond

// Admission enforces one tenant's rate limits on one instance: requests
// per second and bytes written per second, each a bucket of one second's
// worth that a request may overdraw (a write larger than a second's bytes
// still passes, and delays the next ones). A request that finds its
// bucket empty waits until the bucket refills, if that is within the
// maximum wait, else it is refused with etcd's "too many requests". It is
// safe for concurrent use.
type Admission struct {
	now     func() time.Time
	maxWait time.Duration
	leases  func() int // the tenant's live leases

	mu     sync.Mutex
	limits Limits
	reqs   bucket
	bytes  bucket
}

// NewAdmission returns the admission of effective limits l (Effective
// already applied). leases counts the tenant's live leases (nil: the lease
// limit is not enforced); now is the clock (nil: time.Now).
func NewAdmission(l Limits, leases func() int, now func() time.Time) *Admission {
	if now == nil {
		now = time.Now
	}
	a := &Admission{now: now, maxWait: DefaultMaxWait, leases: leases}
	a.SetLimits(l)
	return a
}

// SetLimits replaces the limits (a registry change); the buckets keep
// what they hold, bounded by the new rates.
func (a *Admission) SetLimits(l Limits) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.now()
	a.limits = l
	a.reqs.setRate(float64(l.RequestsPerSecond), t)
	a.bytes.setRate(float64(l.WriteBytesPerSecond), t)
}

// Limits returns the limits in force.
func (a *Admission) Limits() Limits {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limits
}

// Admit admits one request writing writeBytes (0 for a read), waiting for
// room at most the maximum wait. Errors: etcd's "too many requests" when
// the tenant is over a rate, or ctx's error while waiting.
func (a *Admission) Admit(ctx context.Context, writeBytes int) error {
	a.mu.Lock()
	t := a.now()
	wait, ok := a.reqs.reserve(1, t, a.maxWait)
	if ok && writeBytes > 0 {
		var w time.Duration
		if w, ok = a.bytes.reserve(float64(writeBytes), t, a.maxWait); ok {
			wait = max(wait, w)
		} else {
			a.reqs.cancel(1)
		}
	}
	a.mu.Unlock()
	if !ok {
		return rpctypes.ErrGRPCRequestTooManyRequests
	}
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AdmitLease admits a lease grant: etcd's "too many requests" when the
// tenant holds its limit of leases already.
func (a *Admission) AdmitLease() error {
	a.mu.Lock()
	limit := a.limits.Leases
	a.mu.Unlock()
	if limit > 0 && a.leases != nil && int64(a.leases()) >= limit {
		return rpctypes.ErrGRPCRequestTooManyRequests
	}
	return nil
}

// bucket is a token bucket holding at most one second of its rate; rate
// <= 0 means no limit.
type bucket struct {
	rate   float64
	tokens float64
	last   time.Time
}

func (b *bucket) setRate(rate float64, t time.Time) {
	b.refill(t)
	if b.rate <= 0 && rate > 0 {
		b.tokens = rate // a new limit starts full
	}
	b.rate = rate
	b.tokens = min(b.tokens, rate)
}

func (b *bucket) refill(t time.Time) {
	if b.rate > 0 && t.After(b.last) {
		b.tokens = min(b.rate, b.tokens+t.Sub(b.last).Seconds()*b.rate)
	}
	b.last = t
}

// reserve takes n tokens: at once while the bucket is not in debt, else
// after the wait until it is out of debt, if that is at most maxWait (ok
// false: nothing taken).
func (b *bucket) reserve(n float64, t time.Time, maxWait time.Duration) (wait time.Duration, ok bool) {
	if b.rate <= 0 {
		return 0, true
	}
	b.refill(t)
	if b.tokens <= 0 {
		wait = time.Duration(-b.tokens / b.rate * float64(time.Second))
		if wait > maxWait {
			return 0, false
		}
	}
	b.tokens -= n
	return wait, true
}

// cancel gives back n tokens reserve took.
func (b *bucket) cancel(n float64) {
	if b.rate > 0 {
		b.tokens = min(b.rate, b.tokens+n)
	}
}
