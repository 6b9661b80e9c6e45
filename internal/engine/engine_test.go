package engine

// The engine's unit tests: an Engine on memlog, with no ZooKeeper
// and no JVM. They prove the committer (group commit, pipelining, requeue,
// exactly-once on an unknown outcome), the tailer, the read barrier, lease
// expiry and compaction against the log's contract. The ZooKeeper-backed
// tests (package backend_test) prove the same engine on the real log.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

var _ Log = (*memlog.Client)(nil)

// engine starts an Engine named name on a new client of st.
func engine(t testing.TB, st *memlog.Store, name string, configure func(*Config)) (*Engine, *memlog.Client) {
	t.Helper()
	lg := testutil.Logger(logrus.ErrorLevel)
	cfg := Config{Name: name, Logger: lg.WithField("member", name)}
	if configure != nil {
		configure(&cfg)
	}
	c := st.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := New(ctx, cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, c
}

func put(t *testing.T, b *Engine, key, value string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

func get(t *testing.T, b *Engine, key string, serializable bool) *pb.RangeResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.Range(ctx, &pb.RangeRequest{Key: []byte(key), Serializable: serializable})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return resp
}

// checkLogReplaysToView replays the whole log into a fresh view and checks
// it equals b's: every write applied exactly once, in log order.
func checkLogReplaysToView(t *testing.T, st *memlog.Store, b *Engine) {
	t.Helper()
	c := st.Client()
	defer c.Close()
	testutil.Eventually(t, 5*time.Second, "view caught up with the head", func() bool { return b.State().LSN == st.HeadNow().LSN })
	view, _, _, err := Replay(context.Background(), c, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := view.State(), b.State(); got.Rev != want.Rev || got.LSN != want.LSN || got.CompactRev != want.CompactRev {
		t.Fatalf("replayed view at %+v, live view at %+v", got, want)
	}
	dump := func(read func(fn func(revision.Reader) error) error) map[string]string {
		out := map[string]string{}
		_ = read(func(r revision.Reader) error {
			return r.Range([]byte{0}, []byte{}, 0, func(kv *revision.KeyValue) bool {
				out[string(kv.Key)] = fmt.Sprintf("%s@%d/%d v%d", kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
				return true
			})
		})
		return out
	}
	got, want := dump(view.Read), dump(b.Read)
	if len(got) != len(want) {
		t.Fatalf("replayed %d keys, live view has %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %q: replayed %q, live %q", k, got[k], v)
		}
	}
}

func TestPutIsOneLogEntryAppliedBeforeTheAnswer(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, _ := engine(t, st, "a", nil)
	rev := put(t, b, "k", "v")
	if rev != 2 {
		t.Fatalf("revision %d, want 2", rev)
	}
	e, ok := st.Entry(2)
	if !ok || len(e.Ops) != 1 || e.Ops[0].Rev != 2 {
		t.Fatalf("entry 2: %+v %v", e, ok)
	}
	// Serializable: no barrier, so the view itself must already hold it.
	if resp := get(t, b, "k", true); len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("read after put: %v", resp.Kvs)
	}
}

func TestConcurrentWritesShareLogEntries(t *testing.T) {
	st := memlog.New(memlog.Options{})
	release := make(chan struct{})
	var first atomic.Bool
	st.SetCommitFault(func(zkstore.CommitRequest) memlog.Fault {
		if first.CompareAndSwap(false, true) {
			<-release // hold the first commit while the others queue
		}
		return memlog.NoFault
	})
	b, _ := engine(t, st, "a", nil)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the engine closes, should the test fail first
	const n = 40
	before := b.commit.submitted.Load()
	revs := make(chan int64, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			revs <- put(t, b, fmt.Sprintf("k%02d", i), "v")
		}()
	}
	testutil.Eventually(t, 5*time.Second, "first commit in flight", first.Load)
	// Every write is in the held entry or waits behind it: they cannot
	// all have an entry of their own.
	testutil.Eventually(t, 10*time.Second, "every write handed to the committer", func() bool { return b.commit.submitted.Load() >= before+n })
	releaseOnce()
	wg.Wait()
	close(revs)
	seen := map[int64]bool{}
	for r := range revs {
		if seen[r] {
			t.Fatalf("revision %d answered twice", r)
		}
		seen[r] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct revisions, want %d", len(seen), n)
	}
	if c := st.Commits(); c >= n {
		t.Fatalf("%d entries for %d writes: no group commit", c, n)
	}
	checkLogReplaysToView(t, st, b)
}

