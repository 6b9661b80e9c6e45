package engine

// Keepalives renewed in the leader's memory (lessor.go), on
// memlog.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

func grant(t testing.TB, b *Engine, ttl int64) int64 {
	t.Helper()
	resp, err := b.LeaseGrant(context.Background(), &pb.LeaseGrantRequest{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

func tokenVersion(t testing.TB, c *memlog.Client, id int64) int32 {
	t.Helper()
	tok, ok, err := c.ReadLeaseToken(id)
	if err != nil || !ok {
		t.Fatalf("lease %x token: %v %v", id, ok, err)
	}
	return tok.Version
}

func renew(t testing.TB, b *Engine, id int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ttl, err := b.LeaseRenew(ctx, id)
	if err != nil {
		t.Fatalf("renew %x: %v", id, err)
	}
	return ttl
}

func leads(b *Engine) func() bool {
	return func() bool { l, _ := b.Leader(); return l }
}

// TestKeepalivesAtTheLeaderWriteNothingToZooKeeper keeps a lease alive at
// the leader for three TTLs (of the engine's clock, with the expiry loop
// scanning between keepalives): no token write, no log entry; then it
// expires a TTL after the last keepalive, not before.
func TestKeepalivesAtTheLeaderWriteNothingToZooKeeper(t *testing.T) {
	st := memlog.New(memlog.Options{})
	clk := testutil.NewClock()
	b, c := engine(t, st, "a", onClock(clk, 0, nil))
	testutil.Eventually(t, 10*time.Second, "a leads", leads(b))
	id := grant(t, b, MinLeaseTTL)
	version, commits := tokenVersion(t, c, id), st.Commits()
	trips0 := counterValue(t, b.metrics.barrierTrips)
	n := 0
	var last time.Time
	for end := clk.Now().Add(3 * ttlOf(MinLeaseTTL)); clk.Now().Before(end); n++ {
		if ttl := renew(t, b, id); ttl != MinLeaseTTL {
			t.Fatalf("keepalive answered TTL %d", ttl)
		}
		last = clk.Now()
		clk.Advance(ttlOf(MinLeaseTTL) / 4)
		scanned(t, b)
	}
	if v := tokenVersion(t, c, id); v != version {
		t.Fatalf("token version %d after %d keepalives at the leader, want %d: a ZooKeeper write per keepalive", v, n, version)
	}
	if got := st.Commits(); got != commits {
		t.Fatalf("%d log entries written by keepalives", got-commits)
	}
	inMemory := counterValue(t, b.metrics.renewalsInMemory)
	multis := counterValue(t, b.metrics.renewalMultis)
	trips := counterValue(t, b.metrics.barrierTrips) - trips0
	t.Logf("%d keepalives: %.0f in memory, %.0f renewal multis, %.0f barrier round trips", n, inMemory, multis, trips)
	if inMemory != float64(n) || multis != 0 {
		t.Fatalf("%.0f keepalives in memory and %.0f renewal multis, want %d and 0", inMemory, multis, n)
	}
	// One round trip per proof window (2.8 s at memlog's default grant, a
	// 10 s timeout at a 2 s tick) at most, not one per keepalive.
	if trips > float64(n)/4 {
		t.Fatalf("%.0f barrier round trips for %d keepalives", trips, n)
	}
	expiresNoSoonerThan(t, b, st, clk, id, last.Add(ttlOf(MinLeaseTTL)), time.Second)
}

func TestKeepaliveAtAFollowerWritesTheToken(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	testutil.Eventually(t, 10*time.Second, "a leads", leads(a))
	b, cb := engine(t, st, "b", nil)
	id := grant(t, b, 60)
	testutil.Eventually(t, 3*time.Second, "a applied the grant", func() bool { return a.State().LSN == b.State().LSN })
	v := tokenVersion(t, cb, id)
	if ttl := renew(t, b, id); ttl != 60 {
		t.Fatalf("TTL %d", ttl)
	}
	if got := tokenVersion(t, cb, id); got != v+1 {
		t.Fatalf("token version %d after a follower's keepalive, want %d", got, v+1)
	}
	if n := counterValue(t, b.metrics.renewalsInMemory); n != 0 {
		t.Fatalf("a follower renewed %.0f keepalives in memory", n)
	}
	if ttl := renew(t, b, 12345); ttl != 0 {
		t.Fatalf("keepalive of an unknown lease: TTL %d, want 0", ttl)
	}
}

// TestRenewalsInTheOldLeadersMemoryAreNotLost: a lease renewed only in the
// leader's memory outlives its TTL; when that leader's session ends, the new
// leader starts the lease's clock anew, so the lease lives at least a TTL
// after the last keepalive the old leader answered.
func TestRenewalsInTheOldLeadersMemoryAreNotLost(t *testing.T) {
	st := memlog.New(memlog.Options{})
	clk := testutil.NewClock()
	a, ca := engine(t, st, "a", onClock(clk, 0, nil))
	testutil.Eventually(t, 10*time.Second, "a leads", leads(a))
	b, _ := engine(t, st, "b", onClock(clk, 0, nil))
	id := grant(t, a, MinLeaseTTL)
	var last time.Time
	for end := clk.Now().Add(ttlOf(MinLeaseTTL) + time.Second); clk.Now().Before(end); {
		renew(t, a, id)
		last = clk.Now()
		clk.Advance(300 * time.Millisecond)
		scanned(t, a)
	}
	if n := counterValue(t, a.metrics.renewalsInMemory); n == 0 {
		t.Fatal("the leader renewed nothing in memory")
	}
	ca.ExpireSession()
	testutil.Eventually(t, 10*time.Second, "b leads", leads(b))
	// a is a follower now: its keepalives write the token.
	testutil.Eventually(t, 10*time.Second, "a knows it does not lead", func() bool { return !leads(a)() })
	// The new leader's clock for the lease starts at its first look, after
	// the last keepalive: it expires a TTL after that at the earliest.
	expiresNoSoonerThan(t, b, st, clk, id, last.Add(ttlOf(MinLeaseTTL)), 2*time.Second)
}

// TestKeepaliveWithoutAProofWaitsForARoundTrip: with no clock assumption
// (negative proof window) each keepalive at the leader waits for a barrier
// round that started after it; when ZooKeeper cannot be reached it is not
// answered as renewed.
func TestKeepaliveWithoutAProofWaitsForARoundTrip(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, c := engine(t, st, "a", func(cfg *Config) { cfg.LeaderProofWindow = -1 })
	testutil.Eventually(t, 10*time.Second, "a leads", leads(b))
	id := grant(t, b, 60)
	v := tokenVersion(t, c, id)
	before := st.QuorumCalls()
	for i := 0; i < 5; i++ {
		renew(t, b, id)
	}
	if got := st.QuorumCalls() - before; got != 5 {
		t.Fatalf("%d barrier round trips for 5 sequential keepalives, want 5", got)
	}
	if got := tokenVersion(t, c, id); got != v {
		t.Fatalf("token written (version %d, was %d)", got, v)
	}
	st.SetUnavailable(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ttl, err := b.LeaseRenew(ctx, id)
	st.SetUnavailable(false)
	if err == nil || ttl != 0 {
		t.Fatalf("keepalive while ZooKeeper is unreachable: TTL %d, %v; want an error", ttl, err)
	}
	if !errors.Is(err, zkstore.ErrUnavailable) {
		t.Fatalf("keepalive while ZooKeeper is unreachable: %v, want %v", err, zkstore.ErrUnavailable)
	}
}

// BenchmarkLeaseKeepAliveInMemory renews 10,000 leases at the leader, round
// robin from 16 goroutines, and reports the ZooKeeper writes per keepalive
// (token writes and log entries; both must be 0). CPU per keepalive is the
// ns/op figure on a machine kept busy by the benchmark.
func BenchmarkLeaseKeepAliveInMemory(b *testing.B) {
	const leases = 10000
	st := memlog.New(memlog.Options{})
	be, _ := engine(b, st, "a", nil)
	testutil.Eventually(b, time.Second, "a leads", leads(be))
	ids := grantMany(b, be, leases, 60)
	// The expiry loop reads every token once (its baseline) on becoming
	// leader: wait for that, it is not steady state.
	testutil.Eventually(b, 30*time.Second, "baselines read", func() bool {
		be.leases.clock.mu.Lock()
		defer be.leases.clock.mu.Unlock()
		return len(be.leases.clock.deadlines) == leases
	})
	commits := st.Commits()
	multis := counterValue(b, be.metrics.renewalMultis)
	trips := counterValue(b, be.metrics.barrierTrips)
	b.ReportAllocs()
	b.ResetTimer()
	var next sync.Mutex
	i := 0
	b.SetParallelism(8) // 16 goroutines on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			next.Lock()
			id := ids[i%leases]
			i++
			next.Unlock()
			if ttl, err := be.LeaseRenew(ctx, id); err != nil || ttl != 60 {
				b.Errorf("renew: %d %v", ttl, err)
				return
			}
		}
	})
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric((float64(st.Commits()-commits)+counterValue(b, be.metrics.renewalMultis)-multis)/n, "zkwrites/op")
	b.ReportMetric((counterValue(b, be.metrics.barrierTrips)-trips)/n, "roundtrips/op")
}

// BenchmarkLeaseExpiryScan is one tick of the leader's expiry loop (4 a
// second) over 10,000 live leases none of which is due.
func BenchmarkLeaseExpiryScan(b *testing.B) {
	const leases = 10000
	st := memlog.New(memlog.Options{})
	be, _ := engine(b, st, "a", nil)
	testutil.Eventually(b, time.Second, "a leads", leads(be))
	grantMany(b, be, leases, 60)
	testutil.Eventually(b, 30*time.Second, "baselines read", func() bool {
		be.leases.clock.mu.Lock()
		defer be.leases.clock.mu.Unlock()
		return len(be.leases.clock.deadlines) == leases
	})
	_, fence, _ := be.election.State()
	lg := be.log.WithField("component", "bench")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		be.leases.expireDue(lg, fence)
	}
}

