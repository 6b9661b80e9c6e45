package wallstep

import (
	"testing"
	"time"
)

func TestStepMovesTheWallReadingNotTheMonotonicOne(t *testing.T) {
	var c Clock
	before := c.Now()
	c.Step(time.Hour)
	after := c.Now()
	if d := after.Unix() - before.Unix(); d < 3600 || d > 3601 {
		t.Fatalf("wall moved %d s, want 3600", d)
	}
	if d := after.Sub(before); d < 0 || d > time.Second {
		t.Fatalf("elapsed %v across a +1 h step, want about 0", d)
	}
	if d := after.Round(0).Sub(before.Round(0)); d < time.Hour {
		t.Fatalf("without monotonic readings the step shows: %v", d)
	}
	c.Step(-2 * time.Hour)
	if back := c.Now(); back.Sub(after) < 0 || back.Unix()-after.Unix() > -7199 {
		t.Fatalf("-2 h step: elapsed %v, wall %d s", back.Sub(after), back.Unix()-after.Unix())
	}
}
