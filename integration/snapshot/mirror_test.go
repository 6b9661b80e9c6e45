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

	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/zketcdtest"
	"github.com/zketcd/zketcd/mirror"
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
		done <- mirror.Run(ctx, mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Store: storeConfig(t, root),
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
	zk := zketcdtest.Start(t, []string{zkAddr}, zketcdtest.Options{Root: root})
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
	err := mirror.Run(ctx, mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Store: storeConfig(t, freshRoot(t))},
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
