package grpcsrv

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Bounds of password guessing through Authenticate. etcd checks a bcrypt
// hash on every call with no bound, so any client can guess passwords as
// fast as its CPU allows (and use the server's: bcrypt at cost 10 takes
// ~50 ms of a core). zketcd lets each user name fail authFailureBurst
// times, then once per authFailureEvery; a success does not count. Every
// instance keeps its own count.
const (
	authFailureBurst = 5
	authFailureEvery = time.Second
	// authLimitUsers bounds the names tracked; beyond it the names whose
	// allowance is whole again are forgotten.
	authLimitUsers = 10000
)

// authLimiter is a token bucket of failed attempts per user name. It is
// safe for concurrent use.
type authLimiter struct {
	burst   float64
	every   time.Duration
	now     func() time.Time
	limited prometheus.Counter
	failed  prometheus.Counter

	mu      sync.Mutex
	buckets map[string]*authBucket
}

type authBucket struct {
	tokens float64
	at     time.Time
}

func newAuthLimiter(reg prometheus.Registerer) *authLimiter {
	l := &authLimiter{
		burst: authFailureBurst, every: authFailureEvery, now: time.Now,
		buckets: map[string]*authBucket{},
		limited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zketcd_authenticate_throttled_total",
			Help: "Authenticate calls refused with \"too many requests\" because their user failed too often (password guessing).",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zketcd_authenticate_failures_total",
			Help: "Authenticate calls that failed: unknown user or wrong password.",
		}),
	}
	if reg != nil {
		reg.MustRegister(l.limited, l.failed)
	}
	return l
}

// refill brings b up to date (the caller holds mu).
func (l *authLimiter) refill(b *authBucket, now time.Time) {
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	b.at = now
}

// allow reports whether user may try a password now (etcd's "too many
// requests" otherwise); it takes nothing: only failures do.
func (l *authLimiter) allow(user string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[user]
	if !ok {
		return nil
	}
	l.refill(b, l.now())
	if b.tokens < 1 {
		l.limited.Inc()
		return rpctypes.ErrGRPCRequestTooManyRequests
	}
	return nil
}

// failure takes one attempt of user's allowance.
func (l *authLimiter) failure(user string) {
	l.failed.Inc()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[user]
	if !ok {
		if len(l.buckets) >= authLimitUsers {
			l.forgetWhole(now)
		}
		b = &authBucket{tokens: l.burst, at: now}
		l.buckets[user] = b
	}
	l.refill(b, now)
	b.tokens = max(b.tokens-1, 0)
}

// forgetWhole drops the names whose allowance is whole again; if none is,
// the map is cleared (an attacker cycling names gains nothing it could
// not have had with fresh names anyway).
func (l *authLimiter) forgetWhole(now time.Time) {
	for name, b := range l.buckets {
		l.refill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, name)
		}
	}
	if len(l.buckets) >= authLimitUsers {
		clear(l.buckets)
	}
}
