package move_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/move"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/rootview"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

var sharedZK = zkservertest.NewShared("move-test", zkserver.Options{})

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }

func open(t *testing.T, name string, sc zkstore.Config) *engine.Engine {
	t.Helper()
	ctx := testutil.Context(t, 30*time.Second)
	b, err := engine.Open(ctx, engine.Config{Store: sc, Name: name, Logger: testutil.Logger(logrus.WarnLevel).WithField("member", name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// writeUntil puts keys through b until stop closes, recording each
// acknowledged key's revision; it returns the longest a put took (the
// write pause its client saw).
func writeUntil(t *testing.T, b *engine.Engine, prefix string, stop <-chan struct{}, acked *sync.Map) (longest time.Duration) {
	ctx := testutil.Context(t, time.Minute)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return longest
		default:
		}
		key := fmt.Sprintf("%s-%05d", prefix, n)
		began := time.Now()
		resp, err := b.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v")})
		longest = max(longest, time.Since(began))
		if err != nil {
			t.Errorf("put %s: %v", key, err)
			return longest
		}
		acked.Store(key, resp.Header.Revision)
	}
}

// TestMoveBetweenRootsWhileTwoInstancesWrite moves a root served by two
// instances, both writing, into another root of the same ensemble: the
// mover copies, fences and finishes; both instances switch; every
// acknowledged write is in the destination at its revision, whose view
// equals theirs; the lease keeps its ID; the source takes nothing after
// the fence, Open follows it to the destination, and a second run of the
// mover reports the move done.
func TestMoveBetweenRootsWhileTwoInstancesWrite(t *testing.T) {
	src := rootview.StoreConfig(t, sharedZK, "")
	dst := rootview.StoreConfig(t, sharedZK, "")
	a, b := open(t, "a", src), open(t, "b", src)
	ctx := testutil.Context(t, time.Minute)
	lease, err := a.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("leased"), Value: []byte("v"), Lease: lease.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: a.State().Rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	var acked sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var pauseA, pauseB time.Duration
	wg.Go(func() { pauseA = writeUntil(t, a, "a", stop, &acked) })
	wg.Go(func() { pauseB = writeUntil(t, b, "b", stop, &acked) })
	time.Sleep(300 * time.Millisecond)

	res, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "both instances on the destination", func() bool { return a.Moves() == 1 && b.Moves() == 1 })
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("fenced at entry %d (revision %d): fence to finished %v; longest put on a %v, on b %v",
		res.FenceLSN, res.Rev, res.Paused.Round(time.Millisecond), pauseA.Round(time.Millisecond), pauseB.Round(time.Millisecond))

	in, err := zkstore.OpenInspector(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	h, err := in.SyncHead()
	in.Close()
	if err != nil || h.LSN != res.FenceLSN {
		t.Fatalf("source head %v %v, fence at %d", h, err, res.FenceLSN)
	}
	if _, err := zkstore.Open(ctx, src); !errors.Is(err, zkstore.ErrMoved) {
		t.Fatalf("open of the source: %v, want ErrMoved", err)
	}
	testutil.Eventually(t, 10*time.Second, "caught up", func() bool { return a.State().LSN == b.State().LSN })
	view := rootview.Recovered(t, dst)
	if got, want := rootview.Dump(view), rootview.Dump(a.Snapshot()); got != want {
		t.Fatalf("destination's view differs from the instance's:\n%s\nvs\n%s", got, want)
	}
	n := 0
	acked.Range(func(k, v any) bool {
		n++
		kv, err := a.Range(ctx, &pb.RangeRequest{Key: []byte(k.(string)), Serializable: true})
		if err != nil || len(kv.Kvs) != 1 || kv.Kvs[0].ModRevision != v.(int64) {
			t.Errorf("%s acknowledged at %d: %v %v", k, v, kv, err)
		}
		return true
	})
	if last, ok := acked.Load("a-00000"); !ok || n < 4 {
		t.Fatalf("too few writes: %d (%v)", n, last)
	}
	ttl, err := b.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: lease.ID})
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("lease after the move: %v %v", ttl, err)
	}
	c := open(t, "c", src) // follows the move
	if c.State().LSN < res.FenceLSN {
		t.Fatalf("an instance opened on the source recovered up to %d", c.State().LSN)
	}
	again, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.WarnLevel)})
	if err != nil || !again.AlreadyMoved {
		t.Fatalf("second run: %+v %v", again, err)
	}
	if _, err := zkstore.FreeMovedSource(ctx, src); err != nil {
		t.Fatal(err)
	}
	if _, err := zkstore.Open(ctx, src); !errors.Is(err, zkstore.ErrMoved) {
		t.Fatalf("open of the freed source: %v, want ErrMoved", err)
	}
}

