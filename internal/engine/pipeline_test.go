package engine

import (
	"testing"
	"time"
)

// drive lands flights of size requests on p for windows windows, each
// window committing at rate(limit) requests per second, with the queue
// backed up; it returns the limits at the end of each window.
func drive(p *pacer, windows int, rate func(limit int) float64) []int {
	now := time.Unix(0, 0)
	var limits []int
	for range windows {
		r := rate(p.limit)
		step := time.Duration(float64(time.Second) * 10 / r) // 10 requests a flight
		before := p.steps
		for p.steps == before {
			now = now.Add(step)
			p.landed(now, 10, time.Millisecond, p.limit-1, 100)
		}
		limits = append(limits, p.limit)
	}
	return limits
}

func TestAutoDepthGoesDeeperWhileItPays(t *testing.T) {
	p := newPacer(0)
	limits := drive(p, 40, func(limit int) float64 { return 1000 * float64(min(limit, 4)) })
	if got := limits[len(limits)-1]; got < 4 {
		t.Fatalf("limit %d after %v; want at least 4 where the rate grows up to depth 4", got, limits)
	}
	for _, l := range limits {
		if l > MaxAutoCommitPipeline {
			t.Fatalf("limit %d above %d", l, MaxAutoCommitPipeline)
		}
	}
}

func TestAutoDepthStaysShallowWhenDeeperDoesNotPay(t *testing.T) {
	p := newPacer(0)
	limits := drive(p, 40, func(limit int) float64 { return 2000 / float64(limit) })
	at1 := 0
	for _, l := range limits {
		if l == 1 {
			at1++
		}
		if l > 2 {
			t.Fatalf("limit %d in %v: deeper only costs here", l, limits)
		}
	}
	if at1 < len(limits)*3/4 {
		t.Fatalf("limits %v: mostly 1 expected", limits)
	}
}

func TestAutoDepthHalvesOnARefusal(t *testing.T) {
	p := newPacer(0)
	p.limit = 8
	p.refused()
	if p.limit != 4 {
		t.Fatalf("limit %d after a refusal at 8, want 4", p.limit)
	}
}

func TestFixedDepthNeverMoves(t *testing.T) {
	for _, n := range []int{1, 4} {
		p := newPacer(n)
		p.refused()
		now := time.Unix(0, 0)
		for range 1000 {
			now = now.Add(10 * time.Millisecond)
			p.landed(now, 10, time.Millisecond, n-1, 100)
		}
		if p.limit != n || p.pipelined() != (n != 1) {
			t.Fatalf("fixed %d: limit %d, pipelined %v", n, p.limit, p.pipelined())
		}
	}
	if !newPacer(0).pipelined() || newPacer(-1).fixed != 0 {
		t.Fatal("auto must pipeline; a negative depth is auto")
	}
}

func TestFillKeepsExtraFlightsFromCarryingCrumbs(t *testing.T) {
	p := newPacer(4)
	p.landed(time.Unix(1, 0), 16, time.Millisecond, 0, 0)
	if p.mayLaunch(1, 3) {
		t.Fatal("a second flight of 3 behind flights of 16")
	}
	if !p.mayLaunch(1, 8) || !p.mayLaunch(0, 1) || p.mayLaunch(4, 100) {
		t.Fatal("fill or limit misapplied")
	}
}
