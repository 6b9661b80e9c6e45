package engine

import (
	"fmt"
	"time"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// MaxAutoCommitPipeline is the most log entries the automatic depth
// (Config.CommitPipeline 0) keeps in flight.
const MaxAutoCommitPipeline = 8

// markState is what the committer knows of its pipeline marker
// (zkstore.Marker): absent, at a known version, or unknown (a commit that
// set it has an unknown outcome).
type markState struct {
	known, exists bool
	version       int32
}

// op is the marker op of the next commit in state m, and the state the
// commit leaves if it lands.
func (m markState) op(name string) (*zkstore.Marker, markState) {
	switch {
	case !m.known:
		return &zkstore.Marker{Name: name, Version: zkstore.AnyVersion}, m
	case !m.exists:
		return &zkstore.Marker{Name: name, Create: true}, markState{known: true, exists: true}
	}
	return &zkstore.Marker{Name: name, Version: m.version}, markState{known: true, exists: true, version: m.version + 1}
}

// pacer chooses how many entries the committer keeps in flight. A fixed
// depth (Config.CommitPipeline N > 0) is its limit for ever; the automatic
// depth (0) starts at 1 and moves between 1 and MaxAutoCommitPipeline:
//
//   - up by one when a flight lands while the committer had the limit in
//     flight and a full batch waiting behind them (the queue grows faster
//     than the flights drain it: ZooKeeper's latency, not its throughput,
//     is the bound);
//   - halved on a refusal of a chained flight (its predecessor failed: the
//     deeper the pipeline, the more work a failure throws away), and on a
//     landing at depth d whose smoothed latency reached d times that of
//     flights sent alone (the flights did not overlap in ZooKeeper: more
//     in flight only queues there, as on a CPU-bound server).
//
// Whatever the limit, a flight is launched behind others only when the
// pending queue holds at least half the smoothed size of the flights
// (fill): an extra flight carrying one request would cost ZooKeeper a
// transaction for what the next batch would carry for free.
type pacer struct {
	fixed int // > 0: the fixed depth
	limit int
	// size is the smoothed number of requests per flight; rtt the smoothed
	// commit latency of flights sent alone (depth 1), rttDeep that of the
	// others divided by their depth (what each flight costs the pipeline).
	size         float64
	rtt, rttDeep time.Duration
}

func newPacer(fixed int) *pacer {
	fixed = max(fixed, 0) // negative: automatic, as 0
	p := &pacer{fixed: fixed, limit: 1}
	if fixed > 0 {
		p.limit = fixed
	}
	return p
}

// auto reports whether the depth is chosen automatically.
func (p *pacer) auto() bool { return p.fixed == 0 }

// pipelined reports whether commits may ever be chained (and so carry the
// marker op): a fixed depth of 1 never chains, and writes exactly what
// earlier versions wrote.
func (p *pacer) pipelined() bool { return p.fixed != 1 }

// fill is the fewest pending requests worth a flight behind others.
func (p *pacer) fill() int { return max(1, int(p.size/2)) }

// mayLaunch reports whether another flight may go out with inFlight in
// flight and pending requests waiting.
func (p *pacer) mayLaunch(inFlight, pending int) bool {
	if inFlight == 0 {
		return pending > 0
	}
	return inFlight < p.limit && pending >= p.fill()
}

// landed records a flight of requests that committed after took, sent at
// depth (flights in flight with it, itself included), with inFlight
// flights and pending requests behind it when it landed.
func (p *pacer) landed(requests int, took time.Duration, depth, inFlight, pending int) {
	const w = 0.125
	if p.size == 0 {
		p.size = float64(requests)
	} else {
		p.size += w * (float64(requests) - p.size)
	}
	ewma := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		} else {
			*d += time.Duration(w * float64(v-*d))
		}
	}
	if depth <= 1 {
		ewma(&p.rtt, took)
	} else {
		ewma(&p.rttDeep, took/time.Duration(depth))
	}
	if !p.auto() {
		return
	}
	switch {
	case depth > 1 && p.rtt > 0 && p.rttDeep >= p.rtt:
		p.limit = max(1, p.limit/2)
		p.rttDeep = 0
	case inFlight+1 >= p.limit && pending >= p.fill() && p.limit < MaxAutoCommitPipeline:
		p.limit++
	}
}

// refused records a chained flight refused because a flight before it
// failed.
func (p *pacer) refused() {
	if p.auto() {
		p.limit = max(1, p.limit/2)
	}
}

// String describes the depth: "auto (n)" or the fixed number.
func (p *pacer) String() string {
	if p.auto() {
		return fmt.Sprintf("auto (%d)", p.limit)
	}
	return fmt.Sprint(p.fixed)
}
