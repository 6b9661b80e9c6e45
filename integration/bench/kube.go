package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// The kube-apiserver stacks: real kube-apiservers (one per etcd member or
// zketcd instance they are pointed at) on a store of the deployed shape,
// driven through the Kubernetes REST API.
const (
	ServerKubeEtcd    = "kube-etcd"         // 1 kube-apiserver → a single etcd
	ServerKubeZK1     = "kube-zketcd-zk1"   // 1 kube-apiserver → 1 zketcd on a standalone ZooKeeper
	ServerKubeEtcd3   = "kube-etcd-3"       // 1 kube-apiserver → the 3 etcd members
	ServerKubeZK3     = "kube-zketcd-zk3"   // 1 kube-apiserver → 1 zketcd on a 3-member ensemble
	ServerKubeEtcd3x2 = "kube-etcd-3x2"     // 2 kube-apiservers, each → its own etcd member
	ServerKubeZK3x2   = "kube-zketcd-zk3x2" // 2 kube-apiservers, each → its own zketcd instance
	// The zketcd stacks again with --read-lease on every instance.
	ServerKubeZK3Lease   = "kube-zketcd-zk3-lease"
	ServerKubeZK3x2Lease = "kube-zketcd-zk3x2-lease"
)

// KubeStandaloneServers are the kube-apiserver stacks on single-node
// stores; KubeServers are all of them, in run order.
var KubeStandaloneServers = []string{ServerKubeEtcd, ServerKubeZK1}

// KubeServers are the kube-apiserver stacks in run order.
var KubeServers = []string{ServerKubeEtcd, ServerKubeZK1, ServerKubeEtcd3, ServerKubeZK3, ServerKubeEtcd3x2, ServerKubeZK3x2, ServerKubeZK3Lease, ServerKubeZK3x2Lease}

// kubeStack describes a kube-apiserver stack: the store it runs on and
// how many kube-apiservers.
type kubeStack struct {
	store      string
	apiservers int
	label      string
}

var kubeStacks = map[string]kubeStack{
	ServerKubeEtcd:     {ServerEtcd, 1, "kube-apiserver on etcd, 1 member"},
	ServerKubeZK1:      {ServerZK1, 1, "kube-apiserver on zketcd, ZK standalone"},
	ServerKubeEtcd3:    {ServerEtcd3, 1, "kube-apiserver on etcd, 3 members"},
	ServerKubeZK3:      {ServerZK3, 1, "kube-apiserver on zketcd, ZK 3-member"},
	ServerKubeEtcd3x2:  {ServerEtcd3, 2, "2 kube-apiservers on etcd, 3 members (one member each)"},
	ServerKubeZK3x2:    {ServerZK3x2, 2, "2 kube-apiservers on zketcd ×2, ZK 3-member (one instance each)"},
	ServerKubeZK3Lease: {ServerZK3Lease, 1, "kube-apiserver on zketcd, ZK 3-member, --read-lease"},
	ServerKubeZK3x2Lease: {ServerZK3x2Lease, 2,
		"2 kube-apiservers on zketcd ×2, ZK 3-member, --read-lease (one instance each)"},
}

func isKubeServer(s string) bool { _, ok := kubeStacks[s]; return ok }

// kubeOnEtcd tells whether s is a kube-apiserver stack on etcd.
func kubeOnEtcd(s string) bool {
	k, ok := kubeStacks[s]
	return ok && (k.store == ServerEtcd3 || k.store == ServerEtcd)
}

func kubeLabel(s string) (string, bool) { k, ok := kubeStacks[s]; return k.label, ok }

// Kube workloads. Every object is a ConfigMap (one 256 B value) or a Pod
// (one container, never scheduled), alternately.
const (
	WKubeLoad   = "kube-create-10k" // KubeObjects creates from KubeLoadClients clients
	WKubeCreate = "kube-create"
	WKubeUpdate = "kube-update"
	WKubeGet    = "kube-get"
	WKubeList   = "kube-list"
	WKubeWatch  = "kube-watch"
)

// KubeWorkloads are the kube workloads in report order.
var KubeWorkloads = []string{WKubeLoad, WKubeCreate, WKubeUpdate, WKubeGet, WKubeList, WKubeWatch}

// Namespaces of the kube workloads.
const (
	kubeNSLoad   = "zkbench-load" // the KubeObjects objects: get, update, list
	kubeNSCreate = "zkbench-create"
	kubeNSWatch  = "zkbench-watch"
	kubeListPage = 500
)

