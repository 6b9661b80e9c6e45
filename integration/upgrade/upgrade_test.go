// Package upgrade tests rolling restarts of zketcd instances at mixed
// versions on one root: builds of this repository, the current one, one
// patched to write log entries in a newer format (4) and read all, and one
// patched back to root format 1 (the builds before compression: they read
// entry formats 1 and 2 and snapshot format 1, and never raise the root).
// It builds both (a few minutes on a loaded machine), so it runs only with
// ZKETCD_UPGRADE_TEST=1 (make upgrade-test).
package upgrade

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/faults"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// repoRoot is the repository the integration module replaces
// github.com/zketcd/zketcd with.
const repoRoot = "../.."

// buildNext builds the current sources patched to write log entries in
// format 4 (reading 1 to 4).
func buildNext(t *testing.T, ctx context.Context, dir string) string {
	return buildPatched(t, ctx, dir, "next", [][3]string{
		{"internal/zkstore/codec.go", "const entryFormat = 1", "const entryFormat = 4"},
		{"internal/zkstore/codec.go", "if f := d.byte(); f != entryFormat {", "if f := d.byte(); f != entryFormat && f != 1 {"},
		{"internal/zkstore/format.go", "maxEntryFormat = compressedEntryFormat", "maxEntryFormat = 4"},
	})
}

// buildPrevious builds the current sources patched back to root format 1:
// what the builds before compression read (entries up to format 2,
// snapshots format 1, base descriptions format 1, roots format 1) and
// write.
func buildPrevious(t *testing.T, ctx context.Context, dir string) string {
	return buildPatched(t, ctx, dir, "previous", [][3]string{
		{"internal/zkstore/format.go", fmt.Sprintf("MetaFormat = %d", zkstore.MetaFormat), "MetaFormat = 1"},
		{"internal/zkstore/format.go", "baseFormat = layeredBaseFormat", "baseFormat = fullBaseFormat"},
		{"internal/zkstore/format.go", "maxEntryFormat = compressedEntryFormat", "maxEntryFormat = indirectFormat"},
		{"internal/zkstore/snapshot.go", "maxSnapshotFormat = deltaFormat", "maxSnapshotFormat = snapshotFormat"},
	})
}

// buildPatched copies the repository's Go sources to dir/name, applies
// patches (file, old, new) and builds its zketcd.
func buildPatched(t *testing.T, ctx context.Context, dir, name string, patches [][3]string) string {
	t.Helper()
	src := filepath.Join(dir, "src-"+name)
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every top-level entry of the main module but the integration module
	// and the docs, so that a new package needs no change here.
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch p := e.Name(); {
		case p == "integration" || p == "docs" || p == "bin" || p == "zketcd-dev" || strings.HasPrefix(p, "."):
		case e.IsDir() || p == "go.mod" || p == "go.sum":
			if out, err := exec.Command("cp", "-a", filepath.Join(repoRoot, p), src).CombinedOutput(); err != nil {
				t.Fatalf("copy %s: %v: %s", p, err, out)
			}
		}
	}
	patch := func(file, old, new string) {
		t.Helper()
		path := filepath.Join(src, file)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s: %q not found: the patch needs updating", file, old)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range patches {
		patch(p[0], p[1], p[2])
	}
	out := filepath.Join(dir, "zketcd-"+name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/zketcd")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the %s zketcd: %v\n%s", name, err, b)
	}
	return out
}

func statusErrors(c *clientv3.Client, addr string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Status(ctx, addr)
	if err != nil {
		return err.Error()
	}
	return strings.Join(resp.Errors, "; ")
}

