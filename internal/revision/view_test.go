package revision

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func put(k, v string) Change               { return Change{Key: []byte(k), Value: []byte(v)} }
func putLease(k, v string, l int64) Change { return Change{Key: []byte(k), Value: []byte(v), Lease: l} }
func del(k string) Change                  { return Change{Delete: true, Key: []byte(k)} }

func txn(rev int64, cs ...Change) Op { return Op{Kind: OpTxn, Rev: rev, Changes: cs} }

func mustApply(t *testing.T, v *View, lsn int64, ops ...Op) []Event {
	t.Helper()
	ev, err := v.Apply(&Entry{LSN: lsn, Zxid: 100 + lsn, Ops: ops})
	if err != nil {
		t.Fatalf("apply entry %d: %v", lsn, err)
	}
	return ev
}

func get(t *testing.T, r Reader, key string, rev int64) *KeyValue {
	t.Helper()
	var out *KeyValue
	if err := r.Range([]byte(key), nil, rev, func(kv *KeyValue) bool { out = kv; return false }); err != nil {
		t.Fatalf("get %q@%d: %v", key, rev, err)
	}
	return out
}

func keys(t *testing.T, r Reader, key, end string, rev int64) string {
	t.Helper()
	var out []string
	e := []byte(end)
	if end == "" {
		e = []byte{}
	}
	if err := r.Range([]byte(key), e, rev, func(kv *KeyValue) bool { out = append(out, string(kv.Key)); return true }); err != nil {
		t.Fatalf("range: %v", err)
	}
	return fmt.Sprint(out)
}

func TestApplyNumbersVersionsLikeEtcd(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1")), txn(3, put("a", "2"), put("b", "1")))
	ev := mustApply(t, v, 3, txn(4, del("a")), txn(5, put("a", "3")))
	if len(ev) != 2 || ev[0].Type != EventDelete || ev[0].PrevKV.Version != 2 || ev[1].PrevKV != nil {
		t.Fatalf("events: %+v", ev)
	}
	_ = v.Read(func(r Reader) error {
		if kv := get(t, r, "a", 0); kv.CreateRevision != 5 || kv.Version != 1 || kv.ModRevision != 5 || kv.CreateZxid != 103 {
			t.Errorf("a after re-create: %+v", kv)
		}
		if kv := get(t, r, "a", 3); kv.CreateRevision != 2 || kv.Version != 2 || string(kv.Value) != "2" {
			t.Errorf("a@3: %+v", kv)
		}
		if kv := get(t, r, "a", 4); kv != nil {
			t.Errorf("a@4 should be deleted: %+v", kv)
		}
		if kv := get(t, r, "a", 1); kv != nil {
			t.Errorf("a@1 should not exist: %+v", kv)
		}
		if got := keys(t, r, "a", "", 3); got != "[a b]" {
			t.Errorf("range@3 = %s", got)
		}
		if err := r.Range([]byte("a"), nil, 6, func(*KeyValue) bool { return true }); !errors.Is(err, ErrFutureRev) {
			t.Errorf("future read: %v", err)
		}
		return nil
	})
	if s := v.State(); s.Rev != 5 || s.LSN != 3 {
		t.Errorf("state %+v", s)
	}
}

func TestApplyRejectsGapsAndBadEntriesAndStops(t *testing.T) {
	v := NewView(1, 1)
	if _, err := v.Apply(&Entry{LSN: 3}); err == nil {
		t.Fatal("gap accepted")
	}
	if v.Err() == nil {
		t.Fatal("view not stopped after a bad entry")
	}
	v = NewView(1, 1)
	if _, err := v.Apply(&Entry{LSN: 2, Ops: []Op{txn(2, del("missing"))}}); err == nil {
		t.Fatal("delete of a missing key accepted")
	}
	v = NewView(1, 1)
	if _, err := v.Apply(&Entry{LSN: 2, Ops: []Op{txn(3, put("a", "1"))}}); err == nil {
		t.Fatal("revision gap accepted")
	}
	v = NewView(1, 1)
	if _, err := v.Apply(&Entry{LSN: 2, Ops: []Op{txn(2, putLease("a", "1", 7))}}); err == nil {
		t.Fatal("put with unknown lease accepted")
	}
	// Re-applying an applied entry is a no-op (tailer and committer race).
	v = NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1")))
	if ev, err := v.Apply(&Entry{LSN: 2, Ops: []Op{txn(2, put("a", "1"))}}); err != nil || ev != nil {
		t.Fatalf("re-apply: %v %v", ev, err)
	}
}

