package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestProofWindowIsBoundedByTheGrantAndTheTick: the window is half of
// Gmin − Gc/3 − tick/2 (see proofwindow.go), narrowed by a positive limit;
// no window without a tick, when the bound is not positive, or when the
// clock-free proof is asked for — each refusal names the values.
func TestProofWindowIsBoundedByTheGrantAndTheTick(t *testing.T) {
	const s = time.Second
	grant := func(requested, granted, least, tick time.Duration) zkstore.Grant {
		return zkstore.Grant{Session: 1, Requested: requested, Timeout: granted, MinTimeout: least, Tick: tick}
	}
	for _, tc := range []struct {
		name    string
		g       zkstore.Grant
		limit   time.Duration
		want    time.Duration
		wantErr []string
	}{
		{name: "ZooKeeper's defaults, zketcd's default request", g: grant(10*s, 10*s, 10*s, 2*s), want: (20*s/3 - s) / 2},
		{name: "the faults cluster", g: grant(4*s, 4*s, 4*s, s/2), want: (8*s/3 - s/4) / 2},
		{name: "maxSessionTimeout below the request", g: grant(10*s, s, s, s/2), want: (2*s/3 - s/4) / 2},
		{name: "the issue's interleaving", g: grant(10*s, 4*s, 4*s, 2*s), want: (8*s/3 - s) / 2},
		{name: "a limit narrows it", g: grant(10*s, 10*s, 10*s, 2*s), limit: 100 * time.Millisecond, want: 100 * time.Millisecond},
		{name: "a limit does not widen it", g: grant(10*s, s, s, s/2), limit: time.Hour, want: (2*s/3 - s/4) / 2},
		{name: "a server whose grant was never seen grants less", g: zkstore.Grant{Session: 1, Requested: 10 * s, Timeout: 10 * s, MinTimeout: 10 * s, Tick: 2 * s,
			MinSessionTimeout: 4 * s, MaxSessionTimeout: 8 * s}, want: (8*s - 10*s/3 - s) / 2},
		{name: "the servers' bounds above the request change nothing", g: zkstore.Grant{Session: 1, Requested: 10 * s, Timeout: 10 * s, MinTimeout: 10 * s, Tick: 2 * s,
			MinSessionTimeout: 4 * s, MaxSessionTimeout: 40 * s}, want: (20*s/3 - s) / 2},
		{name: "a connection granted more than the session's least", g: grant(10*s, 6*s, 2*s, s/2),
			wantErr: []string{"granted session timeout 6s", "requested 10s", "the least granted to this session 2s", "tickTime 500ms"}},
		{name: "tick unknown", g: zkstore.Grant{Session: 1, Requested: 10 * s, Timeout: 4 * s, MinTimeout: 4 * s},
			wantErr: []string{"tickTime is unknown", "granted session timeout 4s (requested 10s)", "--zk-tick-time"}},
		{name: "timeout below three quarters of a tick", g: grant(10*s, s, s, 2*s),
			wantErr: []string{"granted session timeout 1s (requested 10s", "tickTime 2s"}},
		{name: "no session yet", g: zkstore.Grant{Requested: 10 * s}, wantErr: []string{"no session timeout granted yet"}},
		{name: "clock-free proofs asked for", g: grant(10*s, 10*s, 10*s, 2*s), limit: -1, wantErr: []string{"off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := proofWindow(tc.g, tc.limit)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("window %v, want a refusal", w)
				}
				for _, sub := range tc.wantErr {
					if !strings.Contains(err.Error(), sub) {
						t.Errorf("refusal %q does not name %q", err, sub)
					}
				}
				return
			}
			if err != nil || w != tc.want {
				t.Fatalf("window %v, %v; want %v", w, err, tc.want)
			}
		})
	}
}

func gaugeValue(t testing.TB, g prometheus.Gauge) float64 {
	t.Helper()
	return written(t, g).GetGauge().GetValue()
}

