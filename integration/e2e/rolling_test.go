package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/zketcd/zketcd/integration/kubelab"
	"github.com/zketcd/zketcd/internal/zkserver"
)

// TestKubeAPIServerStaysReadyThroughARollingRestart runs kube-apiserver on
// zketcd on a 3-member ensemble, creates config maps all along, and
// restarts the ZooKeeper members one at a time (followers first, the
// leader last; SIGTERM, start on the old data, then a quorum with every
// member serving and the leader's mntr counting both followers synced
// before the next). /readyz, probed every 200 ms, answers 200 throughout,
// and every acknowledged object is there afterwards. Needs $KUBE_APISERVER
// (make e2e); $ZKETCD_BINARY as TestKubeAPIServer.
func TestKubeAPIServerStaysReadyThroughARollingRestart(t *testing.T) {
	bin := os.Getenv("KUBE_APISERVER")
	if bin == "" {
		t.Skip("KUBE_APISERVER is not set; run `make e2e`")
	}
	ctx := t.Context()
	dir := t.TempDir()
	zketcd := os.Getenv("ZKETCD_BINARY")
	if zketcd == "" {
		var err error
		if zketcd, err = kubelab.BuildZketcd(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	lab, err := kubelab.New(dir, bin, zketcd, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ens, err := lab.Ensemble(ctx, 3)
	must(err)
	z, err := lab.StartZketcd(ctx, "rolling", ens.Addrs(), kubelab.ZketcdRoot)
	must(err)
	api, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: "rolling", EtcdServers: z.URL()})
	must(err)
	_, err = api.WaitReady(ctx, 3*time.Minute)
	must(err)
	const ns = "rolling"
	_, err = api.Create(ctx, "/api/v1/namespaces", kubelab.Namespace(ns))
	must(err)
	path := "/api/v1/namespaces/" + ns + "/configmaps"

	// A writer (creates retried until acknowledged; 409 means an earlier
	// attempt was) and the /readyz probe.
	var mu sync.Mutex
	acked := map[string]bool{}
	var probes, notReady int
	var firstBad string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			name := fmt.Sprintf("cm-%05d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := api.Create(rctx, path, kubelab.ConfigMap(name, map[string]string{"i": strconv.Itoa(i)}))
				cancel()
				if err == nil || kubelab.HTTPCode(err) == 409 {
					mu.Lock()
					acked[name] = true
					mu.Unlock()
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	wg.Go(func() {
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, body, err := api.Do(rctx, "GET", "/readyz?verbose", nil, "")
			cancel()
			mu.Lock()
			probes++
			if err != nil || st != 200 {
				notReady++
				if firstBad == "" {
					firstBad = fmt.Sprintf("HTTP %d, %v: %s", st, err, body)
				}
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	time.Sleep(5 * time.Second)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	leader := -1
	for leader < 0 {
		if leader, err = ens.Leader(rctx); err != nil {
			if rctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	order := []int{}
	for i := range ens.Size() {
		if i != leader {
			order = append(order, i)
		}
	}
	for _, i := range append(order, leader) {
		m := ens.Member(i)
		began := time.Now()
		must(m.Stop())
		must(m.Start(rctx))
		must(ens.WaitQuorum(rctx))
		for {
			li, err := ens.Leader(rctx)
			if err == nil {
				if v, err := ens.Member(li).Monitor(rctx); err == nil && v["zk_synced_followers"] == strconv.Itoa(ens.Size()-1) {
					break
				}
			}
			if rctx.Err() != nil {
				t.Fatalf("followers not synced after restarting member %d", i+1)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("ZooKeeper member %d (%s) restarted, quorum and synced followers after %s", i+1, modeOf(rctx, m), time.Since(began).Round(time.Millisecond))
		time.Sleep(3 * time.Second)
	}
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()

	list, err := api.List(ctx, path)
	must(err)
	got := map[string]bool{}
	for _, it := range list.Items {
		got[it.Metadata.Name] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for name := range acked {
		if !got[name] {
			t.Errorf("%s was acknowledged but is not listed", name)
		}
	}
	t.Logf("%d config maps acknowledged during the rolling restart, %d listed at resourceVersion %s; /readyz not ok on %d of %d probes",
		len(acked), len(got), list.Metadata.ResourceVersion, notReady, probes)
	if notReady > 0 {
		t.Errorf("kube-apiserver was not ready on %d of %d probes; first: %s", notReady, probes, firstBad)
	}
}

// modeOf is the member's srvr mode, for the log.
func modeOf(ctx context.Context, m *zkserver.Server) string {
	mode, err := m.Mode(ctx)
	if err != nil {
		return err.Error()
	}
	return mode
}