// grantMany grants n leases of ttl seconds from 32 goroutines.
func grantMany(t testing.TB, b *Engine, n int, ttl int64) []int64 {
	ids := make([]int64, n)
	var wg sync.WaitGroup
	const workers = 32
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				ids[i] = grant(t, b, ttl)
			}
		}()
	}
	wg.Wait()
	return ids
}

// TestCheckpointedRemainingTTLIsTheFirstDeadline: a lease written with a
// remaining-TTL checkpoint (as `zketcd mirror` copies one from etcd) expires
// when that time is up, not after its granted TTL, unless a keepalive came:
// that one moves its token, and from then on it lives by its granted TTL.
func TestCheckpointedRemainingTTLIsTheFirstDeadline(t *testing.T) {
	st := memlog.New(memlog.Options{})
	w := st.Client()
	const granted, left = 60, 3
	e := &revision.Entry{LSN: 2, Writer: revision.WriterTag{Nonce: 7, Seq: 1}, Ops: []revision.Op{
		{Kind: revision.OpLeaseGrant, Lease: 0xa, TTL: granted}, {Kind: revision.OpLeaseCheckpoint, Lease: 0xa, TTL: left},
		{Kind: revision.OpLeaseGrant, Lease: 0xb, TTL: granted}, {Kind: revision.OpLeaseCheckpoint, Lease: 0xb, TTL: left},
	}}
	if res, err := w.Commit(context.Background(), zkstore.CommitRequest{Prev: 1, Entry: e, Rev: 1}); err != nil || res.Outcome != zkstore.Committed {
		t.Fatalf("commit: %v %v", res.Outcome, err)
	}
	w.Close()
	clk := testutil.NewClock()
	start := clk.Now()
	b, c := engine(t, st, "a", onClock(clk, 0, nil))
	testutil.Eventually(t, 10*time.Second, "a leads", leads(b))
	ttl, err := b.LeaseTimeToLive(context.Background(), &pb.LeaseTimeToLiveRequest{ID: 0xa})
	if err != nil || ttl.GrantedTTL != granted || ttl.TTL > left || ttl.TTL < left-1 {
		t.Fatalf("time to live of a checkpointed lease: %+v %v, want granted %d, remaining ≤ %d", ttl, err, granted, left)
	}
	if got := renew(t, b, 0xb); got != granted {
		t.Fatalf("keepalive answered TTL %d, want %d", got, granted)
	}
	if v := tokenVersion(t, c, 0xb); v != 1 {
		t.Fatalf("token of the checkpointed lease at version %d after a keepalive, want 1 (renewed through it)", v)
	}
	// Its remaining TTL from the leader's start, not its granted one.
	expiresNoSoonerThan(t, b, st, clk, 0xa, start.Add(ttlOf(left)), ttlOf(granted)/4)
	clk.Advance(2 * time.Second)
	scanned(t, b)
	if !st.LeaseTokenExists(0xb) {
		t.Fatal("the kept-alive checkpointed lease expired")
	}
}

