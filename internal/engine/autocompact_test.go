package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/compactor"
	"github.com/zketcd/zketcd/internal/testutil"
)

// autoCompactions returns an instance's zketcd_auto_compactions_total for
// outcome ("" sums every outcome).
func autoCompactions(t *testing.T, in *embedtest.Instance, outcome string) float64 {
	t.Helper()
	mfs, err := in.Zketcd().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "zketcd_auto_compactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && (outcome == "" || l.GetValue() == outcome) {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// waitCompactRev waits until the instance's view is compacted at or above
// rev and returns its compacted revision.
func waitCompactRev(t *testing.T, in *embedtest.Instance, rev int64, within time.Duration) int64 {
	t.Helper()
	var got int64
	testutil.Eventually(t, within, fmt.Sprintf("compacted at revision %d or above", rev), func() bool {
		got = in.Engine().State().CompactRev
		return got >= rev
	})
	return got
}

func putN(t *testing.T, c *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	var rev int64
	for i := 0; i < n; i++ {
		resp, err := c.Put(testutil.Context(t, 30*time.Second), fmt.Sprintf("%s%d", prefix, i%5), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

func TestAutoCompactionRevisionModeCompactsToRetentionBelowTheHead(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{AutoCompaction: compactor.Config{
		Mode: compactor.ModeRevision, Revisions: 5, RevisionInterval: 200 * time.Millisecond,
	}})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	first := putN(t, c, "r/", 1)
	last := putN(t, c, "r/", 20)

	if got := waitCompactRev(t, in, last-5, 10*time.Second); got != last-5 {
		t.Fatalf("compacted to %d, want %d (head %d - retention 5)", got, last-5, last)
	}
	// A compaction takes no revision: later checks find nothing new to do.
	// This proves a negative, so it waits a bounded time: three checks.
	time.Sleep(600 * time.Millisecond)
	if got := in.Engine().State().CompactRev; got != last-5 {
		t.Fatalf("compacted revision moved to %d with no writes", got)
	}
	if _, err := c.Get(ctx, "r/0", clientv3.WithRev(last-6)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := c.Get(ctx, "r/0", clientv3.WithRev(last-5)); err != nil {
		t.Fatalf("read at the compaction: %v", err)
	}
	// The same compaction as the Compact RPC: a client's Compact below it
	// is refused, and a watch from before it is canceled.
	if _, err := c.Compact(ctx, last-6); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("Compact below the auto-compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
	wresp := <-c.Watch(ctx, "r/", clientv3.WithPrefix(), clientv3.WithRev(first))
	if !wresp.Canceled || wresp.CompactRevision != last-5 {
		t.Fatalf("watch from %d: canceled %v, compact revision %d; want canceled at %d",
			first, wresp.Canceled, wresp.CompactRevision, last-5)
	}
	// Checks during the writes may have compacted lower revisions first.
	if n := autoCompactions(t, in, "compacted"); n < 1 {
		t.Fatalf("zketcd_auto_compactions_total{outcome=compacted} = %v, want at least 1", n)
	}
	if n := autoCompactions(t, in, "failed"); n != 0 {
		t.Fatalf("zketcd_auto_compactions_total{outcome=failed} = %v", n)
	}
}

// Periodic mode compacts to a revision sampled at least the retention
// before: a sample is kept for 10 sampling intervals (retention/10 each)
// before it is used.
func TestAutoCompactionPeriodicModeCompactsTheRevisionOfRetentionAgo(t *testing.T) {
	const retention = time.Second
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{AutoCompaction: compactor.Config{
		Mode: compactor.ModePeriodic, Retention: retention,
	}})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	written := map[int64]time.Time{} // revision -> when its Put was sent
	var mid int64                    // the first revision written a retention after the start
	start := time.Now()
	checked := 0
	// Writes (about one every 50 ms, Eventually's pace) until the compaction
	// reaches a revision written a retention and a half after the start.
	testutil.Eventually(t, 12*time.Second, "compacted to a revision written after 1.5 retentions", func() bool {
		sent := time.Now()
		resp, err := c.Put(ctx, "p/k", sent.String())
		if err != nil {
			t.Fatal(err)
		}
		rev := resp.Header.Revision
		written[rev] = sent
		if mid == 0 && sent.Sub(start) > retention+retention/2 {
			mid = rev
		}
		seen := time.Now()
		cr := in.Engine().State().CompactRev
		if at, ok := written[cr]; ok {
			// The revision was current when sampled, so its Put was sent
			// before; it was sampled at least a retention before now.
			if age := seen.Sub(at); age < retention {
				t.Fatalf("compacted to revision %d, written only %s before", cr, age)
			}
			checked++
		}
		return mid != 0 && cr >= mid
	})
	cr := in.Engine().State().CompactRev
	if checked == 0 {
		t.Fatal("never saw a compaction to a revision this test wrote")
	}
	if _, err := c.Get(ctx, "p/k", clientv3.WithRev(cr-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if n := autoCompactions(t, in, "compacted"); n < 2 {
		t.Fatalf("zketcd_auto_compactions_total{outcome=compacted} = %v, want at least 2", n)
	}
}

// Two instances on one root both run the auto-compactor; only the elected
// leader compacts, and the other takes over when it goes.
func TestAutoCompactionRunsOnlyOnTheLeaderInstance(t *testing.T) {
	opts := embedtest.Options{AutoCompaction: compactor.Config{
		Mode: compactor.ModeRevision, Revisions: 3, RevisionInterval: 100 * time.Millisecond,
	}}
	a := embedtest.Start(t, []string{zkAddr(t)}, opts)
	opts.Root = a.Root()
	b := embedtest.Start(t, []string{zkAddr(t)}, opts)
	leader, follower := waitLeader(t, a, b)

	c := follower.Client(t)
	last := putN(t, c, "two/", 15)
	waitCompactRev(t, leader, last-3, 10*time.Second)
	waitCompactRev(t, follower, last-3, 10*time.Second)
	// The follower must not compact: a negative, so a bounded wait of
	// five of its checks.
	time.Sleep(500 * time.Millisecond)
	if n := autoCompactions(t, leader, "compacted"); n < 1 {
		t.Fatalf("leader: %v auto-compactions", n)
	}
	if n := autoCompactions(t, follower, ""); n != 0 {
		t.Fatalf("follower attempted %v auto-compactions", n)
	}

	leader.Close()
	testutil.Eventually(t, 10*time.Second, "the remaining instance leads", func() bool {
		l, _ := follower.Engine().Leader()
		return l
	})
	last = putN(t, c, "two/", 10)
	if got := waitCompactRev(t, follower, last-3, 10*time.Second); got != last-3 {
		t.Fatalf("new leader compacted to %d, want %d", got, last-3)
	}
	if n := autoCompactions(t, follower, "compacted"); n < 1 {
		t.Fatalf("new leader: %v auto-compactions", n)
	}
}

// waitLeader waits until exactly one of two instances on a root is the
// leader and returns it first.
func waitLeader(t *testing.T, a, b *embedtest.Instance) (leader, follower *embedtest.Instance) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "a single leader among the two instances", func() bool {
		la, ida := a.Engine().Leader()
		lb, idb := b.Engine().Leader()
		switch {
		case la && !lb && idb == a.Engine().MemberID():
			leader, follower = a, b
		case lb && !la && ida == b.Engine().MemberID():
			leader, follower = b, a
		}
		return leader != nil
	})
	return leader, follower
}
