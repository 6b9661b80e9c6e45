package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Profile sets the size of a run.
type Profile struct {
	Name     string        `json:"name"`
	Warmup   time.Duration `json:"warmup"`
	Duration time.Duration `json:"duration"`
	Clients  []int         `json:"clients"`
	// MaxConns caps the connections of a cell: worker i uses connection
	// i mod min(clients, MaxConns).
	MaxConns     int   `json:"max_conns"`
	Watchers     []int `json:"watchers"`
	WatchRate    int   `json:"watch_rate"`
	MixWatchers  int   `json:"mix_watchers"`
	KVKeys       int   `json:"kv_keys"`
	RecoveryKeys []int `json:"recovery_keys"`
	// ToolClients is no longer used: etcd's benchmark tool runs at every
	// client count of Clients (kept so older results.json files load).
	ToolClients int    `json:"tool_clients,omitempty"`
	ZKHeap      string `json:"zk_heap"`
	// KubeObjects objects are created through kube-apiserver by
	// KubeLoadClients clients (kube-create-10k) and then read, updated
	// and listed.
	KubeObjects     int `json:"kube_objects,omitempty"`
	KubeLoadClients int `json:"kube_load_clients,omitempty"`
	// KeepaliveLeases leases are kept alive on the deployed-shape servers.
	KeepaliveLeases int `json:"keepalive_leases,omitempty"`
	// FloorEntryBytes is the size of the floor's log entries (0:
	// zkfloor.EntrySize, that of a 256 B put).
	FloorEntryBytes int `json:"floor_entry_bytes,omitempty"`
}

// MakeTarget names the make target that runs the profile.
func (p Profile) MakeTarget() string {
	switch p.Name {
	case "quick":
		return "`make bench`"
	case "long":
		return "`make bench-long`"
	}
	return "`zkbench` (custom profile " + p.Name + ")"
}

// Profiles are the predefined run sizes.
var Profiles = map[string]Profile{
	// quick: every server × workload in under 20 minutes on 2 cores.
	"quick": {
		Name: "quick", Warmup: time.Second, Duration: 4 * time.Second, Clients: []int{1, 16, 64},
		MaxConns: 16, Watchers: []int{1, 100}, WatchRate: 100, MixWatchers: 10, KVKeys: 10000,
		RecoveryKeys: []int{100000}, ZKHeap: "1g", KubeObjects: 10000, KubeLoadClients: 16,
		KeepaliveLeases: 10000,
	},
	// long: longer cells and recovery over 1M keys as well.
	"long": {
		Name: "long", Warmup: 3 * time.Second, Duration: 20 * time.Second, Clients: []int{1, 16, 64},
		MaxConns: 16, Watchers: []int{1, 100}, WatchRate: 100, MixWatchers: 10, KVKeys: 10000,
		RecoveryKeys: []int{100000, 1000000}, ZKHeap: "4g", KubeObjects: 10000, KubeLoadClients: 16,
		KeepaliveLeases: 10000,
	},
}

// Options configure a run.
type Options struct {
	Profile   Profile
	Servers   []string // default AllServers
	Workloads []string // default: all (AllWorkloads, watch, tool, recovery)
	// MarkdownPath and DataDir receive the report; empty: not written.
	MarkdownPath, DataDir string
	RepoRoot              string // the zketcd repository (for build-peers.sh and building zketcd)
	EtcdBin, KineBin      string // default: build-peers.sh
	KubeAPIServerBin      string // default: integration/kube/build-kube-apiserver.sh (for the kube stacks)
	PGBinDir              string // PostgreSQL's binaries (kine-pg); default: the newest /usr/lib/postgresql/*/bin
	// BaselinePath is an earlier results.json (read before this run
	// overwrites it) whose standalone zketcd rows the targets compare with.
	BaselinePath string
	BenchmarkBin string // default: build-peers.sh; "none" skips the cross-check
	ZketcdBin    string // default: go build ./cmd/zketcd into the work dir
	SelfBin      string // the harness binary (pprof child)
	PprofDir     string // if set, zketcd runs in the pprof child and each cell is profiled
	KeepWorkDir  bool
	// ZketcdArgs are more flags for every zketcd server (-zketcd-args).
	ZketcdArgs []string
	// ZKJVMFlags (nil: ZKDefaultJVMFlags), ZKConfig and ZKProps set the
	// ZooKeeper servers' JVM flags besides the heap, more zoo.cfg lines and
	// system properties (-zk-jvm, -zk-cfg, -zk-props); ZKJFRDir records
	// flight recordings of them per cell (-zk-jfr); ZKRequestLog counts
	// their requests by type and path (-zk-request-log). See Env.
	ZKJVMFlags        []string
	ZKConfig, ZKProps map[string]string
	ZKJFRDir          string
	ZKRequestLog      bool
	Logf              func(format string, args ...any)
}

