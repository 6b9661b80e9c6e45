package etcdformat

import (
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

// gapView is a mirrored root's view: revisions skipped (OpBumpRev) before,
// between and after its transactions.
func gapView(t *testing.T) *revision.View {
	t.Helper()
	v := revision.NewView(1, 1)
	ops := [][]revision.Op{
		{{Kind: revision.OpBumpRev, Rev: 10}, {Kind: revision.OpTxn, Rev: 11, Changes: []revision.Change{{Key: []byte("/p/a"), Value: []byte("1")}, {Key: []byte("/p/b"), Value: []byte("1")}}}},
		{{Kind: revision.OpBumpRev, Rev: 19}, {Kind: revision.OpTxn, Rev: 20, Changes: []revision.Change{{Key: []byte("/p/a"), Value: []byte("2")}}}},
		{{Kind: revision.OpBumpRev, Rev: 29}, {Kind: revision.OpTxn, Rev: 30, Changes: []revision.Change{{Delete: true, Key: []byte("/p/b")}}}},
		{{Kind: revision.OpBumpRev, Rev: 45}},
	}
	for i, o := range ops {
		if _, err := v.Apply(&revision.Entry{LSN: int64(i + 2), Ops: o}); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// TestHashKVInsideARevisionGap: HashKV at a revision no transaction took
// hashes the same records as at the transaction before it (etcd's HashKV
// of the prefix's records is the same at both), with the asked revision as
// hash_revision; above the bumped head it is a future revision.
func TestHashKVInsideARevisionGap(t *testing.T) {
	s := gapView(t).Snapshot()
	for _, tc := range []struct{ gap, before int64 }{{5, 1}, {15, 11}, {25, 20}, {40, 30}, {45, 30}, {0, 30}} {
		hg, err := HashKV(s, tc.gap)
		if err != nil {
			t.Fatalf("HashKV(%d): %v", tc.gap, err)
		}
		hb, err := HashKV(s, tc.before)
		if err != nil {
			t.Fatal(err)
		}
		want := tc.gap
		if want == 0 {
			want = 45
		}
		if hg.Hash != hb.Hash || hg.Revision != want {
			t.Errorf("HashKV(%d) = %+v, HashKV(%d) = %+v: same hash, revision %d wanted", tc.gap, hg, tc.before, hb, want)
		}
	}
	if _, err := HashKV(s, 46); err != revision.ErrFutureRev {
		t.Errorf("HashKV(46): %v", err)
	}
}

// TestSnapshotFileOfARootWithGaps: the snapshot file keeps every record
// at its revision and the interior gaps with them; a gap at the top (no
// write since the cut-over's bump) has no record, so a reader derives the
// last transaction's revision, as etcdutl snapshot restore does (the
// operator passes --bump-revision; see docs/operations.md).
func TestSnapshotFileOfARootWithGaps(t *testing.T) {
	want := gapView(t).Snapshot()
	got, _, err := ReadFile(writeSnapshotFile(t, t.TempDir(), want), ReadOptions{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got.State.Rev != 30 {
		t.Fatalf("read back at revision %d, want 30 (the last record's)", got.State.Rev)
	}
	for _, rev := range []int64{11, 15, 20, 25, 30} {
		hg, err1 := HashKV(got, rev)
		hw, err2 := HashKV(want, rev)
		if err1 != nil || err2 != nil || hg != hw {
			t.Fatalf("HashKV(%d): %+v %v, want %+v %v", rev, hg, err1, hw, err2)
		}
	}
}
