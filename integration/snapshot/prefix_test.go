package snapshot

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/mirror"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Two clusters of one shared etcd, as Kamaji keeps its tenants.
const (
	prefixA = "/t/a/"
	prefixB = "/t/b/"
)

// sharedWriter writes a kube-like mix to both clusters of a shared etcd:
// puts, overwrites, deletes, leased keys (leases of each cluster), lease
// revocations, and transactions that change both prefixes at one revision.
type sharedWriter struct {
	t    *testing.T
	c    *clientv3.Client
	lc   pb.LeaseClient
	n    int
	revA []int64 // the revisions that changed a key under prefixA
}

func newSharedWriter(t *testing.T, c *clientv3.Client) *sharedWriter {
	return &sharedWriter{t: t, c: c, lc: pb.NewLeaseClient(c.ActiveConnection())}
}

func (w *sharedWriter) step(ctx context.Context) {
	w.t.Helper()
	i := w.n
	w.n++
	p := prefixA
	if i%3 != 0 {
		p = prefixB // two thirds of the writes are the other cluster's
	}
	key := func(j int) string { return fmt.Sprintf("%sregistry/pods/ns/%d", p, j%25) }
	var rev int64
	var err error
	touchesA := p == prefixA
	switch i % 7 {
	case 0, 1:
		var r *clientv3.PutResponse
		r, err = w.c.Put(ctx, key(i), fmt.Sprintf(`{"kind":"Pod","n":%d}`, i))
		if err == nil {
			rev = r.Header.Revision
		}
	case 2:
		var r *clientv3.DeleteResponse
		r, err = w.c.Delete(ctx, key(i+5))
		if err == nil {
			rev = r.Header.Revision
			touchesA = touchesA && r.Deleted > 0
		}
	case 3:
		id := int64(0x7000 + i)
		if _, err = w.lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 120 + int64(i%5)*60}); err == nil {
			var r *clientv3.PutResponse
			r, err = w.c.Put(ctx, fmt.Sprintf("%sregistry/events/%d", p, i), "e", clientv3.WithLease(clientv3.LeaseID(id)))
			if err == nil {
				rev = r.Header.Revision
			}
		}
	case 4:
		// One transaction, both clusters, one revision.
		var r *clientv3.TxnResponse
		r, err = w.c.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("%sregistry/leases/%d", prefixA, i%4), "t"),
			clientv3.OpPut(fmt.Sprintf("%sregistry/leases/%d", prefixB, i%4), "t")).Commit()
		if err == nil {
			rev, touchesA = r.Header.Revision, true
		}
	case 5:
		// Revoke a lease granted two rounds ago (its key goes with it).
		id := int64(0x7000 + i - 2 - 7)
		var r *pb.LeaseRevokeResponse
		r, err = w.lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: id})
		if errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) || (err != nil && strings.Contains(err.Error(), "requested lease not found")) {
			err, touchesA = nil, false
		} else if err == nil {
			rev = r.Header.Revision
			touchesA = (i-9)%3 == 0
		}
	case 6:
		var r *clientv3.PutResponse
		r, err = w.c.Put(ctx, key(i+1), "v")
		if err == nil {
			rev = r.Header.Revision
		}
	}
	if err != nil {
		w.t.Fatalf("write %d: %v", i, err)
	}
	if touchesA && rev > 0 {
		w.revA = append(w.revA, rev)
	}
}

// prefixDump lists the keys under prefix at rev (0: current) with their
// revisions, version and lease, and the header's revision.
func prefixDump(t *testing.T, c *clientv3.Client, prefix string, rev int64) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("get %s@%d: %v", prefix, rev, err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s=%s c%d m%d v%d l%x\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return b.String(), resp.Header.Revision
}

// watchDump collects a prefix watch's events from rev up to to.
func watchDump(t *testing.T, c *clientv3.Client, prefix string, from, to int64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	for resp := range c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV(), clientv3.WithProgressNotify()) {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch %s from %d: %v", prefix, from, err)
		}
		for _, ev := range resp.Events {
			fmt.Fprintf(&b, "%d %s %s=%s c%d v%d\n", ev.Kv.ModRevision, ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.CreateRevision, ev.Kv.Version)
			if ev.Kv.ModRevision == to {
				return b.String()
			}
		}
	}
	t.Fatalf("watch %s from %d ended before revision %d:\n%s", prefix, from, to, b.String())
	return ""
}