func (o *Options) wants(w string) bool {
	return len(o.Workloads) == 0 || slices.Contains(o.Workloads, w)
}

// wantsTool tells whether the run uses etcd's benchmark tool: its
// cross-check cells or a variant of tool-put named in Workloads.
func (o *Options) wantsTool() bool {
	return o.wants(WToolPut) || slices.ContainsFunc(ToolVariants, func(w string) bool { return slices.Contains(o.Workloads, w) })
}

// selected returns the workloads of ws the run asks for: those named in
// opts.Workloads, or all of ws when none of them is named (a server with
// workloads of its own, such as the ZooKeeper floor, runs them all unless
// told which).
func (o *Options) selected(ws []string) []string {
	var out []string
	for _, w := range ws {
		if len(o.Workloads) == 0 || slices.Contains(o.Workloads, w) {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return ws
	}
	return out
}

// Run measures every server of opts and writes the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if len(opts.Servers) == 0 {
		opts.Servers = AllServers
	}
	opts.Servers = ExpandServers(opts.Servers)
	began := time.Now()
	rep := &Report{Machine: DescribeMachine(), Profile: opts.Profile}
	if opts.BaselinePath != "" {
		old, err := LoadReport(opts.BaselinePath)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		rep.SetBaseline(old)
	}
	work, err := os.MkdirTemp("", "zkbench-")
	if err != nil {
		return nil, err
	}
	if opts.KeepWorkDir {
		opts.Logf("work dir %s (kept)", work)
	} else {
		defer os.RemoveAll(work)
	}
	env := &Env{WorkDir: work, ZKHeap: opts.Profile.ZKHeap, SelfBin: opts.SelfBin, PprofChild: opts.PprofDir != "", PGBinDir: opts.PGBinDir,
		ZketcdExtraArgs: opts.ZketcdArgs, ZKJVMFlags: opts.ZKJVMFlags, ZKConfig: opts.ZKConfig, ZKProps: opts.ZKProps,
		ZKJFRDir: opts.ZKJFRDir, ZKRequestLog: opts.ZKRequestLog}
	rep.ZooKeeper = env.zkSettings()
	if err := resolveBinaries(ctx, &opts, env); err != nil {
		return nil, err
	}
	if opts.PprofDir != "" {
		if err := os.MkdirAll(opts.PprofDir, 0o755); err != nil {
			return nil, err
		}
	}
	for _, s := range opts.Servers {
		if ctx.Err() != nil {
			break
		}
		sr := ServerRun{Name: s, LoadStart: loadAvg()}
		t0 := time.Now()
		res, err := runServer(ctx, env, &opts, s)
		rep.Results = append(rep.Results, res...)
		sr.LoadEnd, sr.Seconds = loadAvg(), time.Since(t0).Seconds()
		if err != nil {
			sr.Error = oneLine(err.Error())
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %v", s, err))
			opts.Logf("%s: ERROR %v", s, err)
		}
		rep.Servers = append(rep.Servers, sr)
		rep.Machine.LoadEnd = loadAvg()
		rep.ElapsedSeconds = time.Since(began).Seconds()
		if opts.MarkdownPath != "" {
			if err := rep.WriteFiles(opts.MarkdownPath, opts.DataDir); err != nil {
				return rep, err
			}
		}
	}
	return rep, ctx.Err()
}

