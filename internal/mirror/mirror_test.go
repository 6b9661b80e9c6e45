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
// stop when caught up returns nil with the copy complete; run again on the
// same root with the same source it continues (nothing to copy twice);
// another source's mirror, or one into a root with other content, is
// refused.
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
	if _, err := c.Put(testutil.Context(t, time.Minute), "k9", "later"); err != nil {
		t.Fatal(err)
	}
	if err := start(t, c, cfg, true, nil).result(t); err != nil {
		t.Fatalf("the same mirror run again: %v", err)
	}
	if got, want := rootview.Dump(rootview.Recovered(t, cfg)), rootview.Dump(src.Engine.Snapshot()); got != want {
		t.Fatalf("continued copy:\n%s\nsource:\n%s", got, want)
	}
	err := mirror.Run(testutil.Context(t, time.Minute), mirror.Config{Source: c, Prefix: []byte("k"), Store: cfg, UntilCaughtUp: true}, nil)
	if !errors.Is(err, mirror.ErrNotResumable) {
		t.Fatalf("a mirror of another prefix into the root: %v, want %v", err, mirror.ErrNotResumable)
	}
	used := rootview.StoreConfig(t, sharedZK, "")
	var st *zkstore.Store
	st, err = zkstore.Open(testutil.Context(t, time.Minute), used)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := start(t, c, used, true, nil).result(t); !errors.Is(err, zkstore.ErrNotFresh) {
		t.Fatalf("a mirror into a used root: %v, want %v", err, zkstore.ErrNotFresh)
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
	intruder := cfg
	intruder.Mirror = true // past the refusal every other Open meets
	st, err := zkstore.Open(ctx, intruder)
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

// TestPrefixCutoverCopiesOneOfTwoClusters: a mirror of one prefix copies
// its keys with their revisions across the other prefix's revisions (the
// gaps), the root refuses instances until the cut-over, and the cut-over
// agrees on the source's revision with equal prefix hashes.
func TestPrefixCutoverCopiesOneOfTwoClusters(t *testing.T) {
	src := memserver.Start(t, memserver.Options{})
	c := src.Client(t)
	ctx := testutil.Context(t, time.Minute)
	put := func(k string) int64 {
		t.Helper()
		r, err := c.Put(ctx, k, "v"+k)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	put("/a/1")
	put("/b/1")
	pcfg := rootview.StoreConfig(t, sharedZK, "")
	mc := mirror.Config{Source: c, Prefix: []byte("/a/"), Store: pcfg, StatusInterval: 20 * time.Millisecond, Quiet: 50 * time.Millisecond, UntilCaughtUp: true}
	if err := mirror.Run(ctx, mc, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := zkstore.Open(ctx, pcfg); !errors.Is(err, zkstore.ErrMirrorInProgress) {
		t.Fatalf("an instance on a root being mirrored: %v", err)
	}
	// The cut-over held back until the operator's signal: it follows,
	// and a quiet source does not end it.
	mc.UntilCaughtUp = false
	start := make(chan struct{})
	mc.Start = start
	type outcome struct {
		res mirror.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := mirror.Cutover(ctx, mc, nil)
		done <- outcome{res, err}
	}()
	put("/b/2")
	a2 := put("/a/2")
	put("/b/3")
	last := put("/b/4")
	select {
	case o := <-done:
		t.Fatalf("the cut-over ended before its start: %+v %v", o.res, o.err)
	case <-time.After(500 * time.Millisecond): // a negative: ten quiet periods
	}
	close(start)
	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cut-over did not end")
	}
	res, err := o.res, o.err
	if err != nil {
		t.Fatal(err)
	}
	if res.Rev != last || res.SourceHash != res.RootHash || res.Keys != 2 {
		t.Fatalf("cut-over %+v, want revision %d, 2 keys, equal hashes", res, last)
	}
	snap := rootview.Recovered(t, pcfg)
	if snap.State.Rev != last {
		t.Fatalf("root at revision %d, want %d", snap.State.Rev, last)
	}
	var mods []int64
	snap.Each(func(kh revision.KeyHistory) bool {
		mods = append(mods, kh.Versions[len(kh.Versions)-1].ModRevision)
		return true
	})
	if len(mods) != 2 || mods[1] != a2 {
		t.Fatalf("mod revisions %v, want /a/2 at %d", mods, a2)
	}
	st, err := zkstore.Open(ctx, pcfg)
	if err != nil {
		t.Fatalf("an instance on the cut-over root: %v", err)
	}
	st.Close()
	if err := mirror.Run(ctx, mc, nil); !errors.Is(err, mirror.ErrNotResumable) {
		t.Fatalf("a mirror into a root cut over: %v", err)
	}
}
