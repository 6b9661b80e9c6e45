package grpcsrv

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestAuthLimiterAllowsABurstOfFailuresThenOnePerInterval(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newAuthLimiter(nil)
	l.now = func() time.Time { return now }
	for i := range authFailureBurst {
		if err := l.allow("alice"); err != nil {
			t.Fatalf("attempt %d refused: %v", i, err)
		}
		l.failure("alice")
	}
	if err := l.allow("alice"); !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) {
		t.Fatalf("after %d failures: %v, want too many requests", authFailureBurst, err)
	}
	if err := l.allow("bob"); err != nil {
		t.Fatalf("another user is refused: %v", err)
	}
	now = now.Add(authFailureEvery)
	if err := l.allow("alice"); err != nil {
		t.Fatalf("after one interval: %v", err)
	}
	l.failure("alice")
	if err := l.allow("alice"); err == nil {
		t.Fatal("a failure after the interval left another attempt")
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