// resolveBinaries builds or finds the peers and zketcd.
func resolveBinaries(ctx context.Context, opts *Options, env *Env) error {
	var need []string
	if opts.EtcdBin == "" && (slices.Contains(opts.Servers, ServerEtcd) || slices.Contains(opts.Servers, ServerEtcd3) ||
		slices.ContainsFunc(opts.Servers, kubeOnEtcd)) {
		need = append(need, "etcd")
	}
	if opts.KineBin == "" && (slices.Contains(opts.Servers, ServerKine) || slices.Contains(opts.Servers, ServerKinePG)) {
		need = append(need, "kine")
	}
	if opts.BenchmarkBin == "" && opts.wantsTool() {
		need = append(need, "benchmark")
	}
	if len(need) > 0 {
		script := filepath.Join(opts.RepoRoot, "integration", "bench", "build-peers.sh")
		opts.Logf("building/locating peers: %s %s", script, strings.Join(need, " "))
		out, err := scriptOutput(ctx, script, need...)
		if err != nil {
			return fmt.Errorf("build-peers.sh: %w", err)
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), "=")
			if !ok {
				continue
			}
			switch k {
			case "etcd":
				opts.EtcdBin = v
			case "kine":
				opts.KineBin = v
			case "benchmark":
				opts.BenchmarkBin = v
			}
		}
	}
	if opts.BenchmarkBin == "none" {
		opts.BenchmarkBin = ""
	}
	// Servers run in their own directories: make every path absolute.
	for _, p := range []*string{&opts.EtcdBin, &opts.KineBin, &opts.BenchmarkBin, &opts.ZketcdBin} {
		if *p != "" && !filepath.IsAbs(*p) {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	env.EtcdBin, env.KineBin = opts.EtcdBin, opts.KineBin
	if slices.ContainsFunc(opts.Servers, isKubeServer) {
		if err := resolveKubeAPIServer(ctx, opts); err != nil {
			return err
		}
		env.KubeAPIServer = opts.KubeAPIServerBin
	}
	needZketcd := slices.ContainsFunc(opts.Servers, func(s string) bool {
		return zketcdInstances(s) > 0 || (isKubeServer(s) && !kubeOnEtcd(s))
	})
	if opts.ZketcdBin == "" && needZketcd && !env.PprofChild {
		opts.ZketcdBin = filepath.Join(env.WorkDir, "zketcd")
		opts.Logf("building zketcd from %s", opts.RepoRoot)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", opts.ZketcdBin, "./cmd/zketcd")
		cmd.Dir = opts.RepoRoot
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/zketcd: %w", err)
		}
	}
	env.ZketcdBin = opts.ZketcdBin
	return nil
}

// scriptOutput runs a bash script and returns its stdout (its stderr goes
// to the harness's).
func scriptOutput(ctx context.Context, script string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	return string(out), err
}

