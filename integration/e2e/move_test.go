package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/kubedata"
	"github.com/zketcd/zketcd/integration/kubelab"
)

// TestKubeAPIServerWhileItsRootMoves moves the root a kube-apiserver's two
// zketcd instances serve while it serves a kube-like churn: first to
// another root of the same ZooKeeper (`zketcd move --to-root`), then to a
// second ZooKeeper server (`--to-zk`), with the same kube-apiserver, the
// same churn and the same WATCHes (opened from a resourceVersion taken
// before the first move: two through kube-apiserver's watch cache, one
// through a second kube-apiserver without it) throughout. It checks that
// each mover succeeds and prints the documented last line; that no watch
// answers 410 Gone ("too old resource version") or ends, and neither
// kube-apiserver logs a relist or a watch restart; that each watch
// delivers every acknowledged write exactly once, in order, with its
// resourceVersion; that the objects listed after equal
// those listed before with the churn applied; that a GET returns each
// object's last acknowledged resourceVersion; that every /registry key at
// a revision before the moves reads the same after them, and HashKV at
// that revision and at the end agree across the instances; that /readyz
// stays ok and no request fails. It reports the write unavailability kube
// clients saw around each fence (the longest gap between acknowledged
// writes, the longest write in flight across it) and during the copy, the
// mover's "writes paused", its time and peak RSS.
//
// $ZKETCD_MOVE_OBJECTS (default 300) ConfigMaps are seeded, and the churn
// runs at $ZKETCD_MOVE_RATE requests a second (default 40) from
// $ZKETCD_MOVE_CLIENTS clients (default 4); `make bench-move` raises
// them. It needs $KUBE_APISERVER (make e2e).
func TestKubeAPIServerWhileItsRootMoves(t *testing.T) {
	bin := kubeAPIServerOrSkip(t)
	objects := envInt(t, "ZKETCD_MOVE_OBJECTS", 300)
	rate := envInt(t, "ZKETCD_MOVE_RATE", 40)
	clients := envInt(t, "ZKETCD_MOVE_CLIENTS", 4)
	ctx := t.Context()
	lab := newLab(t, bin)
	must := fatalOn(t)
	zk1, err := lab.ZooKeeper(ctx)
	must(err)
	zk2, err := lab.ZooKeeper(ctx)
	must(err)
	const root = "/kube"
	za, err := lab.StartZketcd(ctx, "a", []string{zk1.Addr()}, root)
	must(err)
	zb, err := lab.StartZketcd(ctx, "b", []string{zk1.Addr()}, root)
	must(err)
	api, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: "moved", EtcdServers: za.URL() + "," + zb.URL()})
	must(err)
	// A second kube-apiserver without its watch cache: each WATCH through
	// it is a watch on zketcd from the client's resourceVersion.
	direct, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: "no-watch-cache", EtcdServers: zb.URL() + "," + za.URL(), Extra: []string{"--watch-cache=false"}})
	must(err)
	for _, a := range []*kubelab.APIServer{api, direct} {
		took, err := a.WaitReady(ctx, 3*time.Minute)
		must(err)
		t.Logf("kube-apiserver %s on zketcd a and b (root %s of ZooKeeper %s) ready in %v", a.Name, root, zk1.Addr(), took.Round(time.Millisecond))
	}

	const ns = "move"
	cmPath := "/api/v1/namespaces/" + ns + "/configmaps"
	_, err = api.Create(ctx, "/api/v1/namespaces", kubelab.Namespace(ns))
	must(err)
	start := time.Now()
	must(seedConfigMaps(ctx, api, cmPath, objects, 8))
	t.Logf("seeded %d ConfigMaps through kube-apiserver in %v", objects, time.Since(start).Round(time.Millisecond))

	before, err := api.List(ctx, cmPath)
	must(err)
	if len(before.Items) != objects {
		t.Fatalf("listed %d ConfigMaps, seeded %d", len(before.Items), objects)
	}
	rv0 := before.Metadata.ResourceVersion
	var watches []*heldWatch
	for _, path := range []string{cmPath, "/api/v1/configmaps"} {
		w, err := api.Watch(ctx, path+"?resourceVersion="+rv0)
		must(err)
		watches = append(watches, holdWatch(path, w))
	}
	w, err := direct.Watch(ctx, cmPath+"?resourceVersion="+rv0)
	must(err)
	watches = append(watches, holdWatch(cmPath+" (no watch cache)", w))
	relistsBefore := len(api.Grep(relisted, 0)) + len(direct.Grep(relisted, 0))
	ready := watchReadyz(ctx, api, 200*time.Millisecond)
	churn := startChurn(ctx, api, cmPath, before, clients, rate)
	t.Cleanup(churn.stop)

	ca, err := za.Client()
	must(err)
	cb, err := zb.Client()
	must(err)
	time.Sleep(3 * time.Second)
	// The keys before the moves, at a revision the moves must keep.
	preRev := mustStatusRev(t, ctx, ca)
	preKeys := registryAt(t, ctx, ca, preRev)
	preHash := hashKV(t, ctx, ca, preRev)
	t.Logf("%d keys under /registry at revision %d before the moves", len(preKeys), preRev)

	sec, err := lab.Security()
	must(err)
	moves := []struct {
		name           string
		zk, from, to   string
		toZK           string
		switchesBefore int
	}{
		{name: "to another root", zk: zk1.Addr(), from: root, to: "/kube-b"},
		{name: "to another ZooKeeper", zk: zk1.Addr(), from: "/kube-b", to: "/kube", toZK: zk2.Addr(), switchesBefore: 1},
	}
	var report []string
	for _, mv := range moves {
		args := []string{"move", "--zk", mv.zk, "--zk-root", mv.from, "--to-root", mv.to, "--zk-auth-file", sec.ZKAuthFile, "--log-level", "info"}
		if mv.toZK != "" {
			args = append(args, "--to-zk", mv.toZK)
		}
		r := runMover(t, ctx, lab.Zketcd, filepath.Join(lab.Dir, "move-"+strings.TrimPrefix(mv.to, "/")+".log"), args)
		if r.err != nil {
			t.Fatalf("zketcd %s: %v\n%s", strings.Join(args, " "), r.err, r.tail)
		}
		wantTo := mv.to
		if mv.toZK != "" {
			wantTo = mv.toZK + ":" + mv.to
		}
		if want := "moved " + mv.from + " to " + wantTo + " at log entry "; !strings.HasPrefix(r.summary, want) {
			t.Errorf("the mover's last line %q, want it to begin %q (docs/operations.md)", r.summary, want)
		}
		for _, z := range []*kubelab.Zketcd{za, zb} {
			waitSwitched(t, z, mv.switchesBefore+1)
		}
		switched := time.Now()
		time.Sleep(3 * time.Second) // the churn on the destination
		// Around the fence: from the mover's "source fenced" line until
		// both instances were seen on the destination (polled: an upper
		// bound). During the copy: from its start to the fence.
		gap, _ := churn.unavailability(r.fenced.Add(-500*time.Millisecond), switched.Add(time.Second))
		n, longest := churn.overlapping(r.fenced, switched)
		_, copying := churn.overlapping(r.started, r.fenced)
		line := fmt.Sprintf("%s: mover %v (peak RSS %d MiB), %s; fence to both instances switched <= %v (switches %s); kube clients: longest gap between acknowledged writes around the fence %v, %d writes across the fence, the longest %v; longest write while the mover copied %v",
			mv.name, r.ended.Sub(r.started).Round(time.Millisecond), r.maxRSSKiB>>10, r.summary,
			switched.Sub(r.fenced).Round(time.Millisecond), strings.Join(switchTimes(za, zb), ", "),
			gap.Round(time.Millisecond), n, longest.Round(time.Millisecond), copying.Round(time.Millisecond))
		t.Log(line)
		t.Logf("  fenced at %s, both instances seen on the destination at %s", r.fenced.Format("15:04:05.000"), switched.Format("15:04:05.000"))
		report = append(report, line)
		for _, p := range r.progress {
			t.Logf("  mover: %s", p)
		}
	}
	churn.stop()
	readyFailures := ready.stop()
	baseGap, baseLongest := churn.unavailability(churn.started, churn.started.Add(3*time.Second))
	t.Logf("before the moves (3 s of churn): longest gap between acknowledged writes %v, longest write %v",
		baseGap.Round(time.Millisecond), baseLongest.Round(time.Millisecond))

	res := churn.result()
	// A last write: every watch has delivered the churn once it shows it.
	marker, err := api.Create(ctx, cmPath, kubelab.ConfigMap("zz-marker", nil))
	must(err)
	res.ops = append(res.ops, churnOp{typ: "ADDED", name: "zz-marker", rv: marker.RV()})
	res.lastRV = marker.RV()
	t.Logf("churn: %d creates, %d updates, %d deletes, %d gets acknowledged; %d failed", res.counts["ADDED"], res.counts["MODIFIED"], res.counts["DELETED"], res.counts["GET"], len(res.failed))
	for _, f := range res.failed {
		t.Errorf("a request failed during the moves: %s", f)
	}
	for _, f := range res.stale {
		t.Errorf("a GET after the write: %s", f)
	}
	for _, f := range readyFailures {
		t.Errorf("/readyz: %s", f)
	}

	// Every acknowledged write, once, in order, in each watch.
	for _, w := range watches {
		events, ended := w.waitFor(res.lastRV, 60*time.Second)
		if ended != nil {
			t.Errorf("watch %s from %s ended: %v", w.path, rv0, ended)
		}
		checkWatch(t, w.path, ns, events, res)
	}
	if n := len(api.Grep(relisted, 0)) + len(direct.Grep(relisted, 0)) - relistsBefore; n > 0 {
		t.Errorf("kube-apiserver logged %d watch restarts or relists during the moves: %q", n, api.Grep(relisted, 3))
	}
	// The listing: before, with the churn applied.
	after, err := api.List(ctx, cmPath)
	must(err)
	want := listState(before)
	for _, op := range res.ops {
		if op.typ == "DELETED" {
			delete(want, op.name)
		} else {
			want[op.name] = op.rv
		}
	}
	if d := stateDiff(listState(after), want); d != "" {
		t.Errorf("ConfigMaps listed after the moves differ from those before with the churn (listed, expected): %s", d)
	}
	// The store: the keys at the revision before the moves, and HashKV.
	for name, c := range map[string]*clientv3.Client{"a": ca, "b": cb} {
		if got := registryAt(t, ctx, c, preRev); !mapsEqual(got, preKeys) {
			t.Errorf("zketcd %s: /registry at revision %d after the moves differs from before (%d keys, %d before)", name, preRev, len(got), len(preKeys))
		}
		if h := hashKV(t, ctx, c, preRev); h.CompactRevision == preHash.CompactRevision && h.Hash != preHash.Hash {
			t.Errorf("zketcd %s: HashKV(%d) after the moves %d, before %d", name, preRev, h.Hash, preHash.Hash)
		}
	}
	endRev := mustStatusRev(t, ctx, ca)
	ha, hb := hashKV(t, ctx, ca, endRev), hashKV(t, ctx, cb, endRev)
	if ha.Hash != hb.Hash || ha.CompactRevision != hb.CompactRevision {
		t.Errorf("HashKV(%d): a %d (compacted at %d), b %d (compacted at %d)", endRev, ha.Hash, ha.CompactRevision, hb.Hash, hb.CompactRevision)
	}
	t.Logf("summary (%d ConfigMaps, churn %d requests/s from %d clients, 3 watches from resourceVersion %s, HashKV(%d) %d on both):\n    %s",
		objects, rate, clients, rv0, endRev, ha.Hash, strings.Join(report, "\n    "))
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: not a positive number", name, s)
	}
	return n
}

