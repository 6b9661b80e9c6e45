package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// sharedZK is one ZooKeeper shared by the package's tests, each on a root
// of its own.
var sharedZK = zkservertest.NewShared("snapshot", sharedZKOptions())

func sharedZKOptions() zkserver.Options {
	var opts zkserver.Options
	if os.Getenv("SNAPSHOT_MEASURE_KEYS") != "" || os.Getenv("MIRROR_MEASURE_KEYS") != "" {
		// TestMeasureSnapshot: a million keys' log entries and a base
		// generation of the same size do not fit the default 512 MiB heap.
		opts.JVMFlags = []string{"-Xmx6g"}
	}
	return opts
}

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }

// tool returns the path of etcdctl or etcdutl v3.7.3, or skips the test.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p := os.Getenv(strings.ToUpper(name)); p != "" {
		return p
	}
	cache := os.Getenv("ZKETCD_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "zketcd")
	}
	p := filepath.Join(cache, "etcd-v3.7.3", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s v3.7.3 not found (set $%s or run integration/bench/build-peers.sh %s)", name, strings.ToUpper(name), name)
	}
	return p
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// saveSnapshot runs `etcdctl snapshot save` against endpoint.
func saveSnapshot(t *testing.T, endpoint, path string) {
	t.Helper()
	run(t, tool(t, "etcdctl"), "--endpoints", endpoint, "snapshot", "save", path)
}

