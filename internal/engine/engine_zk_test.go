package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

func TestRestartRecoversKeysRevisionsAndHistory(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	for i := 0; i < 20; i++ {
		if _, err := c.Put(ctx, fmt.Sprintf("k%02d", i%7), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Delete(ctx, "k03"); err != nil {
		t.Fatal(err)
	}
	before, err := c.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	old, err := c.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(10))
	if err != nil {
		t.Fatal(err)
	}
	in.Restart()
	c2 := in.Client(t)
	after, err := c2.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision || fmt.Sprint(after.Kvs) != fmt.Sprint(before.Kvs) {
		t.Fatalf("after restart:\n%v\nbefore:\n%v", after, before)
	}
	oldAfter, err := c2.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(10))
	if err != nil || fmt.Sprint(oldAfter.Kvs) != fmt.Sprint(old.Kvs) {
		t.Fatalf("history at 10 after restart: %v %v, want %v", oldAfter, err, old.Kvs)
	}
	resp, err := c2.Put(ctx, "k99", "x")
	if err != nil || resp.Header.Revision != before.Header.Revision+1 {
		t.Fatalf("first write after restart: %v %v", resp, err)
	}
}

func TestTwoInstancesSeeEachOthersWritesLinearizably(t *testing.T) {
	a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	b := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: a.Root()})
	ca, cb := a.Client(t), b.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	for i := 0; i < 50; i++ {
		w, r := ca, cb
		if i%2 == 1 {
			w, r = cb, ca
		}
		put, err := w.Put(ctx, "x", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != fmt.Sprint(i) || got.Header.Revision < put.Header.Revision {
			t.Fatalf("write %d through one instance not visible through the other: %v", i, got)
		}
	}
	members, err := ca.MemberList(ctx)
	if err != nil || len(members.Members) != 2 {
		t.Fatalf("member list: %v %v", members, err)
	}
}

func TestConcurrentCASThroughTwoInstancesNeverBothSucceed(t *testing.T) {
	for _, depth := range []int{1, 3} {
		t.Run(fmt.Sprintf("pipeline=%d", depth), func(t *testing.T) { testConcurrentCAS(t, depth) })
	}
}

func testConcurrentCAS(t *testing.T, depth int) {
	a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{CommitPipeline: depth})
	b := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: a.Root(), CommitPipeline: depth})
	clients := []*clientv3.Client{a.Client(t), b.Client(t)}
	ctx := testutil.Context(t, 30*time.Second)
	const rounds = 30
	for round := 0; round < rounds; round++ {
		key := fmt.Sprintf("cas-%d", round)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(c *clientv3.Client, i int) {
				defer wg.Done()
				resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
					Then(clientv3.OpPut(key, fmt.Sprint(i))).Commit()
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Succeeded {
					wins.Add(1)
				}
			}(clients[i%2], i)
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d create-CAS winners, want exactly 1", round, n)
		}
	}
}

func TestGroupCommitGivesEachWriteItsOwnRevision(t *testing.T) {
	for _, depth := range []int{1, 3} {
		t.Run(fmt.Sprintf("pipeline=%d", depth), func(t *testing.T) { testGroupCommit(t, depth) })
	}
}

func testGroupCommit(t *testing.T, depth int) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{CommitPipeline: depth})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	const writers, each = 32, 20
	revs := make(chan int64, writers*each)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				resp, err := c.Put(ctx, fmt.Sprintf("w%d", w), fmt.Sprint(i))
				if err != nil {
					t.Error(err)
					return
				}
				revs <- resp.Header.Revision
			}
		}(w)
	}
	wg.Wait()
	close(revs)
	seen := map[int64]bool{}
	for r := range revs {
		if seen[r] {
			t.Fatalf("revision %d acknowledged twice", r)
		}
		seen[r] = true
	}
	for r := int64(2); r < 2+writers*each; r++ {
		if !seen[r] {
			t.Fatalf("revision %d missing: revisions are not dense", r)
		}
	}
	lsn := in.Engine().State().LSN
	t.Logf("%d writes in %d log entries", writers*each, lsn-1)
}

func TestZooKeeperRestartDuringTraffic(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{SessionTimeout: 20 * time.Second})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	var acked sync.Map // value -> revision
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	stopWriters := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(stopWriters)
	var failures atomic.Int32
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("t%d-%d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := c.Put(cctx, key, "v")
				cancel()
				if err != nil {
					failures.Add(1)
					if !retryable(err) {
						t.Errorf("non-retryable error during a ZooKeeper outage: %v", err)
					}
					time.Sleep(50 * time.Millisecond) // a retry's pace, not a wait
					continue
				}
				acked.Store(key, resp.Header.Revision)
			}
		}(w)
	}
	countAcked := func() int {
		n := 0
		acked.Range(func(any, any) bool { n++; return true })
		return n
	}
	testutil.Eventually(t, 10*time.Second, "writes acknowledged before the outage", func() bool { return countAcked() >= 20 })
	if err := zk.Stop(); err != nil {
		t.Fatal(err)
	}
	// The outage itself: ZooKeeper stays down for 2 s of traffic.
	time.Sleep(2 * time.Second)
	if err := zk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	testutil.Eventually(t, 40*time.Second, "a write succeeds after ZooKeeper came back", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := c.Put(cctx, "after", "restart")
		if err != nil && time.Since(restarted) > 35*time.Second {
			buf := make([]byte, 1<<20)
			t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		}
		return err == nil
	})
	back := countAcked()
	testutil.Eventually(t, 10*time.Second, "the writers write again", func() bool { return countAcked() >= back+20 })
	stopWriters()
	if failures.Load() == 0 {
		t.Log("no request failed during the outage (ZooKeeper restarted quickly)")
	}
	n := 0
	acked.Range(func(k, v any) bool {
		n++
		resp, err := c.Get(ctx, k.(string))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != v.(int64) {
			t.Errorf("acknowledged write %s@%d lost: %v", k, v, resp.Kvs)
		}
		return true
	})
	t.Logf("%d acknowledged writes checked, %d failed requests during the outage", n, failures.Load())
}

// retryable reports whether err is one of the errors etcd clients treat as
// "try again": Unavailable codes, timeouts and deadline errors.
func retryable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrStopped} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TestLeaderYieldsToTheOtherInstance: YieldLeadership steps the leader down
// (through the candidacy a move can switch) and the other instance leads;
// an instance that does not lead does not step down.
func TestLeaderYieldsToTheOtherInstance(t *testing.T) {
	a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	b := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: a.Root()})
	leader, other := a.Engine(), b.Engine()
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool {
		la, _ := leader.Leader()
		lb, _ := other.Leader()
		return la || lb
	})
	if l, _ := leader.Leader(); !l {
		leader, other = other, leader
	}
	if other.YieldLeadership() {
		t.Fatal("an instance that does not lead stepped down")
	}
	if !leader.YieldLeadership() {
		t.Fatal("the leader did not step down")
	}
	testutil.Eventually(t, 10*time.Second, "the other instance leads", func() bool { l, _ := other.Leader(); return l })
}
