package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
)

// waitGone waits until key is gone and returns how long that took.
func waitGone(t *testing.T, c *clientv3.Client, key string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testutil.Eventually(t, within, fmt.Sprintf("key %q gone", key), func() bool {
		resp, err := c.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Kvs) == 0
	})
	return time.Since(start)
}

func TestLeaseExpiresAndDeletesKeysInOneRevision(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	grant, err := c.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if grant.TTL != 2 {
		t.Fatalf("granted TTL %d", grant.TTL)
	}
	for _, k := range []string{"l/a", "l/b", "l/c"} {
		if _, err := c.Put(ctx, k, "v", clientv3.WithLease(grant.ID)); err != nil {
			t.Fatal(err)
		}
	}
	put, _ := c.Put(ctx, "plain", "v")
	wch := c.Watch(ctx, "l/", clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision+1), clientv3.WithPrevKV())
	start := time.Now()
	ttl, err := c.TimeToLive(ctx, grant.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 2 || len(ttl.Keys) != 3 || ttl.TTL < 1 || ttl.TTL > 2 {
		t.Fatalf("time to live: %+v %v", ttl, err)
	}
	waitGone(t, c, "l/a", 10*time.Second)
	took := time.Since(start)
	if took < 1500*time.Millisecond {
		t.Fatalf("lease expired after %s, before its TTL", took)
	}
	resp := <-wch
	if len(resp.Events) != 3 {
		t.Fatalf("expiry should delete 3 keys in one revision, got %v", resp.Events)
	}
	for _, ev := range resp.Events {
		if ev.Type != clientv3.EventTypeDelete || ev.PrevKv == nil || ev.Kv.ModRevision != resp.Events[0].Kv.ModRevision {
			t.Fatalf("event %v", ev)
		}
	}
	ttl, err = c.TimeToLive(ctx, grant.ID)
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("expired lease time to live: %+v %v", ttl, err)
	}
	if g, _ := c.Get(ctx, "plain"); len(g.Kvs) != 1 {
		t.Fatal("key without lease deleted")
	}
	t.Logf("lease with TTL 2s expired after %s", took)
}

// TestKeepAliveKeepsLeaseAlive: keepalives keep a 2 s lease alive for
// three TTLs of the engine's clock, moved 1.5 s after each keepalive
// answered; once they stop, the lease expires.
func TestKeepAliveKeepsLeaseAlive(t *testing.T) {
	clk := testutil.NewClock()
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{
		Configure: func(cfg *embed.Config) { cfg.Engine.Now = clk.Now },
	})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	grant, err := c.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", "v", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	// One keepalive at a time, each answered before the clock moves: the
	// client's own KeepAlive loop sends on a real-time timer and keeps a
	// buffer of answers, which under load can be older than the last
	// advance, so the clock could pass the TTL without a renewal between.
	start := clk.Now()
	for clk.Now().Sub(start) < 6*time.Second {
		if _, err := c.KeepAliveOnce(ctx, grant.ID); err != nil {
			t.Fatalf("keepalive of a kept-alive lease: %v", err)
		}
		clk.Advance(1500 * time.Millisecond) // less than the TTL since the keepalive
	}
	if g, _ := c.Get(ctx, "k"); len(g.Kvs) != 1 {
		t.Fatal("key of a kept-alive lease was deleted")
	}
	clk.Advance(time.Second) // past the TTL since the last keepalive
	took := waitGone(t, c, "k", 10*time.Second)
	t.Logf("expired %s after keepalives stopped", took)
	if resp, err := c.KeepAliveOnce(context.Background(), grant.ID); err == nil {
		t.Fatalf("keepalive of an expired lease: %v", resp)
	}
}

func TestLeaseSurvivesLeaderRestartAndExpiresAfterFailover(t *testing.T) {
	a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	testutil.Eventually(t, 10*time.Second, "the first instance leads", func() bool { l, _ := a.Engine().Leader(); return l })
	b := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: a.Root()})
	if leader, _ := a.Engine().Leader(); !leader {
		t.Fatal("first instance is not the leader")
	}
	cb := b.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	grant, err := cb.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Put(ctx, "k", "v", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.Close() // the leader goes away; b must take over expiry
	waitGone(t, cb, "k", 15*time.Second)
	took := time.Since(start)
	if took < 2500*time.Millisecond {
		t.Fatalf("expired %s after grant, before its TTL", took)
	}
	if leader, _ := b.Engine().Leader(); !leader {
		t.Fatal("second instance did not become the leader")
	}
	t.Logf("lease expired %s after grant, through a leader change", took)
}

// TestKeepalivesAtTheLeaderCostNoZooKeeperWrite: on a real ZooKeeper, a
// lease kept alive through the leader instance for longer than its TTL (of
// the engine's clock, moved half a second per keepalive) costs no renewal
// multi and no token write; it stays alive.
func TestKeepalivesAtTheLeaderCostNoZooKeeperWrite(t *testing.T) {
	clk := testutil.NewClock()
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{
		Configure: func(cfg *embed.Config) { cfg.Engine.Now = clk.Now },
	})
	c := in.Client(t)
	testutil.Eventually(t, 10*time.Second, "the instance leads", func() bool { l, _ := in.Engine().Leader(); return l })
	ctx := testutil.Context(t, 30*time.Second)
	grant, err := c.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", "v", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	counters := func() (inMemory, multis, writes float64) {
		mfs, err := in.Zketcd().Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			v := 0.0
			if ms := mf.GetMetric(); len(ms) > 0 && ms[0].GetCounter() != nil {
				v = ms[0].GetCounter().GetValue()
			}
			switch mf.GetName() {
			case "zketcd_lease_keepalives_in_memory_total":
				inMemory = v
			case "zketcd_lease_renewal_multis_total":
				multis = v
			case "zketcd_lease_renewal_token_writes_total":
				writes = v
			}
		}
		return
	}
	n := 0
	for start := clk.Now(); clk.Now().Sub(start) < 3*time.Second; n++ {
		if _, err := c.KeepAliveOnce(ctx, grant.ID); err != nil {
			t.Fatal(err)
		}
		clk.Advance(500 * time.Millisecond)
	}
	inMemory, multis, writes := counters()
	t.Logf("%d keepalives: %.0f in memory, %.0f renewal multis, %.0f token writes", n, inMemory, multis, writes)
	if inMemory != float64(n) || multis != 0 || writes != 0 {
		t.Fatalf("%d keepalives at the leader: %.0f in memory, %.0f multis, %.0f token writes; want %d, 0, 0", n, inMemory, multis, writes, n)
	}
	if g, _ := c.Get(ctx, "k"); len(g.Kvs) != 1 {
		t.Fatal("key of a lease kept alive at the leader was deleted")
	}
}
