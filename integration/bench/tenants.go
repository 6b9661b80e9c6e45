package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// The tenants benchmark (issue 35, `make bench-tenants`): many tenants on
// one zketcd fleet (`zketcd serve --tenants` instances on a 3-member
// ZooKeeper ensemble, a client certificate per tenant), each loaded with
// kube-like objects (integration/kubedata) and then churned with a watch
// per tenant; memory per tenant, per object and per byte, ZooKeeper's
// sessions, connections and znodes, committers per instance, idle tenants'
// cost. The same data on one etcd 3.7.3 holding one tenant's worth and on
// one shared 3-member etcd in Kamaji's layout (/<tenant>/registry/...).
// Then the isolation: a quiet tenant's put and linearizable get latency
// alone, beside a neighbour flooding at its request limit (on the quiet
// tenant's ZooKeeper session and on another), and beside one flooding with
// no limit.

// The stacks of the tenants benchmark.
const (
	TenantsFleet      = "fleet"
	TenantsEtcdOne    = "etcd-one"
	TenantsEtcdShared = "etcd-shared"
)

// TenantsOptions configure RunTenants. Zero fields take the defaults
// (setDefaults).
type TenantsOptions struct {
	// Tenants is how many tenants (default 100), Objects the kube-like
	// objects each is loaded with (default 500).
	Tenants, Objects int
	// Instances is the fleet's zketcd processes (default 2), ZKMembers
	// its ensemble's size (default 3), ZKHeap each JVM's -Xmx (default
	// "2g", starting small).
	Instances, ZKMembers int
	ZKHeap               string
	// Sessions is --tenant-zk-sessions (0: zketcd's default).
	Sessions int
	// LoadClients load the objects (default 64 goroutines).
	LoadClients int
	// ChurnRate is the churn's operations a second over all tenants
	// (default 300), ChurnFor its length (default 2 min), from
	// ChurnWorkers goroutines (default 64).
	ChurnRate    float64
	ChurnFor     time.Duration
	ChurnWorkers int
	// Settle is the quiet time before each sample, over which CPU and
	// ZooKeeper's requests are measured (default 5 s).
	Settle time.Duration
	// Isolation configures the noisy-neighbour measurement (Rounds 0
	// skips it).
	Isolation IsolationOptions
	// Stacks to measure (default all three, in order).
	Stacks []string
	Seed   uint64

	RepoRoot, EtcdBin, ZketcdBin string
	// DataDir receives tenants.json, tenants.md and the plots;
	// MarkdownPath, if set, gets the section spliced in.
	DataDir, MarkdownPath string
	// WorkDir holds the servers' data and logs ("": a new temporary
	// directory, removed at the end unless KeepWorkDir).
	WorkDir     string
	KeepWorkDir bool
	// ZketcdArgs are more flags for every fleet instance.
	ZketcdArgs []string
	// Command is the command line, for the report.
	Command string
	Logf    func(format string, args ...any)
}

// IsolationOptions configure the noisy-neighbour measurement.
type IsolationOptions struct {
	// Rounds of the phases (default 3): the phases alternate round by
	// round, so that the machine's own drift falls on each alike.
	Rounds int
	// Phase is each phase's length in a round (default 20 s).
	Phase time.Duration
	// QuietRate is the quiet tenant's operations a second from its one
	// client, puts and linearizable gets in turn (default 40).
	QuietRate float64
	// FloodClients are the flooding neighbour's goroutines (default 32),
	// FloodLimit its --requests-per-second in the limited phases (default
	// 200).
	FloodClients int
	FloodLimit   int64
}

