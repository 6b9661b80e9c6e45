package snapshot

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/integration/kubedata"
	"github.com/zketcd/zketcd/internal/mirror"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
)

// TestMeasurePrefixMirror is not a check but a measurement, run on
// request: MIRROR_MEASURE_KEYS=100000 writes that many kube-like objects
// (integration/kubedata) under one prefix of an etcd 3.7.3 and half as
// many under another, then times `zketcd mirror cutover` of the first
// prefix into a fresh root (the initial copy, the follow and the
// cut-over's hashes), logging its progress and the peak live Go heap it
// adds in this process (which also runs the idle source etcd); with
// ZKETCD_BINARY set, it runs that command in a process of its own and
// logs its wall time, peak resident memory and progress lines instead.
func TestMeasurePrefixMirror(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MIRROR_MEASURE_KEYS"))
	if n <= 0 {
		t.Skip("set MIRROR_MEASURE_KEYS to measure")
	}
	src := etcdoracle.Start(t, etcdoracle.WithConfig(func(c *embed.Config) { c.QuotaBackendBytes = 8 << 30 }))
	ec := src.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	lc := pb.NewLeaseClient(ec.ActiveConnection())
	for _, id := range []int64{0x61, 0x62, 0x63} {
		if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 3600}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var bytes int64
	fillKube(t, ctx, ec, prefixA, 1, n, &bytes)
	fillKube(t, ctx, ec, prefixB, 2, n/2, nil)
	t.Logf("source: %d objects (%.1f MiB of values) under %s and %d under %s written in %v",
		n, float64(bytes)/(1<<20), prefixA, n/2, prefixB, time.Since(start).Round(time.Second))

	if bin := os.Getenv("ZKETCD_BINARY"); bin != "" {
		// The command as an operator runs it, in a process of its own:
		// its wall time, its peak resident memory, its progress lines.
		root := freshRoot(t)
		cmd := exec.CommandContext(ctx, bin, "mirror", "cutover", "--on-signal", "--from", "http://"+src.Endpoint(), "--prefix", prefixA,
			"--zk", sharedZK.Addr(t), "--zk-root", root, "--status-interval", "2s")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stdout strings.Builder
		cmd.Stdout = &stdout
		began := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Once caught up, the operator's signal (the writers are idle
		// here): from it to the last line is the cut-over's write pause.
		caught := "behind 0"
		var signalled time.Time
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			t.Logf("| %6.1fs %s", time.Since(began).Seconds(), line)
			if signalled.IsZero() && strings.Contains(line, caught) {
				signalled = time.Now()
				if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("zketcd mirror cutover: %v\n%s", err, stdout.String())
		}
		took := time.Since(began)
		t.Logf("| %s", strings.TrimSpace(stdout.String()))
		maxRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
		t.Logf("MEASURE zketcd mirror cutover --prefix of %d kube-like objects: %v in all, %v from the signal to the cut-over, peak RSS %.1f MiB",
			n, took.Round(time.Millisecond), time.Since(signalled).Round(time.Millisecond), float64(maxRSS)/1024)
		return
	}
	var res mirror.Result
	var took time.Duration
	var statusMu sync.Mutex
	peak := peakHeap(func() {
		began := time.Now()
		var err error
		res, err = mirror.Cutover(ctx, mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Prefix: []byte(prefixA),
			Store: rootview.StoreConfig(t, sharedZK, freshRoot(t)), StatusInterval: 2 * time.Second, Quiet: time.Second},
			func(s mirror.Status) {
				statusMu.Lock()
				defer statusMu.Unlock()
				if s.Initial {
					t.Logf("progress %6.1fs: initial copy: %d keys at revision %d", time.Since(began).Seconds(), s.Copied, s.Rev)
				} else {
					t.Logf("progress %6.1fs: revision %d, source at %d, behind %d, %d leases", time.Since(began).Seconds(), s.Rev, s.SourceRev, s.Behind(), s.Leases)
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		took = time.Since(began)
	})
	t.Logf("MEASURE prefix mirror cutover of %d kube-like objects: %v (at GOGC=5), peak live heap +%.1f MiB; revision %d, hash %08x on both sides, %d keys, %d leases",
		n, took.Round(time.Millisecond), float64(peak)/(1<<20), res.Rev, res.RootHash, res.Keys, res.Leases)
}

// fillKube writes n objects of kubedata seed under prefix, events leased.
func fillKube(t *testing.T, ctx context.Context, c *clientv3.Client, prefix string, seed uint64, n int, total *int64) {
	t.Helper()
	g := kubedata.New(seed)
	const perTxn, workers = 50, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for base := w * perTxn; base < n; base += workers * perTxn {
				var ops []clientv3.Op
				var size int64
				for i := base; i < min(base+perTxn, n); i++ {
					o := g.Object(i)
					size += int64(len(o.Value))
					var opts []clientv3.OpOption
					if o.Kind == "event" {
						opts = append(opts, clientv3.WithLease(clientv3.LeaseID(0x61+int64(i%3))))
					}
					ops = append(ops, clientv3.OpPut(prefix+o.Key[1:], string(o.Value), opts...))
				}
				if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- fmt.Errorf("fill %s: %w", prefix, err)
					return
				}
				if total != nil {
					mu.Lock()
					*total += size
					mu.Unlock()
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
