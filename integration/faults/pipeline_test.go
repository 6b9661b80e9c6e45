package faults

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The deep-pipeline scenarios: the leader and ZooKeeper faults, and a slow
// ZooKeeper link, with every instance keeping several log entries in flight
// (--commit-pipeline), and two instances that both commit with a pipeline
// while one's link to ZooKeeper is slow.

const (
	// pipelineDepth is the Pipeline* scenarios' --commit-pipeline.
	pipelineDepth = 8
	// twoCommittersDepth is TwoCommittersSlowLink's --commit-pipeline.
	twoCommittersDepth = 4
	// pipelineEtcdWorkers and pipelinePutRate are the Pipeline* scenarios'
	// writers on top of the kube-like workers: closed-loop etcd-like
	// workers through A and B in turn, and open-loop puts, so that several
	// writes arrive while a commit is in flight.
	pipelineEtcdWorkers = 8
	pipelinePutRate     = 100
	// slowLinkDelay is how long the fault proxies hold every chunk of
	// data, in each direction, on a slowed instance's ZooKeeper links: a
	// commit's round trip grows by twice that, and the commit that landed
	// first is acknowledged that much later.
	slowLinkDelay = 10 * time.Millisecond
	// twoCommittersDelay is the delay on A's ZooKeeper links in
	// TwoCommittersSlowLink: longer than B's commit plus a client's round
	// trip, so that B commits and acknowledges a write after one of A's
	// flights landed and before A hears it did.
	twoCommittersDelay = 20 * time.Millisecond
	// slowLinkHold is how long a link stays slow.
	slowLinkHold = 5 * time.Second
	// casWorkers is TwoCommittersSlowLink's compare-and-swap workers.
	casWorkers = 4
	// blipMin and blipMax bound each reset of A's ZooKeeper links in
	// TwoCommittersZKBlip, blipGapMin and blipGapMax the time from A's
	// reconnection to the next reset; blipHold is how long a fault keeps
	// resetting them.
	blipMin, blipMax       = 50 * time.Millisecond, 200 * time.Millisecond
	blipGapMin, blipGapMax = 200 * time.Millisecond, 600 * time.Millisecond
	blipHold               = 6 * time.Second
	// blipPutRate is TwoCommittersZKBlip's open-loop puts a second,
	// through A and B in turn: A has several flights in flight when its
	// links are reset.
	blipPutRate = 60
)

// pipelineArgs are the Pipeline* scenarios' extra serve flags.
var pipelineArgs = []string{"--commit-pipeline", strconv.Itoa(pipelineDepth)}

// twoCommittersArgs make every instance commit its own writes, with a
// pipeline.
var twoCommittersArgs = []string{"--forward-writes=false", "--commit-pipeline", strconv.Itoa(twoCommittersDepth)}

// slowZKLink delays every chunk of data on the zketcd leader's ZooKeeper
// connections (the proxies it reaches the members through) by d in each
// direction for the hold; open connections are slowed too, the session
// stays. B needs proxies of its own (scenario.proxyB) in case it leads.
func slowZKLink(d time.Duration) func(t *testing.T, cl *cluster) (string, func()) {
	return func(t *testing.T, cl *cluster) (string, func()) {
		victim, name := zketcdLeader(t, cl)
		ps := cl.zkProxies(victim)
		if ps == nil {
			t.Fatalf("zketcd %s reaches ZooKeeper without fault proxies", name)
		}
		for _, p := range ps {
			p.SetDelay(d)
		}
		return fmt.Sprintf("delay the zketcd leader's (%s) ZooKeeper links by %v each way for %v, heal", name, d, slowLinkHold), func() {
			for _, p := range ps {
				p.SetDelay(0)
			}
		}
	}
}

// slowALink delays zketcd A's ZooKeeper links by twoCommittersDelay each
// way for the hold, both instances committing their own writes.
func slowALink(t *testing.T, cl *cluster) (string, func()) {
	for _, p := range cl.proxies {
		p.SetDelay(twoCommittersDelay)
	}
	return fmt.Sprintf("delay zketcd A's ZooKeeper links by %v each way for %v (A and B both commit, --commit-pipeline %d), heal",
			twoCommittersDelay, slowLinkHold, twoCommittersDepth), func() {
			for _, p := range cl.proxies {
				p.SetDelay(0)
			}
		}
}

