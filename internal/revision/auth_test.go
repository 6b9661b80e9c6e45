package revision

import (
	"bytes"
	"testing"
)

func TestAuthOpReplacesStateWithoutTakingARevision(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1")), Op{Kind: OpAuth, Auth: []byte("s1")})
	got, lsn := v.AuthState()
	if string(got) != "s1" || lsn != 2 || v.State().Rev != 2 {
		t.Fatalf("auth %q at %d, rev %d; want s1 at 2, rev 2", got, lsn, v.State().Rev)
	}
	mustApply(t, v, 3, Op{Kind: OpAuth, Auth: []byte("s2")})
	if got, _ := v.AuthState(); string(got) != "s2" || v.State().Rev != 2 {
		t.Fatalf("auth %q rev %d", got, v.State().Rev)
	}
}

func TestBatchStagesAuthStateAndAbortRestoresIt(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, Op{Kind: OpAuth, Auth: []byte("base")})
	_ = v.Read(func(r Reader) error {
		b := NewBatch(r)
		b.Begin()
		b.SetAuthState([]byte("one"))
		b.Commit()
		b.Begin()
		b.SetAuthState([]byte("two"))
		if string(b.AuthState()) != "two" {
			t.Fatalf("staged %q", b.AuthState())
		}
		b.Abort()
		if string(b.AuthState()) != "one" || len(b.Ops()) != 1 || b.Rev() != 1 {
			t.Fatalf("after abort: %q, %d ops, rev %d", b.AuthState(), len(b.Ops()), b.Rev())
		}
		// A batch stacked on this one sees its staged state.
		c := NewBatch(b)
		if string(c.AuthState()) != "one" {
			t.Fatalf("chained batch sees %q", c.AuthState())
		}
		return nil
	})
}

func TestSnapshotKeepsAuthState(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1")), Op{Kind: OpAuth, Auth: []byte("state")})
	w, err := FromSnapshot(v.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := w.AuthState(); !bytes.Equal(got, []byte("state")) {
		t.Fatalf("loaded auth %q", got)
	}
	u := NewView(1, 1)
	u.Reset(w)
	if got, _ := u.AuthState(); string(got) != "state" {
		t.Fatalf("reset auth %q", got)
	}
}