// seedConfigMaps creates n ConfigMaps seed-00000... at path from workers
// goroutines, each with about 1 KiB of data.
func seedConfigMaps(ctx context.Context, api *kubelab.APIServer, path string, n, workers int) error {
	blob := strings.Repeat("x", 1000)
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if _, err := api.Create(ctx, path, kubelab.ConfigMap(fmt.Sprintf("seed-%05d", i), map[string]string{"i": strconv.Itoa(i), "blob": blob})); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// churnOp is one acknowledged write: its type as a watch names it, the
// object and its resourceVersion (0 for a delete, whose answer is a
// Status), and when it was sent and answered.
type churnOp struct {
	typ, name     string
	rv            int64
	sent, decided time.Time
}

// churn runs creates, updates, deletes and gets through kube-apiserver
// from several clients at a fixed total rate; each client owns its
// objects (a share of the seeded ones and those it creates), so every
// write is meant to succeed.
type churn struct {
	started time.Time
	quit    chan struct{} // closed by stop: no new request; those sent finish
	wg      sync.WaitGroup
	once    sync.Once

	mu        sync.Mutex
	ops       []churnOp // acknowledged writes, in the order of their answers
	gets      int
	failed    []string
	failedOps []failedOp
	stale     []string
}

// failedOp is a request that failed: its outcome is unknown to the client.
type failedOp struct {
	churnOp
	err error
}

type churnResult struct {
	ops       []churnOp
	counts    map[string]int
	failed    []string
	failedOps []failedOp
	stale     []string
	lastRV    int64
}

func startChurn(ctx context.Context, api *kubelab.APIServer, path string, seeded *kubelab.List, clients, rate int) *churn {
	c := &churn{started: time.Now(), quit: make(chan struct{})}
	tokens := make(chan struct{})
	c.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-c.quit:
				return
			case <-tick.C:
				select {
				case tokens <- struct{}{}:
				default: // every client busy: the request is not sent (a closed-loop client would wait too)
				}
			}
		}
	})
	for w := range clients {
		own := map[string]int64{}
		for i, o := range seeded.Items {
			if i%clients == w {
				own[o.Metadata.Name] = o.RV()
			}
		}
		c.wg.Go(func() { c.client(ctx, api, path, w, own, tokens) })
	}
	return c
}