// TestMoveCrashedAfterTheFenceFinishesWhenRunAgain stops the mover right
// after its fence: the instances hold their writes (the destination is not
// finished, so neither root takes a commit); a second run finishes the
// move and the held writes land on the destination, once.
func TestMoveCrashedAfterTheFenceFinishesWhenRunAgain(t *testing.T) {
	src := rootview.StoreConfig(t, sharedZK, "")
	dst := rootview.StoreConfig(t, sharedZK, "")
	a := open(t, "a", src)
	ctx := testutil.Context(t, time.Minute)
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("before"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("mover killed")
	_, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.ErrorLevel), AfterFence: func() error { return crash }})
	if !errors.Is(err, crash) {
		t.Fatalf("first run: %v", err)
	}
	if _, err := zkstore.Open(ctx, dst); !errors.Is(err, zkstore.ErrMoveInProgress) {
		t.Fatalf("open of the unfinished destination: %v", err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := a.Put(ctx, &pb.PutRequest{Key: []byte("held"), Value: []byte("v")})
		held <- err
	}()
	select {
	case err := <-held:
		t.Fatalf("a write landed while the move was half done: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.ErrorLevel)}); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	view := rootview.Recovered(t, dst)
	if got, want := rootview.Dump(view), rootview.Dump(a.Snapshot()); got != want {
		t.Fatalf("destination:\n%s\ninstance:\n%s", got, want)
	}
}

// TestMoveRefusesAFleetTenantsRoot refuses, with a plain error and before
// writing anything, a move of a fleet tenant's root and a move into a
// fleet's roots: a fleet's tenant engines cannot follow a move yet.
func TestMoveRefusesAFleetTenantsRoot(t *testing.T) {
	fleet := rootview.StoreConfig(t, sharedZK, "")
	ctx := testutil.Context(t, 30*time.Second)
	reg, err := zkstore.OpenRegistry(ctx, fleet)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if _, err := reg.CreateTenant(zkstore.TenantRecord{Name: "t", CNs: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	tenant := fleet
	tenant.Root = zkstore.TenantRoot(fleet.Root, "t")
	a := open(t, "a", tenant)
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	single := rootview.StoreConfig(t, sharedZK, "")
	open(t, "s", single)
	into := fleet
	into.Root = zkstore.TenantRoot(fleet.Root, "new")
	for _, tc := range []struct {
		name      string
		src, dest zkstore.Config
	}{
		{"a tenant's root", tenant, rootview.StoreConfig(t, sharedZK, "")},
		{"into a fleet's roots", single, into},
		{"the fleet root", fleet, rootview.StoreConfig(t, sharedZK, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := move.Run(ctx, move.Config{Source: tc.src, Dest: tc.dest, Logger: testutil.Logger(logrus.ErrorLevel)})
			if !errors.Is(err, zkstore.ErrFleetTenant) {
				t.Fatalf("move: %v, want ErrFleetTenant", err)
			}
			if ok, _, err := zkstore.RootExists(ctx, tc.dest); err != nil || ok {
				t.Fatalf("the destination was written: %v %v", ok, err)
			}
		})
	}
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("w")}); err != nil {
		t.Fatalf("the tenant after the refused move: %v", err)
	}
}

// copiedUpToTheFence returns a source root with 20 keys written by the
// instance a, and a destination a mover copied it into, stopped before
// it fenced the source.
func copiedUpToTheFence(t *testing.T) (src, dst zkstore.Config, a *engine.Engine) {
	t.Helper()
	src = rootview.StoreConfig(t, sharedZK, "")
	dst = rootview.StoreConfig(t, sharedZK, "")
	a = open(t, "a", src)
	ctx := testutil.Context(t, time.Minute)
	for i := range 20 {
		if _, err := a.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%02d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	stopped := errors.New("mover stopped")
	if _, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.ErrorLevel), BeforeFence: func() error { return stopped }}); !errors.Is(err, stopped) {
		t.Fatalf("the run stopped before the fence: %v", err)
	}
	return src, dst, a
}

