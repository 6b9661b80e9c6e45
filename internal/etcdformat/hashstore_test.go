package etcdformat

import (
	"context"
	"sync/atomic"
	"testing"
)

func TestHashStoreKeepsTheNewestTenCompactionHashes(t *testing.T) {
	var hs HashStore
	before := testView(t).Snapshot()
	for rev := int64(1); rev <= 12; rev++ {
		dropped := make(chan struct{})
		hs.Compacted(before, min(rev, before.State.Rev), func() { close(dropped) })
		<-dropped // one after the other, as compactions far enough apart
	}
	ctx := context.Background()
	if _, ok, _ := hs.Lookup(ctx, 1); ok {
		t.Fatal("the oldest of twelve compaction hashes is still kept")
	}
	h, ok, err := hs.Lookup(ctx, 5)
	want, _ := CompactionHash(before, 5)
	if !ok || err != nil || h != want {
		t.Fatalf("Lookup(5) = %+v %v %v, want %+v", h, ok, err, want)
	}
	if h.CompactRevision != before.State.CompactRev || h.Revision != 5 {
		t.Fatalf("stored hash %+v: want the previous compacted revision %d and revision 5", h, before.State.CompactRev)
	}
	if _, ok, _ := hs.Lookup(ctx, 99); ok {
		t.Fatal("a hash for a revision never compacted to")
	}
}

func TestHashStoreDropsTheCopyOnceTheHashIsKept(t *testing.T) {
	var hs HashStore
	before := testView(t).Snapshot()
	dropped := make(chan struct{})
	hs.Compacted(before, before.State.Rev, func() { close(dropped) })
	<-dropped
	// The hash is kept by then: a lookup finds it computed.
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, sh := range hs.hashes {
		select {
		case <-sh.done:
		default:
			t.Fatalf("the copy was dropped before the hash of the compaction to %d was kept", sh.rev)
		}
	}
	sh := hs.hashes[len(hs.hashes)-1]
	want, _ := CompactionHash(before, before.State.Rev)
	if sh.err != nil || sh.h != want {
		t.Fatalf("kept hash %+v (%v), want %+v", sh.h, sh.err, want)
	}
}

func TestPacedCompactionHashIsTheHashAndPauses(t *testing.T) {
	before := testView(t).Snapshot()
	for rev := before.State.CompactRev + 1; rev <= before.State.Rev; rev++ {
		want, werr := CompactionHash(before, rev)
		paces := 0
		got, err := pacedCompactionHash(before, rev, 1, func() { paces++ })
		if got != want || (err == nil) != (werr == nil) {
			t.Fatalf("paced hash at %d = %+v %v, want %+v %v", rev, got, err, want, werr)
		}
		if paces == 0 {
			t.Fatalf("the hash at %d never paused", rev)
		}
	}
}

// TestHashStoreComputesOneCompactionHashAtATime: compactions applied while
// the hash of an earlier one is still being computed hold no copy of the
// view and get no hash (etcd stores none for a compaction asked for before
// the previous one finished); the one being computed is kept, and a
// compaction after it gets its hash again.
func TestHashStoreComputesOneCompactionHashAtATime(t *testing.T) {
	release := make(chan struct{})
	hs := HashStore{slice: 1, pace: func() func() { return func() { <-release } }}
	before := testView(t).Snapshot()
	var held atomic.Int32
	compact := func(rev int64) chan struct{} {
		dropped := make(chan struct{})
		held.Add(1)
		hs.Compacted(before, rev, func() { held.Add(-1); close(dropped) })
		return dropped
	}
	var all []chan struct{}
	for rev := int64(4); rev <= 6; rev++ {
		all = append(all, compact(rev))
		if n := held.Load(); n > 1 {
			close(release)
			t.Fatalf("%d copies of the view held at once for compaction hashes", n)
		}
	}
	close(release)
	for _, d := range all {
		<-d
	}
	ctx := context.Background()
	want, _ := CompactionHash(before, 4)
	if h, ok, err := hs.Lookup(ctx, 4); !ok || err != nil || h != want {
		t.Fatalf("Lookup(4) = %+v %v %v, want %+v", h, ok, err, want)
	}
	for rev := int64(5); rev <= 6; rev++ {
		if h, ok, _ := hs.Lookup(ctx, rev); ok {
			t.Fatalf("a hash %+v for the compaction to %d, applied while the one to 4 was computed", h, rev)
		}
	}
	<-compact(6)
	want, _ = CompactionHash(before, 6)
	if h, ok, err := hs.Lookup(ctx, 6); !ok || err != nil || h != want {
		t.Fatalf("Lookup(6) after the earlier hash finished = %+v %v %v, want %+v", h, ok, err, want)
	}
}
