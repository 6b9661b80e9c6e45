package snaprestore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/snaprestore"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// sharedZK is one ZooKeeper shared by the package's tests, each on a root
// of its own.
var sharedZK = zkservertest.NewShared("snaprestore", zkserver.Options{})

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }

// storeConfig names a root nothing uses yet.
// history is an etcd key space with overwrites, a multi-key revision,
// deletions, leases (one with a remaining TTL) and a compaction.
func history(t *testing.T) *revision.Snapshot {
	t.Helper()
	v := revision.NewView(1, 1)
	put := func(k, val string, lease int64) revision.Change {
		return revision.Change{Key: []byte(k), Value: []byte(val), Lease: lease}
	}
	del := func(k string) revision.Change { return revision.Change{Delete: true, Key: []byte(k)} }
	for i, ops := range [][]revision.Op{
		{{Kind: revision.OpLeaseGrant, Lease: 0x10, TTL: 60}, {Kind: revision.OpLeaseGrant, Lease: 0x20, TTL: 600}},
		{{Kind: revision.OpTxn, Rev: 2, Changes: []revision.Change{put("a", "1", 0)}}},
		{{Kind: revision.OpTxn, Rev: 3, Changes: []revision.Change{put("a", "2", 0), put("b", "x", 0x10), put("c", "y", 0)}}},
		{{Kind: revision.OpTxn, Rev: 4, Changes: []revision.Change{del("c"), put("d", "z", 0x20)}}},
		{{Kind: revision.OpTxn, Rev: 5, Changes: []revision.Change{put("a", "3", 0), put("c", "again", 0)}}},
		{{Kind: revision.OpCompact, Rev: 4}},
		{{Kind: revision.OpTxn, Rev: 6, Changes: []revision.Change{del("a")}}},
		{{Kind: revision.OpLeaseCheckpoint, Lease: 0x20, TTL: 300}},
	} {
		if _, err := v.Apply(&revision.Entry{LSN: int64(i + 2), Ops: ops}); err != nil {
			t.Fatalf("apply entry %d: %v", i+2, err)
		}
	}
	return v.Snapshot()
}

