package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// memMove is a mover between two memlog roots, as `zketcd move` moves
// between ZooKeeper roots: the source's entries copied at the same
// positions, the fence committed on the source, its copy (Arrived) on the
// destination, which instances open only once finished.
type memMove struct {
	src, dst *memlog.Store
	to       revision.Move
	finished atomic.Bool
}

// copyUpTo copies the source's entries the destination lacks, up to lsn;
// the source's fence is copied as arrived.
func (m *memMove) copyUpTo(t *testing.T, lsn int64) {
	t.Helper()
	c := m.dst.Client()
	defer c.Close()
	for n := m.dst.HeadNow().LSN + 1; n <= lsn; n++ {
		e, ok := m.src.Entry(n)
		if !ok {
			t.Fatalf("source entry %d missing", n)
		}
		for i := range e.Ops {
			if e.Ops[i].Kind == revision.OpFence {
				e.Ops[i].Move.Arrived = true
			}
		}
		rev := max(m.dst.HeadNow().Rev, e.LastRev())
		res, err := c.Commit(context.Background(), zkstore.CommitRequest{Prev: n - 1, Entry: e, Rev: rev})
		if err != nil || res.Outcome != zkstore.Committed {
			t.Fatalf("copy entry %d: %v %v", n, res.Outcome, err)
		}
	}
}

// fence commits the fence on the source after its head, racing its
// committers as the mover does, and returns its position.
func (m *memMove) fence(t *testing.T) int64 {
	t.Helper()
	c := m.src.Client()
	defer c.Close()
	for {
		h := m.src.HeadNow()
		e := &revision.Entry{LSN: h.LSN + 1, Writer: revision.WriterTag{Nonce: 77, Seq: 1},
			Ops: []revision.Op{{Kind: revision.OpFence, Move: m.to}}}
		res, err := c.Commit(context.Background(), zkstore.CommitRequest{Prev: h.LSN, Entry: e, Rev: h.Rev})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome == zkstore.Committed {
			return e.LSN
		}
	}
}

// open is the engines' OpenMoved: the destination once finished.
func (m *memMove) open(_ context.Context, _ Log, to revision.Move) (Log, func(context.Context) (Log, error), error) {
	if to != m.to || !m.finished.Load() {
		return nil, nil, fmt.Errorf("destination %q not finished", to.Root)
	}
	return m.dst.Client(), nil, nil
}

// TestMoveSwitchesEveryInstanceToTheDestinationWithoutLosingAWriteOrAnEvent
// moves a cluster served by two instances while both write: after the
// fence their writes wait, then continue on the destination at the next
// revisions; every acknowledged write is there exactly once, a watch
// opened before the move sees every revision once and in order, the
// lease granted before keeps its ID, and nothing more lands on the
// source.
func TestMoveSwitchesEveryInstanceToTheDestinationWithoutLosingAWriteOrAnEvent(t *testing.T) {
	src := memlog.New(memlog.Options{ClusterID: 9, Root: "/a"})
	dst := memlog.New(memlog.Options{ClusterID: 9, Root: "/b"})
	mv := &memMove{src: src, dst: dst, to: revision.Move{Root: "/b"}}
	configure := func(c *Config) { c.OpenMoved = mv.open; c.ForwardWrites = false }
	a, _ := engine(t, src, "a", configure)
	b, _ := engine(t, src, "b", configure)
	ctx := testutil.Context(t, 30*time.Second)

	lease, err := a.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("leased"), Value: []byte("v"), Lease: lease.ID}); err != nil {
		t.Fatal(err)
	}
	ws := b.NewWatchStream(0)
	defer ws.Close()
	if _, err := ws.Watch(-1, []byte("k"), []byte("l"), b.State().Rev+1); err != nil {
		t.Fatal(err)
	}

	// Both instances write throughout the move.
	var acked sync.Map // key -> revision
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, e := range []*Engine{a, b} {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d-%04d", i, n)
				resp, err := e.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v")})
				if err != nil {
					t.Errorf("put %s: %v", key, err)
					return
				}
				acked.Store(key, resp.Header.Revision)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	mv.copyUpTo(t, src.HeadNow().LSN) // the bulk copy, while writes go on
	fenceAt := mv.fence(t)
	// The mover finishes once every instance applied the fence.
	testutil.Eventually(t, 5*time.Second, "both instances applied the fence", func() bool {
		_, okA := a.Moved()
		_, okB := b.Moved()
		return okA && okB
	})
	if h := src.HeadNow(); h.LSN != fenceAt {
		t.Fatalf("source head %d after the fence at %d", h.LSN, fenceAt)
	}
	mv.copyUpTo(t, fenceAt)
	mv.finished.Store(true)
	testutil.Eventually(t, 5*time.Second, "both instances moved", func() bool { return a.Moves() == 1 && b.Moves() == 1 })
	time.Sleep(100 * time.Millisecond) // writes on the destination
	close(stop)
	wg.Wait()

	if h := src.HeadNow(); h.LSN != fenceAt {
		t.Fatalf("the source took entry %d after its fence at %d", h.LSN, fenceAt)
	}
	if dst.HeadNow().LSN <= fenceAt {
		t.Fatalf("nothing was written on the destination after the fence (head %d)", dst.HeadNow().LSN)
	}
	// Every acknowledged write, at its revision, on the destination; a
	// replay of the destination's log is each instance's view.
	testutil.Eventually(t, 5*time.Second, "caught up", func() bool { return a.State().LSN == dst.HeadNow().LSN && b.State().LSN == dst.HeadNow().LSN })
	acked.Range(func(k, v any) bool {
		resp := get(t, a, k.(string), true)
		if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != v.(int64) {
			t.Errorf("%s: %v, acknowledged at revision %d", k, resp.Kvs, v)
		}
		return true
	})
	checkLogReplaysToView(t, dst, a)
	checkLogReplaysToView(t, dst, b)
	ttl, err := b.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: lease.ID})
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("lease %x after the move: %v %v", lease.ID, ttl, err)
	}
	// The watch saw every revision after its start once, in order.
	want := b.State().Rev
	next := int64(0)
	deadline := time.After(5 * time.Second)
	for next < want {
		select {
		case r := <-ws.Chan():
			for _, ev := range r.Events {
				if next != 0 && ev.KV.ModRevision != next+1 {
					t.Fatalf("watch: revision %d after %d", ev.KV.ModRevision, next)
				}
				next = ev.KV.ModRevision
			}
		case <-deadline:
			t.Fatalf("watch: up to revision %d of %d", next, want)
		}
	}
}

