package grpcsrv

import (
	"testing"
	"time"
)

// TestAuthLimiterHoldsFailuresBeyondTheBurstWithoutRefusing: a user's
// first failures are answered at once; each further one is held until the
// allowance covers it (one a second), never longer than authPenaltyMax,
// however many are made at once; another user is not affected.
func TestAuthLimiterHoldsFailuresBeyondTheBurstWithoutRefusing(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newAuthLimiter(nil)
	l.now = func() time.Time { return now }
	for i := range authFailureBurst {
		if d := l.failure("alice"); d != 0 {
			t.Fatalf("failure %d held %v, want answered at once", i, d)
		}
	}
	if d := l.failure("alice"); d != authFailureEvery {
		t.Fatalf("the failure after the burst is held %v, want %v", d, authFailureEvery)
	}
	if d := l.failure("bob"); d != 0 {
		t.Fatalf("another user's failure held %v", d)
	}
	now = now.Add(authFailureEvery)
	if d := l.failure("alice"); d != authFailureEvery {
		t.Fatalf("a guesser waiting for each answer: held %v, want %v", d, authFailureEvery)
	}
	var d time.Duration
	for range 100 { // guesses in parallel
		d = l.failure("alice")
	}
	if d != authPenaltyMax {
		t.Fatalf("100 failures at once: the last held %v, want the cap %v", d, authPenaltyMax)
	}
	now = now.Add(authPenaltyMax + authFailureBurst*authFailureEvery)
	if d := l.failure("alice"); d != 0 {
		t.Fatalf("after the debt is paid and the burst refilled: held %v", d)
	}
}

func TestAuthLimiterForgetsWholeNamesWhenFull(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newAuthLimiter(nil)
	l.now = func() time.Time { return now }
	for i := range authLimitUsers {
		l.failure(string(rune('a'+i%26)) + time.Duration(i).String())
	}
	now = now.Add(time.Hour)
	l.failure("x")
	if len(l.buckets) != 1 {
		t.Fatalf("%d names kept, want only the new one", len(l.buckets))
	}
}