// runServer runs every selected workload against server s.
func runServer(ctx context.Context, env *Env, opts *Options, s string) (results []Result, err error) {
	p := opts.Profile
	logf := func(format string, args ...any) { opts.Logf("[%s] "+format, append([]any{s}, args...)...) }
	var t *Target
	var zk *zkCluster
	defer func() {
		if t != nil {
			err = errors.Join(err, t.Stop())
		}
		if zk != nil {
			err = errors.Join(err, zk.stop())
		}
	}()
	start := time.Now()
	switch {
	case s == ServerZKFloor:
		return runFloor(ctx, env, &opts.Profile, opts, s, 3, logf)
	case s == ServerZK1Floor:
		return runFloor(ctx, env, &opts.Profile, opts, s, 1, logf)
	case isKubeServer(s):
		return runKube(ctx, env, &opts.Profile, opts, s, logf)
	}
	t, zk, err = startServer(ctx, env, s, s, logf)
	if err != nil {
		return nil, err
	}
	logf("serving on %s after %.1fs", strings.Join(t.Endpoints, ","), time.Since(start).Seconds())

	conns, err := newPool(t.Endpoints, p.MaxConns)
	if err != nil {
		return nil, err
	}
	defer conns.close()
	ws := newWorkloadSet(p.KVKeys)
	pstart := time.Now()
	if _, err := preload(ctx, conns, p.KVKeys, 64, kvKey); err != nil {
		return nil, err
	}
	if ws.mixRevs, err = preload(ctx, conns, mixKeys, 64, mixKey); err != nil {
		return nil, err
	}
	logf("preloaded %d + %d keys in %.1fs", p.KVKeys, mixKeys, time.Since(pstart).Seconds())

	for _, w := range AllWorkloads {
		if !opts.wants(w) && !(w == WCreate && opts.wants(WDelete)) {
			continue
		}
		for _, c := range p.Clients {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			spec, ok := ws.spec(w, c)
			if !ok {
				continue
			}
			spec.warmup, spec.duration = p.Warmup, p.Duration
			sub := &pool{clients: conns.clients[:min(c, p.MaxConns)]}
			var stopWatchers func() int64
			var wc *clientv3.Client
			if w == WMix && p.MixWatchers > 0 {
				if wc, err = newClient(t.Endpoint); err != nil {
					return results, err
				}
				if stopWatchers, err = mixWatchers(ctx, wc, p.MixWatchers); err != nil {
					wc.Close()
					return results, err
				}
			}
			r := runCell(ctx, t, sub, spec, opts.PprofDir)
			if stopWatchers != nil {
				if r.Extra == nil {
					r.Extra = map[string]float64{}
				}
				r.Extra["watch_events"] = float64(stopWatchers())
				wc.Close()
			}
			if err := markCrash(ctx, t, &r, logf); err != nil {
				return append(results, r), err
			}
			logCell(logf, r)
			if opts.wants(w) {
				results = append(results, r)
			}
		}
	}

	if opts.wants(WWatch) {
		for i, n := range p.Watchers {
			r, err := runWatch(ctx, t, watchSpec{watchers: n, rate: p.WatchRate, warmup: p.Warmup, duration: p.Duration, conns: p.MaxConns}, i)
			if err != nil {
				r.Status, r.FirstError = "failed", err.Error()
			}
			if err := markCrash(ctx, t, &r, logf); err != nil {
				return append(results, r), err
			}
			logCell(logf, r)
			results = append(results, r)
		}
	}

	if opts.wants(WKeepalive) && p.KeepaliveLeases > 0 && slices.Contains(DeployedServers, s) {
		r := runKeepalive(ctx, t, conns, p.KeepaliveLeases, p.Warmup, p.Duration, opts.PprofDir)
		if err := markCrash(ctx, t, &r, logf); err != nil {
			return append(results, r), err
		}
		logCell(logf, r)
		results = append(results, r)
	}

	if opts.BenchmarkBin != "" && opts.wantsTool() {
		total := func(w string, n int, fallback float64) int {
			rate := fallback
			for _, r := range results {
				if r.Workload == w && r.Clients == n && ok(&r) {
					rate = r.Throughput
				}
			}
			return int(min(max(rate*p.Duration.Seconds(), 1000), 200000))
		}
		for _, n := range p.Clients {
			var cells []toolCell
			if opts.wants(WToolPut) {
				cells = toolCells(n, total(WPutSeq, n, 1000), total(WGetLin, n, 2000))
			}
			cells = append(cells, toolVariantCells(opts.Workloads, n, p.MaxConns, total(WPutSeq, n, 1000))...)
			for _, tc := range cells {
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
				r := runTool(ctx, opts.BenchmarkBin, t, n, tc)
				if err := markCrash(ctx, t, &r, logf); err != nil {
					return append(results, r), err
				}
				logCell(logf, r)
				results = append(results, r)
			}
		}
	}

	// Recovery runs on its own instances: stop the one under test first.
	if err := t.Stop(); err != nil {
		return results, err
	}
	t = nil
	if opts.wants(WRecovery) || opts.wants(WRecoveryLog) {
		for _, n := range p.RecoveryKeys {
			switch s {
			case ServerZK1, ServerZK3:
				rs, err := measureZketcdRecovery(ctx, env, s, zk, n, logf)
				results = append(results, rs...)
				if err != nil {
					return results, fmt.Errorf("recovery over %d keys: %w", n, err)
				}
			case ServerEtcd:
				r, err := measureEtcdRecovery(ctx, env, n, logf)
				if err != nil {
					return results, fmt.Errorf("etcd recovery over %d keys: %w", n, err)
				}
				results = append(results, r)
			}
		}
	}
	return results, nil
}