func (c *churn) client(ctx context.Context, api *kubelab.APIServer, path string, w int, own map[string]int64, tokens <-chan struct{}) {
	r := rand.New(rand.NewPCG(uint64(w), 42))
	names := make([]string, 0, len(own))
	for n := range own {
		names = append(names, n)
	}
	sort.Strings(names)
	created := 0
	for {
		select {
		case <-c.quit:
			return
		case <-tokens:
		}
		p := r.IntN(100)
		if len(names) == 0 {
			p = 0
		}
		var (
			op  = churnOp{sent: time.Now()}
			o   *kubelab.Object
			err error
			i   = r.IntN(max(len(names), 1))
		)
		switch {
		case p < 30:
			op.typ, op.name = "ADDED", fmt.Sprintf("churn-%d-%05d", w, created)
			created++
			o, err = api.Create(ctx, path, kubelab.ConfigMap(op.name, map[string]string{"by": strconv.Itoa(w)}))
		case p < 70:
			op.typ, op.name = "MODIFIED", names[i]
			o, err = api.MergePatch(ctx, path+"/"+op.name, map[string]any{"data": map[string]string{"n": strconv.Itoa(r.IntN(1 << 30))}})
		case p < 85:
			op.typ, op.name = "DELETED", names[i]
			_, err = api.Delete(ctx, path+"/"+op.name)
		default:
			op.typ, op.name = "GET", names[i]
			o, err = api.Get(ctx, path+"/"+op.name)
		}
		op.decided = time.Now()
		c.mu.Lock()
		switch {
		case err != nil:
			c.failedOps = append(c.failedOps, failedOp{op, err})
			c.failed = append(c.failed, fmt.Sprintf("%s %s sent at %s, failed after %v: %v", op.typ, op.name, op.sent.Format("15:04:05.000"), op.decided.Sub(op.sent).Round(time.Millisecond), err))
		case op.typ == "GET":
			c.gets++
			if o.RV() != own[op.name] {
				c.stale = append(c.stale, fmt.Sprintf("GET %s: resourceVersion %s, its last write was acknowledged at %d", op.name, o.Metadata.ResourceVersion, own[op.name]))
			}
		default:
			if o != nil && op.typ != "DELETED" {
				op.rv = o.RV()
			}
			c.ops = append(c.ops, op)
		}
		c.mu.Unlock()
		switch {
		case err != nil:
			// Its outcome is unknown: the client leaves the object alone
			// (the checks then fail on the error itself).
			if op.typ != "ADDED" {
				names = slices.Delete(names, i, i+1)
			}
		case op.typ == "ADDED":
			names = append(names, op.name)
			own[op.name] = op.rv
		case op.typ == "MODIFIED":
			own[op.name] = op.rv
		case op.typ == "DELETED":
			names = slices.Delete(names, i, i+1)
			delete(own, op.name)
		}
	}
}

