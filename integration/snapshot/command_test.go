package snapshot

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/zketcdtest"
)

// TestSnapshotRestoreCommand runs the zketcd binary ($ZKETCD_BINARY, else
// skipped): `zketcd snapshot restore` loads etcd's snapshot and prints what
// it restored, a second restore into the same root is refused, and so is a
// corrupted file, each with a clear message and exit status 1.
func TestSnapshotRestoreCommand(t *testing.T) {
	bin := os.Getenv("ZKETCD_BINARY")
	if bin == "" {
		t.Skip("set ZKETCD_BINARY (make build) to test the command")
	}
	src := etcdoracle.Start(t)
	writeHistory(t, src.Client(t))
	want := takeDump(t, src.Client(t), "etcd")
	path := filepath.Join(t.TempDir(), "etcd.snapshot")
	saveSnapshot(t, src.Endpoint(), path)
	root := freshRoot(t)
	restore := func(file string) (string, int) {
		cmd := exec.Command(bin, "snapshot", "restore", file, "--zk", zkAddr, "--zk-root", root, "--log-level", "warn")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := restore(path)
	if code != 0 || !strings.Contains(out, "restored ") {
		t.Fatalf("restore: exit %d\n%s", code, out)
	}
	t.Logf("restore: %s", strings.TrimSpace(out))
	out, code = restore(path)
	if code != 1 || !strings.Contains(out, "refusing to restore into "+root) {
		t.Errorf("second restore into the same root: exit %d\n%s", code, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.snapshot")
	if err := os.WriteFile(bad, data, 0o600); err != nil {
		t.Fatal(err)
	}
	root += "-bad"
	if out, code = restore(bad); code != 1 || !strings.Contains(out, "checksum mismatch") {
		t.Errorf("corrupted file: exit %d\n%s", code, out)
	}
	zk := zketcdtest.Start(t, []string{zkAddr}, zketcdtest.Options{Root: strings.TrimSuffix(root, "-bad")})
	compareDumps(t, "etcd", want, "zketcd restored by the command", takeDump(t, zk.Client(t), "zketcd"))
}

// TestMirrorCommandUntilCaughtUp runs `zketcd mirror --until-caught-up`
// against an idle etcd: it copies everything, exits 0 with a summary, and
// zketcd on the root serves what etcd serves.
func TestMirrorCommandUntilCaughtUp(t *testing.T) {
	bin := os.Getenv("ZKETCD_BINARY")
	if bin == "" {
		t.Skip("set ZKETCD_BINARY (make build) to test the command")
	}
	src := etcdoracle.Start(t)
	writeHistory(t, src.Client(t))
	want := takeDump(t, src.Client(t), "etcd")
	root := freshRoot(t)
	out, err := exec.Command(bin, "mirror", "--from", "http://"+src.Endpoint(), "--zk", zkAddr, "--zk-root", root,
		"--until-caught-up", "--status-interval", "200ms", "--log-level", "warn").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mirrored ") {
		t.Fatalf("zketcd mirror: %v\n%s", err, out)
	}
	t.Logf("mirror: %s", strings.TrimSpace(string(out)))
	zk := zketcdtest.Start(t, []string{zkAddr}, zketcdtest.Options{Root: root})
	compareDumps(t, "etcd", want, "zketcd mirror", takeDump(t, zk.Client(t), "zketcd"))
}
