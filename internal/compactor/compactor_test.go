package compactor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// fakeClock moves only when the test advances it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	changed chan struct{} // closed and replaced when waiters grows
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, fakeWaiter{at: f.now.Add(d), ch: ch})
	close(f.changed)
	f.changed = make(chan struct{})
	return ch
}

// Advance moves the clock and fires the timers due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- f.now
	}
	f.waiters = kept
}

// blockUntilWaiting waits until a goroutine waits on the clock: the
// compactor finished its previous round.
func (f *fakeClock) blockUntilWaiting(t *testing.T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		n, ch := len(f.waiters), f.changed
		f.mu.Unlock()
		if n > 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("the compactor never waited on the clock")
		}
	}
}

// fakeTarget's revision grows by one at each Rev call (a store written
// between every two samples), unless fixed is set.
type fakeTarget struct {
	mu        sync.Mutex
	rev       int64
	fixed     bool
	follower  bool
	compacted int64
	fail      error
	calls     []int64
}

func (f *fakeTarget) Rev() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.fixed {
		f.rev++
	}
	return f.rev
}

func (f *fakeTarget) Leader() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.follower
}

func (f *fakeTarget) Compact(_ context.Context, rev int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, rev)
	if f.fail != nil {
		return f.fail
	}
	if rev <= f.compacted {
		return fmt.Errorf("compact to %d: %w", rev, ErrCompacted)
	}
	f.compacted = rev
	return nil
}

