package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/mirror"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/snaprestore"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/memserver"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// sharedZK holds the mirrors' roots, one per test; the sources are
// engines on memlog (memserver), served over gRPC as an etcd would be.
var sharedZK = zkservertest.NewShared("mirror", zkserver.Options{})

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }

// mirroring runs a mirror of src into cfg's root until the returned stop
// is called; status is its last reported position.
type mirroring struct {
	done   chan error
	cancel context.CancelFunc
	mu     sync.Mutex
	last   mirror.Status
}

func start(t *testing.T, src *clientv3.Client, cfg zkstore.Config, untilCaughtUp bool, onStatus func(mirror.Status)) *mirroring {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &mirroring{done: make(chan error, 1), cancel: cancel}
	go func() {
		m.done <- mirror.Run(ctx, mirror.Config{Source: src, Store: cfg, UntilCaughtUp: untilCaughtUp,
			StatusInterval: 20 * time.Millisecond, TempDir: t.TempDir()},
			func(s mirror.Status) {
				m.mu.Lock()
				m.last = s
				m.mu.Unlock()
				if onStatus != nil {
					onStatus(s)
				}
			})
	}()
	t.Cleanup(func() { cancel(); <-m.done })
	return m
}

func (m *mirroring) status() mirror.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// result waits for Run to return.
func (m *mirroring) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-m.done:
		m.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		t.Fatal("the mirror did not stop")
		return nil
	}
}

// TestTheMirrorCopiesEveryRevisionWithItsNumbers: what the source held
// when the mirror started (through its snapshot) and every revision after
// (through its watch) — puts, a transaction's several changes at one
// revision, deletions, leases granted with keys and without, a revocation
// — arrive with the same revisions, versions and leases.
func TestTheMirrorCopiesEveryRevisionWithItsNumbers(t *testing.T) {
	src := memserver.Start(t, memserver.Options{})
	c := src.Client(t)
	ctx := testutil.Context(t, time.Minute)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	l1, err := c.Grant(ctx, 60)
	must(l1, err)
	must(c.Put(ctx, "a", "1"))
	must(c.Put(ctx, "b", "x", clientv3.WithLease(l1.ID)))
	must(c.Txn(ctx).Then(clientv3.OpPut("t1", "1"), clientv3.OpPut("t2", "2")).Commit())
	must(c.Delete(ctx, "a"))

	cfg := rootview.StoreConfig(t, sharedZK, "")
	m := start(t, c, cfg, false, nil)
	testutil.Eventually(t, 30*time.Second, "the mirror follows the source", func() bool { return m.status().SourceRev > 0 })

	must(c.Put(ctx, "a", "again"))
	l2, err := c.Grant(ctx, 30)
	must(l2, err)
	must(c.Put(ctx, "d", "z", clientv3.WithLease(l2.ID)))
	must(c.Txn(ctx).Then(clientv3.OpPut("t1", "3"), clientv3.OpDelete("t2")).Commit())
	must(c.Grant(ctx, 90)) // no keys: copied by the lease sync
	must(c.Revoke(ctx, l1.ID))
	last, err := c.Put(ctx, "z", "last")
	must(last, err)

	want := func() string { return rootview.Dump(src.Engine.Snapshot()) }
	testutil.Eventually(t, 30*time.Second, "the copy holds every revision and lease of the source", func() bool {
		if s := m.status(); s.Rev < last.Header.Revision || s.Leases != 2 {
			return false
		}
		return rootview.Dump(rootview.Recovered(t, cfg)) == want()
	})
	m.cancel()
	if err := m.result(t); err != nil {
		t.Fatalf("the mirror stopped with %v", err)
	}
}

// TestUntilCaughtUpStopsOnceCopiedAndAUsedRootIsRefused: a mirror told to
// stop when caught up returns nil with the copy complete; another mirror
// into the same root refuses it (it is not fresh).
func TestUntilCaughtUpStopsOnceCopiedAndAUsedRootIsRefused(t *testing.T) {
	src := memserver.Start(t, memserver.Options{})
	c := src.Client(t)
	for i := range 5 {
		if _, err := c.Put(testutil.Context(t, time.Minute), fmt.Sprint("k", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rootview.StoreConfig(t, sharedZK, "")
	if err := start(t, c, cfg, true, nil).result(t); err != nil {
		t.Fatal(err)
	}
	if got, want := rootview.Dump(rootview.Recovered(t, cfg)), rootview.Dump(src.Engine.Snapshot()); got != want {
		t.Fatalf("copy:\n%s\nsource:\n%s", got, want)
	}
	if err := start(t, c, cfg, true, nil).result(t); !errors.Is(err, snaprestore.ErrRootInUse) {
		t.Fatalf("a mirror into a used root: %v, want %v", err, snaprestore.ErrRootInUse)
	}
}

// TestASourceCompactedPastTheMirrorStopsIt: the source compacts revisions
// the mirror has not copied yet (here, between its snapshot and its
// watch, from its first status report): it stops with ErrSourceCompacted.
func TestASourceCompactedPastTheMirrorStopsIt(t *testing.T) {
	src := memserver.Start(t, memserver.Options{})
	c := src.Client(t)
	ctx := testutil.Context(t, time.Minute)
	if _, err := c.Put(ctx, "k", "0"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	m := start(t, c, rootview.StoreConfig(t, sharedZK, ""), false, func(mirror.Status) {
		once.Do(func() {
			var rev int64
			for i := range 3 {
				resp, err := c.Put(ctx, "k", fmt.Sprint(i+1))
				if err != nil {
					t.Error(err)
					return
				}
				rev = resp.Header.Revision
			}
			if _, err := c.Compact(ctx, rev); err != nil {
				t.Error(err)
			}
		})
	})
	if err := m.result(t); !errors.Is(err, mirror.ErrSourceCompacted) {
		t.Fatalf("the mirror stopped with %v, want %v", err, mirror.ErrSourceCompacted)
	}
}

// TestAnotherWriterOnTheRootStopsTheMirror: the mirror must be its root's
// only writer; an entry committed by anyone else stops it at its next
// commit.
func TestAnotherWriterOnTheRootStopsTheMirror(t *testing.T) {
	src := memserver.Start(t, memserver.Options{})
	c := src.Client(t)
	ctx := testutil.Context(t, time.Minute)
	cfg := rootview.StoreConfig(t, sharedZK, "")
	m := start(t, c, cfg, false, nil)
	testutil.Eventually(t, 30*time.Second, "the mirror follows the source", func() bool { return m.status().SourceRev > 0 })
	st, err := zkstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := st.SyncHead()
	if err != nil {
		t.Fatal(err)
	}
	e := &revision.Entry{LSN: h.LSN + 1, Writer: revision.WriterTag{Nonce: 0xbad, Seq: 1},
		Ops: []revision.Op{{Kind: revision.OpTxn, Rev: h.Rev + 1, Changes: []revision.Change{{Key: []byte("intruder"), Value: []byte("x")}}}}}
	if res, err := st.Commit(ctx, zkstore.CommitRequest{Prev: h.LSN, Entry: e, Rev: h.Rev + 1}); err != nil || res.Outcome != zkstore.Committed {
		t.Fatalf("the other writer's commit: %v %v", res.Outcome, err)
	}
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := m.result(t); err == nil || !strings.Contains(err.Error(), "another writer") {
		t.Fatalf("the mirror stopped with %v, want it to name another writer", err)
	}
}
