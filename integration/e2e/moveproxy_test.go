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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/integration/faultproxy"
	"github.com/zketcd/zketcd/integration/kubelab"
)

// TestKubeAPIServerMovesFromASharedEtcdBehindAProxy moves one cluster out
// of a shared etcd 3.7.3 into zketcd while its kube-apiservers serve a
// kube-like churn, without restarting them: they reach the store through
// a re-pointable TCP proxy (the stand-in for a DNS name or a virtual IP;
// TLS passes through it, and both stores present certificates of one CA
// valid for its address; the mirror reads etcd over TLS too, with a client
// certificate). Their keys are under --etcd-prefix /team-a;
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
// resourceVersion before the mirror started) answers 410 Gone or ends;
// the kube-apiserver with its watch cache logs no relist (the source etcd
// sends progress notifications every second, so its watches resume above
// the mirror's first revision), the one without it only "compacted"
// answers to its own watches (counted: the copy of the prefix has no
// history before the mirror's first revision); each watch delivers every
// acknowledged write exactly once with its resourceVersion; the objects
// listed after are those before with the churn applied; every key under
// the prefix at a revision before the cut-over and at the cut-over's
// revision reads the same on zketcd as on etcd. It reports the write unavailability kube
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
	k := startProxiedKube(t, lab, proxy, "etcd "+etcd.TLSAddr, "--etcd-prefix="+strings.TrimSuffix(prefix, "/"))

	zk, err := lab.ZooKeeper(ctx)
	must(err)
	sec, err := lab.Security()
	must(err)
	const root = "/team-a"
	// The mirror reads the shared etcd over TLS with a client
	// certificate, as kube-apiserver does (Kamaji's etcd requires one).
	args := []string{"mirror", "cutover", "--on-signal", "--from", etcd.TLSURL(), "--prefix", prefix,
		"--cacert", sec.CAFile, "--cert", sec.RootCert, "--key", sec.RootKey,
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
	other.stop()
	pause := fmt.Sprintf("etcd prefix to zketcd behind a proxy: hold to switch %v = cut-over command %v (%s) + zketcd start %v; %d sockets cut; mirror peak RSS %d MiB",
		switched.Sub(held).Round(time.Millisecond), cutOver.Sub(held).Round(time.Millisecond), m.cutOverParts(held),
		served.Sub(cutOver).Round(time.Millisecond), cut, m.peakRSSKiB()>>10)
	firstRev, _ := m.waitLine(ctx, "initial copy of the prefix", time.Second)
	t.Logf("the mirror's first revision: %s", firstRev)
	// Without the watch cache, kube-apiserver's own informers watch etcd
	// without progress notifications: a watch that saw no event since its
	// list resumes on zketcd from a revision below the mirror's first one,
	// where the copy of the prefix has no history (docs/operations.md),
	// and is answered "compacted": that informer relists.
	line := k.finish(held, switched, cutRev, pause, true)

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
	t.Logf("summary (%s, --quiet %v, another cluster writing on the shared etcd):\n    %s\n    %s", k.shape(), quiet, line, hashLine)
}

// proxiedKube is a kube-apiserver (and a second one without its watch
// cache) on a store behind a [faultproxy.Proxy], with seeded ConfigMaps, a
// churn and WATCHes from a resourceVersion taken before it, as
// TestKubeAPIServerWhileItsRootMoves runs them.
type proxiedKube struct {
	t                      *testing.T
	ctx                    context.Context
	proxy                  *faultproxy.Proxy
	api, direct            *kubelab.APIServer
	objects, rate, clients int
	ns, cmPath, rv0        string
	before                 *kubelab.List
	watches                []*heldWatch
	relistsBefore          [2]int
	ready                  *readyz
	probe                  *probe
	churn                  *churn
}

