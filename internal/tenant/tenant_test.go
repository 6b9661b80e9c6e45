package tenant

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestValidNameAcceptsKamajiNamesAndRefusesPaths(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"team-a", true},
		{"5f1b9a0e-6c2d-4a8e-9f3b-1c2d3e4f5a6b", true}, // a UID
		{"default_tenant_00", true},                    // <namespace>_<name>
		{"a.b", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a b", false},
		{"ä", false},
		{"a\x00", false},
		{strings.Repeat("x", MaxNameBytes), true},
		{strings.Repeat("x", MaxNameBytes+1), false},
	} {
		err := ValidName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidName(%q) = %v, not ErrInvalidName", tc.name, err)
		}
	}
}

func TestValidCNRefusesEmptyAndInvalidUTF8(t *testing.T) {
	for _, cn := range []string{"", "\xff", strings.Repeat("x", MaxCNBytes+1)} {
		if ValidCN(cn) == nil {
			t.Errorf("ValidCN(%q) accepted", cn)
		}
	}
	for _, cn := range []string{"tenant-a", "system:node:a", "CN with spaces/and slashes"} {
		if err := ValidCN(cn); err != nil {
			t.Errorf("ValidCN(%q) = %v", cn, err)
		}
	}
}

func TestEffectiveLimitsTakeDefaultsForZeroAndKeepNegativeAsUnlimited(t *testing.T) {
	def := DefaultLimits()
	got := Limits{RequestsPerSecond: 5, Watchers: -1}.Effective(def)
	want := def
	want.RequestsPerSecond, want.Watchers = 5, -1
	if got != want {
		t.Fatalf("Effective = %+v, want %+v", got, want)
	}
}

func TestDecodeLimitsRefusesUnknownFields(t *testing.T) {
	l := Limits{RequestsPerSecond: 7, QuotaBackendBytes: 1 << 20}
	back, err := DecodeLimits(l.Encode())
	if err != nil || back != l {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
	if _, err := DecodeLimits([]byte(`{"request_per_second":5}`)); err == nil {
		t.Fatal("a misspelt limit was accepted")
	}
	if _, err := DecodeLimits([]byte(`{} {}`)); err == nil {
		t.Fatal("trailing data was accepted")
	}
	if l, err := DecodeLimits(nil); err != nil || l != (Limits{}) {
		t.Fatalf("empty = %+v, %v", l, err)
	}
}

// clock is a time source the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestAdmissionRefusesAFloodBeyondTheRateAndItsWait(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	a := NewAdmission(Limits{RequestsPerSecond: 10}, nil, c.now)
	a.maxWait = 0 // refuse as soon as the bucket is empty
	ctx := context.Background()
	admitted := 0
	for range 100 {
		if err := a.Admit(ctx, 0); err == nil {
			admitted++
		} else if !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) {
			t.Fatalf("refusal = %v, want etcd's too many requests", err)
		}
	}
	// A full bucket holds one second: 10 pass (the 11th finds it at 0,
	// which is not debt), the rest are refused.
	if admitted != 11 {
		t.Fatalf("admitted %d of a burst of 100 at 10/s, want 11", admitted)
	}
	c.t = c.t.Add(time.Second)
	if err := a.Admit(ctx, 0); err != nil {
		t.Fatalf("a second later: %v", err)
	}
}

func TestAdmissionLetsOneLargeWriteOverdrawAndDelaysTheNext(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	a := NewAdmission(Limits{WriteBytesPerSecond: 1000}, nil, c.now)
	a.maxWait = 2 * time.Second
	ctx := context.Background()
	if err := a.Admit(ctx, 2500); err != nil { // 2.5 s worth: overdraws
		t.Fatalf("a write larger than a second's bytes: %v", err)
	}
	a.mu.Lock()
	wait, ok := a.bytes.reserve(1, c.t, a.maxWait)
	a.mu.Unlock()
	if !ok || wait != 1500*time.Millisecond {
		t.Fatalf("the next write waits %v (ok %v), want 1.5s", wait, ok)
	}
	a.maxWait = time.Second
	if err := a.Admit(ctx, 1); !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) {
		t.Fatalf("a write that would wait past the maximum: %v", err)
	}
}

func TestAdmissionWaitEndsWithTheContext(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	a := NewAdmission(Limits{RequestsPerSecond: 1}, nil, c.now)
	a.maxWait = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	_ = a.Admit(ctx, 0)
	_ = a.Admit(ctx, 0) // tokens now -1: the next waits a second
	cancel()
	if err := a.Admit(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit after cancel = %v", err)
	}
}

func TestAdmissionWithoutLimitsAdmitsEverything(t *testing.T) {
	a := NewAdmission(Limits{RequestsPerSecond: -1, WriteBytesPerSecond: 0}, nil, nil)
	for range 10000 {
		if err := a.Admit(context.Background(), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAdmitLeaseRefusesAtTheLimit(t *testing.T) {
	n := 3
	a := NewAdmission(Limits{Leases: 3}, func() int { return n }, nil)
	if err := a.AdmitLease(); !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) {
		t.Fatalf("at the limit: %v", err)
	}
	n = 2
	if err := a.AdmitLease(); err != nil {
		t.Fatalf("below the limit: %v", err)
	}
	a.SetLimits(Limits{Leases: -1})
	n = 1 << 20
	if err := a.AdmitLease(); err != nil {
		t.Fatalf("no limit: %v", err)
	}
}
