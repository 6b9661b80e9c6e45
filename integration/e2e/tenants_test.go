package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// tenantScenarios are the kubelab scenarios each tenant's kube-apiserver
// passes, all three tenants at once: the ones whose outcome depends on the
// tenant being a cluster of its own (resourceVersion = its own revision,
// its own watches, history, pagination and lease expiry). The store-wide
// scenarios of TestKubeAPIServer (etcd side by side, the ZooKeeper leader
// killed, the seed failure) are not about tenants and run there; the
// restarts and the compaction run below, across the tenants.
var tenantScenarios = []string{"crud", "watch", "list-exact", "pagination", "events-ttl"}

// TestKubeAPIServersOnTenants runs three kube-apiservers at once, each on
// its own tenant of one fleet (two `zketcd serve --tenants` instances on
// one ZooKeeper, every apiserver given both, each with its tenant's client
// certificate as docs/operations.md says) with kube-apiserver's default
// compaction (--etcd-compaction-interval is not set to 0, as Kamaji must on
// a shared etcd). Each tenant passes tenantScenarios; each tenant's first
// object's resourceVersion is near its own small revision; one tenant's
// churn leaves the others' revisions where their own writes put them; an
// instance restarted under all three is survived by each; two tenants'
// apiservers restarted onto a 5 s compaction interval compact their own
// history while the third's stays whole. Needs $KUBE_APISERVER (make e2e).
func TestKubeAPIServersOnTenants(t *testing.T) {
	bin := kubeAPIServerOrSkip(t)
	lab := newLab(t, bin)
	ctx := t.Context()
	began := time.Now()

	zk, err := lab.ZooKeeper(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := lab.StartFleet(ctx, []string{zk.Addr()}, "/fleet", 2)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"team-a", "team-b", "team-c"}
	tenants := make([]*kubelab.Tenant, len(names))
	for i, n := range names {
		if tenants[i], err = fleet.CreateTenant(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("ZooKeeper %s; fleet %s on root %s; tenants %v created with zketcd tenant create (%s)",
		zk.Addr(), fleet.EtcdServers(), fleet.Root, names, time.Since(began).Round(time.Millisecond))
	checkStrangersRefused(t, lab, fleet)

	// The three kube-apiservers, started together.
	xs := make([]*kubelab.Experiment, len(tenants))
	var wg sync.WaitGroup
	errs := make([]error, len(tenants))
	for i, tn := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = func() error {
				kv, err := tn.Client()
				if err != nil {
					return err
				}
				a, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: tn.Name, EtcdServers: fleet.EtcdServers(),
					Extra: kubelab.ExtraEventTTL, EtcdCertFile: tn.Cert, EtcdKeyFile: tn.Key})
				if err != nil {
					return err
				}
				d, err := a.WaitReady(ctx, 3*time.Minute)
				if err != nil {
					return err
				}
				t.Logf("kube-apiserver of %s (--etcd-certfile CN=%s, --etcd-servers=%s): /readyz 200 after %s",
					tn.Name, tn.Name, fleet.EtcdServers(), d.Round(time.Millisecond))
				x := kubelab.NewExperiment(lab)
				x.ZK, x.Zketcd, x.Root, x.KV, x.API = zk, fleet.Instances[0], tn.Root, kv, a
				xs[i] = x
				return nil
			}()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("three kube-apiservers ready %s after the start", time.Since(began).Round(time.Millisecond))
	logLeaders(t, fleet, names)

	t.Run("first-object-at-own-revision", func(t *testing.T) {
		var cluster []uint64
		for i, x := range xs {
			before, err := x.KV.Get(ctx, "/kubelab-probe")
			if err != nil {
				t.Fatal(err)
			}
			ns, err := x.API.Create(ctx, "/api/v1/namespaces", kubelab.Namespace("first-"+names[i]))
			if err != nil {
				t.Fatal(err)
			}
			r0 := before.Header.Revision
			t.Logf("%s: revision %d just before its first namespace, created at resourceVersion %d (cluster ID %x)",
				names[i], r0, ns.RV(), before.Header.ClusterId)
			// Only the tenant's own kube-apiserver writes between the
			// two: a shared counter would put it past the other
			// tenants' hundreds of bootstrap writes.
			if ns.RV() <= r0 || ns.RV() > r0+30 {
				t.Errorf("%s: first namespace at resourceVersion %d, its own revision was %d just before", names[i], ns.RV(), r0)
			}
			cluster = append(cluster, before.Header.ClusterId)
		}
		if cluster[0] == cluster[1] || cluster[1] == cluster[2] || cluster[0] == cluster[2] {
			t.Errorf("tenants share a cluster ID: %x", cluster)
		}
	})

	t.Run("scenarios", func(t *testing.T) {
		for i, x := range xs {
			t.Run(names[i], func(t *testing.T) {
				t.Parallel()
				for _, name := range tenantScenarios {
					s := kubelabStep(t, name)
					start := time.Now()
					if err := s.Run(ctx, x, func(format string, args ...any) { t.Logf(name+": "+format, args...) }); err != nil {
						t.Fatalf("%s on %s: %s: %v", name, names[i], s.Title, err)
					}
					t.Logf("%s: ok in %s", name, time.Since(start).Round(time.Millisecond))
				}
			})
		}
	})
	if t.Failed() {
		return
	}

	t.Run("churn-does-not-move-neighbours", func(t *testing.T) {
		checkChurnIndependence(t, ctx, xs, names)
	})

	t.Run("restart-an-instance", func(t *testing.T) {
		// The restart scenario on team-a (its watch, its first write, its
		// /readyz), then every other tenant writes and is ready.
		s := kubelabStep(t, "restart-zketcd")
		if err := s.Run(ctx, xs[0], func(format string, args ...any) { t.Logf(format, args...) }); err != nil {
			t.Fatalf("%s: %v", s.Title, err)
		}
		for i, x := range xs[1:] {
			path := "/api/v1/namespaces/" + x.NS + "/configmaps"
			if _, err := x.API.WaitReady(ctx, time.Minute); err != nil {
				t.Fatalf("%s after the restart: %v", names[i+1], err)
			}
			err := waitCreate(ctx, x.API, path, "after-instance-restart")
			if err != nil {
				t.Fatalf("%s after the restart: %v", names[i+1], err)
			}
			t.Logf("%s: /readyz 200 and a create after %s restarted", names[i+1], fleet.Instances[0].Name)
		}
		logLeaders(t, fleet, names)
	})

	t.Run("own-compaction", func(t *testing.T) {
		checkOwnCompaction(t, ctx, xs, names)
	})
	t.Logf("all done in %s", time.Since(began).Round(time.Second))
}