// TestMoveStartsOverWhenCompactionOvertookTheCopy stops a mover before its
// fence, compacts the source past what it copied, and runs it again: the
// copy starts over from the source's new base generation and the move
// finishes with every write.
func TestMoveStartsOverWhenCompactionOvertookTheCopy(t *testing.T) {
	src, dst, a := copiedUpToTheFence(t)
	ctx := testutil.Context(t, time.Minute)
	// A compaction truncates the log below the base generation before
	// it: three rounds of rewrites and compactions.
	for round := range 3 {
		for i := range 20 {
			if _, err := a.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%02d", i), Value: fmt.Appendf(nil, "w%d-%0200d", round, 0)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: a.State().Rev, Physical: true}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "the source's log truncated", func() bool {
		in, err := zkstore.OpenInspector(ctx, src)
		if err != nil {
			return false
		}
		defer in.Close()
		err = in.ReadEntries(ctx, 3, 3, 1, func(*revision.Entry, int) error { return nil })
		return err != nil
	})
	if _, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.ErrorLevel)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a on the destination", func() bool { return a.Moves() == 1 })
	if got, want := rootview.Dump(rootview.Recovered(t, dst)), rootview.Dump(a.Snapshot()); got != want {
		t.Fatalf("destination:\n%s\ninstance:\n%s", got, want)
	}
}

// TestMoveWithAnInstanceRestartedAtTheFence restarts an instance right
// after the fence (it opens the fenced source and switches, or, opened
// after the move finished, follows the source's moved record), then both
// instances write on the destination: neither finds ZooKeeper's history
// behind its own.
func TestMoveWithAnInstanceRestartedAtTheFence(t *testing.T) {
	src := rootview.StoreConfig(t, sharedZK, "")
	dst := rootview.StoreConfig(t, sharedZK, "")
	a, b := open(t, "a", src), open(t, "b", src)
	ctx := testutil.Context(t, time.Minute)
	for i := range 10 {
		if _, err := b.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%02d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	var a2 *engine.Engine
	reopened := make(chan struct{})
	res, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.WarnLevel), AfterFence: func() error {
		a.Close()
		go func() {
			defer close(reopened)
			a2 = open(t, "a", src)
		}()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	<-reopened
	// a2 opened the fenced source and switched, or (opened after the move
	// finished) followed the source's moved record to the destination.
	testutil.Eventually(t, 20*time.Second, "both on the destination", func() bool {
		_, fenced := a2.Moved()
		return b.Moves() == 1 && !fenced && a2.State().LSN >= res.FenceLSN
	})
	for i := range 20 {
		e := []*engine.Engine{a2, b}[i%2]
		if _, err := e.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "after%02d", i), Value: []byte("v")}); err != nil {
			t.Fatalf("put %d through %d: %v", i, i%2, err)
		}
	}
	if _, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("after00")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a2.Range(ctx, &pb.RangeRequest{Key: []byte("after00")}); err != nil {
		t.Fatal(err)
	}
}

// TestMoveRefusesToFinishWhenTheSourceTookEntriesAfterItsFence commits an
// entry after the fence on the source (what no instance may do): the mover
// stops with an error instead of finishing a destination without it.
func TestMoveRefusesToFinishWhenTheSourceTookEntriesAfterItsFence(t *testing.T) {
	src := rootview.StoreConfig(t, sharedZK, "")
	dst := rootview.StoreConfig(t, sharedZK, "")
	a := open(t, "a", src)
	ctx := testutil.Context(t, time.Minute)
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("before"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	after := func() error {
		st, err := zkstore.Open(ctx, src)
		if err != nil {
			return err
		}
		defer st.Close()
		h, err := st.SyncHead()
		if err != nil {
			return err
		}
		e := &revision.Entry{LSN: h.LSN + 1, Writer: revision.WriterTag{Nonce: 5, Seq: 1}, Ops: []revision.Op{{Kind: revision.OpBumpRev, Rev: h.Rev + 1}}}
		res, err := st.Commit(ctx, zkstore.CommitRequest{Prev: h.LSN, Entry: e, Rev: h.Rev + 1})
		if err != nil || res.Outcome != zkstore.Committed {
			return fmt.Errorf("commit after the fence: %v %v", res.Outcome, err)
		}
		return nil
	}
	res, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.ErrorLevel), AfterFence: after})
	if err == nil {
		t.Fatalf("the move finished (fence at %d) with an entry after its fence", res.FenceLSN)
	}
	if _, err := zkstore.Open(ctx, dst); !errors.Is(err, zkstore.ErrMoveInProgress) {
		t.Fatalf("open of the destination: %v, want it unfinished", err)
	}
}

