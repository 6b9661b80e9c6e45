package revision

import (
	"fmt"
	"reflect"
	"testing"
)

// TestSnapshotRoundTripAnswersLikeTheOriginal builds a view with deletes,
// re-creates, leases and a compaction, snapshots it, loads the snapshot, and
// compares every read at every readable revision and the change history.
func TestSnapshotRoundTripAnswersLikeTheOriginal(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, Op{Kind: OpLeaseGrant, Lease: 9, TTL: 30},
		txn(2, put("a", "1"), putLease("b", "1", 9), put("c", "1")),
		txn(3, put("a", "2"), del("c")))
	mustApply(t, v, 3, txn(4, put("c", "2")), txn(5, del("a"), put("d", "1")), Op{Kind: OpCompact, Rev: 3})
	mustApply(t, v, 4, txn(6, put("a", "3"), putLease("d", "2", 9)))
	w, err := FromSnapshot(v.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if v.State() != w.State() {
		t.Fatalf("state %+v vs %+v", v.State(), w.State())
	}
	for rev := int64(3); rev <= 6; rev++ {
		var a, b string
		_ = v.Read(func(r Reader) error { a = keys(t, r, "\x00", "", rev); return nil })
		_ = w.Read(func(r Reader) error { b = keys(t, r, "\x00", "", rev); return nil })
		if a != b {
			t.Errorf("rev %d: %s vs %s", rev, a, b)
		}
	}
	hist := func(x *View) string {
		var out []string
		if _, err := x.Changes(3, func(e Event) bool {
			prev := "-"
			if e.PrevKV != nil {
				prev = fmt.Sprint(e.PrevKV.ModRevision)
			}
			out = append(out, fmt.Sprintf("%d:%s@%d.%d<%s", e.Type, e.KV.Key, e.KV.ModRevision, e.KV.Sub, prev))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(out)
	}
	if a, b := hist(v), hist(w); a != b {
		t.Errorf("history:\noriginal %s\nloaded   %s", a, b)
	}
	_ = v.Read(func(r Reader) error {
		return w.Read(func(r2 Reader) error {
			if !reflect.DeepEqual(r.Lease(9).Keys(), r2.Lease(9).Keys()) {
				t.Errorf("lease keys %q vs %q", r.Lease(9).Keys(), r2.Lease(9).Keys())
			}
			return nil
		})
	})
	// The loaded view keeps applying entries.
	mustApply(t, w, 5, txn(7, del("d")))
}

// TestDataBytesCountTheLogAndWhatACompactionRetains: a log of distinct
// puts carries exactly the data a snapshot of it holds; superseded versions
// count in the log and, once compacted, no longer in the snapshot.
func TestDataBytesCountTheLogAndWhatACompactionRetains(t *testing.T) {
	v := NewView(1, 1)
	var logged int64
	apply := func(lsn int64, ops ...Op) {
		t.Helper()
		e := &Entry{LSN: lsn, Ops: ops}
		logged += e.DataBytes()
		if _, err := v.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	apply(2, txn(2, put("a", "1111"), put("bb", "22")), txn(3, put("c", "333")))
	if got := v.Snapshot().DataBytes(); got != logged || got != 1+4+2+2+1+3 {
		t.Fatalf("distinct puts: snapshot %d bytes, log %d", got, logged)
	}
	apply(3, txn(4, put("a", "x")), txn(5, del("c")), Op{Kind: OpAuth, Auth: []byte("auth")})
	if want := int64(13 + 2 + 1 + 4); logged != want {
		t.Fatalf("log %d bytes, want %d", logged, want)
	}
	if got := v.Snapshot().DataBytes(); got != 13+2+1+4 {
		t.Fatalf("before the compaction: snapshot %d bytes, want every version's 16 and the auth state's 4", got)
	}
	apply(4, Op{Kind: OpCompact, Rev: 5})
	// Retained at 5: a@4 ("a"+"x"), bb@2, c's deletion at 5 (key only),
	// and the auth state.
	if got := v.Snapshot().DataBytes(); got != 2+4+1+4 {
		t.Fatalf("after the compaction: snapshot %d bytes, want 11", got)
	}
}
