package testutil

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Eventually(t, 5*time.Second, "third call", func() bool { return calls.Add(1) >= 3 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records instead of stopping.
type fatalRecorder struct {
	testing.TB
	msg  string
	args []any
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg, f.args = format, args
	panic(f)
}

func TestEventuallyFailsAfterItsTime(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if r := recover(); r != rec {
				t.Fatalf("recovered %v, want the recorder's Fatalf", r)
			}
		}()
		Eventually(rec, 30*time.Millisecond, "never", func() bool { return false })
	}()
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("gave up after %s, before its 30ms", took)
	}
	if rec.msg == "" {
		t.Fatal("no failure reported")
	}
}

func TestEventuallyWithAnErrorConditionReportsTheLastError(t *testing.T) {
	var calls int
	Eventually(t, 5*time.Second, "second call", func() error {
		if calls++; calls < 2 {
			return errors.New("first")
		}
		return nil
	})
	rec := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		Eventually(rec, 10*time.Millisecond, "never", func() error { return errors.New("still broken") })
	}()
	if got := fmt.Sprintf(rec.msg, rec.args...); !strings.Contains(got, "never: still broken") {
		t.Fatalf("failure %q does not carry the last error", got)
	}
}

type namedCond func() bool

func TestEventuallyTakesNamedConditionTypes(t *testing.T) {
	n := 0
	Eventually(t, 5*time.Second, "third call", namedCond(func() bool { n++; return n >= 3 }))
}

func TestClockMovesOnlyForwardAndKeepsMonotonicOrder(t *testing.T) {
	c := NewClock()
	t0 := c.Now()
	if !c.Now().Equal(t0) {
		t.Fatal("the clock moved by itself")
	}
	t1 := c.Advance(time.Second)
	if got := t1.Sub(t0); got != time.Second {
		t.Fatalf("Advance(1s) moved %s", got)
	}
	if got := c.Advance(-time.Hour); !got.Equal(t1) {
		t.Fatalf("Advance(-1h) moved the clock to %v", got)
	}
	if got := c.AdvanceTo(t0); !got.Equal(t1) {
		t.Fatalf("AdvanceTo(earlier) moved the clock back to %v", got)
	}
	if got := c.AdvanceTo(t1.Add(time.Minute)); got.Sub(t1) != time.Minute {
		t.Fatalf("AdvanceTo(later) read %v", got)
	}
	if !t0.Before(c.Now()) || time.Now().Before(t0) {
		t.Fatal("readings do not compare as time.Now's do")
	}
}