// leaseDump lists the leases of the keys under prefix: ID and granted TTL,
// and the remaining TTL.
func leaseTTLs(t *testing.T, c *clientv3.Client, prefix string) map[int64][2]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][2]int64{}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			continue
		}
		l, err := c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			t.Fatal(err)
		}
		out[kv.Lease] = [2]int64{l.GrantedTTL, l.TTL}
	}
	return out
}

// TestPrefixMirrorMovesOneClusterOutOfASharedEtcd: a real etcd 3.7.3 holds
// two clusters under two prefixes; `zketcd mirror --prefix` copies one of
// them while both keep writing (puts, deletes, leased keys, revocations,
// transactions over both prefixes), is killed between two of its commits
// and run again, and the cut-over agrees with the source: the keys, their
// create and mod revisions and versions, the lease IDs, granted and
// remaining TTLs and the prefix hash are the source's at the source's
// revision; reads and watches from revisions inside the gaps (the other
// cluster's revisions) answer what etcd answers; history before the
// initial copy is compacted; the first write after the cut-over takes the
// revision after the source's.
func TestPrefixMirrorMovesOneClusterOutOfASharedEtcd(t *testing.T) {
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := newSharedWriter(t, ec)
	for range 60 {
		w.step(ctx)
	}
	before := w.revA[len(w.revA)-1] // history the mirror will not have

	root := freshRoot(t)
	var mu sync.Mutex
	var last mirror.Status
	commits := 0
	killAt := 5
	cfg := func() mirror.Config {
		return mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), SourceURLs: src.Endpoint(), Prefix: []byte(prefixA),
			Store: rootview.StoreConfig(t, sharedZK, root), StatusInterval: 100 * time.Millisecond, Quiet: 300 * time.Millisecond, PageSize: 7,
			AfterCommit: func(*revision.Entry) error {
				mu.Lock()
				defer mu.Unlock()
				if commits++; commits == killAt {
					return errors.New("killed between two commits")
				}
				return nil
			}}
	}
	run := func() chan error {
		done := make(chan error, 1)
		go func() {
			done <- mirror.Run(ctx, cfg(), func(s mirror.Status) { mu.Lock(); last = s; mu.Unlock() })
		}()
		return done
	}
	following := func() {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			mu.Lock()
			s := last
			mu.Unlock()
			if s.SourceRev > 0 && !s.Initial {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the mirror does not follow the source")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	done := run()
	following()
	for range 120 {
		w.step(ctx)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed between two commits") {
			t.Fatalf("the first run stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the mirror was not stopped after its commits")
	}
	t.Logf("the first run stopped after %d commits; running it again", killAt)
	mu.Lock()
	last = mirror.Status{}
	mu.Unlock()
	done = run()
	following()
	for range 120 {
		w.step(ctx)
	}
	// The other cluster writes last: the source's revision is past the
	// copied cluster's last change.
	for i := range 3 {
		if _, err := ec.Put(ctx, fmt.Sprintf("%sregistry/late/%d", prefixB, i), "b"); err != nil {
			t.Fatal(err)
		}
	}
	head, err := ec.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	srcRev := head.Header.Revision
	mu.Lock()
	t.Logf("mirror at %+v, source at %d", last, srcRev)
	mu.Unlock()

	// The cut-over: the running mirror is stopped (the operator's Ctrl-C),
	// the cut-over command continues it.
	// The root has one writer: the cut-over runs once the mirror stopped.
	stopRun(t, done, cancel)
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cfg()
	c.AfterCommit = nil
	res, err := mirror.Cutover(ctx, c, nil)
	if err != nil {
		t.Fatalf("cut-over: %v", err)
	}
	t.Logf("cut-over at revision %d: hash %08x/%08x, %d keys, %d leases", res.Rev, res.SourceHash, res.RootHash, res.Keys, res.Leases)
	if res.Rev != srcRev || res.SourceHash != res.RootHash || res.Keys == 0 || res.Leases == 0 {
		t.Fatalf("cut-over %+v, want the source's revision %d and equal hashes", res, srcRev)
	}
	wantKeys, _ := prefixDump(t, ec, prefixA, 0)
	wantLeases := leaseTTLs(t, ec, prefixA)

	// Every revision copied once, none skipped: the root's log holds the
	// copied cluster's revisions after the initial copy, in order.
	snap := rootview.Recovered(t, rootview.StoreConfig(t, sharedZK, root))
	var logged []int64
	seen := map[int64]bool{}
	snap.Each(func(kh revision.KeyHistory) bool {
		for _, kv := range kh.Versions {
			if kv.ModRevision > snap.State.CompactRev && !seen[kv.ModRevision] {
				seen[kv.ModRevision] = true
			}
		}
		return true
	})
	for _, r := range w.revA {
		if r > snap.State.CompactRev && !seen[r] {
			t.Errorf("revision %d changed the copied cluster at the source; the root has no change at it", r)
		}
		if r > snap.State.CompactRev {
			logged = append(logged, r)
		}
	}
	if len(seen) != len(logged) {
		t.Errorf("the root changed %d revisions after its initial copy at %d, the source %d", len(seen), snap.State.CompactRev, len(logged))
	}

	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
	zc := zk.Client(t)
	gotKeys, hdr := prefixDump(t, zc, prefixA, 0)
	if gotKeys != wantKeys || hdr != srcRev {
		t.Fatalf("keys on zketcd at header %d (source at %d):\n%s\nsource:\n%s", hdr, srcRev, gotKeys, wantKeys)
	}
	gotLeases := leaseTTLs(t, zc, prefixA)
	if len(gotLeases) != len(wantLeases) || len(wantLeases) == 0 {
		t.Fatalf("leases on zketcd %v, at the source %v", gotLeases, wantLeases)
	}
	for id, want := range wantLeases {
		got := gotLeases[id]
		if got[0] != want[0] || got[1] < want[1]-1 || got[1] > want[1]+5 {
			t.Errorf("lease %x: zketcd granted/remaining %v, source %v", id, got, want)
		}
	}
	// Reads and watches from revisions inside gaps: each revision the
	// other cluster took after the initial copy, a few of them.
	var gaps []int64
	for r := snap.State.CompactRev + 1; r < srcRev && len(gaps) < 6; r += 7 {
		if !seen[r] {
			gaps = append(gaps, r)
		}
	}
	lastA := w.revA[len(w.revA)-1]
	for _, g := range gaps {
		want, _ := prefixDump(t, ec, prefixA, g)
		got, _ := prefixDump(t, zc, prefixA, g)
		if got != want {
			t.Errorf("range at gap revision %d:\n%s\nsource:\n%s", g, got, want)
		}
		if g < lastA {
			if got, want := watchDump(t, zc, prefixA, g, lastA), watchDump(t, ec, prefixA, g, lastA); got != want {
				t.Errorf("watch from gap revision %d:\n%s\nsource:\n%s", g, got, want)
			}
		}
	}
	if len(gaps) == 0 {
		t.Fatal("no gap revision to test")
	}
	if _, err := zc.Get(ctx, prefixA, clientv3.WithPrefix(), clientv3.WithRev(before)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("read below the initial copy: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if r, err := zc.Put(ctx, prefixA+"registry/after", "cut-over"); err != nil || r.Header.Revision != srcRev+1 {
		t.Fatalf("first write after the cut-over: %v %v, want revision %d", r, err, srcRev+1)
	}
}

// stopRun cancels a running mirror and waits for it.
func stopRun(t *testing.T, done chan error, cancel context.CancelFunc) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mirror: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the mirror did not stop")
	}
}