// TestLeasesTheLeaderGrantsNeedNoTokenRead: a lease granted at the leader,
// or through a follower, starts the leader's clock at its grant, so the
// expiry loop reads no token until a deadline passes (10,000 leases granted
// at once used to cost 10,000 ZooKeeper reads right after); each still
// expires a TTL after its grant, not before.
func TestLeasesTheLeaderGrantsNeedNoTokenRead(t *testing.T) {
	clk := testutil.NewClock()
	st, _, a, _, b, _ := forwardingPairWith(t, onClock(clk, 0, nil))
	granted := map[int64]time.Time{}
	for i := 0; i < 20; i++ {
		e := a
		if i%2 == 1 {
			e = b // forwarded to a
		}
		at := clk.Now()
		granted[grant(t, e, MinLeaseTTL)] = at
		clk.Advance(10 * time.Millisecond)
	}
	for range 4 {
		scanned(t, a)
	}
	if n := counterValue(t, a.metrics.leaseTokenReads); n != 0 {
		t.Fatalf("the leader read %.0f lease tokens for leases it granted", n)
	}
	for id, at := range granted {
		expiresNoSoonerThan(t, a, st, clk, id, at.Add(ttlOf(MinLeaseTTL)), time.Second)
	}
}

// soloLeader starts one instance on a fresh memlog, its lease expiry on
// clk with the loop scanning every tick, and waits until it leads.
func soloLeader(t *testing.T, clk *testutil.Clock, tick time.Duration) (*memlog.Store, *Engine) {
	t.Helper()
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", onClock(clk, tick, nil))
	testutil.Eventually(t, 10*time.Second, "a leads", leads(a))
	return st, a
}