func TestCompactKeepsWhatReadsAtOrAboveCanSee(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1")), txn(3, put("b", "1")), txn(4, put("a", "2")), txn(5, del("b")), txn(6, put("c", "1")))
	mustApply(t, v, 3, Op{Kind: OpCompact, Rev: 5})
	_ = v.Read(func(r Reader) error {
		if err := r.Range([]byte("a"), nil, 4, func(*KeyValue) bool { return true }); !errors.Is(err, ErrCompacted) {
			t.Errorf("read below compaction: %v", err)
		}
		if kv := get(t, r, "a", 5); kv == nil || string(kv.Value) != "2" {
			t.Errorf("a@5 = %+v", kv)
		}
		if got := keys(t, r, "\x00", "", 5); got != "[a]" {
			t.Errorf("range@5 = %s", got)
		}
		return nil
	})
	trimAll(t, v)
	if n := v.tree.Len(); n != 3 {
		t.Errorf("tree keeps %d keys, want 3 (b's deletion at the compacted revision stays)", n)
	}
	mustApply(t, v, 4, Op{Kind: OpCompact, Rev: 6})
	// Before the trim, a snapshot already leaves b out.
	if n := v.Snapshot().Len(); n != 2 {
		t.Errorf("snapshot before the trim holds %d keys, want 2", n)
	}
	trimAll(t, v)
	if n := v.tree.Len(); n != 2 {
		t.Errorf("tree keeps %d keys, want 2 (b's history is gone)", n)
	}
	if ki, _ := v.tree.Get(&keyIndex{key: []byte("a")}); len(ki.versions) != 1 {
		t.Errorf("a keeps %d versions after compacting to 6, want 1", len(ki.versions))
	}
}

// trimAll drops what the last compaction made invisible, one key per call.
func trimAll(t *testing.T, v *View) {
	t.Helper()
	for i := 0; v.TrimCompacted(1); i++ {
		if i > 1000 {
			t.Fatal("TrimCompacted never finishes")
		}
	}
}

// A snapshot is O(1) to take and stays the state it was taken at while
// the view goes on applying and trimming, with no lock held while it is
// read.
func TestSnapshotStaysItsStateWhileTheViewChanges(t *testing.T) {
	v := NewView(1, 1)
	var ops []Op
	for i := 0; i < 100; i++ {
		ops = append(ops, txn(int64(2+i), put(fmt.Sprintf("k%03d", i), "1")))
	}
	mustApply(t, v, 2, ops...)
	snap := v.Snapshot()
	done := make(chan struct{})
	go func() {
		defer close(done)
		lsn := int64(3)
		apply := func(op Op) {
			if _, err := v.Apply(&Entry{LSN: lsn, Ops: []Op{op}}); err != nil {
				t.Errorf("apply entry %d: %v", lsn, err)
			}
			lsn++
		}
		for i := 0; i < 100; i++ {
			rev := int64(102 + i)
			apply(txn(rev, put(fmt.Sprintf("k%03d", i), "2")))
			if i%10 == 9 {
				apply(Op{Kind: OpCompact, Rev: rev})
				for v.TrimCompacted(7) {
				}
			}
		}
	}()
	for round := 0; round < 20; round++ {
		n := 0
		snap.Each(func(kh KeyHistory) bool {
			if len(kh.Versions) != 1 || string(kh.Versions[0].Value) != "1" || kh.Versions[0].ModRevision > 101 {
				t.Errorf("snapshot changed under it: %s has %d versions", kh.Key, len(kh.Versions))
				return false
			}
			n++
			return true
		})
		if n != 100 {
			t.Fatalf("snapshot holds %d keys, want 100", n)
		}
	}
	<-done
	again, err := FromSnapshot(snap)
	if err != nil || again.State().Rev != 101 || again.KeyCount() != 100 {
		t.Fatalf("view from the old snapshot: %v", err)
	}
}