// TestPrefixMirrorCannotResumePastACompaction: a stopped prefix mirror
// whose source compacted past the root's revision says it cannot continue
// and why; the root stays unserved.
func TestPrefixMirrorCannotResumePastACompaction(t *testing.T) {
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newSharedWriter(t, ec)
	for range 30 {
		w.step(ctx)
	}
	root := freshRoot(t)
	cfg := mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Prefix: []byte(prefixA), Store: rootview.StoreConfig(t, sharedZK, root),
		UntilCaughtUp: true, StatusInterval: 100 * time.Millisecond}
	if err := mirror.Run(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		w.step(ctx)
	}
	r, err := ec.Put(ctx, prefixA+"registry/x", "y")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	err = mirror.Run(ctx, cfg, nil)
	if !errors.Is(err, mirror.ErrSourceCompacted) || !strings.Contains(err.Error(), "cannot continue") {
		t.Fatalf("resume past a compaction: %v", err)
	}
	t.Logf("resume refused: %v", err)
	if _, err := zkstore.Open(ctx, rootview.StoreConfig(t, sharedZK, root)); !errors.Is(err, zkstore.ErrMirrorInProgress) {
		t.Fatalf("an instance on the unfinished root: %v", err)
	}
}

// TestPrefixMirrorRoundTripsBackToEtcd: the root a prefix mirror cut over
// (its revision moved past the copied cluster's last change) goes back to
// etcd 3.7.3 through a snapshot: `etcdutl snapshot restore` derives the
// revision from the last record, below the root's, so it takes
// --bump-revision (the difference) and --mark-compacted, and etcd then
// serves the root's revision and keys and takes the next write after it;
// once zketcd wrote after the cut-over, a plain restore serves the same
// revision, keys, history and HashKV.
func TestPrefixMirrorRoundTripsBackToEtcd(t *testing.T) {
	etcdutl := tool(t, "etcdutl")
	tool(t, "etcdctl")
	src := etcdoracle.Start(t)
	ec := src.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newSharedWriter(t, ec)
	for range 40 {
		w.step(ctx)
	}
	if _, err := ec.Put(ctx, prefixB+"registry/last", "b"); err != nil {
		t.Fatal(err)
	}
	root := freshRoot(t)
	res, err := mirror.Cutover(ctx, mirror.Config{Source: etcdoracle.NewClient(t, src.Endpoint()), Prefix: []byte(prefixA),
		Store: rootview.StoreConfig(t, sharedZK, root), StatusInterval: 100 * time.Millisecond, Quiet: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	zk := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root})
	zc := zk.Client(t)
	wantKeys, _ := prefixDump(t, zc, prefixA, 0)

	file := filepath.Join(t.TempDir(), "gap.db")
	saveSnapshot(t, zk.Endpoint(), file)
	st := status(t, file)
	if st.Revision >= res.Rev {
		t.Fatalf("etcdutl snapshot status: revision %d, the root is at %d: no gap at the top to test", st.Revision, res.Rev)
	}
	bump := res.Rev - st.Revision
	restored := restoreIntoEtcdWith(t, etcdutl, file, "--bump-revision", fmt.Sprint(bump), "--mark-compacted")
	rc := restored.Client(t)
	gotKeys, hdr := prefixDump(t, rc, prefixA, 0)
	if hdr != res.Rev || gotKeys != wantKeys {
		t.Fatalf("etcd restored with --bump-revision %d: header %d, want %d; keys:\n%s\nzketcd:\n%s", bump, hdr, res.Rev, gotKeys, wantKeys)
	}
	if r, err := rc.Put(ctx, prefixA+"registry/back", "1"); err != nil || r.Header.Revision != res.Rev+1 {
		t.Fatalf("first write on the restored etcd: %v %v, want revision %d", r, err, res.Rev+1)
	}
	restored.Close()

	// A write on zketcd closes the gap at the top: a plain restore.
	if _, err := zc.Put(ctx, prefixA+"registry/after", "z"); err != nil {
		t.Fatal(err)
	}
	want := takeDump(t, zc, "zketcd")
	file = filepath.Join(t.TempDir(), "closed.db")
	saveSnapshot(t, zk.Endpoint(), file)
	plain := restoreIntoEtcdWith(t, etcdutl, file)
	compareDumps(t, "zketcd", want, "etcd restored from its snapshot", takeDump(t, plain.Client(t), "etcd"))
}

// restoreIntoEtcdWith is restoreIntoEtcd with extra `etcdutl snapshot
// restore` arguments, on a peer port of its own.
func restoreIntoEtcdWith(t *testing.T, etcdutl, path string, extra ...string) *etcdoracle.Oracle {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored.etcd")
	peer := "http://" + embedtest.FreeAddr(t)
	args := append([]string{"snapshot", "restore", path, "--data-dir", dir, "--name", "restored",
		"--initial-cluster", "restored=" + peer, "--initial-advertise-peer-urls", peer, "--initial-cluster-token", "etcdoracle"}, extra...)
	run(t, etcdutl, args...)
	return etcdoracle.Start(t, etcdoracle.WithConfig(func(c *embed.Config) {
		c.Dir = dir
		c.Name = "restored"
		u, _ := url.Parse(peer)
		c.AdvertisePeerUrls = []url.URL{*u}
		c.ListenPeerUrls = []url.URL{*u}
		c.InitialCluster = "restored=" + peer
	}))
}