// kubelabStep returns kubelab's scenario name.
func kubelabStep(t *testing.T, name string) kubelab.Step {
	t.Helper()
	for _, s := range kubelab.Steps() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no kubelab scenario %q", name)
	return kubelab.Step{}
}

// checkStrangersRefused: a certificate whose CN names no tenant is
// answered etcd's permission error by every instance.
func checkStrangersRefused(t *testing.T, lab *kubelab.Lab, fleet *kubelab.Fleet) {
	t.Helper()
	sec, err := lab.Security()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := sec.IssueClient("nobody")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sec.ClientTLS(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range fleet.Instances {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{z.Addr}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		gctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err = c.Get(gctx, "/registry/", clientv3.WithPrefix())
		cancel()
		c.Close()
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("%s: a certificate with CN=nobody got %v, want %v", z.Name, err, rpctypes.ErrPermissionDenied)
		}
	}
}

// logLeaders logs which instance leads each tenant (its
// etcd_server_is_leader series).
func logLeaders(t *testing.T, fleet *kubelab.Fleet, names []string) {
	t.Helper()
	var parts []string
	for _, n := range names {
		var on []string
		for _, z := range fleet.Instances {
			v, err := z.Metric(t.Context(), "etcd_server_is_leader", `tenant="`+n+`"`)
			if err == nil && v == 1 {
				on = append(on, z.Name)
			}
		}
		parts = append(parts, fmt.Sprintf("%s on %s", n, strings.Join(on, "+")))
	}
	t.Logf("leaders: %s", strings.Join(parts, ", "))
}