// TestReadLeaseFollowsTheGrantedTimeoutNotTheRequested: zketcd asks for
// 10 s, ZooKeeper grants 1 s at a 500 ms tick: a lease read answers from
// memory only within the 208 ms window that grant allows, not within a third
// of the request (3.3 s, what the window was before it followed the grant).
func TestReadLeaseFollowsTheGrantedTimeoutNotTheRequested(t *testing.T) {
	st, _, a, _, _, _ := forwardingPairOn(t, memlog.Options{SessionTimeout: 10 * time.Second, GrantedTimeout: time.Second, TickTime: 500 * time.Millisecond},
		func(c *Config) { c.ReadLease = true })
	testutil.Eventually(t, 5*time.Second, "the leader took the read lease", func() bool { return a.reads.held.Load() != nil })
	want := (2*time.Second/3 - 250*time.Millisecond) / 2
	testutil.Eventually(t, 5*time.Second, "zketcd_leader_proof_window_seconds is the granted timeout's window", func() bool {
		return gaugeValue(t, a.metrics.proofWindow) == want.Seconds()
	})
	// The proofs below are back-dated by up to a second: the connection
	// and the lease must be older.
	testutil.Eventually(t, 5*time.Second, "the connection and the read lease are over a second old", func() bool {
		return time.Since(a.store.Grant().Since) > time.Second && time.Since(a.reads.held.Load().taken) > time.Second
	})
	put(t, a, "k", "v")
	p := a.live.proof.Load()
	for _, tc := range []struct {
		age    time.Duration
		rounds float64
	}{{want / 4, 0}, {want + 50*time.Millisecond, 1}, {time.Second, 1}} {
		a.live.proof.Store(&liveProof{session: p.session, sent: time.Now().Add(-tc.age), lsn: p.lsn})
		before := st.QuorumCalls()
		get(t, a, "k", false)
		if n := float64(st.QuorumCalls() - before); n != tc.rounds {
			t.Errorf("a read %v after the proof took %.0f barrier rounds, want %.0f", tc.age, n, tc.rounds)
		}
	}
}

// TestProofWindowFollowsANewConnection: once the session moves to a server
// that grants less, a proof sent before that connection counts for nothing,
// and the window follows the new grant.
func TestProofWindowFollowsANewConnection(t *testing.T) {
	st, _, a, ac, _, _ := forwardingPairOn(t, memlog.Options{SessionTimeout: 10 * time.Second, TickTime: 500 * time.Millisecond},
		func(c *Config) { c.ReadLease = true })
	testutil.Eventually(t, 5*time.Second, "the leader took the read lease", func() bool { return a.reads.held.Load() != nil })
	put(t, a, "k", "v")
	sid, _ := ac.Session()
	if a.live.fresh(sid, time.Now()) == nil {
		t.Fatal("no fresh proof after a commit")
	}
	ac.SetGranted(2 * time.Second)
	if a.live.fresh(sid, time.Now()) != nil {
		t.Fatal("a proof sent before the new connection still counts")
	}
	before := st.QuorumCalls()
	get(t, a, "k", false) // pays a round, which proves the session again
	if st.QuorumCalls() == before {
		t.Fatal("a read after the reconnect answered from memory on the old connection's proof")
	}
	if w, _ := a.live.window(sid); w != (2*time.Second-2*time.Second/3-250*time.Millisecond)/2 {
		t.Fatalf("window %v after a reconnect granted 2s", w)
	}
	testutil.Eventually(t, 5*time.Second, "the window metric followed the new grant", func() bool {
		return gaugeValue(t, a.metrics.grantedTimeout) == 2
	})
}

// TestReadLeaseRefusedWithoutATick: on ZooKeeper servers that refuse conf
// (and no tick declared) no window can be shown: the read lease is not
// taken, Status's warnings name the granted and requested timeouts, reads
// take barrier rounds, and a keepalive at the leader still renews in memory
// after a round that started after it.
func TestReadLeaseRefusedWithoutATick(t *testing.T) {
	st, _, a, _, _, _ := forwardingPairOn(t, memlog.Options{SessionTimeout: 10 * time.Second, GrantedTimeout: 4 * time.Second, TickTime: -1},
		func(c *Config) { c.ReadLease = true })
	testutil.Eventually(t, 5*time.Second, "the read lease was refused", func() bool { return len(a.Warnings()) == 1 })
	msg := a.Warnings()[0]
	for _, sub := range []string{"--read-lease refused", "tickTime is unknown", "granted session timeout 4s (requested 10s)"} {
		if !strings.Contains(msg, sub) {
			t.Errorf("warning %q does not name %q", msg, sub)
		}
	}
	if a.reads.held.Load() != nil {
		t.Fatal("the read lease was taken without a window")
	}
	if got := gaugeValue(t, a.metrics.readLease); got != -1 {
		t.Errorf("zketcd_read_lease_state %v, want -1", got)
	}
	put(t, a, "k", "v")
	before := st.QuorumCalls()
	get(t, a, "k", false)
	if st.QuorumCalls() == before {
		t.Error("a linearizable read answered without a barrier round")
	}
	id := grant(t, a, 60)
	inMemory := counterValue(t, a.metrics.renewalsInMemory)
	before = st.QuorumCalls()
	if ttl := renew(t, a, id); ttl != 60 {
		t.Fatalf("keepalive TTL %d", ttl)
	}
	if counterValue(t, a.metrics.renewalsInMemory) != inMemory+1 || st.QuorumCalls() == before {
		t.Error("the keepalive was not renewed in memory after a barrier round")
	}
}