func (c *churn) stop() {
	c.once.Do(func() {
		close(c.quit)
		c.wg.Wait()
	})
}

func (c *churn) result() churnResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := churnResult{ops: slices.Clone(c.ops), counts: map[string]int{"GET": c.gets}, failed: c.failed, failedOps: slices.Clone(c.failedOps), stale: c.stale}
	for _, op := range c.ops {
		r.counts[op.typ]++
		r.lastRV = max(r.lastRV, op.rv)
	}
	return r
}

// unavailability returns, for the writes answered or pending within
// [from, to], the longest time without an acknowledged write and the
// longest a single acknowledged write took.
func (c *churn) unavailability(from, to time.Time) (gap, longest time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var acks []time.Time
	for _, op := range c.ops {
		if op.decided.Before(from) || op.sent.After(to) {
			continue
		}
		longest = max(longest, op.decided.Sub(op.sent))
		if !op.decided.After(to) {
			acks = append(acks, op.decided)
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return a.Compare(b) })
	last := from
	for _, a := range acks {
		gap = max(gap, a.Sub(last))
		last = a
	}
	return max(gap, to.Sub(last)), longest
}

// overlapping returns how many acknowledged writes were in flight at some
// point of [from, to], and the longest of them.
func (c *churn) overlapping(from, to time.Time) (n int, longest time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range c.ops {
		if op.decided.Before(from) || op.sent.After(to) {
			continue
		}
		n++
		longest = max(longest, op.decided.Sub(op.sent))
	}
	return n, longest
}