func TestLostCASIsEvaluatedAgainOnTheNewerView(t *testing.T) {
	st := memlog.New(memlog.Options{})
	faultFirstCommit(st, memlog.LoseCAS)
	b, _ := engine(t, st, "a", nil)
	ctx := context.Background()
	// A compare on the foreign key: evaluated again after the lost CAS, it
	// must see the foreign put.
	resp, err := b.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte(memlog.ForeignKey), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_Version{Version: 0}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("mine"), Value: []byte("first")}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("mine"), Value: []byte("second")}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded || resp.Header.Revision != 3 {
		t.Fatalf("succeeded %v at revision %d, want the failure branch at 3 (after the foreign put at 2)", resp.Succeeded, resp.Header.Revision)
	}
	if kv := get(t, b, "mine", false).Kvs; len(kv) != 1 || string(kv[0].Value) != "second" {
		t.Fatalf("mine = %v", kv)
	}
	checkLogReplaysToView(t, st, b)
}

func TestUnknownOutcomeThatLandedIsAppliedOnce(t *testing.T) {
	st := memlog.New(memlog.Options{})
	faultFirstCommit(st, memlog.UnknownApplied)
	b, _ := engine(t, st, "a", nil)
	_, err := b.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v1")})
	if !errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost) {
		t.Fatalf("put of unknown outcome: %v, want %v", err, rpctypes.ErrGRPCTimeoutDueToConnectionLost)
	}
	// The entry did land: the tailer applies it, once; the next write
	// follows it.
	if rev := put(t, b, "k", "v2"); rev != 3 {
		t.Fatalf("next put at revision %d, want 3", rev)
	}
	kv := get(t, b, "k", false).Kvs
	if len(kv) != 1 || kv[0].Version != 2 || kv[0].CreateRevision != 2 || string(kv[0].Value) != "v2" {
		t.Fatalf("k = %v, want version 2 created at 2", kv)
	}
	if c := st.Commits(); c != 2 {
		t.Fatalf("%d entries written, want 2", c)
	}
	checkLogReplaysToView(t, st, b)
}

func TestUnknownOutcomeThatWasLostWritesNothing(t *testing.T) {
	st := memlog.New(memlog.Options{})
	faultFirstCommit(st, memlog.UnknownLost)
	b, _ := engine(t, st, "a", nil)
	_, err := b.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("lost")})
	if !errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost) {
		t.Fatalf("put: %v", err)
	}
	if kv := get(t, b, "k", false).Kvs; len(kv) != 0 {
		t.Fatalf("k = %v after a lost commit", kv)
	}
	if rev := put(t, b, "k", "v"); rev != 2 {
		t.Fatalf("next put at revision %d, want 2", rev)
	}
}

func TestUnavailableLogFailsTheWriteAndWritesNothing(t *testing.T) {
	st := memlog.New(memlog.Options{})
	st.SetCommitFault(func(zkstore.CommitRequest) memlog.Fault { return memlog.Unavailable })
	b, _ := engine(t, st, "a", nil)
	_, err := b.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	// grpcsrv answers it as etcd's "no leader".
	if !errors.Is(err, zkstore.ErrUnavailable) {
		t.Fatalf("put: %v, want %v", err, zkstore.ErrUnavailable)
	}
	if c := st.Commits(); c != 0 {
		t.Fatalf("%d entries written", c)
	}
}

