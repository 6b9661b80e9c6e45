package snapshot

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/snaprestore"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
)

// TestOlderEtcdSnapshotRestoresIntoZketcd runs when
// $ETCD_OLDER_BINARIES lists etcd server binaries of other minor versions
// (comma separated, e.g. /opt/etcd-3.5.35/etcd,/opt/etcd-3.6.16/etcd): for
// each it writes the same history, saves a snapshot with etcdctl 3.7.3,
// restores it into zketcd and compares what both serve (every retained
// revision, leases, compacted revision, HashKV).
func TestOlderEtcdSnapshotRestoresIntoZketcd(t *testing.T) {
	list := os.Getenv("ETCD_OLDER_BINARIES")
	if list == "" {
		t.Skip("set ETCD_OLDER_BINARIES to etcd 3.5/3.6 server binaries")
	}
	for _, bin := range strings.Split(list, ",") {
		out, _ := exec.Command(bin, "--version").CombinedOutput()
		name := strings.Fields(strings.SplitN(string(out), "\n", 2)[0] + " etcd ? ?")[2]
		t.Run(name, func(t *testing.T) {
			endpoint := startEtcdProcess(t, bin)
			c := etcdoracle.NewClient(t, endpoint)
			writeHistory(t, c)
			want := takeDump(t, c, "etcd "+name)
			path := filepath.Join(t.TempDir(), "etcd.snapshot")
			saveSnapshot(t, endpoint, path)
			root := freshRoot(t)
			res, err := snaprestore.Restore(context.Background(), snaprestore.Config{File: path, Store: rootview.StoreConfig(t, sharedZK, root)})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("etcd %s snapshot: storage version %q, revision %d, compacted %d", name, res.StorageVersion, res.Rev, res.CompactRev)
			zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
			got := takeDump(t, zk.Client(t), "zketcd")
			if strings.HasPrefix(name, "3.5.") {
				// etcd 3.5 does not fill HashKVResponse.hash_revision
				// (added in 3.6): compare the hash and compact_revision.
				for _, d := range []dump{want, got} {
					for rev, h := range d.HashKV {
						d.HashKV[rev] = h[:strings.Index(h, " rev=")]
					}
				}
			}
			compareDumps(t, "etcd "+name, want, "zketcd restored from its snapshot", got)
		})
	}
}

// startEtcdProcess starts an etcd binary on loopback ports with a fresh
// data directory and returns its client endpoint.
func startEtcdProcess(t *testing.T, bin string) string {
	t.Helper()
	client, peer := freePort(t), freePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--name", "older", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "older=http://"+peer)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", client, time.Second)
		if err == nil {
			c.Close()
			return client
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("etcd %s did not listen on %s", bin, client)
	return ""
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}
