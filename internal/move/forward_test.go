package move_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/move"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestMoveWhileForwardingInstancesServe moves a root served by two
// instances started as `zketcd serve` starts them (writes forwarded to
// the leader through the internal endpoint), with clients writing through
// both and a watch on the follower: every acknowledged write is on the
// destination once, at the revision it was acknowledged with; the
// revisions after the start are exactly the acknowledged writes (none
// applied twice); the source takes nothing after the fence; the watch
// sees every revision once.
func TestMoveWhileForwardingInstancesServe(t *testing.T) {
	src := rootview.StoreConfig(t, sharedZK, "")
	dst := rootview.StoreConfig(t, sharedZK, "")
	zk := []string{sharedZK.Addr(t)}
	a := embedtest.Start(t, zk, embedtest.Options{Root: src.Root, Name: "a", ForwardWrites: true})
	testutil.Eventually(t, 20*time.Second, "a leads", func() bool { l, _ := a.Engine().Leader(); return l })
	b := embedtest.Start(t, zk, embedtest.Options{Root: src.Root, Name: "b", ForwardWrites: true})
	ctx := testutil.Context(t, 2*time.Minute)
	ca, cb := a.Client(t), b.Client(t)
	first, err := cb.Put(ctx, "k-first", "v")
	if err != nil {
		t.Fatal(err)
	}
	startRev := first.Header.Revision

	// The watch, from the first write on.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	seen := map[int64]int{}
	var seenMu sync.Mutex
	var seenMax int64
	wch := cb.Watch(wctx, "k-", clientv3.WithPrefix(), clientv3.WithRev(startRev))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for resp := range wch {
			seenMu.Lock()
			for _, ev := range resp.Events {
				seen[ev.Kv.ModRevision]++
				seenMax = max(seenMax, ev.Kv.ModRevision)
			}
			seenMu.Unlock()
		}
	}()

	var acked sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	longest := make([]time.Duration, 4)
	for i, c := range []*clientv3.Client{ca, ca, cb, cb} {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k-%d-%05d", i, n)
				began := time.Now()
				resp, err := c.Put(ctx, key, "v")
				longest[i] = max(longest[i], time.Since(began))
				if err != nil {
					t.Errorf("put %s: %v", key, err)
					return
				}
				acked.Store(key, resp.Header.Revision)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	res, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "both instances on the destination", func() bool {
		return a.Engine().Moves() == 1 && b.Engine().Moves() == 1
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("fenced at entry %d (revision %d): fence to finished %v; longest puts %v", res.FenceLSN, res.Rev, res.Paused.Round(time.Millisecond), longest)

	in, err := zkstore.OpenInspector(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	h, err := in.SyncHead()
	in.Close()
	if err != nil || h.LSN != res.FenceLSN {
		t.Fatalf("source head %+v %v, fence at %d", h, err, res.FenceLSN)
	}
	last, err := cb.Get(ctx, "k-first") // linearizable: both instances' writes applied at b
	if err != nil {
		t.Fatal(err)
	}
	headRev := last.Header.Revision
	testutil.Eventually(t, 10*time.Second, "a caught up", func() bool { return a.Engine().State().Rev >= headRev })
	if got, want := rootview.Dump(rootview.Recovered(t, dst)), rootview.Dump(a.Engine().Snapshot()); got != want {
		t.Fatalf("destination's view differs from the instance's:\n%s\nvs\n%s", got, want)
	}
	n := int64(0)
	acked.Range(func(k, v any) bool {
		n++
		kv, err := ca.Get(ctx, k.(string), clientv3.WithSerializable())
		if err != nil || len(kv.Kvs) != 1 || kv.Kvs[0].ModRevision != v.(int64) || kv.Kvs[0].Version != 1 {
			t.Errorf("%s acknowledged at %d: %v %v", k, v, kv, err)
		}
		return true
	})
	if n < 20 || headRev-startRev != n {
		t.Fatalf("revisions %d..%d after the first write, %d writes acknowledged (too few, a write applied twice, or one not acknowledged)", startRev, headRev, n)
	}
	testutil.Eventually(t, 10*time.Second, "the watch saw the last revision", func() bool {
		seenMu.Lock()
		defer seenMu.Unlock()
		return seenMax >= headRev
	})
	wcancel()
	<-watchDone
	for rev := startRev; rev <= headRev; rev++ {
		if seen[rev] != 1 {
			t.Errorf("the watch saw revision %d %d times", rev, seen[rev])
		}
	}
	if len(seen) != int(headRev-startRev+1) {
		t.Errorf("the watch saw %d revisions, want %d", len(seen), headRev-startRev+1)
	}
}
