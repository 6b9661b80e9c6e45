package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/snaprestore"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
)

// TestMeasureSnapshot is not a check but a measurement, run on request:
// SNAPSHOT_MEASURE_KEYS=100000 writes that many keys (256-byte values) to
// zketcd and to etcd 3.7.3, and logs, for `etcdctl snapshot save` against
// each, the time and file size, and for zketcd the peak Go heap above the
// baseline while the snapshot is taken (this process also runs the
// server), then the same for `zketcd snapshot restore` of etcd's file.
func TestMeasureSnapshot(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SNAPSHOT_MEASURE_KEYS"))
	if n <= 0 {
		t.Skip("set SNAPSHOT_MEASURE_KEYS to measure")
	}
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{})
	etcd := etcdoracle.Start(t, etcdoracle.WithConfig(func(c *embed.Config) { c.QuotaBackendBytes = 8 << 30 }))
	value := make([]byte, 256)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	for name, c := range map[string]*clientv3.Client{"zketcd": zk.Client(t), "etcd": etcd.Client(t)} {
		start := time.Now()
		fill(t, c, n, string(value))
		t.Logf("%s: wrote %d keys in %v", name, n, time.Since(start).Round(time.Millisecond))
	}
	dir := t.TempDir()
	for _, target := range []struct{ name, endpoint string }{{"zketcd", zk.Endpoint()}, {"etcd", etcd.Endpoint()}} {
		path := filepath.Join(dir, target.name+".snapshot")
		var took time.Duration
		peak := peakHeap(func() {
			start := time.Now()
			saveSnapshot(t, target.endpoint, path)
			took = time.Since(start)
		})
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: etcdctl snapshot save of %d keys: %v, %.1f MiB file, peak live heap +%.1f MiB in this process",
			target.name, n, took.Round(time.Millisecond), float64(fi.Size())/(1<<20), float64(peak)/(1<<20))
	}
	var res snaprestore.Result
	var took time.Duration
	peak := peakHeap(func() {
		start := time.Now()
		var err error
		res, err = snaprestore.Restore(context.Background(), snaprestore.Config{File: filepath.Join(dir, "etcd.snapshot"), Store: rootview.StoreConfig(t, sharedZK, freshRoot(t))})
		if err != nil {
			t.Fatal(err)
		}
		took = time.Since(start)
	})
	t.Logf("zketcd snapshot restore of etcd's file: %d keys, %d versions in %v (%.1f MiB base generation), peak live heap +%.1f MiB",
		res.Keys, res.Versions, took.Round(time.Millisecond), float64(res.Base.Size)/(1<<20), float64(peak)/(1<<20))
}

func fill(t *testing.T, c *clientv3.Client, n int, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const perTxn, workers = 100, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for base := w * perTxn; base < n; base += workers * perTxn {
				var ops []clientv3.Op
				for i := base; i < min(base+perTxn, n); i++ {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/measure/%08d", i), value))
				}
				if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// peakHeap runs f and returns the peak HeapInuse above the value before it,
// sampled every 5 ms. The garbage collector runs at GOGC=5 meanwhile, so
// the peak is close to the live heap f adds (at the default GOGC, a large
// baseline heap lets garbage grow by as much before a collection).
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	return peak - base
}
