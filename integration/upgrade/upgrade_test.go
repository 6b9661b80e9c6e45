// Package upgrade tests a rolling restart of zketcd instances at mixed
// versions on one root: two builds of this repository, the current one and
// one patched to write log entries in a newer format (3) and read both.
// It builds both (a few minutes on a loaded machine), so it runs only with
// ZKETCD_UPGRADE_TEST=1 (make upgrade-test).
package upgrade

import (
	"context"
	"fmt"
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
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// repoRoot is the repository the integration module replaces
// github.com/zketcd/zketcd with.
const repoRoot = "../.."

// buildNext copies the repository's Go sources to dir, patches the copy to
// write log entries in format 3 (reading 1, 2 and 3), and builds its zketcd.
func buildNext(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
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
	patch("internal/zkstore/codec.go", "const entryFormat = 1", "const entryFormat = 3")
	patch("internal/zkstore/codec.go", "if f := d.byte(); f != entryFormat {", "if f := d.byte(); f != entryFormat && f != 1 {")
	patch("internal/zkstore/format.go", "maxEntryFormat = indirectFormat", "maxEntryFormat = 3")
	out := filepath.Join(dir, "zketcd-next")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/zketcd")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the next zketcd: %v\n%s", err, b)
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
// current one (so B leads, and commits every write) and B writes format-3
// entries; A, still current, refuses them (halts, naming the versions; it
// serves no read of the new data); A restarted on the next build serves
// everything, nothing lost; a current-build instance started afterwards
// refuses to start, naming the versions.
func TestRollingUpgradeToANewerEntryFormat(t *testing.T) {
	if os.Getenv("ZKETCD_UPGRADE_TEST") == "" {
		t.Skip("builds two zketcd binaries; run with ZKETCD_UPGRADE_TEST=1 (make upgrade-test)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cur, err := faults.BuildZketcd(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	next := buildNext(t, ctx, dir)
	zk := zkservertest.Standalone(t)
	instance := func(bin, name, addr, metrics string) *faults.Zketcd {
		z := faults.NewZketcd(faults.ZketcdConfig{Bin: bin, Name: name, Root: "/upgrade", Dir: dir, ZK: []string{zk.Addr()},
			Addr: addr, Metrics: metrics, SessionTimeout: 4 * time.Second, ProgressInterval: time.Minute})
		t.Cleanup(func() { _ = z.Stop() })
		return z
	}
	aAddr, aMetrics, bAddr, bMetrics := embedtest.FreeAddr(t), embedtest.FreeAddr(t), embedtest.FreeAddr(t), embedtest.FreeAddr(t)
	a := instance(cur, "a", aAddr, aMetrics)
	b := instance(cur, "b", bAddr, bMetrics)
	for _, z := range []*faults.Zketcd{a, b} {
		if err := z.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	client := func(addr string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
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

	// B onto the next build: it reads the format-1 log, and writes format 3.
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
	// current) hands the leadership to B, which then writes format 3.
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

	// A, still current, meets format 3: it halts, naming the versions.
	want := "log entry has format 3, newer than this zketcd reads (up to 2)"
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