func (o *TenantsOptions) setDefaults() {
	if o.Tenants <= 0 {
		o.Tenants = 100
	}
	if o.Objects <= 0 {
		o.Objects = 500
	}
	if o.Instances <= 0 {
		o.Instances = 2
	}
	if o.ZKMembers <= 0 {
		o.ZKMembers = 3
	}
	if o.ZKHeap == "" {
		o.ZKHeap = "2g"
	}
	if o.LoadClients <= 0 {
		o.LoadClients = 64
	}
	if o.ChurnRate <= 0 {
		o.ChurnRate = 300
	}
	if o.ChurnFor <= 0 {
		o.ChurnFor = 2 * time.Minute
	}
	if o.ChurnWorkers <= 0 {
		o.ChurnWorkers = 64
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
	if o.Isolation.Phase <= 0 {
		o.Isolation.Phase = 20 * time.Second
	}
	if o.Isolation.QuietRate <= 0 {
		o.Isolation.QuietRate = 40
	}
	if o.Isolation.FloodClients <= 0 {
		o.Isolation.FloodClients = 32
	}
	if o.Isolation.FloodLimit <= 0 {
		o.Isolation.FloodLimit = 200
	}
	if len(o.Stacks) == 0 {
		o.Stacks = []string{TenantsFleet, TenantsEtcdOne, TenantsEtcdShared}
	}
	if o.Seed == 0 {
		o.Seed = 35
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// TenantsReport is a run of the tenants benchmark.
type TenantsReport struct {
	Machine  Machine         `json:"machine"`
	Date     string          `json:"date"`
	Build    string          `json:"build"`
	Command  string          `json:"command,omitempty"`
	Settings TenantsSettings `json:"settings"`
	Mix      []MixShare      `json:"mix"`
	// Stacks are the stacks measured, in run order.
	Stacks    []TenantsStack   `json:"stacks"`
	Isolation *IsolationResult `json:"isolation,omitempty"`
	Elapsed   float64          `json:"elapsed_s"`
}

// TenantsSettings are the run's parameters, as the report states them.
type TenantsSettings struct {
	Tenants         int      `json:"tenants"`
	Objects         int      `json:"objects_per_tenant"`
	Instances       int      `json:"instances"`
	ZKMembers       int      `json:"zk_members"`
	ZKHeap          string   `json:"zk_heap"`
	Sessions        int      `json:"tenant_zk_sessions,omitempty"`
	LoadClients     int      `json:"load_clients"`
	ChurnRate       float64  `json:"churn_rate"`
	ChurnSeconds    float64  `json:"churn_s"`
	SettleSeconds   float64  `json:"settle_s"`
	IsolationRounds int      `json:"isolation_rounds"`
	IsolationPhaseS float64  `json:"isolation_phase_s"`
	QuietRate       float64  `json:"quiet_rate"`
	FloodClients    int      `json:"flood_clients"`
	FloodLimit      int64    `json:"flood_limit"`
	ZketcdArgs      []string `json:"zketcd_args,omitempty"`
}

// TenantsStack is one stack's run: its samples of memory and ZooKeeper
// along the steps, the load and the churn.
type TenantsStack struct {
	Stack string `json:"stack"`
	// Tenants it held (1 for etcd-one).
	Tenants int             `json:"tenants"`
	Samples []TenantsSample `json:"samples"`
	LoadS   float64         `json:"load_s"`
	Loaded  int64           `json:"loaded_bytes"`
	Churn   *ChurnResult    `json:"churn,omitempty"`
	// StartMs are the fleet's tenant engine starts: the first request of
	// each tenant on its first instance (p50, p99, max in ms).
	StartMs []float64 `json:"start_ms,omitempty"`
	Errors  []string  `json:"errors,omitempty"`
	Notes   []string  `json:"notes,omitempty"`
}

// The steps at which a stack is sampled.
const (
	StepEmpty  = "started, no tenant"
	StepIdle   = "tenants started, empty"
	StepLoaded = "loaded"
	StepChurn  = "after the churn"
)

// TenantsSample is a stack's state after a step.
type TenantsSample struct {
	Step string `json:"step"`
	// Tenants running, Objects and DataBytes (keys and values) live.
	Tenants   int          `json:"tenants"`
	Objects   int          `json:"objects"`
	DataBytes int64        `json:"data_bytes"`
	Procs     []ProcSample `json:"procs"`
	ZK        []ZKSample   `json:"zk,omitempty"`
	// ZKRequests is the requests a second ZooKeeper's servers received
	// over the TenantsOptions.Settle before the sample.
	ZKRequests float64 `json:"zk_requests_per_s,omitempty"`
}

// ProcSample is one etcd-API process (a fleet instance, an etcd member).
type ProcSample struct {
	Name string `json:"name"`
	RSS  int64  `json:"rss"`
	// HeapInuse is the Go heap in use after a forced collection (fleet
	// instances; pprof's heap?gc=1).
	HeapInuse  int64 `json:"heap_inuse,omitempty"`
	Goroutines int   `json:"goroutines,omitempty"`
	// ZKConns are its established connections to ZooKeeper, ZKSessions
	// the sessions its tenants' member znodes belong to.
	ZKConns    int `json:"zk_conns,omitempty"`
	ZKSessions int `json:"zk_sessions,omitempty"`
	// Leaders are the tenants it commits for (etcd_server_is_leader 1),
	// Running those whose engines run on it.
	Leaders int `json:"leaders,omitempty"`
	Running int `json:"running,omitempty"`
	// DBSize is an etcd member's database size.
	DBSize int64 `json:"db_size,omitempty"`
	// CPU is the cores it used over the quiet TenantsOptions.Settle
	// before the sample.
	CPU float64 `json:"cpu_cores"`
}

// cpuWindow measures the CPU of pids and of zk's servers (if not nil)
// over window (sleeping it), in cores each, and the requests a second zk
// received.
func cpuWindow(ctx context.Context, window time.Duration, pids []int, zk *zkCluster) (cores, zkCores []float64, zkReqs float64) {
	all := append([]int(nil), pids...)
	if zk != nil {
		for _, srv := range zkServers(zk) {
			all = append(all, srv.PID())
		}
	}
	before := make([]float64, len(all))
	for i, p := range all {
		before[i] = cpuSeconds0(p)
	}
	var pk0 float64
	if zk != nil {
		pk0 = zkPackets(ctx, zk)
	}
	start := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
	}
	secs := time.Since(start).Seconds()
	for i, p := range all {
		c := (cpuSeconds0(p) - before[i]) / secs
		if i < len(pids) {
			cores = append(cores, c)
		} else {
			zkCores = append(zkCores, c)
		}
	}
	if zk != nil {
		zkReqs = (zkPackets(ctx, zk) - pk0) / secs
	}
	return cores, zkCores, zkReqs
}

// ZKSample is one ZooKeeper server's mntr and RSS.
type ZKSample struct {
	Name string `json:"name"`
	// CPU is the cores the server used over the TenantsOptions.Settle
	// before the sample.
	CPU        float64 `json:"cpu_cores"`
	Mode       string  `json:"mode"`
	RSS        int64   `json:"rss"`
	Conns      int64   `json:"conns"`
	Znodes     int64   `json:"znodes"`
	DataSize   int64   `json:"data_size"`
	Watches    int64   `json:"watches"`
	Ephemerals int64   `json:"ephemerals"`
}

// RunTenants runs the tenants benchmark and writes its report.
func RunTenants(ctx context.Context, opts TenantsOptions) (*TenantsReport, error) {
	opts.setDefaults()
	began := time.Now()
	rep := &TenantsReport{Machine: DescribeMachine(), Date: began.UTC().Format(time.RFC3339), Build: repoBuild(ctx, opts.RepoRoot), Command: opts.Command,
		Settings: TenantsSettings{Tenants: opts.Tenants, Objects: opts.Objects, Instances: opts.Instances, ZKMembers: opts.ZKMembers,
			ZKHeap: opts.ZKHeap, Sessions: opts.Sessions, LoadClients: opts.LoadClients, ChurnRate: opts.ChurnRate,
			ChurnSeconds: opts.ChurnFor.Seconds(), SettleSeconds: opts.Settle.Seconds(), IsolationRounds: opts.Isolation.Rounds, IsolationPhaseS: opts.Isolation.Phase.Seconds(),
			QuietRate: opts.Isolation.QuietRate, FloodClients: opts.Isolation.FloodClients, FloodLimit: opts.Isolation.FloodLimit,
			ZketcdArgs: opts.ZketcdArgs},
		Mix: describeMix(opts.Seed)}
	work := opts.WorkDir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "zktenants-"); err != nil {
			return nil, err
		}
		if opts.KeepWorkDir {
			opts.Logf("work dir %s (kept)", work)
		} else {
			defer os.RemoveAll(work)
		}
	}
	servers := []string{}
	if slices.Contains(opts.Stacks, TenantsEtcdOne) || slices.Contains(opts.Stacks, TenantsEtcdShared) {
		servers = append(servers, ServerEtcd3)
	}
	if slices.Contains(opts.Stacks, TenantsFleet) {
		servers = append(servers, ServerZK3)
	}
	bopts := Options{RepoRoot: opts.RepoRoot, EtcdBin: opts.EtcdBin, ZketcdBin: opts.ZketcdBin, BenchmarkBin: "none",
		Logf: opts.Logf, Servers: servers}
	env := &Env{WorkDir: work, ZKHeap: opts.ZKHeap, ZKHeapMin: "64m", Log: quietLogger()}
	if err := resolveBinaries(ctx, &bopts, env); err != nil {
		return nil, err
	}
	env.ZketcdBin = bopts.ZketcdBin
	for _, stack := range opts.Stacks {
		if ctx.Err() != nil {
			break
		}
		opts.Logf("tenants: %s", stack)
		dir := filepath.Join(work, stack)
		var st TenantsStack
		var iso *IsolationResult
		switch stack {
		case TenantsFleet:
			st, iso = runFleetStack(ctx, env, &opts, dir)
		case TenantsEtcdOne, TenantsEtcdShared:
			st = runEtcdStack(ctx, env, &opts, stack, dir)
		default:
			return rep, fmt.Errorf("unknown stack %q", stack)
		}
		for _, e := range st.Errors {
			opts.Logf("tenants: %s: %s", stack, e)
		}
		rep.Stacks = append(rep.Stacks, st)
		if iso != nil {
			rep.Isolation = iso
		}
		rep.Elapsed = time.Since(began).Seconds()
		rep.Machine.LoadEnd = loadAvg()
		if err := rep.write(opts); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

// tenantNames are the tenants' names: t000, t001, ...
func tenantNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t%03d", i)
	}
	return out
}

