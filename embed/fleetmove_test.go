package embed_test

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/move"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// putUntil puts keys through c until stop closes, recording each
// acknowledged key's revision in acked.
func putUntil(t *testing.T, c *clientv3.Client, prefix string, stop <-chan struct{}, acked *sync.Map) {
	ctx := testutil.Context(t, 2*time.Minute)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		key := fmt.Sprintf("%s-%05d", prefix, n)
		resp, err := c.Put(ctx, key, "v")
		if err != nil {
			t.Errorf("put %s: %v", key, err)
			return
		}
		acked.Store(key, resp.Header.Revision)
	}
}

// TestTenantMoveWhileTwoInstancesServeIt moves tenant a of a fleet served
// by two instances, a client on each writing a's keys and a watch on a,
// into another root of the fleet's ensemble, or of another ensemble:
// both instances switch; every
// acknowledged write is there once at its revision; the watch sees every
// revision exactly once; the lease keeps its ID and time left; b is
// untouched; the registry names the new root, where an instance started
// afterwards serves a; freeing the source leaves only its moved record,
// and deleting the tenant frees both roots.
func TestTenantMoveWhileTwoInstancesServeIt(t *testing.T) {
	for _, other := range []bool{false, true} {
		name := "the fleet's ensemble"
		if other {
			name = "another ensemble"
		}
		t.Run(name, func(t *testing.T) { testTenantMove(t, other) })
	}
}