// TestRollingUpgradeToANewerEntryFormat: A and B serve one root on the
// current build; B is restarted on the next build, A restarted on the
// current one (so B leads, and commits every write) and B writes format-4
// entries; A, still current, refuses them (halts, naming the versions; it
// serves no read of the new data); A restarted on the next build serves
// everything, nothing lost; a current-build instance started afterwards
// refuses to start, naming the versions.
func TestRollingUpgradeToANewerEntryFormat(t *testing.T) {
	l := newLab(t, "/upgrade")
	ctx, cur, instance, client := l.ctx, l.cur, l.instance, l.client
	next := buildNext(t, ctx, l.dir)
	aAddr, aMetrics, bAddr, bMetrics := embedtest.FreeAddr(t), embedtest.FreeAddr(t), embedtest.FreeAddr(t), embedtest.FreeAddr(t)
	a := instance(cur, "a", aAddr, aMetrics)
	b := instance(cur, "b", bAddr, bMetrics)
	l.start(a, b)
	ca, cb := client(aAddr), client(bAddr)
	for i := 0; i < 50; i++ {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		if _, err := c.Put(ctx, fmt.Sprintf("old/%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}

	// B onto the next build: it reads the current log, and writes format 4.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = instance(next, "b", bAddr, bMetrics)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	get, err := cb.Get(ctx, "old/", clientv3.WithPrefix())
	if err != nil || len(get.Kvs) != 50 {
		t.Fatalf("the next build reading the current log: %v %v", get, err)
	}
	// Only the leader commits (--forward-writes): while A, on the current
	// build, leads, B's writes go to A in format 1. Restarting A (still
	// current) hands the leadership to B, which then writes format 4.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	a = instance(cur, "a", aAddr, aMetrics)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var lastRev int64
	for i := 0; i < 10; i++ {
		resp, err := cb.Put(ctx, fmt.Sprintf("new/%02d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		lastRev = resp.Header.Revision
	}

	// A, still current, meets format 4: it halts, naming the versions.
	want := "log entry has format 4, newer than this zketcd reads (up to 3)"
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(statusErrors(ca, aAddr), want) {
		if time.Now().After(deadline) {
			t.Fatalf("A did not refuse the newer format: %s", statusErrors(ca, aAddr))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("A (current build): %s", statusErrors(ca, aAddr))
	if _, err := ca.Get(ctx, "new/00", clientv3.WithSerializable()); err == nil || !strings.Contains(err.Error(), rpctypes.ErrCorrupt.Error()) {
		t.Fatalf("A served a read after meeting the newer format: %v", err)
	}
	if n := errorLines(t, a.LogPath(), want); n != 1 {
		t.Errorf("A logged the refusal as an error %d times, want once", n)
	}

	// A onto the next build: everything is there.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	a = instance(next, "a", aAddr, aMetrics)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*clientv3.Client{"a": ca, "b": cb} {
		get, err := c.Get(ctx, "", clientv3.WithPrefix())
		if err != nil || len(get.Kvs) != 60 || get.Header.Revision != lastRev {
			t.Fatalf("%s after the upgrade: %d keys at revision %d (%v), want 60 at %d", name, len(get.Kvs), get.Header.Revision, err, lastRev)
		}
	}
	if _, err := ca.Put(ctx, "after", "upgrade"); err != nil {
		t.Fatal(err)
	}

	// A current-build instance refuses the root from now on.
	c := instance(cur, "c", embedtest.FreeAddr(t), embedtest.FreeAddr(t))
	err = c.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "newer than this zketcd reads") {
		t.Fatalf("a current-build instance on the upgraded root: %v", err)
	}
	t.Logf("C (current build) at start: %s", err)
}

// errorLines counts the error-level lines of a log that contain s.
func errorLines(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=error") && strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// TestRollingUpgradeRaisesTheRootFormatOnlyOnceEveryInstanceReadsIt: A
// and B serve a root on the previous build (root format 1, no
// compression); B is restarted on the current build and leads, and keeps
// writing format-1 entries, so A, still previous, serves every write (no
// halt); once A runs the current build too, the leader raises the root to
// this build's format and entries are compressed (zketcd_root_format the
// same on both);
// everything reads back; a previous-build instance started afterwards
// refuses the root, naming both versions.
func TestRollingUpgradeRaisesTheRootFormatOnlyOnceEveryInstanceReadsIt(t *testing.T) {
	l := newLab(t, "/raise")
	ctx, cur, instance, client := l.ctx, l.cur, l.instance, l.client
	prev := buildPrevious(t, ctx, l.dir)
	aAddr, aMetrics, bAddr, bMetrics := embedtest.FreeAddr(t), embedtest.FreeAddr(t), embedtest.FreeAddr(t), embedtest.FreeAddr(t)
	a := instance(prev, "a", aAddr, aMetrics)
	b := instance(prev, "b", bAddr, bMetrics)
	l.start(a, b)
	// Values that compress: a kube-apiserver-like object.
	value := func(i int) string {
		return strings.Repeat(fmt.Sprintf(`{"kind":"ConfigMap","metadata":{"name":"cm-%d","namespace":"team"}}`, i), 20)
	}
	ca, cb := client(aAddr), client(bAddr)
	written := 0
	putSome := func(c *clientv3.Client, prefix string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := c.Put(ctx, fmt.Sprintf("%s/%03d", prefix, i), value(i)); err != nil {
				t.Fatalf("put %s/%d: %v", prefix, i, err)
			}
			written++
		}
	}
	putSome(ca, "prev", 20)

	// B onto the current build; A restarted on the previous one so that B
	// leads and commits every write.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = instance(cur, "b", bAddr, bMetrics)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	a = instance(prev, "a", aAddr, aMetrics)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	putSome(cb, "mixed", 20)
	putSome(ca, "mixed-a", 10)
	// A negative (the root stays at format 1): two rounds of the leader's
	// format check.
	time.Sleep(5 * time.Second)
	if f := metricValue(t, bMetrics, "zketcd_root_format"); f != 1 {
		t.Fatalf("the root was raised to %v while a previous-build instance serves it", f)
	}
	get, err := ca.Get(ctx, "mixed/", clientv3.WithPrefix())
	if err != nil || len(get.Kvs) != 20 {
		t.Fatalf("the previous build reading the current build's writes: %v %v (status: %s)", get, err, statusErrors(ca, aAddr))
	}

	// A onto the current build: the leader raises the root.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	a = instance(cur, "a", aAddr, aMetrics)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("root format %d on both once every instance runs the current build", zkstore.MetaFormat), func() error {
		if fa, fb := metricValue(t, aMetrics, "zketcd_root_format"), metricValue(t, bMetrics, "zketcd_root_format"); fa != zkstore.MetaFormat || fb != zkstore.MetaFormat {
			return fmt.Errorf("root format %v / %v", fa, fb)
		}
		return nil
	})
	putSome(ca, "raised", 20)
	for name, c := range map[string]*clientv3.Client{"a": ca, "b": cb} {
		get, err := c.Get(ctx, "", clientv3.WithPrefix())
		if err != nil || len(get.Kvs) != written {
			t.Fatalf("%s after the raise: %d keys (%v), want %d", name, len(get.Kvs), err, written)
		}
		for _, kv := range get.Kvs {
			var i int
			if _, err := fmt.Sscanf(string(kv.Key[strings.LastIndexByte(string(kv.Key), '/')+1:]), "%d", &i); err != nil || string(kv.Value) != value(i) {
				t.Fatalf("%s: %s reads back changed", name, kv.Key)
			}
		}
	}

	// A previous-build instance refuses the raised root.
	c := instance(prev, "c", embedtest.FreeAddr(t), embedtest.FreeAddr(t))
	err = c.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("has format %d, newer than this zketcd reads (up to 1)", zkstore.MetaFormat)) {
		t.Fatalf("a previous-build instance on the raised root: %v", err)
	}
	t.Logf("C (previous build) at start: %s", err)
}

// lab is what both tests set up: a context, a temporary directory with
// this build's zketcd (cur), a ZooKeeper, and instances on one root.
type lab struct {
	t              *testing.T
	ctx            context.Context
	dir, cur, root string
	zk             *zkserver.Server
}

func newLab(t *testing.T, root string) *lab {
	if os.Getenv("ZKETCD_UPGRADE_TEST") == "" {
		t.Skip("builds two zketcd binaries; run with ZKETCD_UPGRADE_TEST=1 (make upgrade-test)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	l := &lab{t: t, ctx: ctx, dir: t.TempDir(), root: root}
	var err error
	if l.cur, err = faults.BuildZketcd(ctx, l.dir); err != nil {
		t.Fatal(err)
	}
	l.zk = zkservertest.Standalone(t)
	return l
}

// instance returns an instance of bin on the lab's root (stopped at the
// end of the test).
func (l *lab) instance(bin, name, addr, metrics string) *faults.Zketcd {
	z := faults.NewZketcd(faults.ZketcdConfig{Bin: bin, Name: name, Root: l.root, Dir: l.dir, ZK: []string{l.zk.Addr()},
		Addr: addr, Metrics: metrics, SessionTimeout: 4 * time.Second, ProgressInterval: time.Minute})
	l.t.Cleanup(func() { _ = z.Stop() })
	return z
}

func (l *lab) start(zs ...*faults.Zketcd) {
	l.t.Helper()
	for _, z := range zs {
		if err := z.Start(l.ctx); err != nil {
			l.t.Fatal(err)
		}
	}
}

func (l *lab) client(addr string) *clientv3.Client {
	l.t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { c.Close() })
	return c
}

// metricValue reads one gauge from an instance's metrics URL (0 if absent).
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			fmt.Sscanf(rest, "%g", &v)
			return v
		}
	}
	return 0
}