func TestPipelinedFlightsRequeueInOrderAfterALostCAS(t *testing.T) {
	st := memlog.New(memlog.Options{})
	var calls, chained atomic.Int32
	st.SetCommitFault(func(req zkstore.CommitRequest) memlog.Fault {
		if req.Marker != nil && !req.Marker.Create && req.Pipelined {
			chained.Add(1)
		}
		if calls.Add(1) == 3 {
			return memlog.LoseCAS
		}
		return memlog.NoFault
	})
	b, _ := engine(t, st, "a", func(c *Config) { c.CommitPipeline = 4; c.MaxBatchRequests = 2; c.CommitLinger = -1 })
	const writers, each = 8, 10
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for i := 0; i < each; i++ {
				rev := put(t, b, fmt.Sprintf("w%d", w), fmt.Sprint(i))
				if rev <= last {
					t.Errorf("writer %d: revision %d after %d", w, rev, last)
				}
				last = rev
			}
		}()
	}
	wg.Wait()
	if chained.Load() == 0 {
		t.Fatal("no commit was chained on another by the pipeline marker")
	}
	for w := 0; w < writers; w++ {
		kv := get(t, b, fmt.Sprintf("w%d", w), false).Kvs
		if len(kv) != 1 || kv[0].Version != each || string(kv[0].Value) != fmt.Sprint(each-1) {
			t.Fatalf("w%d = %v, want version %d holding %d", w, kv, each, each-1)
		}
	}
	if kv := get(t, b, memlog.ForeignKey, false).Kvs; len(kv) != 1 {
		t.Fatalf("foreign write missing: %v", kv)
	}
	checkLogReplaysToView(t, st, b)
}

func TestTooLargeEntryIsSplitAndATooLargeRequestRefused(t *testing.T) {
	st := memlog.New(memlog.Options{MaxEntryBytes: 1 << 20, MaxChunkedBytes: 8 << 10})
	release := make(chan struct{})
	var first atomic.Bool
	st.SetCommitFault(func(zkstore.CommitRequest) memlog.Fault {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		return memlog.NoFault
	})
	b, _ := engine(t, st, "a", nil)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the engine closes, should the test fail first
	value := string(make([]byte, 1024))
	const n = 20
	before := b.commit.submitted.Load()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); put(t, b, fmt.Sprintf("k%02d", i), value) }()
	}
	testutil.Eventually(t, 5*time.Second, "first commit in flight", first.Load)
	// Every write is in the held entry or waits behind it: the next batch
	// takes all those waiting, past the chunk size.
	testutil.Eventually(t, 10*time.Second, "every write handed to the committer", func() bool { return b.commit.submitted.Load() >= before+n })
	releaseOnce()
	wg.Wait()
	_, err := b.Put(context.Background(), &pb.PutRequest{Key: []byte("huge"), Value: make([]byte, 16<<10)})
	if !errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		t.Fatalf("huge put: %v, want %v", err, rpctypes.ErrGRPCRequestTooLarge)
	}
	checkLogReplaysToView(t, st, b)
}

func TestTailerAppliesAnotherWritersEntries(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, _ := engine(t, st, "a", nil)
	lsn := st.AppendForeign([]revision.Op{{Kind: revision.OpTxn, Rev: 2, Changes: []revision.Change{{Key: []byte("x"), Value: []byte("1")}}}})
	testutil.Eventually(t, 3*time.Second, "tailer applied the foreign entry", func() bool { return b.State().LSN >= lsn })
	if kv := get(t, b, "x", true).Kvs; len(kv) != 1 || kv[0].ModRevision != 2 {
		t.Fatalf("x = %v", kv)
	}
}

func TestLinearizableReadSeesAWriteMadeElsewhereBeforeIt(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	b, _ := engine(t, st, "b", nil)
	for i := 0; i < 20; i++ {
		rev := put(t, a, "k", fmt.Sprint(i))
		before := st.QuorumCalls()
		kv := get(t, b, "k", false).Kvs
		if len(kv) != 1 || kv[0].ModRevision != rev {
			t.Fatalf("round %d: b read %v, want the write at %d", i, kv, rev)
		}
		if st.QuorumCalls() == before {
			t.Fatalf("round %d: linearizable read without a barrier round", i)
		}
	}
}

