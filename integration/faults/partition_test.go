package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/faultproxy"
	"github.com/zketcd/zketcd/internal/zkserver"
)

// The ZKFollowerPartition scenario: a ZooKeeper follower cut off from the
// other two members while the zketcd leader reaches ZooKeeper through that
// follower alone.

// followerSyncLimit is the scenario's syncLimit in ticks: with the faults
// cluster's 500 ms tick, a cut-off follower keeps answering its clients,
// pings included, for 6 s, longer than zketcd's session timeout (4 s), so
// the zketcd leader's session expires on the quorum, and the other instance
// takes over, while the follower still tells the old leader it is
// connected.
const followerSyncLimit = 12

// followerPartitionHold outlasts the follower's sync limit and the session
// timeout, and leaves the other instance some seconds of leadership.
const followerPartitionHold = followerSyncLimit*500*time.Millisecond + sessionTimeout + 2*time.Second

// longSyncLimit sets the scenario's syncLimit.
func longSyncLimit(_ *testing.T, o *zkserver.Options) {
	if o.TickTime != 500*time.Millisecond {
		panic("followerPartitionHold assumes the faults cluster's 500 ms tick")
	}
	o.SyncLimit = followerSyncLimit
}

// grantedTimeout is the session timeout the ensemble of the
// ReadLeaseGrantedTimeout scenario grants (its maxSessionTimeout, ZooKeeper's
// default minimum at the 500 ms tick), a tenth of what zketcd asks for.
const grantedTimeout = time.Second

// shortGrant is longSyncLimit with maxSessionTimeout at grantedTimeout.
func shortGrant(t *testing.T, o *zkserver.Options) {
	longSyncLimit(t, o)
	o.MaxSessionTimeout = grantedTimeout
}

// zkProxies returns the proxies z reaches the members through, in member
// index order (nil for B without clusterOptions.links).
func (cl *cluster) zkProxies(z *Zketcd) []*faultproxy.Proxy {
	if z == cl.a {
		return cl.proxies
	}
	return cl.bProxies
}

// isolate blackholes every link between member i (0-based) and the other
// members, in both directions, or heals them.
func (cl *cluster) isolate(i int, on bool) {
	for l, p := range cl.links {
		if l.From == i+1 || l.To == i+1 {
			if on {
				p.Blackhole()
			} else {
				p.Heal()
			}
		}
	}
}

// commits returns how many of z's commits so far committed (0 if it does
// not answer).
func commits(z *Zketcd) float64 {
	m, _ := scrapeMetrics(z.Metrics)
	return m[`zketcd_commit_duration_seconds_count{outcome="committed"}`]
}

// zkFollowerPartition keeps the zketcd leader on one ZooKeeper follower
// alone (its proxies to the other members cut; the other instance's proxy
// to that follower cut), then blackholes every link between that follower
// and the other two members for followerPartitionHold. The follower goes on
// answering the leader's requests and pings for up to syncLimit x tickTime
// with a view of the data that is falling behind; the leader's session
// expires on the quorum meanwhile and the other instance takes over. The
// heal reopens every link and proxy. It fails the test if the partition
// did not take the follower out of the quorum, if the other two lost it, or
// if the other instance did not commit during the partition.
func zkFollowerPartition(t *testing.T, cl *cluster) (string, func()) {
	return followerPartition(t, cl, false)
}

// quietFollowerPartition is zkFollowerPartition with the probes' puts
// stopped from before the cut until the other instance leads, then put
// through it alone until the heal: the old leader has no commit in flight
// through the cut-off follower (which would hold the follower's answers to
// its pings behind it, so that its client gives the connection up within
// two thirds of the granted timeout), stays connected to it, and goes on
// answering reads and keepalives from memory for as long as it believes
// its session alive, while the new leader commits.
func quietFollowerPartition(t *testing.T, cl *cluster) (string, func()) {
	return followerPartition(t, cl, true)
}

