package etcdformat

import (
	"context"
	"testing"
)

func TestHashStoreKeepsTheNewestTenCompactionHashes(t *testing.T) {
	var hs HashStore
	before := testView(t).Snapshot()
	for rev := int64(1); rev <= 12; rev++ {
		hs.Compacted(before, min(rev, before.State.Rev), nil)
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
