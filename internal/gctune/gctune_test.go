package gctune

import (
	"runtime/debug"
	"testing"
)

func TestPercentKeepsGrowthAFractionOfTheLiveHeapAboveAFloor(t *testing.T) {
	c := Config{}
	for _, tc := range []struct {
		live int64
		want int
	}{
		{0, 100},
		{32 << 20, 100}, // below the floor: Go's default
		{128 << 20, 50}, // the 64 MiB floor is half of it
		{640 << 20, 10}, // still the floor
		{1280 << 20, 5}, // 5% of it is the floor
		{4 << 30, 5},    // 5%
		{100 << 30, 5},  // never below MinPercent
	} {
		if got := c.Percent(tc.live); got != tc.want {
			t.Errorf("live %d MiB: percent %d, want %d", tc.live>>20, got, tc.want)
		}
	}
	if got := (Config{Fraction: 0.2, Floor: 1 << 20}).Percent(1 << 30); got != 20 {
		t.Errorf("fraction 0.2: %d", got)
	}
}

func TestLoadDefersCollectionAndRestoresTheSettings(t *testing.T) {
	tu := New(Config{})
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tu.tune(128 << 20) // Run's setting for 128 MiB live: 50%
	if got := debug.SetGCPercent(50); got != 50 {
		t.Fatalf("tuned percentage %d, want 50", got)
	}
	limit := debug.SetMemoryLimit(-1)
	done := tu.Load(64 << 20)
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("percentage during a load %d, want -1 (off)", got)
	}
	// What the process held, plus the 64 MiB load and the 64 MiB floor.
	if got := debug.SetMemoryLimit(-1); got >= limit || got < 128<<20 {
		t.Errorf("memory limit during a load %d (held %d, before %d)", got, heldBytes(), limit)
	}
	tu.tune(1 << 30) // Run's tick during the load changes nothing
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("a tick during a load set %d", got)
	}
	second := tu.Load(64 << 20) // overlapping loads: the first to end restores nothing
	done()
	done() // once only
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("percentage while a load remains %d, want -1", got)
	}
	second()
	if got := debug.SetGCPercent(50); got != 50 {
		t.Errorf("percentage after the loads %d, want 50", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit after the loads %d, want %d", got, limit)
	}
	tu.tune(4 << 30)
	if got := debug.SetGCPercent(5); got != 5 {
		t.Errorf("a tick after the loads set %d, want 5", got)
	}
}
