package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// TestKubeAPIServerMovesFromASharedEtcdBehindAProxy moves one cluster out
// of a shared etcd 3.7.3 into zketcd while its kube-apiservers serve a
// kube-like churn, without restarting them: they reach the store through
// a re-pointable TCP proxy (the stand-in for a DNS name or a virtual IP;
// TLS passes through it, and both stores present certificates of one CA
// valid for its address). Their keys are under --etcd-prefix /team-a;
// another cluster's keys under /team-b/ are written meanwhile, so the
// cluster's revisions are sparse. `zketcd mirror cutover --on-signal
// --prefix /team-a/` copies the prefix and follows it; at the cut-over the
// proxy cuts kube-apiserver's connections and holds new ones, SIGUSR1
// starts the cut-over (--quiet $ZKETCD_MOVE_QUIET, default 200ms: nothing
// reaches the source once the proxy holds), zketcd is started on the root
// once it is cut over, and the proxy forwards to it.
//
// It checks what TestKubeAPIServerWhileItsRootMoves checks: the cut-over
// prints its prefix hash line; no watch (two through kube-apiserver's
// watch cache, one through a kube-apiserver without it, all from a
// resourceVersion before the mirror started) answers 410 Gone or ends, and
// no kube-apiserver logs a relist; each watch delivers every acknowledged
// write exactly once with its resourceVersion; the objects listed after
// are those before with the churn applied; every key under the prefix at a
// revision before the cut-over and at the cut-over's revision reads the
// same on zketcd as on etcd. It reports the write unavailability kube
// clients saw (the longest gap between acknowledged writes, the longest
// write across the cut-over) and its parts: the quiet period, the two
// prefix hashes, zketcd's start. Requests in flight on a connection the
// proxy cuts fail (their outcome is unknown to the client): it reports
// them, and checks the watches allow each such write at most once.
//
// Sizes as TestKubeAPIServerWhileItsRootMoves ($ZKETCD_MOVE_OBJECTS,
// $ZKETCD_MOVE_RATE, $ZKETCD_MOVE_CLIENTS); `make bench-move` raises them.
func TestKubeAPIServerMovesFromASharedEtcdBehindAProxy(t *testing.T) {
	bin := kubeAPIServerOrSkip(t)
	objects := envInt(t, "ZKETCD_MOVE_OBJECTS", 300)
	rate := envInt(t, "ZKETCD_MOVE_RATE", 40)
	clients := envInt(t, "ZKETCD_MOVE_CLIENTS", 4)
	quiet := 200 * time.Millisecond
	if s := os.Getenv("ZKETCD_MOVE_QUIET"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("ZKETCD_MOVE_QUIET=%q: not a positive duration", s)
		}
		quiet = d
	}
	ctx := t.Context()
	lab := newLab(t, bin)
	// zketcd on the mirrored root serves without etcd's authentication,
	// as etcd does here: the client certificates are still verified.
	lab.ManualAuth = true
	must := fatalOn(t)
	etcd, err := lab.StartEtcdWith(ctx, kubelab.EtcdOptions{TLS: true, WatchProgressNotifyInterval: time.Second})
	must(err)
	ec, err := etcd.Client()
	must(err)
	proxy, err := lab.StartProxy(etcd.TLSAddr)
	must(err)
	other := startOtherCluster(ctx, ec, "/team-b/", 20)
	t.Cleanup(other.stop)

	const prefix = "/team-a/"
	apiOpts := func(name string, extra ...string) kubelab.APIServerOptions {
		return kubelab.APIServerOptions{Name: name, EtcdServers: "https://" + proxy.Addr,
			Extra: append([]string{"--etcd-prefix=" + strings.TrimSuffix(prefix, "/")}, extra...)}
	}
	api, err := lab.StartAPIServer(apiOpts("moved"))
	must(err)
	direct, err := lab.StartAPIServer(apiOpts("no-watch-cache", "--watch-cache=false"))
	must(err)
	for _, a := range []*kubelab.APIServer{api, direct} {
		took, err := a.WaitReady(ctx, 3*time.Minute)
		must(err)
		t.Logf("kube-apiserver %s on etcd %s through the proxy %s (--etcd-prefix %s) ready in %v", a.Name, etcd.TLSAddr, proxy.Addr, prefix, took.Round(time.Millisecond))
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
	relistsBefore := [2]int{len(api.Grep(relisted, 0)), len(direct.Grep(relisted, 0))}
	ready := watchReadyz(ctx, api, 200*time.Millisecond)
	churn := startChurn(ctx, api, cmPath, before, clients, rate)
	t.Cleanup(churn.stop)

	zk, err := lab.ZooKeeper(ctx)
	must(err)
	sec, err := lab.Security()
	must(err)
	const root = "/team-a"
	args := []string{"mirror", "cutover", "--on-signal", "--from", etcd.URL(), "--prefix", prefix,
		"--zk", zk.Addr(), "--zk-root", root, "--zk-auth-file", sec.ZKAuthFile,
		"--status-interval", "300ms", "--quiet", quiet.String(), "--log-level", "info"}
	m := startLogged(t, lab.Zketcd, filepath.Join(lab.Dir, "mirror-cutover.log"), args)
	if _, err := m.waitLine(ctx, "mirror: caught up with the source", 5*time.Minute); err != nil {
		t.Fatalf("zketcd %s: %v\n%s", strings.Join(args, " "), err, m.tail(20))
	}
	t.Logf("mirror caught up %v after its start", time.Since(m.started).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // the churn while the mirror follows
	preRev := mustStatusRev(t, ctx, ec)
	preKeys := prefixAt(t, ctx, ec, prefix, preRev)
	t.Logf("%d keys under %s at revision %d before the cut-over", len(preKeys), prefix, preRev)

	// The cut-over: the proxy holds kube-apiserver's traffic, the mirror
	// cuts over, zketcd starts on the root, the proxy forwards to it.
	held := time.Now()
	cut := proxy.Hold()
	must(m.cmd.Process.Signal(syscall.SIGUSR1))
	summary, err := m.waitLine(ctx, "cut over ", 5*time.Minute)
	if err != nil {
		t.Fatalf("zketcd %s: %v\n%s", strings.Join(args, " "), err, m.tail(20))
	}
	cutOver := time.Now()
	if err := m.wait(); err != nil {
		t.Fatalf("zketcd mirror cutover: %v\n%s", err, m.tail(20))
	}
	z, err := lab.StartZketcd(ctx, "moved", []string{zk.Addr()}, root)
	must(err)
	served := time.Now()
	proxy.Switch(z.Addr)
	switched := time.Now()
	cutRev, hashLine := parseCutOver(t, summary)
	t.Logf("cut-over: %s", summary)
	time.Sleep(3 * time.Second) // the churn on zketcd
	churn.stop()
	readyFailures := ready.stop()
	other.stop()

	gap, _ := churn.unavailability(held.Add(-500*time.Millisecond), switched.Add(time.Second))
	n, longest := churn.overlapping(held, switched)
	baseGap, baseLongest := churn.unavailability(churn.started, churn.started.Add(3*time.Second))
	parts := m.cutOverParts(held)
	line := fmt.Sprintf("etcd prefix to zketcd behind a proxy: hold to switch %v = cut-over command %v (%s) + zketcd start %v; kube clients: longest gap between acknowledged writes %v, %d writes across the hold, the longest %v; before (3 s of churn): gap %v, longest write %v; %d sockets cut; mirror peak RSS %d MiB",
		switched.Sub(held).Round(time.Millisecond), cutOver.Sub(held).Round(time.Millisecond), parts,
		served.Sub(cutOver).Round(time.Millisecond), gap.Round(time.Millisecond), n, longest.Round(time.Millisecond),
		baseGap.Round(time.Millisecond), baseLongest.Round(time.Millisecond), cut, m.peakRSSKiB()>>10)
	t.Log(line)
	for _, e := range proxy.DialErrors() {
		t.Errorf("proxy: %s", e)
	}

	res := churn.result()
	marker, err := api.Create(ctx, cmPath, kubelab.ConfigMap("zz-marker", nil))
	must(err)
	if marker.RV() <= cutRev {
		t.Errorf("the first write after the cut-over got resourceVersion %d, not above the cut-over's revision %d", marker.RV(), cutRev)
	}
	res.ops = append(res.ops, churnOp{typ: "ADDED", name: "zz-marker", rv: marker.RV()})
	res.lastRV = marker.RV()
	t.Logf("churn: %d creates, %d updates, %d deletes, %d gets acknowledged; %d failed", res.counts["ADDED"], res.counts["MODIFIED"], res.counts["DELETED"], res.counts["GET"], len(res.failed))
	// A request in flight on a connection the proxy cut fails (etcd's
	// client does not send a write again once its connection closed under
	// it): its outcome is unknown to the client, so its event may or may
	// not come, once. Any other failure is an error.
	unknown := map[string]string{}
	for _, f := range res.failedOps {
		desc := fmt.Sprintf("%s %s sent at %s, failed after %v: %v", f.typ, f.name, f.sent.Format("15:04:05.000"), f.decided.Sub(f.sent).Round(time.Millisecond), f.err)
		if f.sent.After(held.Add(50*time.Millisecond)) || f.decided.Before(held) || !strings.Contains(f.err.Error(), "Unavailable") {
			t.Errorf("a request failed during the move, not one in flight when the proxy cut: %s", desc)
			continue
		}
		t.Logf("in flight when the proxy cut the connections (outcome unknown to the client): %s", desc)
		if f.typ != "GET" {
			unknown[f.name] = f.typ
		}
	}
	for _, f := range res.stale {
		t.Errorf("a GET after the write: %s", f)
	}
	for _, f := range readyFailures {
		t.Logf("/readyz while the proxy held: %s", f)
	}
	for _, w := range watches {
		events, ended := w.waitFor(res.lastRV, 60*time.Second)
		if ended != nil {
			t.Errorf("watch %s from %s ended: %v", w.path, rv0, ended)
		}
		events, landed := dropUnknownOutcomes(events, ns, res, unknown)
		for _, l := range landed {
			t.Logf("watch %s: the failed write %s landed (its one event is allowed)", w.path, l)
		}
		checkWatch(t, w.path, ns, events, res)
	}
	// kube-apiserver's watch cache watches etcd with progress
	// notifications (etcd sends them every --watch-progress-notify-
	// interval, 1 s here): etcd's client resumes each from the revision
	// last notified, above the mirror's first revision, so none restarts.
	if n := len(api.Grep(relisted, 0)) - relistsBefore[0]; n > 0 {
		t.Errorf("kube-apiserver (watch cache) logged %d watch restarts or relists during the move: %q", n, api.Grep(relisted, 10))
	}
	// Without the watch cache, kube-apiserver's own informers watch etcd
	// without progress notifications: a watch that saw no event since its
	// list resumes on zketcd from a revision below the mirror's first one,
	// where the copy of the prefix has no history (docs/operations.md),
	// and is answered "compacted": that informer relists. Anything else is
	// an error.
	var compacted int
	for _, l := range direct.Grep(relisted, 0)[relistsBefore[1]:] {
		if strings.Contains(l, "required revision has been compacted") {
			compacted++
		} else {
			t.Errorf("kube-apiserver (no watch cache): %s", l)
		}
	}
	firstRev, _ := m.waitLine(ctx, "initial copy of the prefix", time.Second)
	t.Logf("kube-apiserver (no watch cache): %d of its own watches answered compacted after the switch (the mirror's %s)", compacted, firstRev)
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
	listed := listState(after)
	for name := range unknown {
		delete(listed, name)
		delete(want, name)
	}
	if d := stateDiff(listed, want); d != "" {
		t.Errorf("ConfigMaps listed after the move differ from those before with the churn (listed, expected): %s", d)
	}
	zc, err := z.Client()
	must(err)
	for _, rev := range []int64{preRev, cutRev} {
		onEtcd := prefixAt(t, ctx, ec, prefix, rev)
		if got := prefixAt(t, ctx, zc, prefix, rev); !mapsEqual(got, onEtcd) {
			t.Errorf("%s at revision %d: zketcd %d keys, etcd %d keys, not the same", prefix, rev, len(got), len(onEtcd))
		}
	}
	if got := prefixAt(t, ctx, zc, prefix, preRev); !mapsEqual(got, preKeys) {
		t.Errorf("%s at revision %d on zketcd differs from what etcd held before the cut-over", prefix, preRev)
	}
	t.Logf("summary (%d ConfigMaps, churn %d requests/s from %d clients, --quiet %v, 3 watches from resourceVersion %s, another cluster writing on the shared etcd):\n    %s\n    %s",
		objects, rate, clients, quiet, rv0, line, hashLine)
}

// dropUnknownOutcomes removes from events (of a watch on namespace ns) the
// one event of each write in unknown (object name → event type) that
// failed with an unknown outcome and landed: an event of that type for
// that object beyond its acknowledged writes. It returns the events left
// and the writes that landed.
func dropUnknownOutcomes(events []kubelab.WatchEvent, ns string, res churnResult, unknown map[string]string) ([]kubelab.WatchEvent, []string) {
	if len(unknown) == 0 {
		return events, nil
	}
	acked := map[string]int{}
	for _, op := range res.ops {
		acked[op.name]++
	}
	seen := map[string]int{}
	var out []kubelab.WatchEvent
	var landed []string
	for _, e := range events {
		if e.Type != "ERROR" && e.Type != "BOOKMARK" && e.Object.Metadata.Namespace == ns {
			name := e.Object.Metadata.Name
			seen[name]++
			if typ, ok := unknown[name]; ok && seen[name] == acked[name]+1 && e.Type == typ {
				landed = append(landed, typ+" "+name)
				continue
			}
		}
		out = append(out, e)
	}
	return out, landed
}

// otherCluster writes keys under a prefix of the shared etcd at a fixed
// rate: another cluster, taking revisions of the shared counter.
type otherCluster struct {
	quit chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func startOtherCluster(ctx context.Context, c *clientv3.Client, prefix string, rate int) *otherCluster {
	o := &otherCluster{quit: make(chan struct{})}
	o.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-o.quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, _ = c.Put(ctx, fmt.Sprintf("%sconfigmaps/default/cm-%d", prefix, i%500), strconv.Itoa(i))
		}
	})
	return o
}

