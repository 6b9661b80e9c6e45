package snapshot

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
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
		cmd := exec.Command(bin, "snapshot", "restore", file, "--zk", sharedZK.Addr(t), "--zk-root", root, "--log-level", "warn")
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
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: strings.TrimSuffix(root, "-bad")})
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
	out, err := exec.Command(bin, "mirror", "--from", "http://"+src.Endpoint(), "--zk", sharedZK.Addr(t), "--zk-root", root,
		"--until-caught-up", "--status-interval", "200ms", "--log-level", "warn").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mirrored ") {
		t.Fatalf("zketcd mirror: %v\n%s", err, out)
	}
	t.Logf("mirror: %s", strings.TrimSpace(string(out)))
	out, err = exec.Command(bin, "mirror", "cutover", "--from", "http://"+src.Endpoint(), "--zk", sharedZK.Addr(t), "--zk-root", root,
		"--quiet", "200ms", "--log-level", "warn").CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("at revision %d: prefix hash", want.Rev)) {
		t.Fatalf("zketcd mirror cutover: %v\n%s", err, out)
	}
	t.Logf("mirror cutover: %s", strings.TrimSpace(string(out)))
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
	compareDumps(t, "etcd", want, "zketcd mirror", takeDump(t, zk.Client(t), "zketcd"))
}

// TestEtcdctlEndpointHashKVMatchesEtcd: after the same history, `etcdctl
// endpoint hashkv` reports the same hash (and hash and compact revisions)
// for zketcd and etcd 3.7.3, at the current revision and at an older one.
func TestEtcdctlEndpointHashKVMatchesEtcd(t *testing.T) {
	ctl := tool(t, "etcdctl")
	etcd := etcdoracle.Start(t)
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{})
	compacted := writeHistory(t, etcd.Client(t))
	writeHistory(t, zk.Client(t))
	hash := func(endpoint string, rev int64) string {
		out := run(t, ctl, "--endpoints", endpoint, "endpoint", "hashkv", "--rev", fmt.Sprint(rev), "-w", "json")
		var res []struct {
			HashKV struct {
				Hash            uint32 `json:"hash"`
				CompactRevision int64  `json:"compact_revision"`
				HashRevision    int64  `json:"hash_revision"`
			} `json:"HashKV"`
		}
		i := strings.Index(out, "[")
		if i < 0 {
			t.Fatalf("etcdctl endpoint hashkv -w json: no JSON in\n%s", out)
		}
		if err := json.Unmarshal([]byte(out[i:]), &res); err != nil || len(res) != 1 {
			t.Fatalf("etcdctl endpoint hashkv -w json: %v\n%s", err, out)
		}
		return fmt.Sprintf("%+v", res[0].HashKV)
	}
	for _, rev := range []int64{0, compacted + 2} {
		if e, z := hash(etcd.Endpoint(), rev), hash(zk.Endpoint(), rev); e != z {
			t.Errorf("endpoint hashkv --rev %d: etcd %s, zketcd %s", rev, e, z)
		} else {
			t.Logf("endpoint hashkv --rev %d: %s on both", rev, e)
		}
	}
}

// TestPrefixMirrorCommandKilledAndRunAgain runs `zketcd mirror --prefix`
// as a process and kills it (SIGKILL) three times while both clusters of
// the source write, each time in the middle of copying, then `zketcd
// mirror cutover`: the root holds every revision of the copied cluster
// once, and the cut-over agrees with the source.
func TestPrefixMirrorCommandKilledAndRunAgain(t *testing.T) {
	bin := os.Getenv("ZKETCD_BINARY")
	if bin == "" {
		t.Skip("set ZKETCD_BINARY (make build) to test the command")
	}
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := newSharedWriter(t, ec)
	for range 30 {
		w.step(ctx)
	}
	root := freshRoot(t)
	args := []string{"--from", "http://" + src.Endpoint(), "--prefix", prefixA, "--zk", sharedZK.Addr(t), "--zk-root", root,
		"--status-interval", "100ms", "--log-level", "info"}
	for round := range 4 {
		cmd := exec.Command(bin, append([]string{"mirror"}, args...)...)
		var out strings.Builder
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		following := make(chan struct{})
		read := make(chan struct{})
		go func() {
			defer close(read)
			sc := bufio.NewScanner(stderr)
			once := false
			for sc.Scan() {
				out.WriteString(sc.Text() + "\n")
				if !once && strings.HasPrefix(sc.Text(), "revision ") {
					once = true
					close(following)
				}
			}
		}()
		if round > 0 { // round 0 is killed during its initial copy, or right after
			select {
			case <-following:
			case <-time.After(time.Minute):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-read
				t.Fatalf("round %d: the mirror does not follow:\n%s", round, out.String())
			}
		}
		for range 60 {
			w.step(ctx)
		}
		if round == 3 {
			for range 3 { // the other cluster last: a gap at the top
				if _, err := ec.Put(ctx, prefixB+"registry/last", "b"); err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-read // the pipe's end: out is the reader's until then
		err = cmd.Wait()
		t.Logf("round %d: killed (%v): %s", round, err, strings.TrimSpace(out.String()))
		if strings.Contains(out.String(), "Error") || strings.Contains(out.String(), "error:") {
			t.Fatalf("round %d: the mirror failed before it was killed:\n%s", round, out.String())
		}
	}
	head, err := ec.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, append([]string{"mirror", "cutover", "--quiet", "300ms"}, args...)...).CombinedOutput()
	want := fmt.Sprintf("at revision %d: prefix hash", head.Header.Revision)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("zketcd mirror cutover: %v, want %q\n%s", err, want, out)
	}
	t.Logf("cutover: %s", strings.TrimSpace(string(out)))
	snap := rootview.Recovered(t, rootview.StoreConfig(t, sharedZK, root))
	changed := map[int64]bool{}
	snap.Each(func(kh revision.KeyHistory) bool {
		for _, kv := range kh.Versions {
			changed[kv.ModRevision] = true
		}
		return true
	})
	n := 0
	for _, r := range w.revA {
		if r > snap.State.CompactRev {
			n++
			if !changed[r] {
				t.Errorf("revision %d changed the copied cluster; the root has no change at it", r)
			}
		}
	}
	t.Logf("%d revisions of the copied cluster after the initial copy at %d, each in the root", n, snap.State.CompactRev)
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
	gotKeys, hdr := prefixDump(t, zk.Client(t), prefixA, 0)
	wantKeys, _ := prefixDump(t, ec, prefixA, 0)
	if gotKeys != wantKeys || hdr != head.Header.Revision {
		t.Fatalf("keys on zketcd at header %d (source at %d):\n%s\nsource:\n%s", hdr, head.Header.Revision, gotKeys, wantKeys)
	}
}
