package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/mirror"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
)

// TestMirrorCopiesEtcdWithTheSameRevisions: `zketcd mirror` copies an etcd
// with history, a compaction and leases, follows it while a writer keeps
// writing (puts, deletes, multi-op txns, leases granted with and without
// keys, a revoke), and once the writer stops and the mirror has caught up,
// zketcd started on the root serves every retained revision, the leases and
// HashKV exactly as the source does; writes then continue at the next
// revision.
func TestMirrorCopiesEtcdWithTheSameRevisions(t *testing.T) {
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	writeHistory(t, ec)
	root := freshRoot(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var last mirror.Status
	done := make(chan error, 1)
	go func() {
		done <- mirror.Run(ctx, mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Store: rootview.StoreConfig(t, sharedZK, root),
			StatusInterval: 100 * time.Millisecond}, func(s mirror.Status) { mu.Lock(); last = s; mu.Unlock() })
	}()

	// The writer, while the mirror follows.
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	lc := pb.NewLeaseClient(ec.ActiveConnection())
	for i := 0; i < 200; i++ {
		var err error
		switch i % 5 {
		case 0:
			_, err = ec.Put(wctx, fmt.Sprintf("/registry/m/%d", i%40), fmt.Sprint(i))
		case 1:
			_, err = ec.Txn(wctx).Then(clientv3.OpPut(fmt.Sprintf("/registry/m/%d", (i+7)%40), "t"), clientv3.OpDelete(fmt.Sprintf("/registry/m/%d", (i+3)%40))).Commit()
		case 2:
			_, err = ec.Delete(wctx, fmt.Sprintf("/registry/m/%d", (i+11)%40))
		case 3:
			id := int64(0x9000 + i)
			if _, err = lc.LeaseGrant(wctx, &pb.LeaseGrantRequest{ID: id, TTL: 300}); err == nil {
				_, err = ec.Put(wctx, fmt.Sprintf("/registry/leased/%d", i), "l", clientv3.WithLease(clientv3.LeaseID(id)))
			}
		case 4:
			if i%20 == 4 {
				_, err = lc.LeaseRevoke(wctx, &pb.LeaseRevokeRequest{ID: int64(0x9000 + i - 1)})
			} else {
				_, err = lc.LeaseGrant(wctx, &pb.LeaseGrantRequest{ID: int64(0xa000 + i), TTL: 120}) // no keys
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	head, err := ec.Get(wctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	// Caught up: every revision copied and two status rounds after it (the
	// lease sync runs with each).
	deadline := time.Now().Add(30 * time.Second)
	rounds := 0
	for rounds < 2 {
		mu.Lock()
		s := last
		mu.Unlock()
		if s.Rev == head.Header.Revision && s.SourceRev == head.Header.Revision {
			rounds++
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirror not caught up: %+v, source at %d", s, head.Header.Revision)
		}
		select {
		case err := <-done:
			t.Fatalf("mirror stopped: %v", err)
		case <-time.After(150 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("mirror: %v", err)
	}
	want := takeDump(t, ec, "etcd")
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
	zc := zk.Client(t)
	compareDumps(t, "etcd", want, "zketcd mirror of it", takeDump(t, zc, "zketcd"))
	resp, err := zc.Put(wctx, "/registry/after", "cut-over")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != want.Rev+1 {
		t.Errorf("first write after the cut-over at revision %d, want %d", resp.Header.Revision, want.Rev+1)
	}
}

// TestMirrorStopsWhenTheSourceCompactsPastIt: a source that compacts
// revisions the mirror has not copied yet stops it with
// ErrSourceCompacted and a message naming both revisions.
func TestMirrorStopsWhenTheSourceCompactsPastIt(t *testing.T) {
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	writeHistory(t, ec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := true
	err := mirror.Run(ctx, mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Store: rootview.StoreConfig(t, sharedZK, freshRoot(t))},
		func(mirror.Status) {
			if !first {
				return
			}
			first = false
			// The mirror waits here, after its snapshot, before it watches:
			// the source moves on and compacts.
			for i := 0; i < 5; i++ {
				if _, err := ec.Put(ctx, "/registry/later", fmt.Sprint(i)); err != nil {
					t.Error(err)
				}
			}
			resp, err := ec.Put(ctx, "/registry/later", "last")
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := ec.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				t.Error(err)
			}
		})
	if !errors.Is(err, mirror.ErrSourceCompacted) {
		t.Fatalf("mirror: %v, want ErrSourceCompacted", err)
	}
	t.Logf("mirror stopped: %v", err)
}

// TestMirrorRecreatesLeasesWithTheirRemainingTTL: leases copied by the
// mirror (from its initial snapshot, from the watch, and from the lease
// sync) keep their IDs and granted TTLs and have, on zketcd after the
// cut-over, the time they had left at the source, not a whole new TTL; a
// keepalive renews them for their granted TTL. The leader counts that time
// from its own first look at the lease (never by comparing clocks), so a
// lease lives at most the cut-over's length longer than at the source, and
// never less.
func TestMirrorRecreatesLeasesWithTheirRemainingTTL(t *testing.T) {
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc := pb.NewLeaseClient(ec.ActiveConnection())
	const granted = 60
	grant := func(id int64, key string) {
		t.Helper()
		if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: granted}); err != nil {
			t.Fatal(err)
		}
		if key != "" {
			if _, err := ec.Put(ctx, key, "v", clientv3.WithLease(clientv3.LeaseID(id))); err != nil {
				t.Fatal(err)
			}
		}
	}
	const inSnapshot, viaWatch, viaSync = 0x51, 0x52, 0x53
	grant(inSnapshot, "/registry/leased/snap")
	grant(viaWatch, "") // its key is put after the mirror started
	time.Sleep(4 * time.Second)

	root := freshRoot(t)
	mirrorStart := time.Now()
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- mirror.Run(mctx, mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Store: rootview.StoreConfig(t, sharedZK, root),
			StatusInterval: 100 * time.Millisecond}, func(mirror.Status) { once.Do(func() { close(started) }) })
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("mirror: %v", err)
	}
	if _, err := ec.Put(ctx, "/registry/leased/watch", "v", clientv3.WithLease(viaWatch)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	grant(viaSync, "") // no key: only the lease sync sees it
	time.Sleep(time.Second)
	mcancel()
	if err := <-done; err != nil {
		t.Fatalf("mirror: %v", err)
	}

	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
	zc := zk.Client(t)
	for _, id := range []clientv3.LeaseID{inSnapshot, viaWatch, viaSync} {
		want, err := ec.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := zc.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("lease %x: source TTL %d/%d, zketcd %d/%d", id, want.TTL, want.GrantedTTL, got.TTL, got.GrantedTTL)
		if got.GrantedTTL != granted || got.ID != id {
			t.Fatalf("lease %x on zketcd: %+v, want ID and granted TTL %d kept", id, got, granted)
		}
		// Never less than at the source; more by at most the cut-over
		// (from the mirror's first look to the leader's), up to the
		// truncation to whole seconds of both answers.
		late := int64(time.Since(mirrorStart).Seconds()) + 1
		if d := got.TTL - want.TTL; d < -1 || d > late {
			t.Errorf("lease %x: %d s left on zketcd, %d s at the source (allowed: -1..+%d)", id, got.TTL, want.TTL, late)
		}
	}
	if got, err := zc.TimeToLive(ctx, inSnapshot); err != nil || got.TTL > granted-4 {
		t.Fatalf("lease of the initial snapshot: %+v %v, want at most %d s left", got, err, granted-4)
	}
	ka, err := zc.KeepAliveOnce(ctx, viaWatch)
	if err != nil || ka.TTL != granted {
		t.Fatalf("keepalive on zketcd: %+v %v, want TTL %d", ka, err, granted)
	}
	if got, err := zc.TimeToLive(ctx, viaWatch); err != nil || got.TTL < granted-1 {
		t.Fatalf("after a keepalive: %+v %v, want about %d s left", got, err, granted)
	}
}
