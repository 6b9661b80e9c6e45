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
// depth (0) starts at 1 and moves between 1 and MaxAutoCommitPipeline by
// measuring: it counts the requests committed per second over windows of
// at least 64 smoothed commit latencies (and 250 ms), and
//
//   - probes one deeper when a window saw the queue back up (a flight
//     landed with the limit in flight and a fill waiting behind it),
//     keeping the new depth only if the next window committed at least
//     10% more, else going back and waiting 16 windows before probing
//     again;
//   - probes one shallower every 16th window, keeping it unless the rate
//     fell by more than 5% (the load changed: deeper no longer pays),
//     even while the queue backs up or a failed probe waits;
//   - halves the limit on a refusal of a chained flight (its predecessor
//     failed: the deeper the pipeline, the more work a failure throws
//     away).
//
// The window right after any change of the limit is not measured: it
// shows the change under way, not the new depth. Clients that waited on
// one flight arrive together and fill the next one; a deeper pipeline
// splits them into cohorts that arrive apart, and going back shallower
// leaves those cohorts apart for a while, so a trial judged on its first
// window finds every change worse than where it came from and stays where
// it happens to be (at depth 2 for good, at 16 clients on 2 cores).
//
// Pipelining pays when ZooKeeper's latency leaves zketcd and ZooKeeper
// idle (an fsync, the network); on CPU-bound servers extra flights only
// split the batches into more ZooKeeper transactions, which the probing
// finds and undoes.
//
// Whatever the limit, a flight is launched behind others only when the
// pending queue holds at least half the smoothed size of the flights
// (fill): an extra flight carrying one request would cost ZooKeeper a
// transaction for what the next batch would carry for free.
type pacer struct {
	fixed int // > 0: the fixed depth
	limit int
	// size is the smoothed number of requests per flight; rtt the smoothed
	// commit latency.
	size float64
	rtt  time.Duration
	// The current window: since when, requests landed, whether the queue
	// backed up. rate is the previous window's requests per second, from
	// the limit it ran at (prevLimit); probing says the limit was moved
	// for a trial; wait is the windows left before the next probe.
	since       time.Time
	requests    int
	backlog     bool
	rate        float64
	prevLimit   int
	probing     bool
	wait, steps int
	// settle is the windows still to pass unmeasured after the limit
	// changed.
	settle int
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

// landed records a flight of requests that committed after took, at now,
// with inFlight flights and pending requests behind it.
func (p *pacer) landed(now time.Time, requests int, took time.Duration, inFlight, pending int) {
	const w = 0.125
	if p.size == 0 {
		p.size, p.rtt = float64(requests), took
	} else {
		p.size += w * (float64(requests) - p.size)
		p.rtt += time.Duration(w * float64(took-p.rtt))
	}
	if !p.auto() {
		return
	}
	if p.since.IsZero() {
		p.since = now
	}
	p.requests += requests
	if inFlight+1 >= p.limit && pending >= p.fill() {
		p.backlog = true
	}
	span := now.Sub(p.since)
	if span < max(250*time.Millisecond, 64*p.rtt) {
		return
	}
	rate := float64(p.requests) / span.Seconds()
	p.window(rate)
	p.since, p.requests, p.backlog = now, 0, false
}

// window ends a measuring window that committed rate requests per second.
func (p *pacer) window(rate float64) {
	p.steps++
	if p.settle > 0 {
		p.settle-- // the change under way: neither a trial nor a baseline
		return
	}
	switch {
	case p.probing:
		p.probing = false
		deeper := p.limit > p.prevLimit
		if deeper && rate < 1.1*p.rate || !deeper && rate < 0.95*p.rate {
			p.set(p.prevLimit)
			p.wait = 16 // no better: back, and stay a while
			return
		}
	case p.limit > 1 && p.steps%16 == 0:
		// Before waiting and backing up: a pipeline that is always
		// backed up must still find out that shallower pays.
		p.prevLimit, p.probing = p.limit, true
		p.set(p.limit - 1)
	case p.wait > 0:
		p.wait--
	case p.backlog && p.limit < MaxAutoCommitPipeline:
		p.prevLimit, p.probing = p.limit, true
		p.set(p.limit + 1)
	}
	p.rate = rate
}

// set moves the limit to n; the next window settles.
func (p *pacer) set(n int) {
	if n != p.limit {
		p.limit, p.settle = n, 1
	}
}

// refused records a chained flight refused because a flight before it
// failed.
func (p *pacer) refused() {
	if p.auto() {
		p.probing = false
		p.set(max(1, p.limit/2))
	}
}

// String describes the depth: "auto (n)" or the fixed number.
func (p *pacer) String() string {
	if p.auto() {
		return fmt.Sprintf("auto (%d)", p.limit)
	}
	return fmt.Sprint(p.fixed)
}