// heldWatch drains a kube-apiserver watch into a list as events come.
type heldWatch struct {
	path string
	w    *kubelab.Watch

	mu     sync.Mutex
	events []kubelab.WatchEvent
	done   chan struct{}
}

func holdWatch(path string, w *kubelab.Watch) *heldWatch {
	h := &heldWatch{path: path, w: w, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for ev := range w.Events {
			h.mu.Lock()
			h.events = append(h.events, ev)
			h.mu.Unlock()
		}
	}()
	return h
}

// waitFor waits until the watch delivered an event at rv or later (or an
// error, or it ended, or timeout), then stops it and returns its events
// and why it ended early (nil: it did not).
func (h *heldWatch) waitFor(rv int64, timeout time.Duration) ([]kubelab.WatchEvent, error) {
	deadline := time.Now().Add(timeout)
	var ended error
	for time.Now().Before(deadline) {
		h.mu.Lock()
		n := len(h.events)
		reached := n > 0 && (h.events[n-1].Object.RV() >= rv || h.events[n-1].Type == "ERROR")
		h.mu.Unlock()
		if reached {
			break
		}
		select {
		case <-h.done:
			at, err := h.w.Ended()
			ended = fmt.Errorf("stream closed at %s: %v", at.Format(time.RFC3339Nano), err)
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	h.w.Close()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events), ended
}

// checkWatch checks that events (in namespace ns) are the acknowledged writes of res, each
// once, in resourceVersion order, each object's in the order of its
// writes, and that no event is an error (a 410 Gone among them).
func checkWatch(t *testing.T, path, ns string, events []kubelab.WatchEvent, res churnResult) {
	t.Helper()
	type ev struct {
		typ string
		rv  int64
	}
	got := map[string][]ev{}
	var last int64
	gone := 0
	for _, e := range events {
		if e.Type == "ERROR" {
			if e.Status.Code == 410 {
				gone++
			}
			t.Errorf("watch %s: %s", path, e)
			continue
		}
		if e.Type == "BOOKMARK" {
			continue
		}
		rv := e.Object.RV()
		if rv <= last {
			t.Errorf("watch %s: %s after resourceVersion %d", path, e, last)
		}
		last = rv
		if e.Object.Metadata.Namespace != ns {
			continue // kube-apiserver's own ConfigMaps, in the cluster-wide watch
		}
		got[e.Object.Metadata.Name] = append(got[e.Object.Metadata.Name], ev{e.Type, rv})
	}
	want := map[string][]ev{}
	for _, op := range res.ops {
		want[op.name] = append(want[op.name], ev{op.typ, op.rv})
	}
	bad := 0
	for name, w := range want {
		g := got[name]
		ok := len(g) == len(w)
		for i := 0; ok && i < len(w); i++ {
			// A delete's answer is a Status: its event's resourceVersion is
			// only checked to follow the object's previous one (above).
			ok = g[i].typ == w[i].typ && (w[i].typ == "DELETED" || g[i].rv == w[i].rv)
		}
		if !ok {
			if bad++; bad <= 10 {
				t.Errorf("watch %s: %s: events %v, acknowledged writes %v", path, name, g, w)
			}
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("watch %s: %s: events %v without an acknowledged write", path, name, g)
			}
		}
	}
	t.Logf("watch %s: %d events for %d acknowledged writes to %d objects, %d mismatched objects, %d answers 410 Gone",
		path, len(events), len(res.ops), len(want), bad, gone)
}