// TestMoveTwiceFollowsTheSecondWithinTheNewEnsemble moves a served root
// to another ensemble, then within that ensemble: the second fence names
// no servers (the destination is on its source's ensemble), and the
// instance opens it on the ensemble it runs on, not the one it was
// started on.
func TestMoveTwiceFollowsTheSecondWithinTheNewEnsemble(t *testing.T) {
	src := rootview.StoreConfig(t, sharedZK, "")
	other := zkservertest.Standalone(t)
	first := zkstore.Config{Servers: []string{other.Addr()}, Root: "/first", Logger: testutil.Logger(logrus.WarnLevel)}
	second := first
	second.Root = "/second"
	a := open(t, "a", src)
	ctx := testutil.Context(t, time.Minute)
	for i, hop := range []struct{ from, to zkstore.Config }{{src, first}, {first, second}} {
		if _, err := a.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		if _, err := move.Run(ctx, move.Config{Source: hop.from, Dest: hop.to, Logger: testutil.Logger(logrus.ErrorLevel)}); err != nil {
			t.Fatalf("move %d: %v", i+1, err)
		}
		testutil.Eventually(t, 20*time.Second, fmt.Sprintf("the instance on %s", hop.to.Root), func() bool { return a.Moves() == int64(i+1) })
	}
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if got, want := rootview.Dump(rootview.Recovered(t, second)), rootview.Dump(a.Snapshot()); got != want {
		t.Fatalf("the second destination:\n%s\ninstance:\n%s", got, want)
	}
	stray := src
	stray.Root = second.Root
	if ok, _, err := zkstore.RootExists(ctx, stray); err != nil || ok {
		t.Fatalf("%s on the first ensemble: exists %v, %v", stray.Root, ok, err)
	}
}

// TestMoveLogsTheCopysProgress moves a root whose log is longer than the
// progress step: the mover logs, step by step, the entries copied, those
// left and the rate, and the base generation's copy when it makes one.
func TestMoveLogsTheCopysProgress(t *testing.T) {
	src := rootview.StoreConfig(t, sharedZK, "")
	dst := rootview.StoreConfig(t, sharedZK, "")
	a := open(t, "a", src)
	ctx := testutil.Context(t, time.Minute)
	for i := range 60 {
		if _, err := a.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%02d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	lg, hook := logtest.NewNullLogger()
	lg.SetLevel(logrus.InfoLevel)
	if _, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: logrus.NewEntry(lg), ProgressEvery: 10}); err != nil {
		t.Fatal(err)
	}
	var steps []int64
	base := false
	for _, e := range hook.AllEntries() {
		switch e.Message {
		case "copying the source's base generation":
			if _, ok := e.Data["base_bytes"]; !ok {
				t.Errorf("the base generation's copy without its size: %v", e.Data)
			}
		case "base generation copied":
			base = true
		case "copying":
			n, _ := e.Data["entries"].(int64)
			left, okLeft := e.Data["left"].(int64)
			_, okRate := e.Data["entries_per_sec"].(int64)
			if !okLeft || !okRate || left < 0 {
				t.Errorf("progress line without its figures: %v", e.Data)
			}
			if len(steps) > 0 && n <= steps[len(steps)-1] {
				t.Errorf("progress went from %d to %d entries", steps[len(steps)-1], n)
			}
			steps = append(steps, n)
		}
	}
	if !base {
		t.Error(`no "base generation copied" line`)
	}
	if len(steps) < 5 {
		t.Fatalf("%d progress lines for a copy of 60 entries or more in steps of 10: %v", len(steps), steps)
	}
}

// TestMoveContinuesAfterAResetCutShort: a run that started the copy over
// (the source's compaction overtook it) was stopped while it reset the
// destination, leaving some of the copy (the meta) but not its head. Run
// again, the move resets what is left and finishes instead of failing on
// znodes that exist.
func TestMoveContinuesAfterAResetCutShort(t *testing.T) {
	src, dst, a := copiedUpToTheFence(t)
	ctx := testutil.Context(t, time.Minute)
	conn, _, err := zk.Connect(dst.Servers, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Delete(dst.Root+"/head", -1); err != nil {
		t.Fatal(err)
	}
	if _, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: testutil.Logger(logrus.ErrorLevel)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a on the destination", func() bool { return a.Moves() == 1 })
	if got, want := rootview.Dump(rootview.Recovered(t, dst)), rootview.Dump(a.Snapshot()); got != want {
		t.Fatalf("destination:\n%s\ninstance:\n%s", got, want)
	}
}