// startProxiedKube starts the kube-apiservers with --etcd-servers the
// proxy (store names what it forwards to, for the log) and extra flags,
// seeds $ZKETCD_MOVE_OBJECTS ConfigMaps and starts the watches and the
// churn ($ZKETCD_MOVE_RATE, $ZKETCD_MOVE_CLIENTS).
func startProxiedKube(t *testing.T, lab *kubelab.Lab, proxy *faultproxy.Proxy, store string, extra ...string) *proxiedKube {
	t.Helper()
	ctx := t.Context()
	must := fatalOn(t)
	k := &proxiedKube{t: t, ctx: ctx, proxy: proxy, ns: "move",
		objects: envInt(t, "ZKETCD_MOVE_OBJECTS", 300), rate: envInt(t, "ZKETCD_MOVE_RATE", 40), clients: envInt(t, "ZKETCD_MOVE_CLIENTS", 4)}
	k.cmPath = "/api/v1/namespaces/" + k.ns + "/configmaps"
	opts := func(name string, more ...string) kubelab.APIServerOptions {
		return kubelab.APIServerOptions{Name: name, EtcdServers: "https://" + proxy.Addr(), Extra: append(slices.Clone(extra), more...)}
	}
	var err error
	k.api, err = lab.StartAPIServer(opts("moved"))
	must(err)
	k.direct, err = lab.StartAPIServer(opts("no-watch-cache", "--watch-cache=false"))
	must(err)
	for _, a := range []*kubelab.APIServer{k.api, k.direct} {
		took, err := a.WaitReady(ctx, 3*time.Minute)
		must(err)
		t.Logf("kube-apiserver %s on %s through the proxy %s %v ready in %v", a.Name, store, proxy.Addr(), extra, took.Round(time.Millisecond))
	}
	_, err = k.api.Create(ctx, "/api/v1/namespaces", kubelab.Namespace(k.ns))
	must(err)
	start := time.Now()
	must(seedConfigMaps(ctx, k.api, k.cmPath, k.objects, 8))
	t.Logf("seeded %d ConfigMaps through kube-apiserver in %v", k.objects, time.Since(start).Round(time.Millisecond))
	k.before, err = k.api.List(ctx, k.cmPath)
	must(err)
	if len(k.before.Items) != k.objects {
		t.Fatalf("listed %d ConfigMaps, seeded %d", len(k.before.Items), k.objects)
	}
	k.rv0 = k.before.Metadata.ResourceVersion
	for _, path := range []string{k.cmPath, "/api/v1/configmaps"} {
		w, err := k.api.Watch(ctx, path+"?resourceVersion="+k.rv0)
		must(err)
		k.watches = append(k.watches, holdWatch(path, w))
	}
	w, err := k.direct.Watch(ctx, k.cmPath+"?resourceVersion="+k.rv0)
	must(err)
	k.watches = append(k.watches, holdWatch(k.cmPath+" (no watch cache)", w))
	k.relistsBefore = [2]int{len(k.api.Grep(relisted, 0)), len(k.direct.Grep(relisted, 0))}
	k.probe = startProbe(t, lab, proxy.Addr())
	k.ready = watchReadyz(ctx, k.api, 200*time.Millisecond)
	k.churn = startChurn(ctx, k.api, k.cmPath, k.before, k.clients, k.rate)
	t.Cleanup(k.churn.stop)
	return k
}

func (k *proxiedKube) shape() string {
	return fmt.Sprintf("%d ConfigMaps, churn %d requests/s from %d clients, 3 watches from resourceVersion %s", k.objects, k.rate, k.clients, k.rv0)
}

