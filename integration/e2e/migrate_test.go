package e2e

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/integration/kubelab"
)

// TestKubeAPIServerMovesBetweenEtcdAndZketcd moves a kube-apiserver's data
// from etcd 3.7.3 to zketcd with `etcdctl`'s snapshot (saved through the
// same Maintenance.Snapshot call) and `zketcd snapshot restore`, and back
// with zketcd's snapshot and `etcdutl snapshot restore`: after each move
// kube-apiserver lists every object with its resourceVersion unchanged, a
// WATCH from a resourceVersion taken before the move delivers the changes
// made after it (no 410 Gone, no relist), and writes continue with higher
// resourceVersions. It needs $KUBE_APISERVER (make e2e) and etcdutl
// ($ETCDUTL or build-peers.sh's cache); $ZKETCD_BINARY as TestKubeAPIServer.
func TestKubeAPIServerMovesBetweenEtcdAndZketcd(t *testing.T) {
	bin := kubeAPIServerOrSkip(t)
	utl := os.Getenv("ETCDUTL")
	if utl == "" {
		home, _ := os.UserHomeDir()
		utl = filepath.Join(home, ".cache", "zketcd", "etcd-v3.7.3", "etcdutl")
	}
	if _, err := os.Stat(utl); err != nil {
		t.Skip("etcdutl v3.7.3 not found: integration/bench/build-peers.sh etcdutl")
	}
	ctx := t.Context()
	lab := newLab(t, bin)
	must := fatalOn(t)
	startAPI := func(name, etcdURL string, extra ...string) *kubelab.APIServer {
		t.Helper()
		a, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: name, EtcdServers: etcdURL, Extra: extra})
		must(err)
		took, err := a.WaitReady(ctx, 3*time.Minute)
		must(err)
		t.Logf("kube-apiserver %s ready in %v", name, took.Round(time.Millisecond))
		return a
	}
	const ns = "migrate"
	cmPath := "/api/v1/namespaces/" + ns + "/configmaps"

	// On etcd: objects, a resourceVersion to resume from, changes after it.
	etcd, err := lab.StartEtcd(ctx)
	must(err)
	api := startAPI("on-etcd", etcd.URL())
	_, err = api.Create(ctx, "/api/v1/namespaces", kubelab.Namespace(ns))
	must(err)
	for i := 0; i < 10; i++ {
		_, err := api.Create(ctx, cmPath, kubelab.ConfigMap(fmt.Sprintf("cm-%d", i), map[string]string{"i": fmt.Sprint(i)}))
		must(err)
	}
	resumeFrom, err := api.List(ctx, cmPath)
	must(err)
	var wantEvents []string
	var lastRV int64
	for i := 0; i < 3; i++ {
		o, err := api.MergePatch(ctx, fmt.Sprintf("%s/cm-%d", cmPath, i), map[string]any{"data": map[string]string{"moved": "no"}})
		must(err)
		wantEvents = append(wantEvents, fmt.Sprintf("MODIFIED cm-%d rv=%s", i, o.Metadata.ResourceVersion))
		lastRV = o.RV()
	}
	_, err = api.Delete(ctx, cmPath+"/cm-9")
	must(err)
	wantEvents = append(wantEvents, "DELETED cm-9")
	onEtcd := listing(t, ctx, api, cmPath)
	api.Stop()
	// The control for the watch below: kube-apiserver restarted on the same
	// etcd, with its watch cache, answers a watch from before its restart
	// with 410 Gone.
	api = startAPI("on-etcd-restarted", etcd.URL())
	if w, err := api.Watch(ctx, cmPath+"?resourceVersion="+resumeFrom.Metadata.ResourceVersion); err != nil {
		t.Logf("watch from %s after a restart on etcd: %v", resumeFrom.Metadata.ResourceVersion, err)
	} else {
		ev, _, _ := w.Next(20 * time.Second)
		w.Close()
		t.Logf("watch from %s after a restart on etcd (watch cache on): %v", resumeFrom.Metadata.ResourceVersion, ev)
		if ev.Type != "ERROR" || ev.Status.Code != 410 {
			t.Errorf("kube-apiserver restarted on etcd resumed a watch from before its restart (%v): test zketcd with the watch cache too", ev)
		}
	}
	api.Stop()

	file := filepath.Join(lab.Dir, "etcd.snapshot")
	ec, err := etcd.Client()
	must(err)
	saveSnapshot(t, ctx, ec, file)
	etcd.Stop()

	// etcd → zketcd.
	zk, err := lab.ZooKeeper(ctx)
	must(err)
	sec, err := lab.Security()
	must(err)
	out, err := exec.CommandContext(ctx, lab.Zketcd, "snapshot", "restore", file, "--zk", zk.Addr(), "--zk-root", "/moved",
		"--zk-auth-file", sec.ZKAuthFile, "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("zketcd snapshot restore: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
	z, err := lab.StartZketcd(ctx, "moved", []string{zk.Addr()}, "/moved")
	must(err)
	// Without its watch cache: a kube-apiserver that (re)starts serves
	// watches from its cache, which begins at the revision it started at
	// and answers an older resourceVersion with 410 Gone on etcd as well;
	// without it the watch goes to the store, which resumes it.
	api = startAPI("on-zketcd", z.URL(), "--watch-cache=false")
	if got := listing(t, ctx, api, cmPath); got != onEtcd {
		t.Errorf("objects on zketcd differ from etcd:\n zketcd: %s\n etcd:   %s", got, onEtcd)
	}
	w, err := api.Watch(ctx, cmPath+"?resourceVersion="+resumeFrom.Metadata.ResourceVersion)
	must(err)
	var gotEvents []string
	for len(gotEvents) < len(wantEvents) {
		ev, ok, _ := w.Next(20 * time.Second)
		if !ok {
			break
		}
		e := ev.String()
		if ev.Type == "DELETED" {
			e = strings.SplitN(e, " rv=", 2)[0]
		}
		gotEvents = append(gotEvents, e)
	}
	w.Close()
	if strings.Join(gotEvents, "; ") != strings.Join(wantEvents, "; ") {
		t.Errorf("watch from resourceVersion %s on zketcd: %v, want %v", resumeFrom.Metadata.ResourceVersion, gotEvents, wantEvents)
	} else {
		t.Logf("watch from resourceVersion %s (taken on etcd) resumed on zketcd: %v", resumeFrom.Metadata.ResourceVersion, gotEvents)
	}
	created, err := api.Create(ctx, cmPath, kubelab.ConfigMap("after-move", map[string]string{"on": "zketcd"}))
	must(err)
	if created.RV() <= lastRV {
		t.Errorf("a write on zketcd got resourceVersion %s, not above etcd's %d", created.Metadata.ResourceVersion, lastRV)
	}
	onZketcd := listing(t, ctx, api, cmPath)
	api.Stop()

	// zketcd → etcd.
	back := filepath.Join(lab.Dir, "zketcd.snapshot")
	zc, err := z.Client()
	must(err)
	saveSnapshot(t, ctx, zc, back)
	z.Stop()
	restored := filepath.Join(lab.Dir, "restored.etcd")
	const peer = "http://127.0.0.1:2380"
	if out, err := exec.CommandContext(ctx, utl, "snapshot", "restore", back, "--data-dir", restored, "--name", "back",
		"--initial-cluster", "back="+peer, "--initial-advertise-peer-urls", peer).CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	etcd2 := etcdoracle.Start(t, etcdoracle.WithConfig(func(c *embed.Config) {
		c.Dir, c.Name, c.InitialCluster = restored, "back", "back="+peer
		u, _ := url.Parse(peer)
		c.AdvertisePeerUrls = []url.URL{*u}
	}))
	api = startAPI("back-on-etcd", "http://"+etcd2.Endpoint())
	if got := listing(t, ctx, api, cmPath); got != onZketcd {
		t.Errorf("objects back on etcd differ from zketcd:\n etcd:   %s\n zketcd: %s", got, onZketcd)
	}
	t.Logf("objects with their resourceVersions, on etcd, zketcd and etcd again: %s", onZketcd)
}

// listing is "name@resourceVersion ..." of every object at path, sorted.
func listing(t *testing.T, ctx context.Context, a *kubelab.APIServer, path string) string {
	t.Helper()
	l, err := a.List(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range l.Items {
		out = append(out, o.Metadata.Name+"@"+o.Metadata.ResourceVersion)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// saveSnapshot streams Maintenance.Snapshot to path (what `etcdctl
// snapshot save` does).
func saveSnapshot(t *testing.T, ctx context.Context, c *clientv3.Client, path string) {
	t.Helper()
	rc, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
}
