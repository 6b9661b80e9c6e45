package grpcsrv

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bounds of password guessing through Authenticate. etcd checks a bcrypt
// hash on every call with no bound, so any client can guess passwords as
// fast as its CPU allows (and use the server's: bcrypt at cost 10 takes
// ~50 ms of a core). zketcd never refuses an attempt — a refusal keyed by
// the user name, or by the address, refuses the user's right password
// too while someone guesses it — but slows the guesses down: each user
// name may fail authFailureBurst times, then the answer to each further
// failure is held until the user's allowance (one failure per
// authFailureEvery) covers it, at most authPenaltyMax. A success is
// answered at once and costs nothing. The password checks that run at
// once are bounded apart (authServer.checks), and a password that
// succeeded before skips them (auth.Store.Remembered). Every instance keeps
// its own count.
const (
	authFailureBurst = 5
	authFailureEvery = time.Second
	// authPenaltyMax bounds how long one failure's answer is held (and so
	// how far guesses made in parallel run the allowance into debt).
	authPenaltyMax = 3 * time.Second
	// authLimitUsers bounds the names tracked; beyond it the names whose
	// allowance is whole again are forgotten.
	authLimitUsers = 10000
)

// authLimiter is a token bucket of failed attempts per user name, which
// may run into debt: the penalty of a failure is the time until the
// bucket is out of debt again. It is safe for concurrent use.
type authLimiter struct {
	burst   float64
	every   time.Duration
	max     time.Duration
	now     func() time.Time
	delayed prometheus.Counter
	failed  prometheus.Counter

	mu      sync.Mutex
	buckets map[string]*authBucket
}

type authBucket struct {
	tokens float64 // down to -max/every: the debt of failures not yet covered
	at     time.Time
}

func newAuthLimiter(reg prometheus.Registerer) *authLimiter {
	l := &authLimiter{
		burst: authFailureBurst, every: authFailureEvery, max: authPenaltyMax, now: time.Now,
		buckets: map[string]*authBucket{},
		delayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zketcd_authenticate_throttled_total",
			Help: "Failed Authenticate calls whose answer was held back because their user failed too often (password guessing is slowed, never refused).",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zketcd_authenticate_failures_total",
			Help: "Authenticate calls that failed: unknown user or wrong password.",
		}),
	}
	if reg != nil {
		reg.MustRegister(l.delayed, l.failed)
	}
	return l
}

// refill brings b up to date (the caller holds mu).
func (l *authLimiter) refill(b *authBucket, now time.Time) {
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	b.at = now
}

// failure takes one failure of user's allowance and returns how long its
// answer is to be held: 0 while the allowance covers it, else the time
// until it does (at most authPenaltyMax).
func (l *authLimiter) failure(user string) time.Duration {
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
	floor := -float64(l.max) / float64(l.every)
	b.tokens = max(b.tokens-1, floor)
	if b.tokens >= 0 {
		return 0
	}
	l.delayed.Inc()
	return min(time.Duration(-b.tokens*float64(l.every)), l.max)
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