func (o *otherCluster) stop() {
	o.once.Do(func() {
		close(o.quit)
		o.wg.Wait()
	})
}

// prefixAt reads every key under prefix at rev, page by page.
func prefixAt(t *testing.T, ctx context.Context, c *clientv3.Client, prefix string, rev int64) map[string]storedKV {
	t.Helper()
	out := map[string]storedKV{}
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(1000))
		if err != nil {
			t.Fatalf("range %s at %d: %v", prefix, rev, err)
		}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = storedKV{kv.CreateRevision, kv.ModRevision, kv.Version, string(kv.Value)}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

var cutOverLine = regexp.MustCompile(`at revision (\d+): prefix hash (\S+) on both sides`)

// parseCutOver returns the revision of the cut-over's last line and the
// line from "at revision" on.
func parseCutOver(t *testing.T, line string) (int64, string) {
	t.Helper()
	m := cutOverLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the cut-over's last line %q has no \"at revision N: prefix hash H on both sides\" (docs/operations.md)", line)
	}
	rev, _ := strconv.ParseInt(m[1], 10, 64)
	return rev, line[strings.Index(line, "at revision"):]
}

// loggedProc is a zketcd command whose output lines are kept with the time
// each came.
type loggedProc struct {
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{} // closed at the exit (err set)
	done    chan struct{} // closed once the output is read
	err     error

	mu    sync.Mutex
	lines []timedLine
	peak  int64
}