func TestLeaseAttachDetach(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, Op{Kind: OpLeaseGrant, Lease: 7, TTL: 10}, txn(2, putLease("a", "1", 7), putLease("b", "1", 7)))
	mustApply(t, v, 3, txn(3, put("a", "2")), txn(4, del("b")))
	_ = v.Read(func(r Reader) error {
		if l := r.Lease(7); l == nil || len(l.Keys()) != 0 {
			t.Errorf("lease 7 keys after detach: %v", l)
		}
		return nil
	})
	mustApply(t, v, 4, txn(5, putLease("c", "1", 7)))
	_ = v.Read(func(r Reader) error {
		if ks := r.Lease(7).Keys(); len(ks) != 1 || string(ks[0]) != "c" {
			t.Errorf("lease keys %q", ks)
		}
		return nil
	})
}

func TestWaitApplied(t *testing.T) {
	v := NewView(1, 1)
	done := make(chan error, 1)
	go func() { done <- v.WaitApplied(context.Background(), 2) }()
	select { // a negative, bounded: it waits while 2 is not applied
	case err := <-done:
		t.Fatalf("WaitApplied(2) returned %v before 2 was applied", err)
	case <-time.After(10 * time.Millisecond):
	}
	mustApply(t, v, 2, txn(2, put("a", "1")))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := v.WaitApplied(ctx, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait beyond: %v", err)
	}
}

func TestBatchSeesEarlierTransactionsAndMergesRanges(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1"), put("c", "1"), put("e", "1")))
	_ = v.Read(func(r Reader) error {
		b := NewBatch(r)
		b.Begin()
		b.Put([]byte("b"), []byte("1"), 0)
		if _, err := b.DeleteRange([]byte("c"), nil); err != nil {
			t.Fatal(err)
		}
		if rev, ok := b.Commit(); !ok || rev != 3 {
			t.Fatalf("commit: %d %v", rev, ok)
		}
		b.Begin()
		kv := b.Put([]byte("a"), []byte("2"), 0)
		if kv.Version != 2 || kv.CreateRevision != 2 || kv.ModRevision != 4 {
			t.Errorf("staged put %+v", kv)
		}
		if got := keys(t, b, "a", "", 0); got != "[a b e]" {
			t.Errorf("merged range = %s", got)
		}
		if got := keys(t, b, "a", "", 2); got != "[a c e]" {
			t.Errorf("range at base revision = %s", got)
		}
		if err := b.Range([]byte("a"), nil, 3, func(*KeyValue) bool { return true }); !errors.Is(err, ErrBatchBoundary) {
			t.Errorf("read at a staged revision: %v", err)
		}
		b.Abort()
		if got := get(t, b, "a", 0); string(got.Value) != "1" {
			t.Errorf("abort left %q", got.Value)
		}
		b.Begin()
		if _, ok := b.Commit(); ok {
			t.Error("empty transaction took a revision")
		}
		if ops := b.Ops(); len(ops) != 1 || ops[0].Rev != 3 || len(ops[0].Changes) != 2 {
			t.Errorf("ops %+v", ops)
		}
		return nil
	})
}

func TestBatchRangeStopsEarly(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1"), put("c", "1"), put("e", "1")))
	_ = v.Read(func(r Reader) error {
		b := NewBatch(r)
		b.Begin()
		b.Put([]byte("b"), []byte("1"), 0)
		b.Put([]byte("f"), []byte("1"), 0)
		var got []string
		_ = b.Range([]byte("a"), []byte{}, 0, func(kv *KeyValue) bool {
			got = append(got, string(kv.Key))
			return len(got) < 3
		})
		if fmt.Sprint(got) != "[a b c]" {
			t.Errorf("got %v", got)
		}
		return nil
	})
}

// IndexLen counts a deleted key until the compaction past its delete is
// trimmed, as etcd's key index does; KeyCount only live keys.
func TestIndexLenKeepsDeletedKeysUntilCompacted(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1"), put("b", "1")))
	mustApply(t, v, 3, txn(3, del("a")))
	if n, live := v.IndexLen(), v.KeyCount(); n != 2 || live != 1 {
		t.Fatalf("after a delete: index %d, live %d", n, live)
	}
	mustApply(t, v, 4, txn(4, put("b", "2")), Op{Kind: OpCompact, Rev: 4})
	for v.TrimCompacted(100) {
	}
	if n := v.IndexLen(); n != 1 {
		t.Fatalf("after the compaction: index %d, want 1", n)
	}
}