func init() {
	WorkloadDoc[WKubeLoad] = "kube-apiserver: POST of 10,000 objects (5,000 ConfigMaps with a 256 B value, 5,000 Pods) into one namespace from 16 clients; " +
		"the row gives the time for all of them (s), their rate and latency"
	WorkloadDoc[WKubeCreate] = "kube-apiserver: POST of a new ConfigMap or Pod (alternately)"
	WorkloadDoc[WKubeUpdate] = "kube-apiserver: PUT of one of the 10,000 objects with a changed label and the resourceVersion last seen (on 409 Conflict: GET, retry); " +
		"each client owns its objects"
	WorkloadDoc[WKubeGet] = "kube-apiserver: GET of one random object of the 10,000 (a quorum read of the store)"
	WorkloadDoc[WKubeList] = "kube-apiserver: LIST of the 5,000 ConfigMaps or the 5,000 Pods (alternately) in pages of 500; one op = the whole list"
	WorkloadDoc[WKubeWatch] = "kube-apiserver: commit-to-event latency; one writer POSTs ConfigMaps at the watch rate; N watchers " +
		"(spread over the kube-apiservers) watch the namespace; from the POST's start to the ADDED event's receipt"
}

// kubeObject is one object of the load namespace: its path and the body
// the apiserver last returned (for the next update).
type kubeObject struct {
	path string
	body []byte
	rev  int
}

// kubeEnv is a running stack: its clients, one per kube-apiserver.
type kubeEnv struct {
	apis    []*kubeAPI
	objects []*kubeObject // the load namespace's objects, in creation order
}

func (k *kubeEnv) api(i int) *kubeAPI { return k.apis[i%len(k.apis)] }

// kubeObjectPath returns the collection of object i (even: ConfigMaps,
// odd: Pods) in namespace ns and the body that creates it as name.
func kubeObjectPath(ns string, i int, name string) (collection string, body []byte) {
	if i%2 == 0 {
		return "/api/v1/namespaces/" + ns + "/configmaps", configMapJSON(name)
	}
	return "/api/v1/namespaces/" + ns + "/pods", podJSON(name)
}

// scanIndex parses name as prefix followed by a decimal index.
func scanIndex(name, prefix string, i *int) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	v, err := strconv.Atoi(rest)
	*i = v
	return err == nil
}

func kubeKind(i int) string {
	if i%2 == 0 {
		return "configmap"
	}
	return "pod"
}

// resolveKubeAPIServer finds the kube-apiserver binary: opts's, or the one
// integration/kube/build-kube-apiserver.sh prints (building it once).
func resolveKubeAPIServer(ctx context.Context, opts *Options) error {
	if opts.KubeAPIServerBin != "" {
		abs, err := filepath.Abs(opts.KubeAPIServerBin)
		opts.KubeAPIServerBin = abs
		return err
	}
	script := filepath.Join(opts.RepoRoot, "integration", "kube", "build-kube-apiserver.sh")
	opts.Logf("building/locating kube-apiserver: %s", script)
	out, err := scriptOutput(ctx, script)
	if err != nil {
		return fmt.Errorf("build-kube-apiserver.sh: %w", err)
	}
	opts.KubeAPIServerBin = lastLine(out)
	return nil
}

