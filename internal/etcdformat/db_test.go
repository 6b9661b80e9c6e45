package etcdformat

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

// testView applies a small history: puts, overwrites, a txn, deletes,
// leases and a compaction.
func testView(t testing.TB) *revision.View {
	t.Helper()
	v := revision.NewView(1, 1)
	put := func(k, val string, lease int64) revision.Change {
		return revision.Change{Key: []byte(k), Value: []byte(val), Lease: lease}
	}
	del := func(k string) revision.Change { return revision.Change{Delete: true, Key: []byte(k)} }
	entries := [][]revision.Op{
		{{Kind: revision.OpLeaseGrant, Lease: 0x10, TTL: 60}, {Kind: revision.OpLeaseGrant, Lease: 0x20, TTL: 600}},
		{{Kind: revision.OpTxn, Rev: 2, Changes: []revision.Change{put("a", "1", 0)}}},
		{{Kind: revision.OpTxn, Rev: 3, Changes: []revision.Change{put("a", "2", 0), put("b", "x", 0x10), put("c", "y", 0)}}},
		{{Kind: revision.OpTxn, Rev: 4, Changes: []revision.Change{del("c"), put("d", "z", 0x20)}}},
		{{Kind: revision.OpTxn, Rev: 5, Changes: []revision.Change{put("a", "3", 0), put("c", "again", 0)}}},
		{{Kind: revision.OpCompact, Rev: 4}},
		{{Kind: revision.OpTxn, Rev: 6, Changes: []revision.Change{del("a")}}},
		{{Kind: revision.OpLeaseCheckpoint, Lease: 0x20, TTL: 300}},
	}
	for i, ops := range entries {
		if _, err := v.Apply(&revision.Entry{LSN: int64(i + 2), Ops: ops}); err != nil {
			t.Fatalf("apply entry %d: %v", i+2, err)
		}
	}
	return v
}

// writeSnapshotFile writes s as a streamed snapshot file (database + trailer).
func writeSnapshotFile(t testing.TB, dir string, s *revision.Snapshot) string {
	t.Helper()
	db := filepath.Join(dir, "db")
	st, err := WriteDB(db, s, DBInfo{ConsistentIndex: 7, Term: 2})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if err := Stream(f, st.Size, func(b []byte, _ uint64) error { out.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "snapshot.db")
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSnapshotFileRoundTripsTheView(t *testing.T) {
	v := testView(t)
	want := v.Snapshot()
	path := writeSnapshotFile(t, t.TempDir(), want)
	got, info, err := ReadFile(path, ReadOptions{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Checksum || info.StorageVersion != StorageVersion || info.ConsistentIndex != 7 || info.Term != 2 {
		t.Fatalf("file info %+v", info)
	}
	if got.State.Rev != want.State.Rev || got.State.CompactRev != want.State.CompactRev {
		t.Fatalf("state %+v, want %+v", got.State, want.State)
	}
	strip := func(s *revision.Snapshot) []revision.KeyValue {
		var out []revision.KeyValue
		s.Each(func(kh revision.KeyHistory) bool {
			for _, kv := range kh.Versions {
				c := *kv
				c.CreateZxid, c.ModZxid = 0, 0
				out = append(out, c)
			}
			return true
		})
		return out
	}
	if g, w := strip(got), strip(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("versions differ:\n got %+v\nwant %+v", g, w)
	}
	if !reflect.DeepEqual(got.Leases, want.Leases) {
		t.Fatalf("leases %+v, want %+v", got.Leases, want.Leases)
	}
	for _, rev := range []int64{0, 4, 5, 6} {
		hg, err1 := HashKV(got, rev)
		hw, err2 := HashKV(want, rev)
		if err1 != nil || err2 != nil || hg != hw {
			t.Fatalf("HashKV(%d): %+v %v, want %+v %v", rev, hg, err1, hw, err2)
		}
	}
	if _, err := revision.FromSnapshot(got); err != nil {
		t.Fatalf("read snapshot does not load into a view: %v", err)
	}
}

func TestReadFileRefusesCorruptTruncatedAndForeignFiles(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(writeSnapshotFile(t, dir, testView(t).Snapshot()))
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
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0xff
	notBolt := bytes.Repeat([]byte("zketcd"), 1000)[:4096]
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"corrupted", flipped, ErrChecksum},
		{"truncated", good[:len(good)-4096], ErrChecksum},
		{"no-trailer", good[:len(good)-32], ErrChecksum},
		{"not-bbolt", withTrailer(notBolt), ErrFormat},
		{"empty", nil, ErrChecksum},
	}
	for _, c := range cases {
		_, _, err := ReadFile(write(c.name, c.data), ReadOptions{TempDir: dir})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".db" && e.Name() != "snapshot.db" {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// withTrailer returns data followed by its SHA-256 (a snapshot file's
// layout).
func withTrailer(data []byte) []byte {
	sum := sha256.Sum256(data)
	return append(append([]byte(nil), data...), sum[:]...)
}
