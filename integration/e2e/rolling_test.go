package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zketcd/zketcd/integration/kubelab"
	"github.com/zketcd/zketcd/internal/zkserver"
)

// TestKubeAPIServerStaysReadyThroughAConnectStringChange runs two zketcd
// instances on a 3-member ensemble and kube-apiserver on both
// (--etcd-servers with the two), creates config maps all along, and
// restarts the instances one by one onto another member list (two of the
// three), each after the previous is healthy, then back onto all three.
// /readyz answers 200 throughout and every acknowledged object is there.
func TestKubeAPIServerStaysReadyThroughAConnectStringChange(t *testing.T) {
	api, ens, zs, probe := startKubeOnEnsemble(t, 2)
	ctx := t.Context()
	time.Sleep(5 * time.Second)
	for _, zk := range [][]string{ens.Addrs()[1:], ens.Addrs()} {
		for _, z := range zs {
			_, down, err := z.RestartOnto(ctx, zk)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("zketcd %s restarted onto --zk %s: healthy again after %s", z.Name, strings.Join(zk, ","), down.Round(time.Millisecond))
			time.Sleep(3 * time.Second)
		}
	}
	time.Sleep(5 * time.Second)
	probe.finish(t, api)
}

// TestKubeAPIServerStaysReadyThroughARollingRestart runs kube-apiserver on
// zketcd on a 3-member ensemble, creates config maps all along, and
// restarts the ZooKeeper members one at a time (followers first, the
// leader last; SIGTERM, start on the old data, then a quorum with every
// member serving and the leader's mntr counting both followers synced
// before the next). /readyz, probed every 200 ms, answers 200 throughout
// but for probes sent between the leader's stop and the election of the
// next (ZooKeeper serves no quorum operation then; reported apart), and
// every acknowledged object is there afterwards. Needs $KUBE_APISERVER
// (make e2e); $ZKETCD_BINARY as TestKubeAPIServer.
func TestKubeAPIServerStaysReadyThroughARollingRestart(t *testing.T) {
	api, ens, _, probe := startKubeOnEnsemble(t, 1)
	time.Sleep(5 * time.Second)
	rctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	leader := -1
	var err error
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
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		if i == leader {
			// Until another member leads, ZooKeeper serves no quorum
			// operation: kube-apiserver's etcd check (a linearizable Get,
			// 2 s) may fail then, as etcd's does while it has no leader.
			for {
				if li, err := ens.Leader(rctx); err == nil && li != i {
					break
				}
				if rctx.Err() != nil {
					t.Fatal("no new ZooKeeper leader after stopping the leader")
				}
				time.Sleep(50 * time.Millisecond)
			}
			probe.excuse(began, time.Now())
			t.Logf("ZooKeeper elected a new leader %s after the leader stopped", time.Since(began).Round(time.Millisecond))
		}
		if err := m.Start(rctx); err != nil {
			t.Fatal(err)
		}
		if err := ens.WaitQuorum(rctx); err != nil {
			t.Fatal(err)
		}
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
		t.Logf("ZooKeeper member %d restarted (now %s), quorum and synced followers after %s", i+1, modeOf(rctx, m), time.Since(began).Round(time.Millisecond))
		time.Sleep(3 * time.Second)
	}
	time.Sleep(5 * time.Second)
	probe.finish(t, api)
}