func followerPartition(t *testing.T, cl *cluster, quiet bool) (string, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if cl.links == nil {
		t.Fatal("zkFollowerPartition needs a cluster with member links")
	}
	if err := waitSynced(ctx, cl.ens); err != nil {
		t.Fatal(err)
	}
	zl, err := waitLeader(ctx, cl.ens)
	if err != nil {
		t.Fatal(err)
	}
	f := (zl + 1) % cl.ens.Size()
	victim, name := zketcdLeader(t, cl)
	other, otherName := cl.b, "B"
	if victim == cl.b {
		other, otherName = cl.a, "A"
	}
	vp, op := cl.zkProxies(victim), cl.zkProxies(other)
	for i, p := range vp {
		if i != f {
			p.Cut()
		}
	}
	op[f].Cut()
	// The leader's client moves to the follower (if it was elsewhere) well
	// within its session timeout: the session and the leadership stay.
	pinned := time.Now()
	for vp[f].Open() == 0 || !victim.Healthy(ctx) {
		if time.Since(pinned) > 20*time.Second {
			t.Fatalf("zketcd %s not connected and healthy through member %d alone 20s after its other proxies were cut", name, f+1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	moved := commits(victim)
	time.Sleep(500 * time.Millisecond)
	if commits(victim) <= moved {
		t.Logf("zketcd %s made no commit in 0.5 s after it was moved to member %d", name, f+1)
	}

	if quiet {
		cl.w.SetProbeWriters()
		if !cl.w.ProbePutsIdle(10 * time.Second) {
			t.Logf("probe puts still under way 10 s after they were stopped")
		}
	}
	c0v := commits(victim)
	cl.isolate(f, true)
	mon := watchPartition(cl.ens, zl, f, victim, other)
	var tookOver *takeover
	if quiet {
		tookOver = watchTakeover(cl.clients[otherName], other.Addr, func() { cl.w.SetProbeWriters(otherName) })
	}
	timeout := cl.sessionTimeout.String()
	if m := cl.zkOpts.MaxSessionTimeout; m > 0 && m < cl.sessionTimeout {
		timeout = fmt.Sprintf("%v requested, %v granted (maxSessionTimeout)", cl.sessionTimeout, m)
	}
	what := fmt.Sprintf("blackhole ZooKeeper follower (member %d) <-> the other 2 members for %v (syncLimit x tickTime %v, session timeout %s) while the zketcd leader (%s) reaches ZooKeeper through it alone, heal",
		f+1, followerPartitionHold, followerSyncLimit*500*time.Millisecond, timeout, name)
	return what, func() {
		obs := mon.stop()
		if quiet {
			led := tookOver.stop()
			cl.w.SetProbeWriters("A", "B")
			note := fmt.Sprintf("the probes put nothing from before the cut until %s led (%s after the cut), then through %s alone until the heal", otherName, led, otherName)
			t.Log(note)
			cl.notes = append(cl.notes, note)
		}
		late := commits(victim) - obs.victimAt1s
		cl.isolate(f, false)
		for _, p := range append(append([]*faultproxy.Proxy(nil), vp...), op...) {
			p.Heal()
		}
		note := fmt.Sprintf("member %d cut off: it answered srvr as a follower for %s after the cut, then %s; the ZooKeeper leader (member %d) reported %s synced followers during the partition (it kept leading: %v); zketcd %s (on member %d alone) committed %.0f entries in the first second (in flight at the cut) and %.0f after; %s (on the other two) committed from %s after the cut on, %.0f entries until the heal",
			f+1, obs.servedFor(), obs.firstOther, zl+1, obs.syncedSeen(), obs.leaderKept, name, f+1, obs.victimAt1s-c0v, late, otherName, obs.tookOver(), obs.otherCommits)
		t.Log(note)
		cl.notes = append(cl.notes, note)
		switch {
		case !obs.stopped:
			t.Errorf("ZooKeeper member %d served as a follower all through its partition", f+1)
		case !obs.leaderKept || !obs.synced[1]:
			t.Errorf("the ZooKeeper leader (member %d) did not keep its quorum with one synced follower: %s", zl+1, note)
		case obs.otherCommits == 0:
			t.Errorf("zketcd %s made no commit during the partition: it did not take over", otherName)
		case obs.victimSampled && late > 0:
			t.Errorf("zketcd %s committed %.0f entries through a follower cut off from its leader for over a second: the partition leaks", name, late)
		}
	}
}

// poller calls a function every period, from a goroutine of its own,
// until the function reports false or stop is called.
type poller struct {
	done chan struct{}
	wg   sync.WaitGroup
}

func poll(period time.Duration, f func() bool) *poller {
	p := &poller{done: make(chan struct{})}
	p.wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for f() {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
		}
	})
	return p
}

// stop ends the polling and waits until the last call returned.
func (p *poller) stop() {
	close(p.done)
	p.wg.Wait()
}

// partitionWatch polls the cut-off member's srvr and the leader's mntr
// during a partition.
type partitionWatch struct {
	poll  *poller
	began time.Time

	mu  sync.Mutex
	obs partitionObs
}

// watchPartition starts polling, every 100 ms, the cut-off member's
// srvr, the ZooKeeper leader's mntr and the commits of both zketcd
// instances (victim on the cut-off member, other on the rest).
func watchPartition(ens *zkserver.Ensemble, leader, cut int, victim, other *Zketcd) *partitionWatch {
	w := &partitionWatch{began: time.Now(), obs: partitionObs{synced: map[int]bool{}, leaderKept: true}}
	o0 := commits(other)
	sampled := false
	w.poll = poll(100*time.Millisecond, func() bool {
		oc := commits(other) - o0
		var vc float64
		first := !sampled && time.Since(w.began) >= time.Second
		if first {
			vc, sampled = commits(victim), true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		mode, err := ens.Member(cut).Mode(ctx)
		m, merr := ens.Member(leader).Monitor(ctx)
		cancel()
		w.mu.Lock()
		defer w.mu.Unlock()
		o := &w.obs
		if oc > 0 && o.otherCommits == 0 {
			o.otherFrom = time.Since(w.began)
		}
		o.otherCommits = oc
		if first {
			o.victimSampled, o.victimAt1s = true, vc
		}
		if !o.stopped && (err != nil || mode != zkserver.ModeFollower) {
			o.stopped, o.stoppedAt = true, time.Since(w.began)
			o.firstOther = "it answered " + mode
			if err != nil {
				o.firstOther = "it did not serve"
				if !errors.Is(err, zkserver.ErrNotServing) {
					o.firstOther += " (" + err.Error() + ")"
				}
			}
		}
		if merr != nil || m["zk_server_state"] != zkserver.ModeLeader {
			o.leaderKept = false
		} else if n, err := strconv.Atoi(m["zk_synced_followers"]); err == nil {
			o.synced[n] = true
		}
		return true
	})
	return w
}

// partitionObs is what a partitionWatch saw.
type partitionObs struct {
	stopped    bool          // the member stopped serving as a follower
	stoppedAt  time.Duration // when, after the cut
	firstOther string        // what it answered then
	synced     map[int]bool  // zk_synced_followers values the leader reported
	leaderKept bool          // the leader answered as leader at every poll
	// otherCommits: the other instance's commits since the cut, the
	// first seen otherFrom after it.
	otherCommits float64
	otherFrom    time.Duration
	// victimAt1s: the victim's commit count (since its start) 1 s after
	// the cut.
	victimSampled bool
	victimAt1s    float64
}

func (o partitionObs) tookOver() string {
	if o.otherCommits == 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", o.otherFrom.Seconds())
}

func (o partitionObs) servedFor() string {
	if !o.stopped {
		return "the whole partition"
	}
	return fmt.Sprintf("%.1f s", o.stoppedAt.Seconds())
}

func (o partitionObs) syncedSeen() string {
	s := ""
	for n := range 3 {
		if o.synced[n] {
			if s != "" {
				s += " and "
			}
			s += strconv.Itoa(n)
		}
	}
	if s == "" {
		return "no"
	}
	return s
}

func (w *partitionWatch) stop() partitionObs {
	w.poll.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.obs
}

// takeover polls an instance's Status until it reports itself the leader.
type takeover struct {
	poll  *poller
	began time.Time
	mu    sync.Mutex
	at    time.Duration // after began; -1 while not seen
}

// watchTakeover polls the Status of the instance at addr through c every
// 10 ms, and calls led once it names itself the leader.
func watchTakeover(c *clientv3.Client, addr string, led func()) *takeover {
	tk := &takeover{began: time.Now(), at: -1}
	tk.poll = poll(10*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, addr)
		cancel()
		if err != nil || st.Leader == 0 || st.Leader != st.Header.MemberId {
			return true
		}
		tk.mu.Lock()
		tk.at = time.Since(tk.began)
		tk.mu.Unlock()
		led()
		return false
	})
	return tk
}

// stop ends the polling and tells when the instance was seen leading.
func (tk *takeover) stop() string {
	tk.poll.stop()
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tk.at < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2f s", tk.at.Seconds())
}