// runKube starts stack s (its store, then its kube-apiservers) and runs
// the kube workloads.
func runKube(ctx context.Context, env *Env, p *Profile, opts *Options, s string, logf func(string, ...any)) (results []Result, err error) {
	st := kubeStacks[s]
	if env.KubeAPIServer == "" {
		return nil, errors.New("no kube-apiserver binary")
	}
	start := time.Now()
	store, zk, err := startServer(ctx, env, st.store, s+"-store", logf)
	defer func() {
		if store != nil {
			err = errors.Join(err, store.Stop())
		}
		if zk != nil {
			err = errors.Join(err, zk.stop())
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", st.store, err)
	}
	logf("store %s serving on %v after %.1fs", st.store, store.Endpoints, time.Since(start).Seconds())
	dir, err := env.dir(s)
	if err != nil {
		return nil, err
	}
	lab, err := kubelab.New(dir, env.KubeAPIServer, env.ZketcdBin, nil)
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	ke := &kubeEnv{}
	defer func() {
		for _, a := range ke.apis {
			a.close()
		}
	}()
	var apiservers []*kubelab.APIServer
	for i := 0; i < st.apiservers; i++ {
		servers := "http://" + store.Endpoints[i%len(store.Endpoints)]
		if st.apiservers == 1 && len(store.Endpoints) > 1 && st.store == ServerEtcd3 {
			// One kube-apiserver on a cluster is given every member.
			servers = ""
			for j, ep := range store.Endpoints {
				if j > 0 {
					servers += ","
				}
				servers += "http://" + ep
			}
		}
		a, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: fmt.Sprintf("%d", i+1), EtcdServers: servers})
		if err != nil {
			return nil, err
		}
		apiservers = append(apiservers, a)
	}
	for _, a := range apiservers {
		took, err := a.WaitReady(ctx, 3*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("kube-apiserver %s: %w", a.Name, err)
		}
		flags, _ := kubelab.ParseFlags(a.Args)
		logf("kube-apiserver %s (--etcd-servers %s) ready after %.1fs", a.Name, flags["etcd-servers"], took.Seconds())
		ke.apis = append(ke.apis, newKubeAPI(a.Port, a.Token))
	}
	// The target's processes are the store's; the kube-apiservers' CPU
	// is counted with them.
	t := &Target{Name: s, Endpoints: store.Endpoints, Endpoint: store.Endpoint, procs: store.procs, helpers: store.helpers, zk: zk,
		metricsURLs: store.metricsURLs}
	t.extraPIDs = childrenRunning(env.KubeAPIServer)
	if len(t.extraPIDs) != len(apiservers) {
		logf("found %d kube-apiserver processes, want %d: their CPU is not counted fully", len(t.extraPIDs), len(apiservers))
	}
	if err := ke.setup(ctx); err != nil {
		return nil, err
	}
	ws := opts.selected(KubeWorkloads)
	// Every other workload works on the objects the load creates.
	r, err := ke.load(ctx, t, p)
	if err != nil {
		return nil, fmt.Errorf("create %d objects: %w", p.KubeObjects, err)
	}
	logCell(logf, r)
	results = append(results, r)
	for _, w := range ws {
		if w == WKubeLoad {
			continue
		}
		for _, c := range p.Clients {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			var r Result
			if w == WKubeWatch {
				r = ke.watchCell(ctx, t, p, c)
			} else {
				spec := ke.spec(w, c)
				spec.warmup, spec.duration = p.Warmup, p.Duration
				r = runCell(ctx, t, &pool{}, spec, "")
			}
			r.Conns = len(ke.apis)
			if err := markCrash(ctx, t, &r, logf); err != nil {
				return append(results, r), err
			}
			logCell(logf, r)
			results = append(results, r)
		}
	}
	return results, nil
}

