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
	"github.com/zketcd/zketcd/internal/testutil/wallstep"
)

// TestLeaseExpiryIgnoresWallClockSteps: the leader's wall clock is stepped
// by +1 h and then -1 h while a 4 s lease runs; the lease expires neither
// early (the +1 h step does not make it an hour old) nor late (the -1 h
// step does not give it another hour): about one TTL after its grant, as
// without a step.
func TestLeaseExpiryIgnoresWallClockSteps(t *testing.T) {
	wall := &wallstep.Clock{}
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{
		Configure: func(cfg *embed.Config) { cfg.Engine.Now = wall.Now },
	})
	c := in.Client(t)
	// The leader starts a lease's clock at the grant it commits.
	testutil.Eventually(t, 10*time.Second, "the instance leads", func() bool { l, _ := in.Engine().Leader(); return l })
	const ttl = 4 * time.Second
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		lease, err := c.Grant(ctx, int64(ttl/time.Second))
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		key := fmt.Sprintf("leased%+d", int64(step/time.Hour))
		if _, err := c.Put(ctx, key, "x", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		wall.Step(step)
		var gone time.Duration
		testutil.Eventually(t, ttl+10*time.Second, fmt.Sprintf("step %v: the lease expired", step), func() bool {
			get, err := c.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			gone = time.Since(granted)
			return len(get.Kvs) == 0
		})
		cancel()
		if gone < ttl {
			t.Fatalf("step %v: lease expired %v after its grant, before its TTL %v", step, gone.Round(time.Millisecond), ttl)
		}
		t.Logf("wall clock stepped %v: the %v lease expired %v after its grant", step, ttl, gone.Round(10*time.Millisecond))
	}
}