// blipALinks resets zketcd A's ZooKeeper links — cuts every connection
// through A's fault proxies and refuses new ones — for blipMin to blipMax
// at a time until healed, each next reset blipGapMin to blipGapMax after A
// connected again: while it commits the writes that queued meanwhile,
// several flights at once, whose answers it then loses. A's session
// survives each reset; the commits it had in flight are sent again and
// resolved by their writer tags, while B takes log positions.
func blipALinks(t *testing.T, cl *cluster) (string, func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	blips := 0
	wait := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, p := range cl.proxies {
				p.Cut()
			}
			mu.Lock()
			blips++
			mu.Unlock()
			ok := wait(blipMin + rand.N(blipMax-blipMin))
			for _, p := range cl.proxies {
				p.Heal()
			}
			if !ok {
				return
			}
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
				open := 0
				for _, p := range cl.proxies {
					open += p.Open()
				}
				if open > 0 || !wait(5*time.Millisecond) {
					break
				}
			}
			if !wait(blipGapMin + rand.N(blipGapMax-blipGapMin)) {
				return
			}
		}
	}()
	return fmt.Sprintf("reset zketcd A's ZooKeeper links for %v-%v at a time, each next %v-%v after it connected again, for %v (A and B both commit, --commit-pipeline %d), heal",
			blipMin, blipMax, blipGapMin, blipGapMax, blipHold, twoCommittersDepth), func() {
			close(stop)
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%d resets of A's ZooKeeper links", blips)
		}
}

// flightSample is both instances' commit metrics at one time.
type flightSample struct {
	at   time.Time
	a, b map[string]float64
}

func sampleFlights(cl *cluster) flightSample {
	a, _ := scrapeMetrics(cl.a.Metrics)
	b, _ := scrapeMetrics(cl.b.Metrics)
	return flightSample{at: time.Now(), a: a, b: b}
}

// flightNote notes, for each instance that committed since s, its commits
// by outcome, their mean time, and how many it had in flight on average:
// the time its commits took, summed, over the time elapsed (Little's law;
// 1 is one commit at a time, back to back). The log entries applied
// meanwhile give the operations per entry. An instance restarted since s
// (its counters reset) or not answering is left out.
func (cl *cluster) flightNote(s flightSample, when string) {
	now := sampleFlights(cl)
	wall := now.at.Sub(s.at).Seconds()
	var parts []string
	perEntry := ""
	for _, x := range []struct {
		name         string
		before, last map[string]float64
	}{{"A", s.a, now.a}, {"B", s.b, now.b}} {
		d := func(m string) float64 { return x.last[m] - x.before[m] }
		n := d("zketcd_commit_duration_seconds_count")
		if n <= 0 || len(x.before) == 0 || len(x.last) == 0 {
			continue
		}
		var outcomes []string
		for _, o := range []string{"committed", "conflict", "refused", "held", "behind", "error"} {
			if k := d(`zketcd_commit_duration_seconds_count{outcome="` + o + `"}`); k > 0 {
				outcomes = append(outcomes, fmt.Sprintf("%.0f %s", k, o))
			}
		}
		sum := d("zketcd_commit_duration_seconds_sum")
		if e := d("zketcd_commit_batch_ops_count"); e > 0 && perEntry == "" {
			// Every instance applies every entry: one count serves.
			perEntry = fmt.Sprintf("; %.2f ops per log entry", d("zketcd_commit_batch_ops_sum")/e)
		}
		parts = append(parts, fmt.Sprintf("%s made %.0f commits (%s), mean %.1f ms, %.2f in flight on average",
			x.name, n, strings.Join(outcomes, ", "), 1000*sum/n, sum/wall))
	}
	if len(parts) == 0 {
		return
	}
	note := fmt.Sprintf("commits %s (%.1f s): %s%s", when, wall, strings.Join(parts, "; "), perEntry)
	cl.t.Log(note)
	cl.notes = append(cl.notes, note)
}
