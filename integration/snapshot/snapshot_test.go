package snapshot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/snaprestore"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
	"github.com/zketcd/zketcd/internal/zkstore"
)

func freshRoot(t *testing.T) string {
	return "/zketcd-snapshot-test/" + filepath.Base(t.Name()) + "-" + time.Now().Format("150405.000000")
}

// TestZketcdSnapshotRestoresIntoEtcd: `etcdctl snapshot save` against
// zketcd writes a file `etcdutl snapshot status` reads and `etcdutl
// snapshot restore` accepts; etcd 3.7.3 started on the restored data
// directory serves every retained revision, the leases and the compacted
// revision zketcd served, with the same HashKV.
func TestZketcdSnapshotRestoresIntoEtcd(t *testing.T) {
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{})
	zc := zk.Client(t)
	writeHistory(t, zc)
	want := takeDump(t, zc, "zketcd")

	path := filepath.Join(t.TempDir(), "zketcd.snapshot")
	saveSnapshot(t, zk.Endpoint(), path)
	st := status(t, path)
	if st.Revision != want.Rev || st.TotalKey != len(want.Revisions[want.Rev]) || st.Version != "3.7.0" {
		t.Errorf("etcdutl snapshot status: %+v; want revision %d, %d keys, version 3.7.0", st, want.Rev, len(want.Revisions[want.Rev]))
	}
	etcd := restoreIntoEtcd(t, path)
	compareDumps(t, "zketcd", want, "etcd restored from zketcd's snapshot", takeDump(t, etcd.Client(t), "etcd"))
}

// TestEtcdSnapshotRestoresIntoZketcdAndBack: a snapshot saved from etcd
// 3.7.3 restored by `zketcd snapshot restore` into a fresh root serves what
// etcd served (every retained revision, leases, compacted revision,
// HashKV), accepts writes at the next revision, and its own snapshot
// restored into etcd again serves the same.
func TestEtcdSnapshotRestoresIntoZketcdAndBack(t *testing.T) {
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	writeHistory(t, ec)
	want := takeDump(t, ec, "etcd")
	path := filepath.Join(t.TempDir(), "etcd.snapshot")
	saveSnapshot(t, src.Endpoint(), path)

	root := freshRoot(t)
	res, err := snaprestore.Restore(context.Background(), snaprestore.Config{File: path, Store: rootview.StoreConfig(t, sharedZK, root)})
	if err != nil {
		t.Fatal(err)
	}
	// etcd writes its storage version only after its first WAL snapshot.
	if res.Rev != want.Rev || res.CompactRev != want.Compacted || (res.StorageVersion != "" && res.StorageVersion != "3.7.0") {
		t.Errorf("restore result %+v; want revision %d, compacted %d", res, want.Rev, want.Compacted)
	}
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
	zc := zk.Client(t)
	got := takeDump(t, zc, "zketcd")
	compareDumps(t, "etcd", want, "zketcd restored from etcd's snapshot", got)
	// A watch from a revision before the move (an informer's
	// resourceVersion) resumes on zketcd with the same events.
	wantEvents := watchHistory(t, ec, want.Compacted+1, want.Rev)
	if g, w := strings.Join(watchHistory(t, zc, want.Compacted+1, want.Rev), "\n"), strings.Join(wantEvents, "\n"); g != w {
		t.Errorf("watch from %d:\n etcd:\n%s\n zketcd:\n%s", want.Compacted+1, w, g)
	} else {
		t.Logf("watch from revision %d: the same %d events", want.Compacted+1, len(wantEvents))
	}

	// And back: zketcd's snapshot into etcd.
	back := filepath.Join(t.TempDir(), "zketcd.snapshot")
	saveSnapshot(t, zk.Endpoint(), back)
	etcd := restoreIntoEtcd(t, back)
	compareDumps(t, "etcd", want, "etcd restored from zketcd's snapshot", takeDump(t, etcd.Client(t), "etcd"))

	// Writes continue at the next revision, and the recovered root (a
	// restart replays the imported base) still serves the history.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := zc.Put(ctx, "/registry/after", "move")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != want.Rev+1 {
		t.Errorf("first write after the restore at revision %d, want %d", resp.Header.Revision, want.Rev+1)
	}
	zk.Restart()
	after := takeDump(t, zk.Client(t), "zketcd restarted")
	delete(after.Revisions, want.Rev+1)
	delete(after.HashKV, want.Rev+1)
	after.Rev = want.Rev
	compareDumps(t, "etcd", want, "zketcd after a write and a restart", after)
}

// TestRestoreRefusesBadInput: a corrupted or truncated file, a file that is
// not an etcd snapshot, and a root that holds data are refused with a clear
// error, and a refused or failed restore leaves no root behind.
func TestRestoreRefusesBadInput(t *testing.T) {
	src := etcdoracle.Start(t)
	writeHistory(t, src.Client(t))
	dir := t.TempDir()
	good := filepath.Join(dir, "etcd.snapshot")
	saveSnapshot(t, src.Endpoint(), good)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)/3] ^= 0x5a
	for _, c := range []struct {
		name string
		file string
		want error
	}{
		{"corrupted", write("corrupt", corrupt), etcdformat.ErrChecksum},
		{"truncated", write("truncated", data[:len(data)/2]), etcdformat.ErrChecksum},
		{"not-a-snapshot", write("text", withTrailer([]byte(strings.Repeat("not a bbolt file", 256)))), etcdformat.ErrFormat},
	} {
		root := freshRoot(t) + c.name
		_, err := snaprestore.Restore(context.Background(), snaprestore.Config{File: c.file, Store: rootview.StoreConfig(t, sharedZK, root)})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
		if exists, _, err := zkstore.RootExists(context.Background(), rootview.StoreConfig(t, sharedZK, root)); err != nil || exists {
			t.Errorf("%s: root left behind (exists=%v, %v)", c.name, exists, err)
		}
	}

	// A root in use.
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{})
	if _, err := zk.Client(t).Put(context.Background(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	_, err = snaprestore.Restore(context.Background(), snaprestore.Config{File: good, Store: rootview.StoreConfig(t, sharedZK, zk.Root())})
	if !errors.Is(err, snaprestore.ErrRootInUse) {
		t.Errorf("root in use: %v, want ErrRootInUse", err)
	} else {
		t.Logf("root in use: %v", err)
	}
	if resp, err := zk.Client(t).Get(context.Background(), "k"); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("the root in use changed: %v %v", resp, err)
	}
}

