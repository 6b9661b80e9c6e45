package watchtest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/watchcheck"
	"github.com/zketcd/zketcd/internal/watchbridge"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// faultRun is the common shape of the fault tests: a puts-only workload
// (so that writes failing during the fault can be placed from the events)
// through writers, watches recorded with record, fault() in the middle,
// then the checker over everything.
type faultRun struct {
	t       *testing.T
	w       *workload
	recs    []*watchcheck.Recorder
	now     int64
	before  time.Duration // writes before the fault
	after   time.Duration // writes after the fault returned
	reader  *clientv3.Client
	writers []*clientv3.Client
}

func newFaultRun(t *testing.T, prefix string, writers []*clientv3.Client) *faultRun {
	w := newWorkload(prefix)
	w.putsOnly = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 10; i++ {
		if _, err := w.h.Do(ctx, writers[0], clientv3.OpPut(w.key(r), w.value(99))); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := writers[0].Get(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return &faultRun{t: t, w: w, now: resp.Header.Revision, before: time.Second, after: 2 * time.Second,
		reader: writers[0], writers: writers}
}

// record starts the standard watches on c: the whole key space from
// revision 2 with prev_kv, from now with progress notifications, one key,
// and one with WithRequireLeader (canceled by the server while it has no
// healthy ZooKeeper session; the recorder then re-watches).
func (f *faultRun) record(c *clientv3.Client, tag string) {
	w := f.w
	f.recs = append(f.recs,
		watchcheck.Record(c, watchcheck.Spec{Name: tag + "-all-from-2", Key: w.prefix, End: w.end(), PrevKV: true}, 2, watchcheck.RecordOptions{}),
		watchcheck.Record(c, watchcheck.Spec{Name: tag + "-all-now", Key: w.prefix, End: w.end()}, f.now+1, watchcheck.RecordOptions{ProgressNotify: true}),
		watchcheck.Record(c, watchcheck.Spec{Name: tag + "-key-a1", Key: w.prefix + "a1", PrevKV: true}, f.now+1, watchcheck.RecordOptions{}),
		watchcheck.Record(c, watchcheck.Spec{Name: tag + "-require-leader", Key: w.prefix, End: w.end(), PrevKV: true}, f.now+1,
			watchcheck.RecordOptions{RequireLeader: true}),
	)
}

// run writes, calls fault, writes some more and checks.
func (f *faultRun) run(fault func()) []*watchcheck.Watch {
	t := f.t
	stop := make(chan struct{})
	wait := f.w.runWriters(t, kvsOf(f.writers), 0, stop, true)
	go askProgress(stop, f.recs...)
	time.Sleep(f.before)
	fault()
	time.Sleep(f.after)
	close(stop)
	ok, failed := wait()
	final, _ := finalRev(t, f.reader, f.w)
	t.Logf("%d writes acknowledged, %d failed, final revision %d", ok, failed, final)
	watches := stopAll(t, final, f.recs...)
	rep := check(t, f.w.h, watches...)
	if rep.Events == 0 {
		t.Error("no event checked")
	}
	return watches
}

// TestWatchAcrossZooKeeperRestart stops ZooKeeper for two seconds under
// writes and watches on two instances (sessions survive: 20 s timeout).
// Watch streams stay open; nothing is lost, duplicated or reordered.
func TestWatchAcrossZooKeeperRestart(t *testing.T) {
	zk := zkservertest.Standalone(t)
	opts := embedtest.Options{SessionTimeout: 20 * time.Second, ProgressNotifyInterval: progressInterval}
	a := embedtest.Start(t, []string{zk.Addr()}, opts)
	opts.Root = a.Root()
	b := embedtest.Start(t, []string{zk.Addr()}, opts)
	ca, cb := a.Client(t), b.Client(t)
	f := newFaultRun(t, "z/", []*clientv3.Client{ca, cb})
	f.record(ca, "a")
	f.record(cb, "b")
	f.run(func() {
		if err := zk.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := zk.Start(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWatchAcrossZketcdRestart restarts instance A while clientv3 watches on
// it and writes go through A and B. The streams on A break; clientv3
// re-creates them from the revision after the last one it delivered when A
// is back, and gets exactly the rest.
func TestWatchAcrossZketcdRestart(t *testing.T) {
	a := startZketcd(t, embedtest.Options{})
	b := startZketcd(t, embedtest.Options{Root: a.Root()})
	ca, cb := a.Client(t), b.Client(t)
	f := newFaultRun(t, "r/", []*clientv3.Client{ca, cb})
	f.reader = cb
	f.record(ca, "a")
	f.record(cb, "b")
	var restartRev int64
	watches := f.run(func() {
		resp, err := cb.Get(context.Background(), "r/")
		if err != nil {
			t.Fatal(err)
		}
		restartRev = resp.Header.Revision
		a.Restart()
	})
	// The watches on A delivered events from after the restart.
	for _, w := range watches {
		if !strings.HasPrefix(w.Name, "a-all") {
			continue
		}
		last := int64(0)
		for _, s := range w.Segments {
			for _, r := range s.Responses {
				for _, ev := range r.Events {
					last = max(last, ev.Kv.ModRevision)
				}
			}
		}
		if last <= restartRev {
			t.Errorf("watch %s: last event at %d, none after the restart at %d", w.Name, last, restartRev)
		}
	}
}

// TestWatchSessionExpiry cuts instance B — which only tails the log: the
// writes go through A — off from ZooKeeper (through a TCP proxy) for longer
// than its session timeout, so that ZooKeeper expires B's session while
// writes go on. (Freezing ZooKeeper instead does not expire sessions
// reliably: on resume a client's queued reconnect can touch the session
// before the server's expiry thread runs.) B must get a new session, catch
// up, and its watchers must miss nothing. Its WithRequireLeader watch is
// canceled while B has no session and re-created by the recorder from the
// next revision.
func TestWatchSessionExpiry(t *testing.T) {
	zopts := zkservertest.Options(t)
	zopts.TickTime = 500 * time.Millisecond // sessions of 2 s are allowed
	zk := zkservertest.StandaloneWith(t, zopts)
	proxy := startProxy(t, zk.Addr())
	opts := embedtest.Options{SessionTimeout: 2 * time.Second, ProgressNotifyInterval: progressInterval}
	a := embedtest.Start(t, []string{zk.Addr()}, opts)
	opts.Root = a.Root()
	b := embedtest.Start(t, []string{proxy.Addr()}, opts)
	ca, cb := a.Client(t), b.Client(t)
	f := newFaultRun(t, "s/", []*clientv3.Client{ca})
	f.record(cb, "b")
	sessionB, _ := b.Engine().Session()
	watches := f.run(func() {
		proxy.Partition()
		time.Sleep(5 * time.Second)
		if id, ok := b.Engine().Session(); ok {
			t.Logf("B still connected during the partition (session %x)", id)
		}
		proxy.Heal()
		deadline := time.Now().Add(30 * time.Second)
		for {
			id, ok := b.Engine().Session()
			if ok && id != sessionB && b.Engine().Health() == nil {
				t.Logf("B has a new session %x (was %x)", id, sessionB)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance B has no new healthy session 30s after the partition healed (session %x, was %x, connected %v, health %v)",
					id, sessionB, ok, b.Engine().Health())
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	for _, w := range watches {
		if strings.HasSuffix(w.Name, "require-leader") {
			for i, s := range w.Segments {
				t.Logf("watch %s segment %d from %d: %d responses, ended: %v", w.Name, i, s.Start, len(s.Responses), s.End)
			}
		}
	}
}

// tcpProxy forwards connections to a target; Partition cuts every
// connection and refuses new ones until Heal.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	conns   map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		ln.Close()
		p.Partition()
	})
	go p.serve()
	return p
}

func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		blocked := p.blocked
		p.mu.Unlock()
		if blocked {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// Partition closes every proxied connection and refuses new ones.
func (p *tcpProxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = true
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Heal lets connections through again.
func (p *tcpProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = false
}

// TestSlowConsumer: one watch stream stops reading (its client's gRPC flow
// control window is small and fixed, so the server's sends block) while
// thousands of writes go on. Writes and another watcher must not slow
// down, the hub must hold at most a channel's worth of responses plus one
// pending response for the slow watcher, and once the slow stream reads
// again it must get every event, in order, exactly once.
func TestSlowConsumer(t *testing.T) {
	in := startZketcd(t, embedtest.Options{})
	c := in.Client(t)
	slowClient, err := clientv3.New(clientv3.Config{
		Endpoints: []string{in.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(64 << 10), grpc.WithInitialConnWindowSize(64 << 10)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slowClient.Close() })
	w := newWorkload("slow/")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := c.Get(ctx, w.prefix)
	if err != nil {
		t.Fatal(err)
	}
	start := resp.Header.Revision + 1

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	stream, err := pb.NewWatchClient(slowClient.ActiveConnection()).Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := watchcheck.Spec{Name: "slow", Key: w.prefix, End: w.end(), PrevKV: true}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(spec.Key), RangeEnd: []byte(spec.End), StartRevision: start, PrevKv: true}}}); err != nil {
		t.Fatal(err)
	}
	if created, err := stream.Recv(); err != nil || !created.Created {
		t.Fatalf("create: %v %v", created, err)
	}
	fast := watchcheck.Record(c, watchcheck.Spec{Name: "fast", Key: w.prefix, End: w.end(), PrevKV: true}, start, watchcheck.RecordOptions{})

	// Writes with 1 KiB values, recorded; the slowest one is reported.
	pad := strings.Repeat("x", 1024)
	const writers, each = 4, 600
	be := in.Engine()
	var maxStats watchbridge.Stats
	stopSampling, sampling := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampling)
		for {
			st := be.WatchStats()
			maxStats.Victims = max(maxStats.Victims, st.Victims)
			maxStats.Queued = max(maxStats.Queued, st.Queued)
			maxStats.Unsynced = max(maxStats.Unsynced, st.Unsynced)
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	began := time.Now()
	errc := make(chan error, writers)
	slowest := make(chan time.Duration, writers)
	for i := 0; i < writers; i++ {
		go func() {
			var worst time.Duration
			for j := 0; j < each; j++ {
				t0 := time.Now()
				key := fmt.Sprintf("%s%c%d", w.prefix, w.letters[j%len(w.letters)], (i*each+j)%w.digits)
				if _, err := w.h.Do(ctx, c, clientv3.OpPut(key, w.value(i)+pad)); err != nil {
					errc <- err
					return
				}
				worst = max(worst, time.Since(t0))
			}
			slowest <- worst
			errc <- nil
		}()
	}
	var worst time.Duration
	for i := 0; i < writers; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		worst = max(worst, <-slowest)
	}
	took := time.Since(began)
	final, _ := finalRev(t, c, w)
	fastCtx, fastCancel := context.WithTimeout(ctx, 10*time.Second)
	defer fastCancel()
	if err := fast.WaitObserved(fastCtx, final); err != nil {
		t.Fatalf("the fast watcher lags behind the slow one: %v", err)
	}
	lag := time.Since(began) - took
	close(stopSampling)
	<-sampling
	st := be.WatchStats()
	t.Logf("%d writes in %v (slowest %v); fast watcher caught up %v after the last write; hub while stalled: %+v (max %+v)",
		writers*each, took.Round(time.Millisecond), worst.Round(time.Millisecond), lag.Round(time.Millisecond), st, maxStats)
	if st.Victims != 1 {
		t.Errorf("hub has %d victims while the slow stream is stalled, want 1 (the slow watcher)", st.Victims)
	}
	if maxStats.Queued > 2*watchbridge.ChanBufLen || maxStats.Victims > 2 {
		t.Errorf("hub held up to %d queued responses and %d victims: not bounded by the streams' channels", maxStats.Queued, maxStats.Victims)
	}
	if worst > 5*time.Second {
		t.Errorf("a write took %v while a watcher was stalled", worst)
	}

	// Now read the slow stream until it has caught up.
	var raw []*pb.WatchResponse
	observed := int64(0)
	for observed < final {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("slow stream after %d responses (observed %d of %d): %v", len(raw), observed, final, err)
		}
		raw = append(raw, r)
		for _, ev := range r.Events {
			observed = max(observed, ev.Kv.ModRevision)
		}
	}
	if st := be.WatchStats(); st.Victims != 0 || st.Unsynced != 0 {
		t.Errorf("after the slow stream caught up: %+v", st)
	}
	slow := &watchcheck.Watch{Spec: spec, Segments: []*watchcheck.Segment{{Start: start, Responses: watchcheck.FromPB(raw, time.Now())}}}
	wcancel()
	check(t, w.h, slow, fast.Stop())
}