func TestWriteThatChangesNothingIsAnsweredAfterABarrier(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, _ := engine(t, st, "a", nil)
	put(t, b, "k", "v")
	commits, rounds := st.Commits(), st.QuorumCalls()
	resp, err := b.DeleteRange(context.Background(), &pb.DeleteRangeRequest{Key: []byte("absent")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != 0 {
		t.Fatalf("deleted %d", resp.Deleted)
	}
	if st.Commits() != commits {
		t.Fatal("a delete of nothing wrote an entry")
	}
	if st.QuorumCalls() == rounds {
		t.Fatal("a delete of nothing was answered without a barrier")
	}
}

func TestBarrierReadsJoinOneRoundStartedAfterThem(t *testing.T) {
	var rounds atomic.Int32
	var lsn atomic.Int64
	gate := make(chan struct{})
	br := &barrier{maxRounds: 1, sync: func() (int64, error) {
		rounds.Add(1)
		<-gate
		return lsn.Load(), nil
	}}
	first := make(chan int64)
	go func() { l, _ := br.wait(context.Background()); first <- l }()
	testutil.Eventually(t, 10*time.Second, "first round started", func() bool { return rounds.Load() == 1 })
	lsn.Store(7) // written after the first round began: later reads must see it
	var wg sync.WaitGroup
	got := make([]int64, 10)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = br.wait(context.Background()) }()
	}
	testutil.Eventually(t, 5*time.Second, "the ten reads joined", func() bool {
		br.mu.Lock()
		defer br.mu.Unlock()
		return br.seq == 11
	})
	close(gate)
	<-first
	wg.Wait()
	for i, l := range got {
		if l != 7 {
			t.Fatalf("read %d got head %d, from a round that started before it", i, l)
		}
	}
	if n := rounds.Load(); n != 2 {
		t.Fatalf("%d rounds for 11 reads in two waves, want 2", n)
	}
}

func TestLeaseExpiresAfterItsTTLDeletingItsKeysInOneRevision(t *testing.T) {
	st := memlog.New(memlog.Options{})
	clk := testutil.NewClock()
	b, _ := engine(t, st, "a", onClock(clk, 0, nil))
	testutil.Eventually(t, 10*time.Second, "a leads", leads(b))
	ctx := context.Background()
	start := clk.Now()
	lease, err := b.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: MinLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"l1", "l2"} {
		if _, err := b.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v"), Lease: lease.ID}); err != nil {
			t.Fatal(err)
		}
	}
	rev := b.State().Rev
	expiresNoSoonerThan(t, b, st, clk, lease.ID, start.Add(ttlOf(MinLeaseTTL)), time.Second)
	if kv := get(t, b, "l", false); len(kv.Kvs) != 0 {
		t.Fatalf("keys left: %v", kv.Kvs)
	}
	if got := b.State().Rev; got != rev+1 {
		t.Fatalf("revision %d after expiry, want %d (both deletes in one)", got, rev+1)
	}
	checkLogReplaysToView(t, st, b)
}

func TestRenewedLeaseOutlivesItsTTL(t *testing.T) {
	st := memlog.New(memlog.Options{})
	clk := testutil.NewClock()
	b, _ := engine(t, st, "a", onClock(clk, 0, nil))
	testutil.Eventually(t, 10*time.Second, "a leads", leads(b))
	ctx := context.Background()
	lease, err := b.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: MinLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	for end := clk.Now().Add(2*ttlOf(MinLeaseTTL) + 500*time.Millisecond); clk.Now().Before(end); {
		ttl, err := b.LeaseRenew(ctx, lease.ID)
		if err != nil || ttl != MinLeaseTTL {
			t.Fatalf("renew: %d %v", ttl, err)
		}
		clk.Advance(400 * time.Millisecond)
		scanned(t, b)
	}
	if !st.LeaseTokenExists(lease.ID) {
		t.Fatal("a lease renewed every 400 ms expired")
	}
}