// startKubeOnEnsemble starts a 3-member ensemble, n zketcd instances on it
// and kube-apiserver on all of them, and starts a writer (config maps,
// creates retried until acknowledged; 409 means an earlier attempt was) and
// a /readyz probe (every 200 ms). It skips the test without
// $KUBE_APISERVER.
func startKubeOnEnsemble(t *testing.T, n int) (*kubelab.APIServer, *zkserver.Ensemble, []*kubelab.Zketcd, *writerProbe) {
	bin := kubeAPIServerOrSkip(t)
	ctx := t.Context()
	lab := newLab(t, bin)
	must := fatalOn(t)
	ens, err := lab.Ensemble(ctx, 3)
	must(err)
	var zs []*kubelab.Zketcd
	var urls []string
	for i := range n {
		z, err := lab.StartZketcd(ctx, fmt.Sprintf("z%d", i+1), ens.Addrs(), kubelab.ZketcdRoot)
		must(err)
		zs = append(zs, z)
		urls = append(urls, z.URL())
	}
	api, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: "ops", EtcdServers: strings.Join(urls, ",")})
	must(err)
	_, err = api.WaitReady(ctx, 3*time.Minute)
	must(err)
	const ns = "ops"
	_, err = api.Create(ctx, "/api/v1/namespaces", kubelab.Namespace(ns))
	must(err)
	p := &writerProbe{path: "/api/v1/namespaces/" + ns + "/configmaps", acked: map[string]bool{}, stop: make(chan struct{})}
	p.wg.Go(func() {
		for i := 0; ; i++ {
			name := fmt.Sprintf("cm-%05d", i)
			for {
				select {
				case <-p.stop:
					return
				default:
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := api.Create(rctx, p.path, kubelab.ConfigMap(name, map[string]string{"i": strconv.Itoa(i)}))
				cancel()
				if err == nil || kubelab.HTTPCode(err) == 409 {
					p.mu.Lock()
					p.acked[name] = true
					p.mu.Unlock()
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	p.wg.Go(func() {
		for {
			// Longer than kube-apiserver's own readiness check of etcd
			// (--etcd-readycheck-timeout, 2 s): the verdict is
			// kube-apiserver's (a failed check answers 500), not this
			// client's deadline racing it on a loaded host.
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			sent := time.Now()
			st, body, err := api.Do(rctx, "GET", "/readyz?verbose", nil, "")
			cancel()
			p.mu.Lock()
			p.probes++
			if err != nil || st != 200 {
				p.bad = append(p.bad, badProbe{sent: sent, what: fmt.Sprintf("HTTP %d, %v: %s", st, err, body)})
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return api, ens, zs, p
}

// writerProbe is the writer and the /readyz probe of startKubeOnEnsemble.
type writerProbe struct {
	path string
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	acked   map[string]bool
	probes  int
	bad     []badProbe
	excused [][2]time.Time // ZooKeeper without a leader (excuse)
}

// badProbe is a /readyz probe that did not answer 200.
type badProbe struct {
	sent time.Time
	what string
}

// excuse records a window in which ZooKeeper had no leader: a probe sent
// in it may fail (finish reports it apart).
func (p *writerProbe) excuse(from, to time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.excused = append(p.excused, [2]time.Time{from, to})
}

// finish stops the writer and the probe and checks that every acknowledged
// object is listed and that /readyz never failed.
func (p *writerProbe) finish(t *testing.T, api *kubelab.APIServer) {
	close(p.stop)
	p.wg.Wait()
	list, err := api.List(t.Context(), p.path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, it := range list.Items {
		got[it.Metadata.Name] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.acked {
		if !got[name] {
			t.Errorf("%s was acknowledged but is not listed", name)
		}
	}
	var notReady []badProbe
	excused := 0
	for _, b := range p.bad {
		if slices.ContainsFunc(p.excused, func(w [2]time.Time) bool { return !b.sent.Before(w[0]) && !b.sent.After(w[1]) }) {
			excused++
			continue
		}
		notReady = append(notReady, b)
	}
	t.Logf("%d config maps acknowledged, %d listed at resourceVersion %s; /readyz not ok on %d of %d probes (and on %d sent while ZooKeeper had no leader)",
		len(p.acked), len(got), list.Metadata.ResourceVersion, len(notReady), p.probes, excused)
	if len(notReady) > 0 {
		t.Errorf("kube-apiserver was not ready on %d of %d probes; first: %s", len(notReady), p.probes, notReady[0].what)
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
