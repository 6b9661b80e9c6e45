package gctune

import "testing"

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