// snapshotStatus is `etcdutl snapshot status -w json`.
type snapshotStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int    `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	Version   string `json:"version"`
}

func status(t *testing.T, path string) snapshotStatus {
	t.Helper()
	out := run(t, tool(t, "etcdutl"), "snapshot", "status", path, "-w", "json")
	var st snapshotStatus
	if err := json.Unmarshal([]byte(strings.TrimSpace(out[strings.Index(out, "{"):])), &st); err != nil {
		t.Fatalf("etcdutl snapshot status: %v\n%s", err, out)
	}
	return st
}

// restoreIntoEtcd runs `etcdutl snapshot restore` and starts an embedded
// etcd 3.7.3 on the restored data directory.
func restoreIntoEtcd(t *testing.T, path string) *etcdoracle.Oracle {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored.etcd")
	const peer = "http://127.0.0.1:2380"
	run(t, tool(t, "etcdutl"), "snapshot", "restore", path, "--data-dir", dir, "--name", "restored",
		"--initial-cluster", "restored="+peer, "--initial-advertise-peer-urls", peer, "--initial-cluster-token", "etcdoracle")
	return etcdoracle.Start(t, etcdoracle.WithConfig(func(c *embed.Config) {
		c.Dir = dir
		c.Name = "restored"
		u, _ := url.Parse(peer)
		c.AdvertisePeerUrls = []url.URL{*u}
		c.InitialCluster = "restored=" + peer
	}))
}

// leaseIDs used by the histories (explicit, so both stores agree).
const (
	leaseA = int64(0x1a2b)
	leaseB = int64(0x3c4d)
)

// writeHistory writes puts, overwrites, deletes, multi-op txns, leased keys,
// a revoked lease and a physical compaction, then more history after it. It
// returns the compacted revision.
func writeHistory(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc := pb.NewLeaseClient(c.ActiveConnection())
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: leaseA, TTL: 900}))
	must(lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: leaseB, TTL: 3600}))
	must(lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 0x5e5e, TTL: 600}))
	for i := 0; i < 20; i++ {
		must(c.Put(ctx, fmt.Sprintf("/registry/pods/p%02d", i), fmt.Sprintf("pod %d", i)))
	}
	for i := 0; i < 20; i += 3 {
		must(c.Put(ctx, fmt.Sprintf("/registry/pods/p%02d", i), fmt.Sprintf("pod %d v2", i)))
	}
	must(c.Delete(ctx, "/registry/pods/p05"))
	must(c.Txn(ctx).Then(clientv3.OpPut("/registry/a", "1"), clientv3.OpPut("/registry/b", "2"), clientv3.OpDelete("/registry/pods/p06")).Commit())
	resp, err := c.Put(ctx, "/registry/pods/p00", "pod 0 v3")
	must(resp, err)
	compacted := resp.Header.Revision
	must(c.Compact(ctx, compacted, clientv3.WithCompactPhysical()))
	must(c.Put(ctx, "/registry/leases/x", "x", clientv3.WithLease(clientv3.LeaseID(leaseA))))
	must(c.Put(ctx, "/registry/leases/y", "y", clientv3.WithLease(clientv3.LeaseID(leaseB))))
	must(c.Put(ctx, "/registry/leases/z", "z", clientv3.WithLease(0x5e5e)))
	must(c.Delete(ctx, "/registry/pods/p1", clientv3.WithPrefix()))
	must(c.Put(ctx, "/registry/pods/p07", "pod 7 v2"))
	must(lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 0x5e5e}))
	must(c.Txn(ctx).If(clientv3.Compare(clientv3.Value("/registry/a"), "=", "1")).
		Then(clientv3.OpPut("/registry/a", "1'"), clientv3.OpDelete("/registry/b"), clientv3.OpPut("/registry/c", "3", clientv3.WithLease(clientv3.LeaseID(leaseA)))).Commit())
	must(c.Put(ctx, "/registry/pods/p05", "recreated"))
	must(c.Delete(ctx, "/registry/pods/p03"))
	return compacted
}

// dump is a store's state as a client sees it, in a comparable form.
type dump struct {
	Rev, Compacted int64
	// Revisions lists every key live at each revision from the compacted
	// one to the current one.
	Revisions map[int64][]string
	Leases    []string
	HashKV    map[int64]string
}

func takeDump(t *testing.T, c *clientv3.Client, endpoint string) dump {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mc := pb.NewMaintenanceClient(c.ActiveConnection())
	h0, err := mc.HashKV(ctx, &pb.HashKVRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d := dump{Rev: h0.Header.Revision, Compacted: h0.CompactRevision, Revisions: map[int64][]string{}, HashKV: map[int64]string{}}
	if _, err := c.Get(ctx, "x", clientv3.WithRev(d.Compacted-1)); d.Compacted > 1 && !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("%s: get below the compacted revision %d: %v, want compacted", endpoint, d.Compacted, err)
	}
	for rev := max(d.Compacted, 1); rev <= d.Rev; rev++ {
		resp, err := c.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("%s: get at %d: %v", endpoint, rev, err)
		}
		var kvs []string
		for _, kv := range resp.Kvs {
			kvs = append(kvs, fmt.Sprintf("%s=%q c%d m%d v%d l%x", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease))
		}
		d.Revisions[rev] = kvs
		if rev == d.Compacted {
			continue // etcd answers HashKV at a compaction's revision from a hash stored while compacting
		}
		h, err := mc.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		if err != nil {
			t.Fatalf("%s: hashkv at %d: %v", endpoint, rev, err)
		}
		d.HashKV[rev] = fmt.Sprintf("%d compact=%d rev=%d", h.Hash, h.CompactRevision, h.HashRevision)
	}
	ls, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls.Leases {
		ttl, err := c.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, k := range ttl.Keys {
			keys = append(keys, string(k))
		}
		sort.Strings(keys)
		d.Leases = append(d.Leases, fmt.Sprintf("%x granted=%d keys=%v", l.ID, ttl.GrantedTTL, keys))
	}
	sort.Strings(d.Leases)
	return d
}

func compareDumps(t *testing.T, nameA string, a dump, nameB string, b dump) {
	t.Helper()
	t.Logf("comparing %s and %s: revision %d, compacted %d, %d keys live, %d revisions listed, %d hashes, leases %v",
		nameA, nameB, a.Rev, a.Compacted, len(a.Revisions[a.Rev]), len(a.Revisions), len(a.HashKV), a.Leases)
	if a.Rev != b.Rev || a.Compacted != b.Compacted {
		t.Errorf("revision/compacted: %s %d/%d, %s %d/%d", nameA, a.Rev, a.Compacted, nameB, b.Rev, b.Compacted)
	}
	for rev := max(a.Compacted, 1); rev <= max(a.Rev, b.Rev); rev++ {
		if x, y := strings.Join(a.Revisions[rev], "\n  "), strings.Join(b.Revisions[rev], "\n  "); x != y {
			t.Errorf("at revision %d:\n %s:\n  %s\n %s:\n  %s", rev, nameA, x, nameB, y)
		}
		if a.HashKV[rev] != b.HashKV[rev] {
			t.Errorf("HashKV(%d): %s %s, %s %s", rev, nameA, a.HashKV[rev], nameB, b.HashKV[rev])
		}
	}
	if x, y := strings.Join(a.Leases, "; "), strings.Join(b.Leases, "; "); x != y {
		t.Errorf("leases:\n %s: %s\n %s: %s", nameA, x, nameB, y)
	}
}

// watchHistory watches every key from revision from with previous values
// and returns the events up to revision to, one line each.
func watchHistory(t *testing.T, c *clientv3.Client, from, to int64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	for resp := range c.Watch(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(from), clientv3.WithPrevKV()) {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch from %d: %v", from, err)
		}
		for _, ev := range resp.Events {
			line := fmt.Sprintf("%s %s=%q c%d m%d v%d l%x", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.CreateRevision, ev.Kv.ModRevision, ev.Kv.Version, ev.Kv.Lease)
			if ev.PrevKv != nil {
				line += fmt.Sprintf(" prev=%q m%d", ev.PrevKv.Value, ev.PrevKv.ModRevision)
			}
			out = append(out, line)
			if ev.Kv.ModRevision >= to {
				cancel()
			}
		}
	}
	return out
}
