package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// mountTmpfs mounts a tmpfs of size (e.g. "30m") on a new directory and
// unmounts it at cleanup; it skips the test where mounting is not allowed
// (not root, or no mount privilege in the container).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestZooKeeperDiskFullStopsWritesKeepsSerializableReadsAndLosesNoAcknowledgedPut
// fills ZooKeeper's disk (a 30 MB tmpfs holding its data directory) with
// 64 KiB puts: ZooKeeper stops (its SyncThread exits on "No space left on
// device"), the instance turns unavailable while serializable reads keep
// answering from its view, and once ZooKeeper restarts with room, every
// acknowledged put is there, on the running instance and on a restarted one.
func TestZooKeeperDiskFullStopsWritesKeepsSerializableReadsAndLosesNoAcknowledgedPut(t *testing.T) {
	dir := mountTmpfs(t, "30m")
	opts := zkservertest.Options(t)
	opts.Dir = filepath.Join(dir, "zk")
	srv := zkservertest.StandaloneWith(t, opts)
	in := embedtest.Start(t, []string{srv.Addr()}, embedtest.Options{SessionTimeout: 4 * time.Second})
	c := in.Client(t)

	// Incompressible: the root compresses log entries.
	raw := make([]byte, 64<<10)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	value := string(raw)
	start := time.Now()
	acked, failures := putUntilRefused(t, c, value)
	failedAt := time.Since(start)
	t.Logf("%d puts of 64 KiB acknowledged before the first failure (%v in)", len(acked), failedAt.Round(time.Millisecond))
	if len(acked) < 50 {
		t.Fatalf("only %d puts before failing", len(acked))
	}

	// Unavailable: health fails, a linearizable read fails, a serializable
	// read answers from the view.
	failed := time.Now()
	testutil.Eventually(t, 30*time.Second, "unhealthy after ZooKeeper's disk filled", func() bool { return in.Engine().Health() != nil })
	t.Logf("unhealthy %v after the first failed put: %v", time.Since(failed).Round(time.Millisecond), in.Engine().Health())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := c.Get(ctx, "big/0/00000")
	cancel()
	if err == nil {
		t.Error("a linearizable read succeeded with ZooKeeper's disk full")
	}
	var anyKey string
	for k := range acked {
		anyKey = k
		break
	}
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	get, err := c.Get(ctx, anyKey, clientv3.WithSerializable())
	cancel()
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != value {
		t.Fatalf("serializable read with ZooKeeper's disk full: %v %v", get, err)
	}
	if log, err := os.ReadFile(srv.LogPath()); err == nil && !strings.Contains(string(log), "No space left on device") {
		t.Logf("ZooKeeper's log does not mention \"No space left on device\"")
	}

	// Room again: ZooKeeper restarts; every acknowledged put is there.
	_ = srv.Stop()
	if out, err := exec.Command("mount", "-o", "remount,size=512m", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer scancel()
	if err := srv.Start(sctx); err != nil {
		t.Fatal(err)
	}
	check := func(who string, c *clientv3.Client) {
		t.Helper()
		var resp *clientv3.GetResponse
		testutil.Eventually(t, 60*time.Second, who+": a read after ZooKeeper restarted with room", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			resp, err = c.Get(ctx, "big/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			return err == nil
		})
		have := map[string]int64{}
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = kv.ModRevision
		}
		for k, rev := range acked {
			if have[k] != rev {
				t.Errorf("%s: acknowledged put %s (revision %d) is %d after the restart", who, k, rev, have[k])
			}
		}
		t.Logf("%s: %d keys present (%d acknowledged, %d failed puts that may or may not have landed)", who, len(have), len(acked), failures)
	}
	check("running instance", c)
	in.Restart()
	check("restarted instance", in.Client(t))
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := in.Client(t).Put(ctx, "after", "room"); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put after the restart: %v", err)
	}
}

// putUntilRefused puts value under new keys from 4 writers until a put
// fails (at most 3 minutes), and returns the revision of each
// acknowledged put by key and how many failed.
func putUntilRefused(t *testing.T, c *clientv3.Client, value string) (map[string]int64, int) {
	var mu sync.Mutex
	acked := map[string]int64{} // key -> revision of its acknowledged put
	failures := 0
	start := time.Now()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var once sync.Once
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("big/%d/%05d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.Put(ctx, key, value)
				cancel()
				mu.Lock()
				if err == nil {
					acked[key] = resp.Header.Revision
				} else {
					failures++
				}
				mu.Unlock()
				if err != nil {
					once.Do(func() { close(stop) })
					return
				}
				if time.Since(start) > 3*time.Minute {
					mu.Lock()
					n := len(acked)
					mu.Unlock()
					t.Errorf("the 30 MB disk is not full after %d puts", n)
					once.Do(func() { close(stop) })
					return
				}
			}
		}()
	}
	wg.Wait()
	return acked, failures
}