func grantID(t *testing.T, b *Engine, id, ttl int64) {
	t.Helper()
	if _, err := b.LeaseGrant(context.Background(), &pb.LeaseGrantRequest{ID: id, TTL: ttl}); err != nil {
		t.Fatalf("grant %x: %v", id, err)
	}
}

func revokeID(t *testing.T, b *Engine, id int64) {
	t.Helper()
	if _, err := b.LeaseRevoke(context.Background(), &pb.LeaseRevokeRequest{ID: id}); err != nil {
		t.Fatalf("revoke %x: %v", id, err)
	}
}

// TestALeaseGrantedAgainUnderItsIDLivesAWholeTTL: a lease revoked and
// granted again with the same ID before the expiry loop dropped its old
// deadline lives a TTL from the second grant, not from the first.
//
// The loop scans every 50 ms here, so that the revoke and the grant again
// (a fraction of a millisecond on memlog) almost always fall between two
// scans, with the first grant's deadline still held.
func TestALeaseGrantedAgainUnderItsIDLivesAWholeTTL(t *testing.T) {
	clk := testutil.NewClock()
	st, a := soloLeader(t, clk, 50*time.Millisecond)
	const id = 0x1234
	for range 5 {
		grantID(t, a, id, MinLeaseTTL)
		clk.Advance(time.Second)
		scanned(t, a) // the loop holds the first grant's deadline
		revokeID(t, a, id)
		at := clk.Now()
		grantID(t, a, id, MinLeaseTTL)
		expiresNoSoonerThan(t, a, st, clk, id, at.Add(ttlOf(MinLeaseTTL)), time.Second)
	}
}

// TestAnExpiryDecidedForAnEarlierGrantOfTheIDIsRefused: an expiry decided
// for a lease (its token read at version 0) that is revoked and granted
// again under the same ID before the expiry commits does not revoke the new
// grant, whose token is at version 0 as well.
func TestAnExpiryDecidedForAnEarlierGrantOfTheIDIsRefused(t *testing.T) {
	st, a := soloLeader(t, testutil.NewClock(), 0)
	const id = 0x4321
	grantID(t, a, id, 60)
	old := a.leases.viewLease(id)
	revokeID(t, a, id)
	grantID(t, a, id, 60)
	_, fence, _ := a.election.State()
	if err := a.leases.expire(id, old, 0, fence); !errors.Is(err, errLeaseGrantedAgain) {
		t.Fatalf("expiry decided for the first grant: %v, want %v", err, errLeaseGrantedAgain)
	}
	if !st.LeaseTokenExists(id) || a.leases.viewLease(id) == nil {
		t.Fatal("the second grant was revoked by an expiry decided for the first")
	}
	// The expiry of the grant the view holds commits.
	if err := a.leases.expire(id, a.leases.viewLease(id), 0, fence); err != nil {
		t.Fatalf("expiry of the current grant: %v", err)
	}
	if st.LeaseTokenExists(id) {
		t.Fatal("the current grant's expiry left its token")
	}
}