func testTenantMove(t *testing.T, otherEnsemble bool) {
	fx := newFleetFixture(t, "a", "b")
	fwd := func(c *embed.Config) { c.Engine.ForwardWrites = true }
	f1, f2 := fx.start("i1", fwd), fx.start("i2", fwd)
	ctx := testutil.Context(t, 2*time.Minute)
	a1, a2, b1 := fx.client(f1, "a"), fx.client(f2, "a"), fx.client(f1, "b")

	bPut, err := b1.Put(ctx, "b-key", "b")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := a1.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	first, err := a1.Put(ctx, "leased", "v", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	watch := a2.Watch(clientv3.WithRequireLeader(ctx), "", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))

	var acked sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { putUntil(t, a1, "k1", stop, &acked) })
	wg.Go(func() { putUntil(t, a2, "k2", stop, &acked) })
	time.Sleep(300 * time.Millisecond)

	dest := fx.storeConfig()
	dest.Root = "/elsewhere/a"
	wantServers := ""
	if otherEnsemble {
		dest.Servers = []string{zkservertest.Standalone(t).Addr()}
		wantServers = dest.Servers[0]
	}
	res, err := move.RunTenant(ctx, "a", move.Config{Source: fx.storeConfig(), Dest: dest, Logger: testutil.Logger(logrus.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "both instances on the destination", func() bool {
		e1, e2 := f1.Tenant("a"), f2.Tenant("a")
		return e1 != nil && e2 != nil && e1.Moves() == 1 && e2.Moves() == 1
	})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("fenced at entry %d (revision %d), writes paused %v", res.FenceLSN, res.Rev, res.Paused.Round(time.Millisecond))

	n := checkAckedOnceAndWatched(t, a1, &acked, first.Header.Revision, watch)
	ttl, err := a2.TimeToLive(ctx, lease.ID)
	if err != nil || ttl.TTL <= 0 || ttl.TTL > 600 {
		t.Fatalf("lease after the move: %+v %v", ttl, err)
	}
	// b: untouched.
	bGot, err := b1.Get(ctx, "b-key")
	if err != nil || len(bGot.Kvs) != 1 || bGot.Kvs[0].ModRevision != bPut.Header.Revision || bGot.Header.Revision != bPut.Header.Revision {
		t.Fatalf("tenant b after a's move: %+v %v", bGot, err)
	}
	if e := f1.Tenant("b"); e == nil || e.Moves() != 0 || e.Root() != zkstore.TenantRoot(fx.root, "b") {
		t.Fatalf("tenant b's engine after a's move: %v", e)
	}
	rec, err := fx.reg.Tenant("a")
	if err != nil || rec.Root != dest.Root || rec.Servers != wantServers {
		t.Fatalf("a's record after the move: %+v %v", rec, err)
	}
	// The root move refuses the tenant's new root: the registry would not follow.
	other := fx.storeConfig()
	other.Root = "/elsewhere/b"
	if _, err := move.Run(ctx, move.Config{Source: dest, Dest: other, Logger: testutil.Logger(logrus.ErrorLevel)}); !errors.Is(err, zkstore.ErrFleetTenant) {
		t.Fatalf("a root move of the tenant's new root: %v, want ErrFleetTenant", err)
	}
	// An instance started afterwards serves a from the new root.
	f3 := fx.start("i3", fwd)
	a3 := fx.client(f3, "a")
	got3, err := a3.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || got3.Count != int64(n) {
		t.Fatalf("a on a new instance: %+v %v", got3, err)
	}
	if e := f3.Tenant("a"); e == nil || e.Root() != dest.Root || e.Moves() != 0 {
		t.Fatalf("a's engine on a new instance: %v", e)
	}
	if _, err := a3.Put(ctx, "after", "v"); err != nil {
		t.Fatal(err)
	}
	// A second run reports the move done.
	again, err := move.RunTenant(ctx, "a", move.Config{Source: fx.storeConfig(), Dest: dest, Logger: testutil.Logger(logrus.WarnLevel)})
	if err != nil || !again.AlreadyMoved {
		t.Fatalf("second run: %+v %v", again, err)
	}
	checkFreedAndDeleted(t, fx, dest)
}

// checkFreedAndDeleted frees tenant a's source after its move to dest:
// the source keeps only its moved record; then deletes a: both roots go.
func checkFreedAndDeleted(t *testing.T, fx *fleetFixture, dest zkstore.Config) {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	// Freed: the source keeps only its moved record.
	src := fx.storeConfig()
	src.Root = zkstore.TenantRoot(fx.root, "a")
	freed, err := move.FreeTenantSources(ctx, fx.storeConfig(), "a")
	if err != nil || len(freed) != 1 || freed[0] != src.Root {
		t.Fatalf("free the sources: %v %v", freed, err)
	}
	if ok, kids, err := zkstore.RootExists(ctx, src); err != nil || !ok || kids != 1 {
		t.Fatalf("the freed source: exists %v, %d children, %v", ok, kids, err)
	}
	// Deleted: both roots go.
	if err := fx.reg.DeleteTenant(ctx, "a", 30*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []zkstore.Config{src, dest} {
		if ok, _, err := zkstore.RootExists(ctx, cfg); err != nil || ok {
			t.Errorf("%s after the tenant's delete: exists %v, %v", cfg.Root, ok, err)
		}
	}
}

// checkAckedOnceAndWatched checks that c reads every acknowledged write
// (keys under "k") once at its revision, and that watch, opened at
// revision from, sees every revision from there to the last write once;
// it returns how many writes were acknowledged.
func checkAckedOnceAndWatched(t *testing.T, c *clientv3.Client, acked *sync.Map, from int64, watch clientv3.WatchChan) int {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	// Every acknowledged write, once, at its revision.
	last := from
	n := 0
	acked.Range(func(_, v any) bool { n++; last = max(last, v.(int64)); return true })
	if n < 4 {
		t.Fatalf("too few writes: %d", n)
	}
	got, err := c.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != n {
		t.Errorf("%d keys, %d writes acknowledged", len(got.Kvs), n)
	}
	for _, kv := range got.Kvs {
		if rev, ok := acked.Load(string(kv.Key)); !ok || rev.(int64) != kv.ModRevision {
			t.Errorf("%s at %d, acknowledged at %v", kv.Key, kv.ModRevision, rev)
		}
	}
	// The watch: every revision from the first put to the last, once.
	next := from
	timeout := time.After(30 * time.Second)
	for next <= last {
		select {
		case wr, ok := <-watch:
			if !ok || wr.Err() != nil {
				t.Fatalf("the watch ended at revision %d: %v", next, wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision != next {
					t.Fatalf("the watch saw revision %d (%s), expected %d", ev.Kv.ModRevision, ev.Kv.Key, next)
				}
				if rev, ok := acked.Load(string(ev.Kv.Key)); ok && rev.(int64) != next {
					t.Fatalf("the watch saw %s at %d, acknowledged at %d", ev.Kv.Key, next, rev)
				}
				next++
			}
		case <-timeout:
			t.Fatalf("the watch stopped at revision %d, the last write is at %d", next, last)
		}
	}
	return n
}

// TestTenantMoveRefusals: a move of a tenant the registry does not hold,
// into a root that is not empty, into or around another tenant's root, or
// into the fleet's own znodes is refused before anything is written.
func TestTenantMoveRefusals(t *testing.T) {
	fx := newFleetFixture(t, "a", "b")
	f := fx.start("i1", nil)
	ctx := testutil.Context(t, time.Minute)
	if _, err := fx.client(f, "a").Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.client(f, "b").Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	busy := fx.storeConfig()
	busy.Root = "/busy"
	st, err := zkstore.Open(ctx, busy)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, tc := range []struct {
		name, tenant, dest string
		want               error
	}{
		{"an unknown tenant", "nobody", "/new-1", zkstore.ErrTenantNotFound},
		{"a destination that is not empty", "a", "/busy", zkstore.ErrNotFresh},
		{"another tenant's root", "a", zkstore.TenantRoot(fx.root, "b"), move.ErrDestinationTaken},
		{"inside another tenant's root", "a", zkstore.TenantRoot(fx.root, "b") + "/x", move.ErrDestinationTaken},
		{"inside its own root", "a", zkstore.TenantRoot(fx.root, "a") + "/x", move.ErrDestinationTaken},
		{"the fleet's registry", "a", fx.root + "/tenants/x", move.ErrDestinationTaken},
		{"around the fleet", "a", "/", move.ErrDestinationTaken},
		{"the fleet's registry through another name of its ensemble", "a", fx.root + "/tenants/x", move.ErrDestinationTaken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := fx.storeConfig()
			dest.Root = tc.dest
			if strings.Contains(tc.name, "another name") {
				dest.Servers = []string{strings.Replace(fx.zk, "127.0.0.1", "localhost", 1)}
			}
			_, err := move.RunTenant(ctx, tc.tenant, move.Config{Source: fx.storeConfig(), Dest: dest, Logger: testutil.Logger(logrus.ErrorLevel)})
			if !errors.Is(err, tc.want) {
				t.Fatalf("move: %v, want %v", err, tc.want)
			}
		})
	}
	if ok, _, err := zkstore.RootExists(ctx, func() zkstore.Config { c := fx.storeConfig(); c.Root = "/new-1"; return c }()); err != nil || ok {
		t.Fatalf("the refused destination was written: %v %v", ok, err)
	}
	if rec, err := fx.reg.Tenant("a"); err != nil || rec.Root != "" {
		t.Fatalf("a's record after the refusals: %+v %v", rec, err)
	}
	if _, err := fx.client(f, "a").Put(ctx, "k", "w"); err != nil {
		t.Fatalf("a after the refused moves: %v", err)
	}
}

// TestTenantMoveCrashedMoverContinuesWhenRunAgain kills the mover right
// after its fence (a's writes wait, neither root takes them), then right
// after it finished the destination but before the registry named it: an
// instance started then reads the old record and follows the source's
// moved record to the data; a last run updates the registry. The held
// write lands once, and the watch sees every revision once.
func TestTenantMoveCrashedMoverContinuesWhenRunAgain(t *testing.T) {
	fx := newFleetFixture(t, "a")
	f1 := fx.start("i1", nil)
	ctx := testutil.Context(t, 2*time.Minute)
	a1 := fx.client(f1, "a")
	first, err := a1.Put(ctx, "before", "v")
	if err != nil {
		t.Fatal(err)
	}
	watch := a1.Watch(clientv3.WithRequireLeader(ctx), "", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))
	dest := fx.storeConfig()
	dest.Root = zkstore.TenantRoot(fx.root, "a-2")
	crash := errors.New("mover killed")
	cfg := move.Config{Source: fx.storeConfig(), Dest: dest, Logger: testutil.Logger(logrus.ErrorLevel)}
	killed := cfg
	killed.AfterFence = func() error { return crash }
	if _, err := move.RunTenant(ctx, "a", killed); !errors.Is(err, crash) {
		t.Fatalf("first run: %v", err)
	}
	held := make(chan *clientv3.PutResponse, 1)
	go func() {
		resp, err := a1.Put(ctx, "held", "v")
		if err != nil {
			t.Errorf("the held put: %v", err)
		}
		held <- resp
	}()
	select {
	case <-held:
		t.Fatal("a write landed while the move was half done")
	case <-time.After(500 * time.Millisecond):
	}
	killed = cfg
	killed.AfterFinish = func() error { return crash }
	if _, err := move.RunTenant(ctx, "a", killed); !errors.Is(err, crash) {
		t.Fatalf("second run: %v", err)
	}
	resp := <-held
	if resp == nil {
		t.FailNow()
	}
	if rec, err := fx.reg.Tenant("a"); err != nil || rec.Root != "" {
		t.Fatalf("a's record before the last run: %+v %v", rec, err)
	}
	f2 := fx.start("i2", nil)
	a2 := fx.client(f2, "a")
	got, err := a2.Get(ctx, "held")
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != resp.Header.Revision {
		t.Fatalf("the held write on an instance started before the registry named the new root: %+v %v", got, err)
	}
	if e := f2.Tenant("a"); e == nil || e.Root() != dest.Root {
		t.Fatalf("a's engine on the new instance: %v", e)
	}
	if _, err := move.RunTenant(ctx, "a", cfg); err != nil {
		t.Fatal(err)
	}
	if rec, err := fx.reg.Tenant("a"); err != nil || rec.Root != dest.Root || len(rec.Previous) != 1 {
		t.Fatalf("a's record after the last run: %+v %v", rec, err)
	}
	// The administration's HTTP API shows the place.
	tlsCfg := fx.certs.ClientTLS(t, false)
	tlsCfg.Certificates = []tls.Certificate{fx.certs.ClientWithSubject(t, pkix.Name{CommonName: "fleet-admin"})}
	admin := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	hr, err := admin.Get("https://" + f1.ClientAddrs()[0] + "/zketcd/v1/tenants/a")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if !strings.Contains(string(body), `"root":"`+dest.Root+`"`) {
		t.Fatalf("GET the tenant: %d %s", hr.StatusCode, body)
	}
	after, err := a2.Put(ctx, "after", "v")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"before", "held", "after"}
	for i := 0; i < len(want); {
		select {
		case wr := <-watch:
			if wr.Err() != nil {
				t.Fatal(wr.Err())
			}
			for _, ev := range wr.Events {
				if i >= len(want) || string(ev.Kv.Key) != want[i] || ev.Kv.ModRevision != first.Header.Revision+int64(i) {
					t.Fatalf("watch event %d: %s at %d", i, ev.Kv.Key, ev.Kv.ModRevision)
				}
				i++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the watch saw %d of %v (the last at %d)", i, want, after.Header.Revision)
		}
	}
}

// TestTenantMoveToAnotherEnsembleAndBack moves a served tenant to another
// ensemble and back to a new root of the fleet's: the second fence names
// the fleet's servers, and the engine returns to the instance's shared
// session; the record keeps both earlier places, and the delete frees all
// three.
func TestTenantMoveToAnotherEnsembleAndBack(t *testing.T) {
	fx := newFleetFixture(t, "a")
	f := fx.start("i1", nil)
	ctx := testutil.Context(t, time.Minute)
	c := fx.client(f, "a")
	away := fx.storeConfig()
	away.Servers, away.Root = []string{zkservertest.Standalone(t).Addr()}, "/away/a"
	back := fx.storeConfig()
	back.Root = zkstore.TenantRoot(fx.root, "a-back")
	var last int64
	var shared int64 // the instance's shared session, the tenant's first
	for i, dest := range []zkstore.Config{away, back} {
		resp, err := c.Put(ctx, fmt.Sprintf("k%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			shared, _ = f.Tenant("a").Session()
		}
		last = resp.Header.Revision
		if _, err := move.RunTenant(ctx, "a", move.Config{Source: fx.storeConfig(), Dest: dest, Logger: testutil.Logger(logrus.ErrorLevel)}); err != nil {
			t.Fatalf("move %d: %v", i+1, err)
		}
		testutil.Eventually(t, 20*time.Second, "the instance on "+dest.Root, func() bool {
			e := f.Tenant("a")
			return e != nil && e.Moves() == int64(i+1) && e.Root() == dest.Root
		})
	}
	if id, _ := f.Tenant("a").Session(); id != shared {
		t.Fatalf("back on the fleet's ensemble on session %x, not the shared %x", id, shared)
	}
	resp, err := c.Put(ctx, "after", "v")
	if err != nil || resp.Header.Revision != last+1 {
		t.Fatalf("a put after both moves: %+v %v (the last before at %d)", resp, err, last)
	}
	rec, err := fx.reg.Tenant("a")
	if err != nil || rec.Root != back.Root || rec.Servers != "" || len(rec.Previous) != 2 || rec.Previous[1].Servers != away.Servers[0] {
		t.Fatalf("a's record after both moves: %+v %v", rec, err)
	}
	f.Close(time.Second)
	if err := fx.reg.DeleteTenant(ctx, "a", 30*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	src := fx.storeConfig()
	src.Root = zkstore.TenantRoot(fx.root, "a")
	for _, cfg := range []zkstore.Config{src, away, back} {
		if ok, _, err := zkstore.RootExists(ctx, cfg); err != nil || ok {
			t.Errorf("%s after the tenant's delete: exists %v, %v", cfg.Root, ok, err)
		}
	}
}