// runFleetStack measures the fleet: started with no tenant, with every
// tenant started empty, loaded, after the churn; then the isolation.
func runFleetStack(ctx context.Context, env *Env, opts *TenantsOptions, dir string) (st TenantsStack, iso *IsolationResult) {
	st = TenantsStack{Stack: TenantsFleet, Tenants: opts.Tenants}
	fail := func(step string, err error) (TenantsStack, *IsolationResult) {
		st.Errors = append(st.Errors, fmt.Sprintf("%s: %v", step, err))
		return st, iso
	}
	logf := opts.Logf
	sub := *env
	sub.WorkDir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("start", err)
	}
	zkc, err := sub.StartZooKeeper(ctx, "zk", opts.ZKMembers)
	if err != nil {
		return fail("start ZooKeeper", err)
	}
	defer func() {
		if err := zkc.stop(); err != nil {
			st.Errors = append(st.Errors, "stop ZooKeeper: "+err.Error())
		}
	}()
	sec, err := kubelab.NewSecurity(filepath.Join(dir, "pki"))
	if err != nil {
		return fail("certificates", err)
	}
	extra := slices.Clone(opts.ZketcdArgs)
	if opts.Sessions > 0 {
		extra = append(extra, "--tenant-zk-sessions", strconv.Itoa(opts.Sessions))
	}
	f, err := startTenantFleet(ctx, &sub, zkc, sec, dir, opts.Instances, extra)
	if err != nil {
		return fail("start the fleet", err)
	}
	defer func() {
		if err := f.stop(); err != nil {
			st.Errors = append(st.Errors, "stop the fleet: "+err.Error())
		}
	}()
	names := tenantNames(opts.Tenants)
	start := time.Now()
	if err := f.createTenants(ctx, names); err != nil {
		return fail("zketcd tenant create", err)
	}
	logf("tenants: created %d tenants with zketcd tenant create in %.1fs", len(names), time.Since(start).Seconds())
	st.Samples = append(st.Samples, f.sample(ctx, opts.Settle, StepEmpty, names, nil))

	// Every tenant started on every instance: its first request through a
	// client of all the instances (as kube-apiserver's --etcd-servers),
	// then one on each instance.
	ts := make([]*benchTenant, len(names))
	addrs := make([]string, len(f.instances))
	for i, in := range f.instances {
		addrs[i] = in.addr
	}
	starts := make([]float64, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make([]error, len(names))
	for i, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cfg, err := tenantTLS(sec, n)
			if err != nil {
				errs[i] = err
				return
			}
			c, err := tenantClient(cfg, addrs...)
			if err != nil {
				errs[i] = err
				return
			}
			ts[i] = newBenchTenant(n, "", c, opts.Seed+uint64(i))
			t0 := time.Now()
			if _, err := c.Get(ctx, "/bench/start"); err != nil {
				errs[i] = fmt.Errorf("%s: first request: %w", n, err)
				return
			}
			starts[i] = float64(time.Since(t0)) / float64(time.Millisecond)
			for _, a := range addrs {
				one, err := tenantClient(cfg, a)
				if err != nil {
					errs[i] = err
					return
				}
				_, err = one.Get(ctx, "/bench/start", clientv3.WithSerializable())
				one.Close()
				if err != nil {
					errs[i] = fmt.Errorf("%s on %s: %w", n, a, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, t := range ts {
			if t != nil {
				t.c.Close()
			}
		}
	}()
	for _, err := range errs {
		if err != nil {
			return fail("start the tenants", err)
		}
	}
	sort.Float64s(starts)
	st.StartMs = []float64{Percentile(starts, 50), Percentile(starts, 99), starts[len(starts)-1]}
	logf("tenants: %d tenants started on %d instances in %.1fs (first request p50 %.0f ms, p99 %.0f ms)",
		len(names), len(f.instances), time.Since(start).Seconds(), st.StartMs[0], st.StartMs[1])
	st.Samples = append(st.Samples, f.sample(ctx, opts.Settle, StepIdle, names, ts))

	start = time.Now()
	loaded, err := loadTenants(ctx, ts, opts.Objects, opts.LoadClients)
	if err != nil {
		return fail("load", err)
	}
	st.LoadS, st.Loaded = time.Since(start).Seconds(), loaded
	logf("tenants: loaded %d objects (%.0f MB) into %d tenants in %.1fs", opts.Objects*len(ts), mb(loaded), len(ts), st.LoadS)
	st.Samples = append(st.Samples, f.sample(ctx, opts.Settle, StepLoaded, names, ts))

	if err := grantTenantLeases(ctx, ts); err != nil {
		return fail("leases", err)
	}
	resetWriteCounts(ts)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	startWatches(wctx, ts)
	time.Sleep(time.Second)
	cs := churn(ctx, ts, opts.ChurnFor, opts.ChurnRate, opts.ChurnWorkers, opts.Seed)
	res := settleWatches(ts, cs, opts.ChurnFor, opts.ChurnRate, 30*time.Second)
	st.Churn = &res
	logf("tenants: churn of %.0fs at %.0f/s: %d writes, %d events seen by the watches", opts.ChurnFor.Seconds(), opts.ChurnRate, res.Writes, res.Events)
	st.Samples = append(st.Samples, f.sample(ctx, opts.Settle, StepChurn, names, ts))

	if opts.Isolation.Rounds > 0 {
		iso = runIsolation(ctx, f, sec, names, opts)
	}
	wcancel()
	return st, iso
}

// sample records the fleet's state after step: every instance's memory,
// goroutines, ZooKeeper connections and sessions, leaders and running
// tenants; every ZooKeeper server's mntr.
func (f *tenantFleet) sample(ctx context.Context, settle time.Duration, step string, names []string, ts []*benchTenant) TenantsSample {
	s := TenantsSample{Step: step}
	cores, zkCores, zkReqs := cpuWindow(ctx, settle, f.pids(), f.zk)
	s.ZKRequests = zkReqs
	for _, t := range ts {
		if t == nil {
			continue
		}
		b, n := t.liveBytes()
		s.DataBytes += b
		s.Objects += n
	}
	ports := zkPorts(f.zk)
	perInstance, _, _ := tenantSessions(f.zk, names)
	for i, in := range f.instances {
		_ = in.forceGC(ctx)
		ps := ProcSample{Name: in.name, CPU: cores[i]}
		ps.RSS, _ = rssBytes(in.p.pid())
		ps.ZKConns, _ = zkConnections(in.p.pid(), ports)
		ps.ZKSessions = len(perInstance[in.name])
		ms, err := scrapeSamples(ctx, "http://"+in.metricsAddr+"/metrics",
			"go_memstats_heap_inuse_bytes", "go_goroutines", "etcd_server_is_leader", "zketcd_fleet_tenants_running")
		if err == nil {
			for _, m := range ms {
				switch m.name {
				case "go_memstats_heap_inuse_bytes":
					if m.labels["tenant"] == "" {
						ps.HeapInuse = int64(m.value)
					}
				case "go_goroutines":
					if m.labels["tenant"] == "" {
						ps.Goroutines = int(m.value)
					}
				case "etcd_server_is_leader":
					if m.value == 1 {
						ps.Leaders++
					}
				case "zketcd_fleet_tenants_running":
					ps.Running = int(m.value)
				}
			}
		}
		s.Procs = append(s.Procs, ps)
		s.Tenants = max(s.Tenants, ps.Running)
	}
	s.ZK = sampleZK(ctx, f.zk)
	for i := range s.ZK {
		if i < len(zkCores) {
			s.ZK[i].CPU = zkCores[i]
		}
	}
	return s
}

// sampleZK reads every ZooKeeper server's mntr and RSS.
func sampleZK(ctx context.Context, z *zkCluster) []ZKSample {
	var out []ZKSample
	servers := zkServers(z)
	for i, srv := range servers {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		vals, err := srv.Monitor(mctx)
		cancel()
		zs := ZKSample{Name: fmt.Sprintf("zk-%d", i+1)}
		if pid := srv.PID(); pid > 0 {
			zs.RSS, _ = rssBytes(pid)
		}
		if err == nil {
			num := func(k string) int64 { v, _ := strconv.ParseInt(vals[k], 10, 64); return v }
			zs.Mode = vals["zk_server_state"]
			zs.Conns, zs.Znodes, zs.DataSize = num("zk_num_alive_connections"), num("zk_znode_count"), num("zk_approximate_data_size")
			zs.Watches, zs.Ephemerals = num("zk_watch_count"), num("zk_ephemerals_count")
		}
		out = append(out, zs)
	}
	return out
}

// runEtcdStack measures etcd 3.7.3: etcd-one is one member holding one
// tenant's worth (the first tenant's objects, a hundredth of the churn);
// etcd-shared is a 3-member cluster holding every tenant under its own
// prefix (Kamaji's --etcd-prefix=/<tenant>), a client per tenant.
func runEtcdStack(ctx context.Context, env *Env, opts *TenantsOptions, stack, dir string) (st TenantsStack) {
	n := opts.Tenants
	members := 3
	if stack == TenantsEtcdOne {
		n, members = 1, 1
	}
	st = TenantsStack{Stack: stack, Tenants: n}
	fail := func(step string, err error) TenantsStack {
		st.Errors = append(st.Errors, fmt.Sprintf("%s: %v", step, err))
		return st
	}
	sub := *env
	sub.WorkDir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("start", err)
	}
	t, err := sub.StartEtcdCluster(ctx, "etcd", members)
	if err != nil {
		return fail("start etcd", err)
	}
	defer func() {
		if err := t.Stop(); err != nil {
			st.Errors = append(st.Errors, "stop etcd: "+err.Error())
		}
	}()
	names := tenantNames(n)
	ts := make([]*benchTenant, n)
	for i, name := range names {
		c, err := clientv3.New(clientv3.Config{Endpoints: t.Endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), MaxCallRecvMsgSize: 64 << 20})
		if err != nil {
			return fail("client", err)
		}
		defer c.Close()
		prefix := "/" + name
		if stack == TenantsEtcdOne {
			prefix = ""
		}
		ts[i] = newBenchTenant(name, prefix, c, opts.Seed+uint64(i))
	}
	pids := make([]int, len(t.procs))
	for i, p := range t.procs {
		pids[i] = p.pid()
	}
	sample := func(step string) {
		s := TenantsSample{Step: step, Tenants: n}
		cores, _, _ := cpuWindow(ctx, opts.Settle, pids, nil)
		for _, bt := range ts {
			b, k := bt.liveBytes()
			s.DataBytes += b
			s.Objects += k
		}
		for i, p := range t.procs {
			ps := ProcSample{Name: fmt.Sprintf("etcd-%d", i+1), CPU: cores[i]}
			ps.RSS, _ = rssBytes(p.pid())
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if r, err := ts[0].c.Status(sctx, t.Endpoints[i]); err == nil {
				ps.DBSize = r.DbSize
				if r.Leader == r.Header.MemberId {
					ps.Leaders = 1
				}
			}
			cancel()
			s.Procs = append(s.Procs, ps)
		}
		st.Samples = append(st.Samples, s)
	}
	sample(StepEmpty)
	start := time.Now()
	loaded, err := loadTenants(ctx, ts, opts.Objects, opts.LoadClients)
	if err != nil {
		return fail("load", err)
	}
	st.LoadS, st.Loaded = time.Since(start).Seconds(), loaded
	opts.Logf("tenants: %s: loaded %d objects (%.0f MB) in %.1fs", stack, opts.Objects*n, mb(loaded), st.LoadS)
	sample(StepLoaded)
	if err := grantTenantLeases(ctx, ts); err != nil {
		return fail("leases", err)
	}
	resetWriteCounts(ts)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	startWatches(wctx, ts)
	time.Sleep(time.Second)
	rate := opts.ChurnRate * float64(n) / float64(opts.Tenants)
	cs := churn(ctx, ts, opts.ChurnFor, rate, max(1, opts.ChurnWorkers*n/opts.Tenants), opts.Seed)
	res := settleWatches(ts, cs, opts.ChurnFor, rate, 30*time.Second)
	st.Churn = &res
	sample(StepChurn)
	return st
}
