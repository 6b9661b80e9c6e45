package zkstore

import (
	"context"
	"errors"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestReadLeaseRefusesCommitsWithoutTheFence: on a real ZooKeeper, while
// one session holds the read lease znode, a commit carrying
// ReadLeaseAbsent from another session is Held and writes nothing; the
// holder's own commit without that guard lands; once the lease is
// released (or the holder's session ends) the guarded commit lands.
func TestReadLeaseRefusesCommitsWithoutTheFence(t *testing.T) {
	srv := zkservertest.Standalone(t)
	open := func() *Store { return openTestStore(t, srv.Addr(), "/readlease") }
	holder, other := open(), open()
	if _, err := holder.TakeReadLease(1); err != nil {
		t.Fatal(err)
	}
	if sid, err := holder.TakeReadLease(1); err != nil || sid == 0 {
		t.Fatalf("taking the held lease again: %d %v, want it kept", sid, err)
	}
	if _, err := other.TakeReadLease(2); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("another session taking the lease: %v, want ErrLeaseHeld", err)
	}
	commit := func(st *Store, seq uint64, guards ...Guard) Outcome {
		t.Helper()
		head, err := st.Head()
		if err != nil {
			t.Fatal(err)
		}
		e := &revision.Entry{LSN: head.LSN + 1, Writer: revision.WriterTag{Nonce: 7, Seq: seq}}
		res, err := st.Commit(context.Background(), CommitRequest{Prev: head.LSN, Entry: e, Rev: head.Rev, Guards: guards})
		if err != nil {
			t.Fatal(err)
		}
		return res.Outcome
	}
	head, _ := other.Head()
	if out := commit(other, 1, other.ReadLeaseAbsent()); out != Held {
		t.Fatalf("a guarded commit while the lease is held: %v, want held", out)
	}
	if now, _ := other.Head(); now != head {
		t.Fatalf("a held commit moved the head from %+v to %+v", head, now)
	}
	if out := commit(holder, 2); out != Committed {
		t.Fatalf("the holder's commit: %v", out)
	}
	if err := other.ReleaseReadLease(); err != nil {
		t.Fatal(err) // not its lease: nothing happens
	}
	if out := commit(other, 3, other.ReadLeaseAbsent()); out != Held {
		t.Fatalf("after another session's release call: %v, want held", out)
	}
	if err := holder.ReleaseReadLease(); err != nil {
		t.Fatal(err)
	}
	if out := commit(other, 4, other.ReadLeaseAbsent()); out != Committed {
		t.Fatalf("a guarded commit after the release: %v", out)
	}
	// The lease goes with its session too.
	if _, err := other.TakeReadLease(2); err != nil {
		t.Fatal(err)
	}
	other.Close()
	if out := commit(holder, 5, holder.ReadLeaseAbsent()); out != Committed {
		t.Fatalf("a guarded commit after the holder's session ended: %v", out)
	}
}