// withTrailer appends data's SHA-256, as a streamed snapshot ends.
func withTrailer(data []byte) []byte {
	sum := sha256.Sum256(data)
	return append(data, sum[:]...)
}

// TestSnapshotUnderWritesIsOfOneRevision: a snapshot saved from zketcd
// while a writer keeps writing holds exactly the state of one revision: the
// etcd restored from it lists, at its current revision R, what zketcd lists
// at R, and its HashKV equals zketcd's HashKV(R).
func TestSnapshotUnderWritesIsOfOneRevision(t *testing.T) {
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{})
	zc := zk.Client(t)
	writeHistory(t, zc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		n := 0
		for ctx.Err() == nil {
			if _, err := zc.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/registry/w/%d", n%50), fmt.Sprint(n)), clientv3.OpDelete(fmt.Sprintf("/registry/w/%d", (n+25)%50))).Commit(); err == nil {
				n++
			}
		}
		done <- n
	}()
	time.Sleep(200 * time.Millisecond)
	path := filepath.Join(t.TempDir(), "zketcd.snapshot")
	saveSnapshot(t, zk.Endpoint(), path)
	time.Sleep(100 * time.Millisecond)
	cancel()
	t.Logf("%d writes went on around the snapshot", <-done)

	etcd := restoreIntoEtcd(t, path)
	got := takeDump(t, etcd.Client(t), "etcd")
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	resp, err := zc.Get(rctx, "", clientv3.WithFromKey(), clientv3.WithRev(got.Rev))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, kv := range resp.Kvs {
		want = append(want, fmt.Sprintf("%s=%q c%d m%d v%d l%x", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease))
	}
	if g, w := strings.Join(got.Revisions[got.Rev], "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("restored etcd at its revision %d differs from zketcd at %d:\n%s\nwant\n%s", got.Rev, got.Rev, g, w)
	}
	cur, err := zc.Get(rctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Header.Revision <= got.Rev {
		t.Errorf("no write after the snapshot's revision %d (zketcd at %d)", got.Rev, cur.Header.Revision)
	}
	h, err := pb.NewMaintenanceClient(zc.ActiveConnection()).HashKV(rctx, &pb.HashKVRequest{Revision: got.Rev})
	if err != nil {
		t.Fatal(err)
	}
	if w := fmt.Sprintf("%d compact=%d rev=%d", h.Hash, h.CompactRevision, h.HashRevision); got.HashKV[got.Rev] != w {
		t.Errorf("HashKV(%d): restored etcd %s, zketcd %s", got.Rev, got.HashKV[got.Rev], w)
	}
	t.Logf("snapshot at revision %d while zketcd went on to %d", got.Rev, cur.Header.Revision)
}

// TestRestoreThatFailsWritingLeavesNothing: a restore that fails after it
// started writing to ZooKeeper (here: base chunks larger than ZooKeeper
// accepts) deletes what it wrote; the root does not exist afterwards.
func TestRestoreThatFailsWritingLeavesNothing(t *testing.T) {
	src := etcdoracle.Start(t)
	c := src.Client(t)
	for i := 0; i < 15; i++ {
		// Incompressible, and each its own: base generations are
		// compressed, with a window that would find a repeated value.
		raw := make([]byte, 100<<10)
		if _, err := rand.Read(raw); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(context.Background(), fmt.Sprintf("big/%d", i), string(raw)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "etcd.snapshot")
	saveSnapshot(t, src.Endpoint(), path)
	root := freshRoot(t)
	cfg := rootview.StoreConfig(t, sharedZK, root)
	cfg.BaseChunkBytes = 4 << 20 // one 1.5 MiB chunk: above ZooKeeper's 1 MiB request limit
	_, err := snaprestore.Restore(context.Background(), snaprestore.Config{File: path, Store: cfg})
	if err == nil {
		t.Fatal("restore with chunks ZooKeeper refuses succeeded")
	}
	t.Logf("restore failed as it should: %v", err)
	if exists, _, err := zkstore.RootExists(context.Background(), rootview.StoreConfig(t, sharedZK, root)); err != nil || exists {
		t.Fatalf("root left behind after a failed restore (exists=%v, %v)", exists, err)
	}
}

// TestImportBaseRefusesARootWithWrites: zkstore.ImportBase, the last step
// of a restore, refuses a root whose log has entries past the sentinel
// (e.g. a zketcd started on it after the restore checked it was empty).
func TestImportBaseRefusesARootWithWrites(t *testing.T) {
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{})
	if _, err := zk.Client(t).Put(context.Background(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	st, err := zkstore.Open(context.Background(), rootview.StoreConfig(t, sharedZK, zk.Root()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	snap := zk.Engine().Snapshot()
	snap.State.LSN = 1
	if _, err := st.ImportBase(context.Background(), snap); !errors.Is(err, zkstore.ErrNotFresh) {
		t.Fatalf("ImportBase on a root with writes: %v, want ErrNotFresh", err)
	} else {
		t.Logf("%v", err)
	}
}
