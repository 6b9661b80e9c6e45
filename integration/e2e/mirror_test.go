package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// TestKubeAPIServerMovesToZketcdThroughTheMirror moves a kube-apiserver
// from etcd 3.7.3 to zketcd with `zketcd mirror` while it writes: the
// mirror copies etcd and follows it; at the cut-over kube-apiserver stops
// (no more writes), the mirror drains and is stopped, and kube-apiserver
// started on zketcd lists every object with its resourceVersion, the whole
// key space has etcd's revisions, and writes continue. Needs
// $KUBE_APISERVER; $ZKETCD_BINARY as TestKubeAPIServer.
func TestKubeAPIServerMovesToZketcdThroughTheMirror(t *testing.T) {
	bin := kubeAPIServerOrSkip(t)
	ctx := t.Context()
	lab := newLab(t, bin)
	must := fatalOn(t)
	const ns = "mirrored"
	cmPath := "/api/v1/namespaces/" + ns + "/configmaps"
	etcd, err := lab.StartEtcd(ctx)
	must(err)
	api, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: "on-etcd", EtcdServers: etcd.URL()})
	must(err)
	_, err = api.WaitReady(ctx, 3*time.Minute)
	must(err)
	_, err = api.Create(ctx, "/api/v1/namespaces", kubelab.Namespace(ns))
	must(err)
	for i := 0; i < 5; i++ {
		_, err := api.Create(ctx, cmPath, kubelab.ConfigMap(fmt.Sprintf("before-%d", i), nil))
		must(err)
	}

	zk, err := lab.ZooKeeper(ctx)
	must(err)
	logPath := filepath.Join(lab.Dir, "mirror.log")
	logf, err := os.Create(logPath)
	must(err)
	defer logf.Close()
	sec, err := lab.Security()
	must(err)
	mirror := exec.Command(lab.Zketcd, "mirror", "--from", etcd.URL(), "--zk", zk.Addr(), "--zk-root", "/mirrored",
		"--zk-auth-file", sec.ZKAuthFile, "--status-interval", "300ms")
	mirror.Stdout, mirror.Stderr = logf, logf
	must(mirror.Start())
	exited := make(chan error, 1)
	go func() { exited <- mirror.Wait() }()
	t.Cleanup(func() { _ = mirror.Process.Kill() })

	// kube-apiserver keeps writing while the mirror follows.
	for i := 0; i < 30; i++ {
		if i%3 == 2 {
			_, err = api.MergePatch(ctx, fmt.Sprintf("%s/during-%d", cmPath, i-1), map[string]any{"data": map[string]string{"p": "1"}})
		} else {
			_, err = api.Create(ctx, cmPath, kubelab.ConfigMap(fmt.Sprintf("during-%d", i), nil))
		}
		must(err)
		time.Sleep(30 * time.Millisecond)
	}
	onEtcd := listing(t, ctx, api, cmPath)

	// Cut-over: stop the writer, let the mirror drain, stop it.
	api.Stop()
	ec, err := etcd.Client()
	must(err)
	head, err := ec.Get(ctx, "x")
	must(err)
	caughtUp := regexp.MustCompile(fmt.Sprintf(`behind=0 .*revision=%d `, head.Header.Revision))
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(logPath)
		if caughtUp.Match(data) {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("mirror exited: %v\n%s", err, data)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirror did not catch up with revision %d:\n%s", head.Header.Revision, kubelab.TailLog(logPath, 10))
		}
		time.Sleep(200 * time.Millisecond)
	}
	must(mirror.Process.Signal(syscall.SIGINT))
	if err := <-exited; err != nil {
		t.Fatalf("mirror: %v\n%s", err, kubelab.TailLog(logPath, 10))
	}
	t.Logf("mirror: %s", strings.TrimSpace(kubelab.TailLog(logPath, 1)))
	want := keySpace(t, ctx, ec)
	etcd.Stop()

	z, err := lab.StartZketcd(ctx, "mirrored", []string{zk.Addr()}, "/mirrored")
	must(err)
	zc, err := z.Client()
	must(err)
	if got := keySpace(t, ctx, zc); got != want {
		t.Errorf("key space on zketcd differs from etcd's at the cut-over:\n zketcd: %.2000s\n etcd:   %.2000s", got, want)
	}
	api, err = lab.StartAPIServer(kubelab.APIServerOptions{Name: "on-zketcd", EtcdServers: z.URL()})
	must(err)
	_, err = api.WaitReady(ctx, 3*time.Minute)
	must(err)
	if got := listing(t, ctx, api, cmPath); got != onEtcd {
		t.Errorf("objects on zketcd differ from etcd:\n zketcd: %s\n etcd:   %s", got, onEtcd)
	}
	o, err := api.Create(ctx, cmPath, kubelab.ConfigMap("after", nil))
	must(err)
	if o.RV() <= head.Header.Revision {
		t.Errorf("a write after the cut-over got resourceVersion %d, not above %d", o.RV(), head.Header.Revision)
	}
	t.Logf("moved through the mirror at revision %d: %d configmaps with their resourceVersions; next write at %d",
		head.Header.Revision, strings.Count(onEtcd, "@"), o.RV())
}

// keySpace lists every key with its revisions, version and lease.
func keySpace(t *testing.T, ctx context.Context, c *clientv3.Client) string {
	t.Helper()
	resp, err := c.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "revision %d:", resp.Header.Revision)
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, " %s c%d m%d v%d l%x;", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return b.String()
}