// TestNothingCommitsAfterAFenceWhileTheViewAppliesIt pauses the tailer
// right after the view applied a move's fence and sends a write then: the
// committer must not commit it after the fence on the source (an entry
// there would be acknowledged and never reach the destination); it
// commits on the destination once the engine switched.
func TestNothingCommitsAfterAFenceWhileTheViewAppliesIt(t *testing.T) {
	src := memlog.New(memlog.Options{ClusterID: 9, Root: "/a"})
	dst := memlog.New(memlog.Options{ClusterID: 9, Root: "/b"})
	mv := &memMove{src: src, dst: dst, to: revision.Move{Root: "/b"}}
	ctx := testutil.Context(t, 30*time.Second)
	var a *Engine
	written := make(chan error, 1)
	configure := func(c *Config) {
		c.OpenMoved = mv.open
		c.ForwardWrites = false
		c.appliedHook = func(e *revision.Entry) {
			if e.Fence() == nil {
				return
			}
			// The view holds the fence; the write arrives now.
			go func() {
				_, err := a.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("v")})
				written <- err
			}()
			deadline := time.Now().Add(500 * time.Millisecond)
			for time.Now().Before(deadline) && src.HeadNow().LSN == e.LSN {
				time.Sleep(time.Millisecond)
			}
		}
	}
	a, _ = engine(t, src, "a", configure)
	put(t, a, "before", "v")
	mv.copyUpTo(t, src.HeadNow().LSN)
	fenceAt := mv.fence(t)
	testutil.Eventually(t, 5*time.Second, "the fence applied", func() bool { _, ok := a.Moved(); return ok })
	if h := src.HeadNow(); h.LSN != fenceAt {
		t.Fatalf("the source took entry %d after its fence at %d", h.LSN, fenceAt)
	}
	mv.copyUpTo(t, fenceAt)
	mv.finished.Store(true)
	select {
	case err := <-written:
		if err != nil {
			t.Fatalf("put after the fence: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the write held by the fence never committed")
	}
	if h := src.HeadNow(); h.LSN != fenceAt {
		t.Fatalf("the source took entry %d after its fence at %d", h.LSN, fenceAt)
	}
	if h := dst.HeadNow(); h.LSN != fenceAt+1 {
		t.Fatalf("destination head %d, want the write at %d", h.LSN, fenceAt+1)
	}
}

// TestCloseWhileFencedReturns closes an instance whose log was fenced by a
// move that never finishes: Close returns (the tailer stops trying to
// switch to the destination).
func TestCloseWhileFencedReturns(t *testing.T) {
	src := memlog.New(memlog.Options{ClusterID: 9, Root: "/a"})
	dst := memlog.New(memlog.Options{ClusterID: 9, Root: "/b"})
	mv := &memMove{src: src, dst: dst, to: revision.Move{Root: "/b"}}
	a, _ := engine(t, src, "a", func(c *Config) { c.OpenMoved = mv.open })
	put(t, a, "k", "v")
	mv.fence(t)
	testutil.Eventually(t, 5*time.Second, "the fence applied", func() bool { _, ok := a.Moved(); return ok })
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while the engine waits for the destination")
	}
}