func (f *fakeTarget) set(fn func(*fakeTarget)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// takeCalls returns the compactions asked since the last call.
func (f *fakeTarget) takeCalls() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// harness runs a compactor on a fake clock and target.
type harness struct {
	t      *testing.T
	clock  *fakeClock
	target *fakeTarget
	reg    *prometheus.Registry
	step   time.Duration
}

// start runs a compactor for cfg on a target set up by setup (if not nil).
func start(t *testing.T, cfg Config, setup func(*fakeTarget)) *harness {
	t.Helper()
	h := &harness{t: t, clock: newFakeClock(), target: &fakeTarget{}, reg: prometheus.NewRegistry()}
	if setup != nil {
		setup(h.target)
	}
	cfg.Clock = h.clock
	lg := logrus.New()
	lg.SetOutput(testWriter{t})
	c, err := New(cfg, h.target, logrus.NewEntry(lg), h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.step = c.cfg.RevisionInterval
	if c.cfg.Mode == ModePeriodic {
		h.step, _, _ = periodicTimes(cfg.Retention)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// tick lets n check intervals pass, each after the compactor finished
// the round before, and returns the compactions asked meanwhile.
func (h *harness) tick(n int) []int64 {
	h.t.Helper()
	for i := 0; i < n; i++ {
		h.clock.blockUntilWaiting(h.t)
		h.clock.Advance(h.step)
	}
	h.clock.blockUntilWaiting(h.t)
	return h.target.takeCalls()
}

// count returns the auto_compactions_total sample for outcome.
func (h *harness) count(outcome string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "zketcd_auto_compactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestPeriodTimesFollowEtcd(t *testing.T) {
	for _, tc := range []struct {
		retention        time.Duration
		sample, interval time.Duration
		keep             int
	}{
		{5 * time.Second, 500 * time.Millisecond, 5 * time.Second, 11},
		{10 * time.Minute, time.Minute, 10 * time.Minute, 11},
		{59 * time.Minute, 354 * time.Second, 59 * time.Minute, 11},
		{time.Hour, 6 * time.Minute, time.Hour, 11},
		{2 * time.Hour, 6 * time.Minute, time.Hour, 21},
		{24 * time.Hour, 6 * time.Minute, time.Hour, 241},
	} {
		sample, interval, keep := periodicTimes(tc.retention)
		if sample != tc.sample || interval != tc.interval || keep != tc.keep {
			t.Errorf("retention %s: sample every %s, compact every %s, keep %d; want %s, %s, %d",
				tc.retention, sample, interval, keep, tc.sample, tc.interval, tc.keep)
		}
	}
}

// Under an hour: nothing for the first retention, then every retention, to
// the revision sampled retention + one sampling interval before.
func TestPeriodicUnderAnHourCompactsEveryRetentionToTheRevisionThen(t *testing.T) {
	h := start(t, Config{Mode: ModePeriodic, Retention: 5 * time.Minute}, nil)
	if got := h.tick(9); len(got) != 0 {
		t.Fatalf("compacted %v before the retention passed", got)
	}
	if got := h.tick(1); !slices.Equal(got, []int64{1}) {
		t.Fatalf("first compaction after 5m: %v, want [1] (the revision at the start)", got)
	}
	for i := 1; i <= 4; i++ {
		if got := h.tick(9); len(got) != 0 {
			t.Fatalf("round %d: compacted %v before the interval passed", i, got)
		}
		// Samples are revisions 1, 2, ... one per 30 s; at 5m·(i+1) the
		// oldest of the 11 kept is the one sampled 5m30s before.
		if got, want := h.tick(1), int64(10*i); !slices.Equal(got, []int64{want}) {
			t.Fatalf("round %d: compacted %v, want [%d]", i, got, want)
		}
	}
	if n := h.count("compacted"); n != 5 {
		t.Fatalf("auto_compactions_total{outcome=compacted} = %v, want 5", n)
	}
}

// Over an hour: the first compaction after the whole retention, then
// hourly, each to the revision retention + 6m before.
func TestPeriodicOverAnHourCompactsHourly(t *testing.T) {
	h := start(t, Config{Mode: ModePeriodic, Retention: 2 * time.Hour}, nil)
	if got := h.tick(19); len(got) != 0 {
		t.Fatalf("compacted %v before two hours", got)
	}
	if got := h.tick(1); !slices.Equal(got, []int64{1}) {
		t.Fatalf("first compaction at 2h: %v, want [1]", got)
	}
	for i := 1; i <= 3; i++ {
		if got := h.tick(9); len(got) != 0 {
			t.Fatalf("hour %d: compacted %v early", i, got)
		}
		if got, want := h.tick(1), int64(10*i); !slices.Equal(got, []int64{want}) {
			t.Fatalf("hour %d: compacted %v, want [%d]", i, got, want)
		}
	}
}

// A failed compaction is tried again at the next sample with the window
// moved on; a revision already compacted counts as done.
func TestPeriodicRetriesEverySampleAfterAFailure(t *testing.T) {
	h := start(t, Config{Mode: ModePeriodic, Retention: 10 * time.Minute},
		func(f *fakeTarget) { f.fail = errors.New("zookeeper unavailable") })
	if got := h.tick(10); !slices.Equal(got, []int64{1}) {
		t.Fatalf("first attempt: %v, want [1]", got)
	}
	// At 11m the window (11 samples) still starts at revision 1; at 12m it
	// has moved on.
	if got := h.tick(2); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("retries: %v, want [1 2] (one per sampling interval, window moving)", got)
	}
	h.target.set(func(f *fakeTarget) { f.fail = nil; f.compacted = 100 })
	if got := h.tick(1); !slices.Equal(got, []int64{3}) {
		t.Fatalf("after recovery: %v, want [3]", got)
	}
	if got := h.tick(9); len(got) != 0 {
		t.Fatalf("already-compacted counts as success, yet it retried: %v", got)
	}
	if h.count("failed") != 3 || h.count("already_compacted") != 1 {
		t.Fatalf("failed %v, already_compacted %v; want 3, 1", h.count("failed"), h.count("already_compacted"))
	}
}

// An idle store (same revision) is not compacted again.
func TestPeriodicSkipsARevisionAlreadyCompactedByIt(t *testing.T) {
	h := start(t, Config{Mode: ModePeriodic, Retention: time.Hour}, func(f *fakeTarget) { f.fixed, f.rev = true, 7 })
	if got := h.tick(10); !slices.Equal(got, []int64{7}) {
		t.Fatalf("first: %v, want [7]", got)
	}
	if got := h.tick(30); len(got) != 0 {
		t.Fatalf("idle store compacted again: %v", got)
	}
}

// A follower samples but never compacts; once leader, it compacts to its
// own samples at once if it has run longer than the retention.
func TestPeriodicFollowerSamplesAndCompactsOnlyOnceLeader(t *testing.T) {
	h := start(t, Config{Mode: ModePeriodic, Retention: 10 * time.Minute}, func(f *fakeTarget) { f.follower = true })
	if got := h.tick(25); len(got) != 0 {
		t.Fatalf("follower compacted: %v", got)
	}
	h.target.set(func(f *fakeTarget) { f.follower = false })
	// 26 samples taken (revisions 1..26); at 26m the oldest of the last 11
	// is revision 16.
	if got := h.tick(1); !slices.Equal(got, []int64{16}) {
		t.Fatalf("new leader: %v, want [16]", got)
	}
}

func TestRevisionCompactsEveryIntervalToCurrentMinusRetention(t *testing.T) {
	h := start(t, Config{Mode: ModeRevision, Revisions: 10, RevisionInterval: time.Second},
		func(f *fakeTarget) { f.fixed, f.rev = true, 5 })
	if got := h.tick(3); len(got) != 0 {
		t.Fatalf("compacted %v with fewer revisions than the retention", got)
	}
	h.target.set(func(f *fakeTarget) { f.rev = 25 })
	if got := h.tick(1); !slices.Equal(got, []int64{15}) {
		t.Fatalf("compacted %v, want [15]", got)
	}
	if got := h.tick(3); len(got) != 0 {
		t.Fatalf("no new revision, yet compacted %v", got)
	}
	h.target.set(func(f *fakeTarget) { f.rev = 40; f.follower = true })
	if got := h.tick(3); len(got) != 0 {
		t.Fatalf("follower compacted %v", got)
	}
	h.target.set(func(f *fakeTarget) { f.follower = false })
	if got := h.tick(1); !slices.Equal(got, []int64{30}) {
		t.Fatalf("compacted %v, want [30]", got)
	}
}

func TestRevisionModeChecksEveryFiveMinutesByDefault(t *testing.T) {
	h := start(t, Config{Mode: ModeRevision, Revisions: 1}, func(f *fakeTarget) { f.fixed, f.rev = true, 100 })
	h.clock.blockUntilWaiting(t)
	h.clock.Advance(5*time.Minute - time.Nanosecond)
	if got := h.target.takeCalls(); len(got) != 0 {
		t.Fatalf("compacted before 5m: %v", got)
	}
	h.clock.Advance(time.Nanosecond)
	h.clock.blockUntilWaiting(t)
	if got := h.target.takeCalls(); !slices.Equal(got, []int64{99}) {
		t.Fatalf("at 5m: %v, want [99]", got)
	}
}

func TestParseRetentionAsEtcd(t *testing.T) {
	for _, tc := range []struct {
		mode      Mode
		retention string
		want      Config
		err       string
	}{
		{ModePeriodic, "0", Config{Mode: ModePeriodic}, ""},
		{ModePeriodic, "1", Config{Mode: ModePeriodic, Retention: time.Hour}, ""},
		{ModePeriodic, "72", Config{Mode: ModePeriodic, Retention: 72 * time.Hour}, ""},
		{ModePeriodic, "30m", Config{Mode: ModePeriodic, Retention: 30 * time.Minute}, ""},
		{ModePeriodic, "1h30m", Config{Mode: ModePeriodic, Retention: 90 * time.Minute}, ""},
		{ModeRevision, "0", Config{Mode: ModeRevision}, ""},
		{ModeRevision, "1000", Config{Mode: ModeRevision, Revisions: 1000}, ""},
		{ModePeriodic, "1.5", Config{}, "want hours or a duration"},
		{ModePeriodic, "-1", Config{}, "want hours or a duration"},
		{ModePeriodic, "-1h", Config{}, "must not be negative"},
		{ModePeriodic, "100ms", Config{}, "shorter than"},
		{ModeRevision, "1h", Config{}, "number of revisions"},
		{ModeRevision, "-5", Config{}, "number of revisions"},
		{"", "1", Config{}, "undefined auto-compaction-mode"},
		{"hourly", "1", Config{}, "unknown auto-compaction-mode"},
	} {
		got, err := ParseRetention(tc.mode, tc.retention)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %q: error %v, want one containing %q", tc.mode, tc.retention, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %q: %+v, %v; want %+v", tc.mode, tc.retention, got, err, tc.want)
		}
	}
}

func TestNewRefusesAConfigThatIsOff(t *testing.T) {
	if _, err := New(Config{}, &fakeTarget{}, nil, nil); err == nil {
		t.Fatal("New accepted retention 0")
	}
	if (Config{Mode: ModeRevision, Revisions: 3}).Enabled() != true || (Config{Retention: time.Hour}).Enabled() != true {
		t.Fatal("Enabled")
	}
}