// finish stops the churn and checks what TestKubeAPIServerWhileItsRootMoves
// checks, for a cut-over whose proxy held at held and switched at
// switched, to a store whose revision then was cutRev: that a write
// afterwards takes a later one, that no request failed but those in
// flight when the proxy cut, that each watch delivered every acknowledged
// write once (and a failed one at most once), that no kube-apiserver
// relisted (compactedOK: but the one without a watch cache, whose own
// watches may be answered compacted: it logs how many), that the listing
// is the one before with the churn. It returns a line with pause (the
// cut-over's own parts) and the write unavailability kube clients saw.
func (k *proxiedKube) finish(held, switched time.Time, cutRev int64, pause string, compactedOK bool) string {
	t, ctx, must := k.t, k.ctx, fatalOn(k.t)
	t.Helper()
	k.churn.stop()
	readyFailures := k.ready.stop()
	k.probe.stop()
	if at, ok := k.probe.firstAnswerAfter(switched); ok {
		t.Logf("an etcd client of the test reading through the proxy every 10 ms: first answer after the switch at +%v (read sent at +%v)",
			at.decided.Sub(switched).Round(time.Millisecond), at.sent.Sub(switched).Round(time.Millisecond))
	}
	gap, _ := k.churn.unavailability(held.Add(-500*time.Millisecond), switched.Add(time.Second))
	n, longest := k.churn.overlapping(held, switched)
	baseGap, baseLongest := k.churn.unavailability(k.churn.started, k.churn.started.Add(3*time.Second))
	line := fmt.Sprintf("%s; kube clients: longest gap between acknowledged writes %v, %d writes across the hold, the longest %v; before (3 s of churn): gap %v, longest write %v",
		pause, gap.Round(time.Millisecond), n, longest.Round(time.Millisecond), baseGap.Round(time.Millisecond), baseLongest.Round(time.Millisecond))
	t.Log(line)
	t.Logf("writes answered from 1 s before the hold to 2 s after the switch (sent → answered, from the hold; the switch at +%v): %s",
		switched.Sub(held).Round(time.Millisecond), k.churn.timeline(held, held.Add(-time.Second), switched.Add(2*time.Second)))
	for _, a := range []*kubelab.APIServer{k.api, k.direct} {
		if lines := klogWithin(a.LogPath(), held, switched.Add(time.Second), 40); len(lines) > 0 {
			t.Logf("kube-apiserver %s logged from the hold to 1 s after the switch:\n    %s", a.Name, strings.Join(lines, "\n    "))
		}
	}
	for _, e := range k.proxy.DialErrors() {
		t.Errorf("proxy: %s", e)
	}

	res := k.churn.result()
	marker, err := k.api.Create(ctx, k.cmPath, kubelab.ConfigMap("zz-marker", nil))
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
		// kube-apiserver may still send on a cut connection until its
		// client has read the close: a request sent soon after counts.
		if f.sent.After(held.Add(500*time.Millisecond)) || f.decided.Before(held) || !strings.Contains(f.err.Error(), "Unavailable") {
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
	for _, w := range k.watches {
		events, ended := w.waitFor(res.lastRV, 60*time.Second)
		if ended != nil {
			t.Errorf("watch %s from %s ended: %v", w.path, k.rv0, ended)
		}
		events, landed := dropUnknownOutcomes(events, k.ns, res, unknown)
		for _, l := range landed {
			t.Logf("watch %s: the failed write %s landed (its one event is allowed)", w.path, l)
		}
		checkWatch(t, w.path, k.ns, events, res)
	}
	// kube-apiserver's watch cache watches etcd with progress
	// notifications (etcd sends them every --watch-progress-notify-
	// interval): etcd's client resumes each from the revision last
	// notified or seen, so none restarts.
	if n := len(k.api.Grep(relisted, 0)) - k.relistsBefore[0]; n > 0 {
		t.Errorf("kube-apiserver (watch cache) logged %d watch restarts or relists during the move: %q", n, k.api.Grep(relisted, 10))
	}
	var compacted int
	for _, l := range k.direct.Grep(relisted, 0)[k.relistsBefore[1]:] {
		if compactedOK && strings.Contains(l, "required revision has been compacted") {
			compacted++
		} else {
			t.Errorf("kube-apiserver (no watch cache): %s", l)
		}
	}
	if compactedOK {
		t.Logf("kube-apiserver (no watch cache): %d of its own watches answered compacted after the switch", compacted)
	}
	after, err := k.api.List(ctx, k.cmPath)
	must(err)
	want := listState(k.before)
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
	return line
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

// TestKubeAPIServerMovesFromZketcdToEtcdBehindAProxy moves a cluster from
// zketcd back to etcd 3.7.3 while its kube-apiservers serve a kube-like
// churn, without restarting them: they reach zketcd through a re-pointable
// TCP proxy (as TestKubeAPIServerMovesFromASharedEtcdBehindAProxy); at the
// cut-over the proxy cuts and holds their connections, the test waits
// until zketcd's revision has not moved for $ZKETCD_MOVE_QUIET (default
// 200ms), `etcdctl snapshot save` saves the root, `etcdutl snapshot
// restore` restores it, an etcd started on the restored data directory
// serves it over TLS, and the proxy forwards to it. The write pause is
// bounded by the snapshot, the restore and etcd's start: it reports each.
// It checks what the other test checks (no kube-apiserver relists here:
// etcd has the whole history of the snapshot), that etcd serves the
// root's revision, and that every key at a revision before the cut-over
// and HashKV at the cut-over's revision are the same on both. It needs
// $KUBE_APISERVER and etcdctl and etcdutl 3.7.3 ($ETCDCTL, $ETCDUTL or
// build-peers.sh's cache).
func TestKubeAPIServerMovesFromZketcdToEtcdBehindAProxy(t *testing.T) {
	bin := kubeAPIServerOrSkip(t)
	home, _ := os.UserHomeDir()
	tool := func(name string) string {
		p := os.Getenv(strings.ToUpper(name))
		if p == "" {
			p = filepath.Join(home, ".cache", "zketcd", "etcd-v3.7.3", name)
		}
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s v3.7.3 not found: integration/bench/build-peers.sh", name)
		}
		return p
	}
	ctl, utl := tool("etcdctl"), tool("etcdutl")
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
	// etcd restored from the root serves without etcd's authentication:
	// so does zketcd here (client certificates are still verified).
	lab.ManualAuth = true
	must := fatalOn(t)
	zk, err := lab.ZooKeeper(ctx)
	must(err)
	z, err := lab.StartZketcd(ctx, "source", []string{zk.Addr()}, "/kube")
	must(err)
	zc, err := z.Client()
	must(err)
	proxy, err := lab.StartProxy(z.Addr)
	must(err)
	k := startProxiedKube(t, lab, proxy, "zketcd "+z.Addr)
	time.Sleep(3 * time.Second)
	preRev := mustStatusRev(t, ctx, zc)
	preKeys := registryAt(t, ctx, zc, preRev)
	sec, err := lab.Security()
	must(err)
	peerPort, err := lab.Port()
	must(err)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	file, restored := filepath.Join(lab.Dir, "root.db"), filepath.Join(lab.Dir, "restored.etcd")

	// The cut-over.
	held := time.Now()
	cut := proxy.Hold()
	// No write lands on zketcd once the requests it received finish.
	rev, last := mustStatusRev(t, ctx, zc), time.Now()
	for time.Since(last) < quiet {
		time.Sleep(20 * time.Millisecond)
		if r := mustStatusRev(t, ctx, zc); r != rev {
			rev, last = r, time.Now()
		}
	}
	quieted := time.Now()
	if out, err := exec.CommandContext(ctx, ctl, "--endpoints", z.URL(), "--cacert", sec.CAFile, "--cert", sec.RootCert, "--key", sec.RootKey,
		"snapshot", "save", file).CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	saved := time.Now()
	if out, err := exec.CommandContext(ctx, utl, "snapshot", "restore", file, "--data-dir", restored, "--name", "restored",
		"--initial-cluster", "restored="+peer, "--initial-advertise-peer-urls", peer).CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	restoredAt := time.Now()
	etcd, err := lab.StartEtcdWith(ctx, kubelab.EtcdOptions{Name: "restored", TLS: true, DataDir: restored, PeerURL: peer})
	must(err)
	served := time.Now()
	proxy.Switch(etcd.TLSAddr)
	switched := time.Now()
	ec, err := etcd.Client()
	must(err)
	if got := mustStatusRev(t, ctx, ec); got != rev {
		t.Errorf("etcd restored from the root serves revision %d, the root was at %d", got, rev)
	}
	st, _ := os.Stat(file)
	var size int64
	if st != nil {
		size = st.Size()
	}
	time.Sleep(3 * time.Second) // the churn on etcd
	pause := fmt.Sprintf("zketcd to etcd behind a proxy: hold to switch %v = quiet %v + etcdctl snapshot save %v (%d KiB) + etcdutl snapshot restore %v + etcd start %v; %d sockets cut",
		switched.Sub(held).Round(time.Millisecond), quieted.Sub(held).Round(time.Millisecond), saved.Sub(quieted).Round(time.Millisecond), size>>10,
		restoredAt.Sub(saved).Round(time.Millisecond), served.Sub(restoredAt).Round(time.Millisecond), cut)
	line := k.finish(held, switched, rev, pause, false)

	if got := registryAt(t, ctx, ec, preRev); !mapsEqual(got, preKeys) {
		t.Errorf("/registry at revision %d on etcd differs from zketcd's before the cut-over (%d keys, %d before)", preRev, len(got), len(preKeys))
	}
	hz, he := hashKV(t, ctx, zc, rev), hashKV(t, ctx, ec, rev)
	if hz.Hash != he.Hash || hz.CompactRevision != he.CompactRevision {
		t.Errorf("HashKV(%d): zketcd %d (compacted at %d), etcd %d (compacted at %d)", rev, hz.Hash, hz.CompactRevision, he.Hash, he.CompactRevision)
	}
	t.Logf("summary (%s, quiet %v):\n    %s\n    HashKV(%d) %d on zketcd and on etcd", k.shape(), quiet, line, rev, he.Hash)
}

// timeline lists the acknowledged writes answered within [from, to] as
// "sent→answered" offsets from at, in the order of their answers.
func (c *churn) timeline(at, from, to time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, op := range c.ops {
		if op.decided.Before(from) || op.decided.After(to) {
			continue
		}
		out = append(out, fmt.Sprintf("%+d→%+dms", op.sent.Sub(at).Milliseconds(), op.decided.Sub(at).Milliseconds()))
	}
	return strings.Join(out, " ")
}

var klogHeader = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`)

// klogWithin returns up to max lines of the klog file at path stamped
// within [from, to] (klog stamps local time without a year: from's zone
// and year are assumed).
func klogWithin(path string, from, to time.Time, max int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		m := klogHeader.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], from.Location())
		if err != nil {
			continue
		}
		at = at.AddDate(from.Year(), 0, 0)
		if at.Before(from) || at.After(to) {
			continue
		}
		if len(out) == max {
			out = append(out, "...")
			break
		}
		out = append(out, strings.TrimSpace(line))
	}
	return out
}

// probe reads one key through an etcd client every 10 ms and keeps when
// each successful read was sent and answered.
type probe struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	reads  []churnOp
}

func startProbe(t *testing.T, lab *kubelab.Lab, addr string) *probe {
	t.Helper()
	sec, err := lab.Security()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sec.ClientTLS(sec.RootCert, sec.RootKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	p := &probe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer c.Close()
		for ctx.Err() == nil {
			op := churnOp{sent: time.Now()}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.Get(rctx, "/probe-of-the-move-test")
			rcancel()
			op.decided = time.Now()
			if err == nil {
				p.mu.Lock()
				p.reads = append(p.reads, op)
				p.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *probe) stop() {
	p.cancel()
	<-p.done
}

// firstAnswerAfter returns the first successful read answered after at.
func (p *probe) firstAnswerAfter(at time.Time) (churnOp, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.reads {
		if r.decided.After(at) {
			return r, true
		}
	}
	return churnOp{}, false
}