// zketcdInstances is how many zketcd instances a zketcd server runs on
// its root (0: not a zketcd server).
func zketcdInstances(s string) int {
	switch s {
	case ServerZK1, ServerZK3, ServerZK3Lease:
		return 1
	case ServerZK3x2, ServerZK3x2Lease:
		return 2
	case ServerZK3x3:
		return 3
	}
	return 0
}

// zkMembers is the size of the ZooKeeper ensemble under a zketcd server.
func zkMembers(s string) int {
	if s == ServerZK1 {
		return 1
	}
	return 3
}

// startServer starts etcd-API server s with its files in WorkDir/dir*
// (every start of a run needs its own dir: the servers keep their data)
// and waits until it serves; zk is its ZooKeeper (nil for etcd and kine),
// which the caller stops after t.
func startServer(ctx context.Context, env *Env, s, dir string, logf func(string, ...any)) (t *Target, zk *zkCluster, err error) {
	start := time.Now()
	switch s {
	case ServerEtcd:
		t, err = env.StartEtcd(ctx, dir)
		return t, nil, err
	case ServerEtcd3:
		t, err = env.StartEtcdCluster(ctx, dir, 3)
		return t, nil, err
	case ServerKine:
		t, err = env.startKine(ctx, ServerKine, dir, nil)
		return t, nil, err
	case ServerKinePG:
		t, err = env.StartKinePG(ctx, dir)
		return t, nil, err
	}
	n := zketcdInstances(s)
	if n == 0 {
		return nil, nil, fmt.Errorf("unknown server %q", s)
	}
	members := zkMembers(s)
	zk, err = env.StartZooKeeper(ctx, dir+"-zk", members)
	if err != nil {
		return nil, nil, fmt.Errorf("start ZooKeeper: %w", err)
	}
	logf("ZooKeeper (%d) serving on %s after %.1fs", members, zk.connect(), time.Since(start).Seconds())
	t, err = env.StartZketcds(ctx, s, dir, zk, "/bench", n)
	if t != nil {
		t.zk = zk
	}
	return t, zk, err
}

// markCrash marks r as "crashed" if the server's process died during the
// cell, and restarts it.
func markCrash(ctx context.Context, t *Target, r *Result, logf func(string, ...any)) error {
	crash, err := t.checkAlive(ctx)
	if crash == "" {
		return err
	}
	r.Status = "crashed"
	r.ServerCPUSeconds, r.ServerCPUPerOpUs = 0, 0
	r.Note = joinNote(r.Note, crash)
	logf("CRASH during %s ×%d: %s", r.Workload, r.Clients, crash)
	return err
}

func logCell(logf func(string, ...any), r Result) {
	msg := fmt.Sprintf("%-14s ×%-3d %9.1f ops/s  p50 %7.2f  p99 %8.2f  p999 %8.2f ms  cpu %6.0f µs/op  load %.1f",
		r.Workload, r.Clients, r.Throughput, r.P50Ms, r.P99Ms, r.P999Ms, r.ServerCPUPerOpUs, r.Load1)
	if r.Status != "ok" || r.Errors > 0 {
		msg += fmt.Sprintf("  [%s, %d errors: %s]", r.Status, r.Errors, oneLine(r.FirstError))
	}
	logf("%s", msg)
}