// setup creates the namespaces and their default service accounts (no
// controller manager runs to create them; Pods need them).
func (k *kubeEnv) setup(ctx context.Context) error {
	a := k.apis[0]
	for _, ns := range []string{kubeNSLoad, kubeNSCreate, kubeNSWatch} {
		body := []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + ns + `"}}`)
		if _, err := a.do(ctx, http.MethodPost, "/api/v1/namespaces", body); err != nil && !isHTTP(err, http.StatusConflict) {
			return err
		}
		sa := []byte(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}`)
		if _, err := a.do(ctx, http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts", sa); err != nil && !isHTTP(err, http.StatusConflict) {
			return err
		}
	}
	return nil
}

// load creates p.KubeObjects objects in the load namespace from
// p.KubeLoadClients clients, spread over the apiservers, and keeps them
// for the other cells.
func (k *kubeEnv) load(ctx context.Context, t *Target, p *Profile) (Result, error) {
	n, clients := p.KubeObjects, p.KubeLoadClients
	res := Result{Server: t.Name, Workload: WKubeLoad, Clients: clients, Conns: len(k.apis)}
	k.objects = make([]*kubeObject, n)
	recs := make([]*recorder, clients)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	cpu0, self0, busy0 := totalCPU(t.pids()), selfCPU(), machineBusy()
	cost0 := sampleCost(ctx, t)
	start := time.Now()
	for w := 0; w < clients; w++ {
		rec := &recorder{}
		recs[w] = rec
		a := k.api(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				name := fmt.Sprintf("obj-%06d", i)
				coll, body := kubeObjectPath(kubeNSLoad, i, name)
				var out []byte
				var err error
				t0 := time.Now()
				for attempt := 0; attempt < 5; attempt++ {
					octx, cancel := context.WithTimeout(ctx, opTimeout)
					out, err = a.do(octx, http.MethodPost, coll, body)
					cancel()
					if err == nil || isHTTP(err, http.StatusConflict) {
						break // a conflict: an earlier attempt landed
					}
					time.Sleep(100 * time.Millisecond)
				}
				if isHTTP(err, http.StatusConflict) {
					out, err = a.do(ctx, http.MethodGet, coll+"/"+name, nil)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				rec.kind = kubeKind(i)
				rec.ok(time.Since(t0))
				rec.kind = ""
				k.objects[i] = &kubeObject{path: coll + "/" + name, body: out}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	summarize(&res, recs, secs)
	res.ServerCPUSeconds = totalCPU(t.pids()) - cpu0
	res.DriverCPUSeconds = selfCPU() - self0
	res.OtherCPUSeconds = max(0, machineBusy()-busy0-res.ServerCPUSeconds-res.DriverCPUSeconds)
	if res.Ops > 0 {
		res.ServerCPUPerOpUs = res.ServerCPUSeconds / float64(res.Ops) * 1e6
	}
	cost1 := sampleCost(ctx, t)
	addCost(&res, t, cost0, cost1)
	countRequests(&res, t, cost0, cost1)
	res.Load1 = loadAvg()[0]
	res.Extra = withExtra(res.Extra, "objects", float64(n))
	if firstErr != nil {
		res.Status, res.FirstError = "failed", firstErr.Error()
		return res, firstErr
	}
	return res, ctx.Err()
}

// spec returns the time-bounded cell of kube workload w at clients.
func (k *kubeEnv) spec(w string, clients int) cellSpec {
	cs := cellSpec{workload: w, clients: clients}
	switch w {
	case WKubeCreate:
		cs.rawWorker = func(i int) opFunc {
			a, n := k.api(i), 0
			return func(ctx context.Context, rec *recorder) error {
				coll, body := kubeObjectPath(kubeNSCreate, n, fmt.Sprintf("c%d-w%03d-%07d", clients, i, n))
				rec.kind = kubeKind(n)
				n++
				_, err := a.do(ctx, http.MethodPost, coll, body)
				return err
			}
		}
	case WKubeUpdate:
		cs.rawWorker = func(i int) opFunc {
			a := k.api(i)
			var mine []*kubeObject // worker i owns objects i, i+clients, ...
			for j := i; j < len(k.objects); j += clients {
				mine = append(mine, k.objects[j])
			}
			next := 0
			return func(ctx context.Context, rec *recorder) error {
				if len(mine) == 0 {
					return errExhausted
				}
				o := mine[next%len(mine)]
				rec.kind = kubeKind(next%len(mine)*clients + i)
				next++
				for attempt := 0; attempt < casRetries; attempt++ {
					o.rev++
					body, err := relabel(o.body, o.rev)
					if err != nil {
						return err
					}
					out, err := a.do(ctx, http.MethodPut, o.path, body)
					if err == nil {
						o.body = out
						return nil
					}
					if !isHTTP(err, http.StatusConflict) {
						return err
					}
					rec.add("conflicts", 1)
					if o.body, err = a.do(ctx, http.MethodGet, o.path, nil); err != nil {
						return err
					}
				}
				return fmt.Errorf("update %s: %d conflicts in a row", o.path, casRetries)
			}
		}
	case WKubeGet:
		cs.rawWorker = func(i int) opFunc {
			a := k.api(i)
			return func(ctx context.Context, rec *recorder) error {
				j := mrand.IntN(len(k.objects))
				rec.kind = kubeKind(j)
				_, err := a.do(ctx, http.MethodGet, k.objects[j].path, nil)
				return err
			}
		}
	case WKubeList:
		cs.rawWorker = func(i int) opFunc {
			a, n := k.api(i), i
			return func(ctx context.Context, rec *recorder) error {
				coll, _ := kubeObjectPath(kubeNSLoad, n, "")
				rec.kind = kubeKind(n)
				want := (len(k.objects) + 1) / 2 // ConfigMaps: the even objects
				if n%2 == 1 {
					want = len(k.objects) / 2
				}
				n++
				items, pages, err := a.list(ctx, coll, kubeListPage)
				if err != nil {
					return err
				}
				if items != want {
					return fmt.Errorf("list %s: %d items, want %d", coll, items, want)
				}
				rec.add("pages", float64(pages))
				rec.add("items", float64(items))
				return nil
			}
		}
	}
	return cs
}

// watchCell measures commit-to-event latency through the apiservers:
// watchers watches on the watch namespace (spread over the apiservers),
// one writer POSTs ConfigMaps at p.WatchRate through the first; a sample
// is the time from the POST's start to a watcher's receipt of the ADDED
// event, for every (object, watcher) pair of the measured window. Events
// that do not arrive within 5 s after the last POST count as errors.
func (k *kubeEnv) watchCell(ctx context.Context, t *Target, p *Profile, watchers int) Result {
	res := Result{Server: t.Name, Workload: WKubeWatch, Clients: watchers}
	fail := func(err error) Result {
		res.Status, res.FirstError = "failed", err.Error()
		return res
	}
	coll := "/api/v1/namespaces/" + kubeNSWatch + "/configmaps"
	b, err := k.apis[0].do(ctx, http.MethodGet, coll+"?limit=1", nil)
	if err != nil {
		return fail(err)
	}
	var l kubeMeta
	if err := json.Unmarshal(b, &l); err != nil {
		return fail(err)
	}
	prefix := fmt.Sprintf("w%d-", watchers)
	total := int(float64(p.WatchRate)*(p.Warmup+p.Duration).Seconds()) + 1
	firstMeasured := int(float64(p.WatchRate) * p.Warmup.Seconds())
	starts := make([]atomic.Int64, total)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lats := make([][]float64, watchers)
	got := make([]atomic.Int64, watchers)
	var wg sync.WaitGroup
	var werr atomic.Value
	for w := 0; w < watchers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := k.api(w).watch(wctx, coll, l.Metadata.ResourceVersion, func(typ, name string, at time.Time) {
				var i int
				if typ != "ADDED" || !scanIndex(name, prefix, &i) || i >= total {
					return
				}
				got[w].Add(1)
				if s := starts[i].Load(); s != 0 && i >= firstMeasured {
					lats[w] = append(lats[w], float64(at.UnixNano()-s)/1e6)
				}
			})
			if err != nil {
				werr.CompareAndSwap(nil, err)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the watches open
	cpu0, self0, busy0 := totalCPU(t.pids()), selfCPU(), machineBusy()
	interval := time.Second / time.Duration(max(p.WatchRate, 1))
	began := time.Now()
	var writeErrs int64
	var firstWriteErr error
	for i := 0; i < total && ctx.Err() == nil; i++ {
		time.Sleep(time.Until(began.Add(time.Duration(i) * interval)))
		starts[i].Store(time.Now().UnixNano())
		octx, ocancel := context.WithTimeout(ctx, opTimeout)
		_, err := k.apis[0].do(octx, http.MethodPost, coll, configMapJSON(fmt.Sprintf("%s%07d", prefix, i)))
		ocancel()
		if err != nil {
			writeErrs++
			if firstWriteErr == nil {
				firstWriteErr = err
			}
		}
	}
	wrote := time.Since(began.Add(p.Warmup)).Seconds()
	want := int64(total) - writeErrs
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		done := true
		for w := range got {
			if got[w].Load() < want {
				done = false
			}
		}
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.ServerCPUSeconds = totalCPU(t.pids()) - cpu0
	res.DriverCPUSeconds = selfCPU() - self0
	res.OtherCPUSeconds = max(0, machineBusy()-busy0-res.ServerCPUSeconds-res.DriverCPUSeconds)
	cancel()
	wg.Wait()
	var all []float64
	var missed int64
	for w := range lats {
		all = append(all, lats[w]...)
		missed += max(0, want-got[w].Load())
	}
	rec := &recorder{}
	for _, v := range all {
		rec.ok(time.Duration(v * float64(time.Millisecond)))
	}
	summarize(&res, []*recorder{rec}, max(wrote, 1e-3))
	res.Errors = missed + writeErrs
	switch {
	case firstWriteErr != nil:
		res.FirstError = firstWriteErr.Error()
	case missed > 0:
		res.FirstError = fmt.Sprintf("%d events not received within 5 s", missed)
	}
	if e, ok := werr.Load().(error); ok && res.FirstError == "" {
		res.FirstError = e.Error()
	}
	if res.Ops > 0 {
		res.ServerCPUPerOpUs = res.ServerCPUSeconds / float64(res.Ops) * 1e6
	}
	res.Load1 = loadAvg()[0]
	res.Note = fmt.Sprintf("writer %d POST/s", p.WatchRate)
	return res
}