func TestSessionLossMovesLeadershipAndTheNewLeaderExpiresLeases(t *testing.T) {
	st := memlog.New(memlog.Options{})
	clk := testutil.NewClock()
	a, ca := engine(t, st, "a", onClock(clk, 0, nil))
	testutil.Eventually(t, 10*time.Second, "a leads", func() bool { l, _ := a.Leader(); return l })
	b, _ := engine(t, st, "b", onClock(clk, 0, nil))
	granted := clk.Now()
	lease, err := b.LeaseGrant(context.Background(), &pb.LeaseGrantRequest{TTL: MinLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	ca.ExpireSession()
	testutil.Eventually(t, 10*time.Second, "b leads", func() bool {
		lb, id := b.Leader()
		return lb && id == b.MemberID()
	})
	if l, _ := a.Leader(); l {
		t.Fatal("a still leads after its session expired")
	}
	// b's clock for the lease starts at its first look, on the clock
	// still at the grant.
	scanned(t, b)
	expiresNoSoonerThan(t, b, st, clk, lease.ID, granted.Add(ttlOf(MinLeaseTTL)), time.Second)
}

func TestCompactionPublishesABaseTruncatesTheLogAndRecoversFromIt(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		put(t, a, fmt.Sprintf("k%d", i%3), fmt.Sprint(i))
	}
	first := a.State().Rev
	if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: first, Physical: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		put(t, a, fmt.Sprintf("k%d", i%3), fmt.Sprint(i))
	}
	if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: a.State().Rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Entry(2); ok {
		t.Fatal("entry 2 survived two physical compactions")
	}
	if _, err := a.Range(ctx, &pb.RangeRequest{Key: []byte("k0"), Revision: first}); !errors.Is(err, revision.ErrCompacted) {
		t.Fatalf("read below the compaction: %v, want %v", err, revision.ErrCompacted)
	}
	// A new instance recovers from the base and the log after it.
	b, _ := engine(t, st, "b", nil)
	if got, want := b.State(), a.State(); got.Rev != want.Rev || got.CompactRev != want.CompactRev {
		t.Fatalf("recovered at %+v, want %+v", got, want)
	}
	checkLogReplaysToView(t, st, b)
}

func TestMemoryIsReleasedOnceTheCompactionObserverDropsItsCopy(t *testing.T) {
	st := memlog.New(memlog.Options{})
	releases := make(chan struct{}, 64)
	a, _ := engine(t, st, "a", func(c *Config) {
		c.AfterCompaction = func() { releases <- struct{}{} }
	})
	var held atomic.Pointer[func()]
	a.OnCompact(func(before *revision.Snapshot, rev int64, dropped func()) {
		if before.State.CompactRev >= rev {
			t.Errorf("observer called for a compaction to %d with the state after it (compacted to %d)", rev, before.State.CompactRev)
		}
		held.Store(&dropped) // held until the test drops it
	})
	for i := 0; i < 10; i++ {
		put(t, a, fmt.Sprintf("k%d", i%3), fmt.Sprint(i))
	}
	if _, err := a.Compact(context.Background(), &pb.CompactionRequest{Revision: a.State().Rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	if held.Load() == nil {
		t.Fatal("the compaction's observer was not called")
	}
	// The copy keeps what the trim dropped alive: no release while it is
	// held (it would free nothing), one once it is dropped.
	select {
	case <-releases:
		t.Fatal("memory released while the observer held its copy of the view")
	case <-time.After(3 * compactCheckEvery):
	}
	drop := *held.Load()
	drop()
	drop() // calls after the first do nothing
	select {
	case <-releases:
	case <-time.After(10 * time.Second):
		t.Fatal("no memory release after the observer dropped its copy of the view")
	}
	if n := a.compaction.copiesHeld.Load(); n != 0 {
		t.Fatalf("%d copies of the view counted as held after the only one was dropped", n)
	}
}

func TestTailerBehindATruncatedLogReloadsTheView(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	testutil.Eventually(t, 10*time.Second, "a leads", func() bool { l, _ := a.Leader(); return l })
	b, cb := engine(t, st, "b", nil)
	put(t, a, "k", "0")
	testutil.Eventually(t, 3*time.Second, "b caught up", func() bool { return b.State().Rev == a.State().Rev })
	cb.SetConnected(false)
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		for i := 0; i < 5; i++ {
			put(t, a, "k", fmt.Sprint(round*5+i))
		}
		if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: a.State().Rev, Physical: true}); err != nil {
			t.Fatal(err)
		}
	}
	cb.SetConnected(true)
	testutil.Eventually(t, 5*time.Second, "b reloaded", func() bool { return b.State().Rev == a.State().Rev })
	if kv := get(t, b, "k", true).Kvs; len(kv) != 1 || string(kv[0].Value) != "9" {
		t.Fatalf("b reads %v", kv)
	}
}

// faultFirstCommit makes st's first commit from now on end with f; the
// others go through.
func faultFirstCommit(st *memlog.Store, f memlog.Fault) {
	var calls atomic.Int32
	st.SetCommitFault(func(zkstore.CommitRequest) memlog.Fault {
		if calls.Add(1) == 1 {
			return f
		}
		return memlog.NoFault
	})
}