type timedLine struct {
	at   time.Time
	text string
}

func startLogged(t *testing.T, bin, logPath string, args []string) *loggedProc {
	t.Helper()
	pr, pw := io.Pipe()
	p := &loggedProc{cmd: exec.Command(bin, args...), started: time.Now(), exited: make(chan struct{}), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s %s: %v", bin, strings.Join(args, " "), err)
	}
	go func() {
		defer close(p.done)
		f, _ := os.Create(logPath)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, timedLine{time.Now(), sc.Text()})
			p.mu.Unlock()
			if f != nil {
				fmt.Fprintln(f, sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, pr)
		if f != nil {
			f.Close()
		}
	}()
	go func() {
		for {
			if kib, ok := vmHWM(p.cmd.Process.Pid); ok {
				p.mu.Lock()
				p.peak = max(p.peak, kib)
				p.mu.Unlock()
			}
			select {
			case <-p.exited:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	go func() {
		err := p.cmd.Wait()
		pw.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitLine waits until a line containing s came and returns it; it fails
// if the process exits first or after timeout.
func (p *loggedProc) waitLine(ctx context.Context, s string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for i, ended := 0, false; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if strings.Contains(p.lines[i].text, s) {
				l := p.lines[i].text
				p.mu.Unlock()
				return l, nil
			}
		}
		p.mu.Unlock()
		if ended {
			return "", fmt.Errorf("exited without a line %q", s)
		}
		select {
		case <-p.done:
			ended = true // every line is in: look once more
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no line %q after %v", s, timeout)
		}
	}
}

// wait waits for the exit and returns its error.
func (p *loggedProc) wait() error {
	<-p.exited
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *loggedProc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines[max(0, len(p.lines)-n):] {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

func (p *loggedProc) peakRSSKiB() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

// cutOverParts describes the cut-over's own steps from its log lines
// after from: when it started waiting for quiet, the hashes' times (their
// took= fields), when it finished.
func (p *loggedProc) cutOverParts(from time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for _, l := range p.lines {
		if l.at.Before(from) {
			continue
		}
		for _, s := range []struct{ msg, name string }{
			{"cut-over started", "signal seen"},
			{"hashed the source's prefix", "source hashed"},
			{"hashed the copy", "copy hashed"},
			{"cut over; instances may serve", "finished"},
		} {
			if strings.Contains(l.text, s.msg) {
				d := s.name + " at +" + l.at.Sub(from).Round(time.Millisecond).String()
				if m := tookField.FindStringSubmatch(l.text); m != nil {
					d += " (took " + m[1] + ")"
				}
				parts = append(parts, d)
			}
		}
	}
	return strings.Join(parts, ", ")
}