// waitCreate creates config map name in path, retrying for up to a
// minute (an earlier attempt that went through counts).
func waitCreate(ctx context.Context, a *kubelab.APIServer, path, name string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := a.Create(ctx, path, kubelab.ConfigMap(name, map[string]string{"v": "0"}))
		if err == nil || kubelab.HTTPCode(err) == 409 {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkChurnIndependence: team-a writes churnWrites config maps through
// its kube-apiserver; the other tenants' revisions move only by their own
// apiservers' background writes (well under churnWrites), and none of
// a's keys appears in their histories.
func checkChurnIndependence(t *testing.T, ctx context.Context, xs []*kubelab.Experiment, names []string) {
	const churnWrites = 150
	revs := func() []int64 {
		out := make([]int64, len(xs))
		for i, x := range xs {
			r, err := x.KV.Get(ctx, "/kubelab-probe")
			if err != nil {
				t.Fatal(err)
			}
			out[i] = r.Header.Revision
		}
		return out
	}
	a := xs[0].API
	if _, err := a.Create(ctx, "/api/v1/namespaces", kubelab.Namespace("e2e-churn")); err != nil {
		t.Fatal(err)
	}
	before := revs()
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < churnWrites; i += 8 {
				if _, err := a.Create(ctx, "/api/v1/namespaces/e2e-churn/configmaps", kubelab.ConfigMap(fmt.Sprintf("churn-%03d", i), map[string]string{"v": "0"})); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	after := revs()
	took := time.Since(start)
	t.Logf("%s created %d config maps in %s: its revision %d -> %d", names[0], churnWrites, took.Round(time.Millisecond), before[0], after[0])
	if after[0]-before[0] < churnWrites {
		t.Errorf("%s's revision moved by %d for %d creates", names[0], after[0]-before[0], churnWrites)
	}
	for i := 1; i < len(xs); i++ {
		moved := after[i] - before[i]
		// What moved it: the tenant's own history over the same time.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var keys []string
		if moved > 0 {
			for wr := range xs[i].KV.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(before[i]+1)) {
				if err := wr.Err(); err != nil {
					t.Fatal(err)
				}
				for _, ev := range wr.Events {
					if ev.Kv.ModRevision <= after[i] {
						keys = append(keys, string(ev.Kv.Key))
					}
				}
				if wr.Header.Revision >= after[i] && len(wr.Events) > 0 && wr.Events[len(wr.Events)-1].Kv.ModRevision >= after[i] {
					break
				}
			}
		}
		cancel()
		t.Logf("%s: revision %d -> %d over the same %s (its own apiserver's writes: %s)", names[i], before[i], after[i],
			took.Round(time.Millisecond), summarizeKeys(keys))
		if moved >= churnWrites/3 {
			t.Errorf("%s's revision moved by %d while %s made %d writes", names[i], moved, names[0], churnWrites)
		}
		for _, k := range keys {
			if strings.Contains(k, "e2e-churn") {
				t.Errorf("%s's history holds %s, a key of %s", names[i], k, names[0])
			}
		}
	}
}

// summarizeKeys counts keys by their first two path segments.
func summarizeKeys(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	count := map[string]int{}
	var order []string
	for _, k := range keys {
		parts := strings.SplitN(strings.TrimPrefix(k, "/"), "/", 4)
		p := "/" + strings.Join(parts[:min(len(parts), 2)], "/")
		if count[p] == 0 {
			order = append(order, p)
		}
		count[p]++
	}
	out := make([]string, len(order))
	for i, p := range order {
		out[i] = fmt.Sprintf("%d under %s", count[p], p)
	}
	return strings.Join(out, ", ")
}

// checkOwnCompaction restarts the first two tenants' kube-apiservers with
// --etcd-compaction-interval=5s (the restart scenario: the same objects at
// the same resourceVersions afterwards) and waits until each has compacted
// its own history past a revision it had before; the third tenant's
// apiserver keeps the default interval (5 min: its first compaction comes
// at twice that, after this test), and its history stays whole from
// revision 2. On a shared etcd the first compaction would have compacted
// everyone's.
func checkOwnCompaction(t *testing.T, ctx context.Context, xs []*kubelab.Experiment, names []string) {
	compacting := xs[:2]
	old := make([]int64, len(xs))
	for i, x := range xs {
		r, err := x.KV.Get(ctx, "/kubelab-probe")
		if err != nil {
			t.Fatal(err)
		}
		old[i] = r.Header.Revision
	}
	restart := kubelabStep(t, "restart-apiserver")
	for i, x := range compacting {
		x.API.Args = append(x.API.Args, "--etcd-compaction-interval=5s")
		if err := restart.Run(ctx, x, func(format string, args ...any) { t.Logf(names[i]+": "+format, args...) }); err != nil {
			t.Fatalf("%s: %s: %v", names[i], restart.Title, err)
		}
	}
	start := time.Now()
	for i, x := range compacting {
		deadline := time.Now().Add(90 * time.Second)
		for {
			_, err := x.KV.Get(ctx, "/registry/namespaces/default", clientv3.WithRev(old[i]))
			if errors.Is(err, rpctypes.ErrCompacted) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no compaction past revision %d after 90 s with --etcd-compaction-interval=5s (last: %v)", names[i], old[i], err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		ck, err := x.KV.Get(ctx, "compact_rev_key")
		if err != nil {
			t.Fatal(err)
		}
		head, err := x.KV.Get(ctx, "/kubelab-probe")
		if err != nil {
			t.Fatal(err)
		}
		desc := "absent"
		if len(ck.Kvs) == 1 {
			desc = fmt.Sprintf("%s (version %d)", ck.Kvs[0].Value, ck.Kvs[0].Version)
		}
		t.Logf("%s: its history compacted past revision %d %s after the restarts; its compact_rev_key %s, its revision %d",
			names[i], old[i], time.Since(start).Round(time.Millisecond), desc, head.Header.Revision)
	}
	c := xs[2]
	r, err := c.KV.Get(ctx, "/registry/namespaces/default", clientv3.WithRev(2))
	if err != nil {
		t.Fatalf("%s (default compaction interval): read at revision 2: %v; another tenant's compaction reached it", names[2], err)
	}
	ck, err := c.KV.Get(ctx, "compact_rev_key")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (default interval): reads at revision 2 still served (header revision %d); compact_rev_key holds %d keys",
		names[2], r.Header.Revision, len(ck.Kvs))
}
