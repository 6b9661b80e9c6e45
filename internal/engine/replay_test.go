package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestReplayOverlappingCompactions recovers views from a root while another
// instance keeps writing and physically compacting it (new base
// generations, log entries deleted under the reader), as an instance
// starting beside a compacting leader does. The first replay is held until
// the entries it still needs are gone, so it must start over from a newer
// base. Every recovered view must equal the writer's store at the view's
// revision.
func TestReplayOverlappingCompactions(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fillForReplay(t, ctx, c)

	var compactions atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// pause holds the writer between its rounds while the first replay's
	// view is compared: it started over, and a compaction past its
	// revision would leave the overlap unchecked.
	var pause sync.Mutex
	writer := func() { // puts, and a physical compaction 30 revisions back
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			pause.Lock()
			//lint:ignore SA2001 a gate: the writer waits here while the test holds it
			pause.Unlock()
			var rev int64
			for i := 0; i < 5; i++ {
				resp, err := c.Put(ctx, fmt.Sprintf("r/hot/%02d", (5*n+i)%40), fmt.Sprint(n))
				if err != nil {
					t.Error(err)
					return
				}
				rev = resp.Header.Revision
			}
			if _, err := c.Compact(ctx, rev-30, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
				t.Error(err)
				return
			}
			compactions.Add(1)
		}
	}
	startWriter := sync.OnceFunc(func() { wg.Add(1); go writer() })
	paused := false
	defer func() {
		if paused {
			pause.Unlock()
		}
		startWriter()
		close(stop)
		wg.Wait()
	}()

	lg := logrus.New()
	lg.SetOutput(io.Discard)
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{zkAddr(t)}, Root: in.Root(), Logger: logrus.NewEntry(lg)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	compared, restarts, restartedCompared := 0, 0, 0
	for round := 0; compared < 20 && round < 100; round++ {
		if paused {
			pause.Unlock()
			paused = false
		}
		var last int64
		jumped := false
		// The first replay starts from the sentinel with the whole log
		// ahead of it, and stalls at its first entry until three new base
		// generations were published: publishing the third one follows the
		// truncation that the second one's compaction ran (of the entries
		// below the first new generation), so the entries this replay still
		// needs are gone and it must start over from a newer base.
		stall := round == 0
		view, _, _, err := engine.Replay(ctx, st, 2, func(e *revision.Entry) {
			if last != 0 && e.LSN != last+1 {
				// One replay reads consecutive entries: it started over
				// from a newer base after a compaction removed entries.
				restarts++
				jumped = true
			}
			last = e.LSN
			if stall {
				stall = false
				startWriter()
				waitGenerations(t, st, 3)
			}
		})
		if err != nil {
			t.Fatalf("round %d: replay: %v", round, err)
		}
		startWriter()
		if round == 0 {
			pause.Lock()
			paused = true
		}
		restarted := last != 0 && last < view.State().LSN
		if restarted {
			// The view ends past the last entry replayed: it came from a base
			// loaded after those entries, when the replay started over.
			restarts++
		}
		restarted = restarted || jumped
		if !viewIsTheStore(t, ctx, c, view, round) {
			continue // the writer compacted past the view already: nothing to compare
		}
		compared++
		if restarted {
			restartedCompared++
		}
	}
	if compared < 20 {
		t.Fatalf("only %d recovered views could be compared", compared)
	}
	if restartedCompared == 0 {
		t.Fatalf("no replay that started over was compared (%d started over): the test did not check an overlap", restarts)
	}
	t.Logf("%d recovered views equal the store at their revision, %d of them from replays that started over, over %d compactions", compared, restartedCompared, compactions.Load())
}

// fillForReplay writes a base worth loading (2,000 keys in 16
// transactions) and a log to replay (150 entries), before any compaction.
func fillForReplay(t *testing.T, ctx context.Context, c *clientv3.Client) {
	t.Helper()
	for i := 0; i < 16; i++ {
		ops := make([]clientv3.Op, 0, 125)
		for j := 0; j < 125; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("r/base/%05d", i*125+j), fmt.Sprint(i, j)))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 150; i++ {
		if _, err := c.Put(ctx, fmt.Sprintf("r/log/%03d", i%50), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// viewIsTheStore compares the keys under r/ of a replayed view with the
// store's at the view's revision, failing the test on a difference; false
// if the store compacted past that revision (nothing compared).
func viewIsTheStore(t *testing.T, ctx context.Context, c *clientv3.Client, view *revision.View, round int) bool {
	t.Helper()
	rev := view.State().Rev
	got := map[string]string{}
	if err := view.Read(func(r revision.Reader) error {
		return r.Range([]byte("r/"), []byte("r0"), 0, func(kv *revision.KeyValue) bool {
			got[string(kv.Key)] = fmt.Sprintf("%s@%d/%d/v%d", kv.Value, kv.ModRevision, kv.CreateRevision, kv.Version)
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	want, err := c.Get(ctx, "r/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if errors.Is(err, rpctypes.ErrCompacted) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Kvs) != len(got) {
		t.Fatalf("round %d: view at revision %d has %d keys, the store %d", round, rev, len(got), len(want.Kvs))
	}
	for _, kv := range want.Kvs {
		w := fmt.Sprintf("%s@%d/%d/v%d", kv.Value, kv.ModRevision, kv.CreateRevision, kv.Version)
		if got[string(kv.Key)] != w {
			t.Fatalf("round %d: view at revision %d: %s = %q, the store has %q", round, rev, kv.Key, got[string(kv.Key)], w)
		}
	}
	return true
}

// waitGenerations waits until n base generations newer than the current
// one have been published (it polls: generations published between two
// polls count as one, which only makes it wait longer).
func waitGenerations(t *testing.T, st *zkstore.Store, n int) {
	t.Helper()
	base, err := st.ReadBase()
	if err != nil {
		t.Fatal(err)
	}
	gen, seen := base.Gen, 0
	testutil.Eventually(t, time.Minute, fmt.Sprintf("%d new base generations", n), func() bool {
		b, err := st.ReadBase()
		if err != nil {
			t.Fatal(err)
		}
		if b.Gen != gen {
			gen = b.Gen
			seen++
		}
		return seen >= n
	})
}
