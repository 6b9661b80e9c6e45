package compactor

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/testutil/wallstep"
)

// steppedClock is the real clock on a machine whose wall clock is stepped;
// strip drops the monotonic reading, as a wall-clock-only time source would.
type steppedClock struct {
	wall  *wallstep.Clock
	strip bool
}

func (c steppedClock) Now() time.Time {
	if c.strip {
		return c.wall.Now().Round(0)
	}
	return c.wall.Now()
}

func (steppedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// firstCompaction runs a periodic compactor with a retention of 3 s on a
// clock stepped by step 300 ms in, and returns when it first compacted
// (measured on the monotonic clock), or ok false if not within limit.
func firstCompaction(t *testing.T, step time.Duration, strip bool, limit time.Duration) (at time.Duration, ok bool) {
	t.Helper()
	wall := &wallstep.Clock{}
	target := &fakeTarget{}
	lg := logrus.New()
	lg.SetOutput(testWriter{t})
	c, err := New(Config{Mode: ModePeriodic, Retention: 3 * time.Second, Clock: steppedClock{wall, strip}}, target, logrus.NewEntry(lg), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(300 * time.Millisecond) // the step comes 300 ms in: the experiment
	wall.Step(step)
	// A measurement, not a wait: not compacting within limit is an answer
	// (the control clock's after a -1 h step).
	for time.Since(start) < limit {
		if len(target.takeCalls()) > 0 {
			return time.Since(start), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, false
}

// TestPeriodicCompactionIgnoresWallClockSteps: a ±1 h step of the wall
// clock neither brings the first compaction forward nor holds it back: it
// comes one retention after the start, as without a step. A clock without
// monotonic readings (the control) compacts at once after +1 h and not at
// all (for an hour) after -1 h, so the test would catch a compactor that
// measured time on the wall clock.
func TestPeriodicCompactionIgnoresWallClockSteps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		step  time.Duration
		strip bool
	}{
		{"no step", 0, false},
		{"+1h", time.Hour, false},
		{"-1h", -time.Hour, false},
		{"control +1h without monotonic readings", time.Hour, true},
		{"control -1h without monotonic readings", -time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			at, ok := firstCompaction(t, tc.step, tc.strip, 8*time.Second)
			switch {
			case tc.strip && tc.step > 0:
				if !ok || at >= 2*time.Second {
					t.Fatalf("control: compaction at %v (%v), want right after the step", at, ok)
				}
			case tc.strip:
				if ok {
					t.Fatalf("control: compaction at %v, want none for an hour", at)
				}
			default:
				if !ok || at < 3*time.Second || at >= 6*time.Second {
					t.Fatalf("first compaction at %v (%v), want one retention (3 s) after the start", at, ok)
				}
				t.Logf("first compaction %v after the start", at.Round(10*time.Millisecond))
			}
		})
	}
}