// readyz polls kube-apiserver's /readyz and keeps what was not ok.
type readyz struct {
	cancel   context.CancelFunc
	done     chan struct{}
	failures []string
	polls    int
}

func watchReadyz(ctx context.Context, api *kubelab.APIServer, every time.Duration) *readyz {
	ctx, cancel := context.WithCancel(ctx)
	r := &readyz{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			st, body, err := api.Do(ctx, "GET", "/readyz", nil, "")
			if ctx.Err() != nil {
				return
			}
			r.polls++
			if err != nil || st != 200 {
				r.failures = append(r.failures, fmt.Sprintf("%s: HTTP %d %v %s", time.Now().Format("15:04:05.000"), st, err, bytes.TrimSpace(body)))
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return r
}

func (r *readyz) stop() []string {
	r.cancel()
	<-r.done
	return r.failures
}

// moverRun is one run of `zketcd move`.
type moverRun struct {
	// started and ended bound the process; fenced is when its "source
	// fenced" line came (zero if none).
	started, ended, fenced time.Time
	err                    error
	maxRSSKiB              int64
	// summary is its last line ("moved ... (writes paused N)"); progress
	// its log lines about the copy; tail its last lines.
	summary  string
	progress []string
	tail     string
}

var moverProgress = regexp.MustCompile(`msg=("copying the source's base generation"|"base generation copied"|"destination at"|copied |copying |"source fenced|"moved: )`)

// runMover runs the zketcd binary with args, its output in logPath.
func runMover(t *testing.T, ctx context.Context, zketcd, logPath string, args []string) moverRun {
	t.Helper()
	var out bytes.Buffer
	pr, pw := io.Pipe()
	cmd := exec.CommandContext(ctx, zketcd, args...)
	cmd.Stdout, cmd.Stderr = pw, pw
	r := moverRun{started: time.Now()}
	var lines []string
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			lines = append(lines, line)
			if r.fenced.IsZero() && strings.Contains(line, `msg="source fenced`) {
				r.fenced = time.Now()
			}
			if moverProgress.MatchString(line) {
				r.progress = append(r.progress, line)
			}
			if strings.HasPrefix(line, "moved ") {
				r.summary = line
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	// Its peak RSS is its VmHWM, read until it exits: the rusage of
	// wait4 would not do, as a child's ru_maxrss includes its parent's RSS
	// at the exec (the test's, which holds every key).
	hwm := make(chan int64, 1)
	if r.err = cmd.Start(); r.err == nil {
		exited := make(chan struct{})
		go func() {
			var peak int64
			for {
				if kib, ok := vmHWM(cmd.Process.Pid); ok {
					peak = max(peak, kib)
				}
				select {
				case <-exited:
					hwm <- peak
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		r.err = cmd.Wait()
		close(exited)
		r.maxRSSKiB = <-hwm
	}
	r.ended = time.Now()
	pw.Close()
	<-scanned
	_ = os.WriteFile(logPath, out.Bytes(), 0o644)
	if r.err == nil && (r.summary == "" || r.fenced.IsZero()) {
		r.err = errors.New("no \"source fenced\" or \"moved ...\" line")
	}
	r.tail = strings.Join(lines[max(0, len(lines)-20):], "\n")
	if i := strings.Index(r.summary, "; free the source"); i > 0 {
		r.summary = r.summary[:i]
	}
	return r
}

// vmHWM returns the peak resident set size of process pid, in KiB.
func vmHWM(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib, err == nil
		}
	}
	return 0, false
}

// relisted matches kube-apiserver's log lines of a watch cache that lost
// its store watch (its reflector relists, its watchers are ended).
var relisted = regexp.MustCompile(`too old resource version|Terminating all watchers|watch chan error`)

var switchedLine = regexp.MustCompile(`moved: the instance runs on the destination root`)

// waitSwitched waits until z logged its n-th switch to a destination.
func waitSwitched(t *testing.T, z *kubelab.Zketcd, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(z.Grep(switchedLine, 0)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("zketcd %s did not switch to the destination (%d switches logged, want %d)", z.Name, len(z.Grep(switchedLine, 0)), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var tookField = regexp.MustCompile(`took=(\S+)`)

// switchTimes returns each instance's last switch time ("a 120ms").
func switchTimes(zs ...*kubelab.Zketcd) []string {
	var out []string
	for _, z := range zs {
		lines := z.Grep(switchedLine, 1)
		took := "?"
		if len(lines) > 0 {
			if m := tookField.FindStringSubmatch(lines[0]); m != nil {
				took = m[1]
			}
		}
		out = append(out, z.Name+" "+took)
	}
	return out
}

func mustStatusRev(t *testing.T, ctx context.Context, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(ctx, "/registry/health-of-the-move-test")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// storedKV is what a key holds at a revision.
type storedKV struct {
	create, mod, version int64
	value                string
}

// registryAt reads every key under /registry/ at rev, page by page.
func registryAt(t *testing.T, ctx context.Context, c *clientv3.Client, rev int64) map[string]storedKV {
	t.Helper()
	out := map[string]storedKV{}
	from, end := "/registry/", clientv3.GetPrefixRangeEnd("/registry/")
	for {
		resp, err := c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(1000))
		if err != nil {
			t.Fatalf("range /registry/ at %d: %v", rev, err)
		}
		var kv *mvccpb.KeyValue
		for _, kv = range resp.Kvs {
			out[string(kv.Key)] = storedKV{kv.CreateRevision, kv.ModRevision, kv.Version, string(kv.Value)}
		}
		if !resp.More || kv == nil {
			return out
		}
		from = string(kv.Key) + "\x00"
	}
}

func hashKV(t *testing.T, ctx context.Context, c *clientv3.Client, rev int64) *pb.HashKVResponse {
	t.Helper()
	h, err := pb.NewMaintenanceClient(c.ActiveConnection()).HashKV(ctx, &pb.HashKVRequest{Revision: rev})
	if err != nil {
		t.Fatalf("HashKV(%d): %v", rev, err)
	}
	return h
}

func mapsEqual(a, b map[string]storedKV) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func listState(l *kubelab.List) map[string]int64 {
	m := make(map[string]int64, len(l.Items))
	for _, o := range l.Items {
		m[o.Metadata.Name] = o.RV()
	}
	return m
}

// stateDiff lists the objects whose resourceVersions differ between got
// and want ("name got/want", 0 for absent), at most 20; "" if none.
func stateDiff(got, want map[string]int64) string {
	var diff []string
	for n, w := range want {
		if g := got[n]; g != w {
			diff = append(diff, fmt.Sprintf("%s %d/%d", n, g, w))
		}
	}
	for n, g := range got {
		if _, ok := want[n]; !ok {
			diff = append(diff, fmt.Sprintf("%s %d/0", n, g))
		}
	}
	sort.Strings(diff)
	if len(diff) > 20 {
		diff = append(diff[:20], fmt.Sprintf("and %d more", len(diff)-20))
	}
	return strings.Join(diff, ", ")
}

// TestMoveCostByObjectCount measures the move's own cost, without
// kube-apiserver: for each count in $ZKETCD_MOVE_COST_OBJECTS (e.g.
// "10000,100000"; skipped when unset, as in `make e2e`), one zketcd
// instance on a root of its own is loaded with that many kube-like objects
// (integration/kubedata, created as kube-apiserver creates them), the root
// is updated once and compacted at its head when $ZKETCD_MOVE_COST_COMPACT
// is set (then the mover copies a base generation rather than the whole
// log), and `zketcd
// move` moves it to another root of the same ZooKeeper. It reports the
// mover's time, peak RSS and progress lines, and checks that the keys and
// HashKV at the move's revision are the same after it. `make bench-move`
// runs it.
func TestMoveCostByObjectCount(t *testing.T) {
	spec := os.Getenv("ZKETCD_MOVE_COST_OBJECTS")
	if spec == "" {
		t.Skip("ZKETCD_MOVE_COST_OBJECTS is not set (make bench-move)")
	}
	compact := os.Getenv("ZKETCD_MOVE_COST_COMPACT") != ""
	ctx := t.Context()
	lab := newLab(t, "")
	must := fatalOn(t)
	zk, err := lab.ZooKeeper(ctx, "-Xmx6g")
	must(err)
	sec, err := lab.Security()
	must(err)
	var rows []string
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("ZKETCD_MOVE_COST_OBJECTS=%q: %q is not a count", spec, f)
		}
		root := fmt.Sprintf("/cost-%d", n)
		z, err := lab.StartZketcd(ctx, fmt.Sprintf("cost-%d", n), []string{zk.Addr()}, root)
		must(err)
		c, err := z.Client()
		must(err)
		start := time.Now()
		size, err := loadKubeObjects(ctx, c, n, 16, false)
		must(err)
		loaded := time.Since(start)
		if compact {
			// Every object updated once, then a compaction at the head:
			// the log then holds twice the live data, and the compaction
			// writes a whole base generation (a log holding little besides
			// the live data would be kept as the generation instead).
			_, err := loadKubeObjects(ctx, c, n, 16, true)
			must(err)
			_, err = c.Compact(ctx, mustStatusRev(t, ctx, c), clientv3.WithCompactPhysical())
			must(err)
			deadline := time.Now().Add(5 * time.Minute)
			for {
				whole, err := z.Metric(ctx, "zketcd_physical_compactions_total", `generation="whole"`)
				if err == nil && whole >= 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no whole base generation written 5 min after the compaction (%v %v)", whole, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		rev := mustStatusRev(t, ctx, c)
		keys := registryAt(t, ctx, c, rev)
		before := hashKV(t, ctx, c, rev)
		t.Logf("%d objects (%d MiB of values) loaded in %v, revision %d", n, size>>20, loaded.Round(time.Millisecond), rev)
		args := []string{"move", "--zk", zk.Addr(), "--zk-root", root, "--to-root", root + "-moved", "--zk-auth-file", sec.ZKAuthFile, "--log-level", "info"}
		r := runMover(t, ctx, lab.Zketcd, filepath.Join(lab.Dir, fmt.Sprintf("move-cost-%d.log", n)), args)
		if r.err != nil {
			t.Fatalf("zketcd %s: %v\n%s", strings.Join(args, " "), r.err, r.tail)
		}
		waitSwitched(t, z, 1)
		for _, p := range r.progress {
			t.Logf("  mover: %s", p)
		}
		if got := registryAt(t, ctx, c, rev); !mapsEqual(got, keys) {
			t.Errorf("%d objects: the keys at revision %d differ after the move (%d, %d before)", n, rev, len(got), len(keys))
		}
		if h := hashKV(t, ctx, c, rev); h.Hash != before.Hash {
			t.Errorf("%d objects: HashKV(%d) %d after the move, %d before", n, rev, h.Hash, before.Hash)
		}
		row := fmt.Sprintf("| %d | %d MiB | %v | %v | %d MiB | %s |", n, size>>20, compact,
			r.ended.Sub(r.started).Round(time.Millisecond), r.maxRSSKiB>>10, r.summary)
		t.Log(row)
		rows = append(rows, row)
		z.Stop()
	}
	t.Logf("summary:\n| objects | values | compacted | mover's time | mover's peak RSS | its last line |\n|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
}

// loadKubeObjects creates n kubedata objects through c from workers
// goroutines, each with kube-apiserver's create transaction (update: puts
// each again, an update), and returns the bytes of their values.
func loadKubeObjects(ctx context.Context, c *clientv3.Client, n, workers int, update bool) (int64, error) {
	g := kubedata.New(1)
	next := make(chan int)
	var (
		mu    sync.Mutex
		total int64
		first error
	)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				o := g.Object(i)
				cmp := clientv3.Compare(clientv3.ModRevision(o.Key), "=", 0)
				if update {
					cmp = clientv3.Compare(clientv3.ModRevision(o.Key), ">", 0)
				}
				resp, err := c.Txn(ctx).If(cmp).Then(clientv3.OpPut(o.Key, string(o.Value))).Commit()
				mu.Lock()
				switch {
				case err != nil && first == nil:
					first = fmt.Errorf("create %s: %w", o.Key, err)
				case err == nil && !resp.Succeeded && first == nil:
					first = fmt.Errorf("write %s (update %v): compare failed", o.Key, update)
				case err == nil:
					total += int64(len(o.Value))
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return total, first
}