// snapshotFile writes s as etcdctl snapshot save does (a bbolt database
// with its SHA-256 trailer) and returns its path and the bare database's.
func snapshotFile(t *testing.T, s *revision.Snapshot) (file, db string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "db")
	st, err := etcdformat.WriteDB(db, s, etcdformat.DBInfo{ConsistentIndex: 9, Term: 2})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if err := etcdformat.Stream(f, st.Size, func(b []byte, _ uint64) error { out.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(dir, "snapshot.db")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, db
}

// TestARestoredRootServesTheSnapshotsRevisionsAndContinues: every retained
// version with its revisions, version and lease, the leases and the
// compacted revision come back as an instance recovers the root; an
// instance on it writes the next revision and refuses reads below the
// compaction, as etcd would.
func TestARestoredRootServesTheSnapshotsRevisionsAndContinues(t *testing.T) {
	want := history(t)
	file, _ := snapshotFile(t, want)
	cfg := rootview.StoreConfig(t, sharedZK, "")
	res, err := snaprestore.Restore(testutil.Context(t, time.Minute), snaprestore.Config{File: file, TempDir: t.TempDir(), Store: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rev != 6 || res.CompactRev != 4 || res.Keys != 4 || res.Live != 3 || res.Leases != 2 || res.Base.Gen != 1 {
		t.Fatalf("result %+v", res)
	}
	got := rootview.Recovered(t, cfg)
	if rootview.Dump(got) != rootview.Dump(want) || got.State.CompactRev != want.State.CompactRev {
		t.Fatalf("recovered (compacted at %d):\n%s\nsnapshot (compacted at %d):\n%s", got.State.CompactRev, rootview.Dump(got), want.State.CompactRev, rootview.Dump(want))
	}

	lg := testutil.Logger(logrus.WarnLevel)
	e, err := engine.Open(testutil.Context(t, time.Minute), engine.Config{Store: cfg, Name: "restored", Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	put, err := e.Put(testutil.Context(t, time.Minute), &pb.PutRequest{Key: []byte("e"), Value: []byte("new")})
	if err != nil || put.Header.Revision != 7 {
		t.Fatalf("put after the restore: %v %v, want revision 7", put, err)
	}
	if _, err := e.Range(testutil.Context(t, time.Minute), &pb.RangeRequest{Key: []byte("a"), Revision: 3}); !errors.Is(err, revision.ErrCompacted) {
		t.Fatalf("read below the compaction: %v, want %v", err, revision.ErrCompacted)
	}
	b, err := e.Range(testutil.Context(t, time.Minute), &pb.RangeRequest{Key: []byte("b")})
	if err != nil || len(b.Kvs) != 1 || b.Kvs[0].Lease != 0x10 || b.Kvs[0].ModRevision != 3 {
		t.Fatalf("b after the restore: %v %v", b, err)
	}
}

// TestRestoreRefusesARootInUseAndLeavesIt: a second restore into a root
// that holds data is refused, and the data is as the first left it.
func TestRestoreRefusesARootInUseAndLeavesIt(t *testing.T) {
	snap := history(t)
	file, _ := snapshotFile(t, snap)
	cfg := rootview.StoreConfig(t, sharedZK, "")
	if _, err := snaprestore.Restore(testutil.Context(t, time.Minute), snaprestore.Config{File: file, Store: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := snaprestore.Restore(testutil.Context(t, time.Minute), snaprestore.Config{File: file, Store: cfg}); !errors.Is(err, snaprestore.ErrRootInUse) {
		t.Fatalf("restore into a root in use: %v, want %v", err, snaprestore.ErrRootInUse)
	}
	if got := rootview.Dump(rootview.Recovered(t, cfg)); got != rootview.Dump(snap) {
		t.Fatalf("the refused restore changed the root:\n%s", got)
	}
}

// TestABadSnapshotIsRefusedAndTheRootLeftAsFound: a damaged file, a bare
// database without SkipHashCheck, and a snapshot a view would not accept
// (a live key on a lease it does not hold) are refused, and the root does
// not exist afterwards; the bare database restores with SkipHashCheck.
func TestABadSnapshotIsRefusedAndTheRootLeftAsFound(t *testing.T) {
	good, bare := snapshotFile(t, history(t))
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	damaged := filepath.Join(t.TempDir(), "damaged.db")
	if err := os.WriteFile(damaged, data, 0o600); err != nil {
		t.Fatal(err)
	}
	orphan := history(t)
	orphan.Leases = orphan.Leases[1:] // b's lease 0x10 is gone, b is live
	orphanFile, _ := snapshotFile(t, orphan)
	for _, tc := range []struct {
		name string
		cfg  snaprestore.Config
		want error // nil: any error
	}{
		{"a damaged file", snaprestore.Config{File: damaged}, etcdformat.ErrChecksum},
		{"a bare database", snaprestore.Config{File: bare}, etcdformat.ErrChecksum},
		{"a key on a missing lease", snaprestore.Config{File: orphanFile}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Store = rootview.StoreConfig(t, sharedZK, "")
			_, err := snaprestore.Restore(testutil.Context(t, time.Minute), tc.cfg)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("restore: %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
			if exists, _, err := zkstore.RootExists(testutil.Context(t, time.Minute), tc.cfg.Store); err != nil || exists {
				t.Fatalf("root exists %v (%v) after a refused restore", exists, err)
			}
		})
	}
	cfg := rootview.StoreConfig(t, sharedZK, "")
	if _, err := snaprestore.Restore(testutil.Context(t, time.Minute), snaprestore.Config{File: bare, SkipHashCheck: true, Store: cfg}); err != nil {
		t.Fatalf("a bare database with SkipHashCheck: %v", err)
	}
	if got := rootview.Dump(rootview.Recovered(t, cfg)); got != rootview.Dump(history(t)) {
		t.Fatalf("the bare database restored as:\n%s", got)
	}
}
