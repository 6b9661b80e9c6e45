package revision

import (
	"errors"
	"testing"
)

// TestBumpRevLeavesAGapReadsAnswerThePreviousState: a view that skips
// revisions (a mirrored root: the source's other clusters took them)
// answers a read inside the gap with the state before it, its next
// transaction continues after the bump, and the changes a watch replays
// from inside the gap are those after it.
func TestBumpRevLeavesAGapReadsAnswerThePreviousState(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1")))
	mustApply(t, v, 3, Op{Kind: OpBumpRev, Rev: 9}, txn(10, put("a", "2"), put("b", "1")))
	mustApply(t, v, 4, Op{Kind: OpBumpRev, Rev: 20})
	if st := v.State(); st.Rev != 20 || st.LSN != 4 {
		t.Fatalf("state after bumps: %+v", st)
	}
	_ = v.Read(func(r Reader) error {
		for _, rev := range []int64{2, 5, 9} {
			if kv := get(t, r, "a", rev); kv == nil || string(kv.Value) != "1" || kv.ModRevision != 2 {
				t.Errorf("a@%d: %+v", rev, kv)
			}
		}
		for _, rev := range []int64{10, 15, 20} {
			if kv := get(t, r, "a", rev); kv == nil || string(kv.Value) != "2" || kv.Version != 2 {
				t.Errorf("a@%d: %+v", rev, kv)
			}
		}
		if err := r.Range([]byte("a"), nil, 21, func(*KeyValue) bool { return true }); !errors.Is(err, ErrFutureRev) {
			t.Errorf("a@21: %v", err)
		}
		return nil
	})
	var revs []int64
	if _, err := v.Changes(5, func(ev Event) bool { revs = append(revs, ev.KV.ModRevision); return true }); err != nil {
		t.Fatal(err)
	}
	if len(revs) != 2 || revs[0] != 10 || revs[1] != 10 {
		t.Errorf("changes from 5: %v", revs)
	}
	mustApply(t, v, 5, txn(21, put("c", "1")))
	_ = v.Read(func(r Reader) error {
		if kv := get(t, r, "c", 0); kv.CreateRevision != 21 || kv.ModRevision != 21 {
			t.Errorf("c: %+v", kv)
		}
		return nil
	})
	// A compaction may target a revision inside a gap.
	mustApply(t, v, 6, Op{Kind: OpCompact, Rev: 15})
	_ = v.Read(func(r Reader) error {
		if kv := get(t, r, "a", 15); kv == nil || string(kv.Value) != "2" {
			t.Errorf("a@15 after compacting to 15: %+v", kv)
		}
		return nil
	})
}

func TestBumpRevMustMoveForward(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
	}{
		{"to the current revision", []Op{{Kind: OpBumpRev, Rev: 3}}},
		{"backwards", []Op{{Kind: OpBumpRev, Rev: 2}}},
		{"below a transaction of the same entry", []Op{txn(4, put("x", "1")), {Kind: OpBumpRev, Rev: 4}}},
		{"then a transaction that does not follow", []Op{{Kind: OpBumpRev, Rev: 8}, txn(8, put("x", "1"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := NewView(1, 1)
			mustApply(t, v, 2, txn(2, put("a", "1")), txn(3, put("a", "2")))
			if _, err := v.Apply(&Entry{LSN: 3, Ops: tc.ops}); err == nil {
				t.Fatalf("applied %+v", tc.ops)
			}
		})
	}
}

func TestEntryEndRevCountsBumps(t *testing.T) {
	for _, tc := range []struct {
		ops  []Op
		want int64
	}{
		{nil, 0},
		{[]Op{{Kind: OpLeaseGrant, Lease: 1, TTL: 5}}, 0},
		{[]Op{txn(4, put("a", "1"))}, 4},
		{[]Op{{Kind: OpBumpRev, Rev: 7}, txn(8, put("a", "1"))}, 8},
		{[]Op{txn(4, put("a", "1")), {Kind: OpBumpRev, Rev: 9}}, 9},
	} {
		e := &Entry{Ops: tc.ops}
		if got := e.EndRev(); got != tc.want {
			t.Errorf("EndRev of %+v = %d, want %d", tc.ops, got, tc.want)
		}
	}
}
