package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// Server names, in the order a run measures them.
const (
	ServerEtcd  = "etcd"
	ServerKine  = "kine"
	ServerZK1   = "zketcd-zk1"
	ServerZK3   = "zketcd-zk3"
	readyWithin = 2 * time.Minute
)

// The deployed shape: the servers users run in production, on one machine.
const (
	// ServerEtcd3 is a 3-member etcd cluster; clients are spread over
	// the members.
	ServerEtcd3 = "etcd-3"
	// ServerKinePG is kine on PostgreSQL, kine's HA deployment.
	ServerKinePG = "kine-pg"
	// ServerZK3x2 and ServerZK3x3 are 2 and 3 zketcd instances on one
	// root of a 3-member ensemble; clients are spread over the instances.
	ServerZK3x2 = "zketcd-zk3x2"
	ServerZK3x3 = "zketcd-zk3x3"
	// ServerZK3Lease and ServerZK3x2Lease are ServerZK3 and ServerZK3x2
	// with --read-lease: the leader answers linearizable reads from memory.
	ServerZK3Lease   = "zketcd-zk3-lease"
	ServerZK3x2Lease = "zketcd-zk3x2-lease"
	// ServerZKFloor is no etcd server: the raw go-zookeeper requests
	// zketcd builds on, on a 3-member ensemble (the floor of ServerZK3*).
	ServerZKFloor = "zk3-floor"
	// ServerZK1Floor is the same on a standalone ZooKeeper (the floor of
	// ServerZK1).
	ServerZK1Floor = "zk1-floor"
)

// StandaloneServers are the servers of the single-node comparison.
var StandaloneServers = []string{ServerEtcd, ServerKine, ServerZK1, ServerZK3}

// FloorServers are the raw ZooKeeper floors.
var FloorServers = []string{ServerZK1Floor, ServerZKFloor}

// DeployedServers are the etcd-API servers of the deployed-shape
// comparison (ServerZK3 is in both: one instance on the 3-member ensemble).
var DeployedServers = []string{ServerEtcd3, ServerKinePG, ServerZK3, ServerZK3x2, ServerZK3x3, ServerZK3Lease, ServerZK3x2Lease}

// AllServers lists every server the harness knows, in run order: the
// standalone ones, the deployed shape, the ZooKeeper floor, then the
// kube-apiserver stacks.
var AllServers = append(append(append([]string{}, StandaloneServers...),
	ServerEtcd3, ServerKinePG, ServerZK3x2, ServerZK3x3, ServerZK3Lease, ServerZK3x2Lease, ServerZK1Floor, ServerZKFloor), KubeServers...)

// ServerGroups are names -servers accepts for a list of servers.
var ServerGroups = map[string][]string{
	"all":        AllServers,
	"standalone": append(append([]string{}, StandaloneServers...), append([]string{ServerZK1Floor}, KubeStandaloneServers...)...),
	"deployed":   append([]string{ServerEtcd3, ServerKinePG, ServerZK3, ServerZK3x2, ServerZK3x3, ServerZK3Lease, ServerZK3x2Lease, ServerZKFloor}, KubeServers[len(KubeStandaloneServers):]...),
	"kube":       KubeServers,
}

// ExpandServers replaces group names in names by their servers (each
// server once, first occurrence first).
func ExpandServers(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		list, ok := ServerGroups[n]
		if !ok {
			list = []string{n}
		}
		for _, s := range list {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// ServerLabel is a server's name in reports.
func ServerLabel(name string) string {
	switch name {
	case ServerEtcd:
		return "etcd 3.7.3"
	case ServerKine:
		return "kine 0.17.5 (SQLite)"
	case ServerZK1:
		return "zketcd, ZK standalone"
	case ServerZK3:
		return "zketcd, ZK 3-member"
	case ServerEtcd3:
		return "etcd 3.7.3, 3 members"
	case ServerKinePG:
		return "kine 0.17.5 (PostgreSQL)"
	case ServerZK3x2:
		return "zketcd ×2, ZK 3-member"
	case ServerZK3x3:
		return "zketcd ×3, ZK 3-member"
	case ServerZK3Lease:
		return "zketcd, ZK 3-member, --read-lease"
	case ServerZK3x2Lease:
		return "zketcd ×2, ZK 3-member, --read-lease"
	case ServerZKFloor:
		return "raw go-zookeeper, ZK 3-member"
	case ServerZK1Floor:
		return "raw go-zookeeper, ZK standalone"
	}
	if l, ok := kubeLabel(name); ok {
		return l
	}
	return name
}

// Target is a running server under test.
type Target struct {
	Name string
	// Endpoint is the first etcd-API endpoint; Endpoints all of them
	// (the members of a cluster, the instances on one root), in the order
	// of procs. Clients are spread over them, connection i on
	// Endpoints[i mod len].
	Endpoint  string
	Endpoints []string
	// PprofAddr is set when zketcd runs in the harness's pprof child.
	PprofAddr string
	// procs are the etcd-API processes (etcd members, kine, zketcd
	// instances), procs[i] serving Endpoints[i]; helpers are the
	// processes they need (PostgreSQL), stopped after them.
	procs   []*process
	helpers []*process
	// extraPIDs are more processes whose CPU counts as the server's
	// (the kube-apiservers of a kube stack).
	extraPIDs []int
	// metricsURLs are the /metrics pages of the etcd-API processes (the
	// cost accounting reads their RPC and commit counters).
	metricsURLs []string
	zk          *zkCluster
	stopFn      func() error
}

// pids are the processes whose CPU time counts as the server's: the
// etcd-API processes, their helpers, whatever those forked, and the
// ZooKeeper servers.
func (t *Target) pids() []int {
	var out []int
	for _, p := range append(append([]*process{}, t.procs...), t.helpers...) {
		if !p.exited() {
			out = append(out, p.pid())
		}
	}
	out = withDescendants(append(out, t.extraPIDs...))
	if t.zk != nil {
		out = append(out, t.zk.pids()...)
	}
	return out
}

// apiPIDs are the PIDs of the etcd-API processes (etcd, kine or zketcd).
func (t *Target) apiPIDs() []int {
	var out []int
	for _, p := range t.procs {
		if !p.exited() {
			out = append(out, p.pid())
		}
	}
	return out
}

// mainPID is the PID of the first etcd-API process.
func (t *Target) mainPID() int {
	if len(t.procs) == 0 {
		return 0
	}
	return t.procs[0].pid()
}

// died returns a channel closed when any etcd-API process exits.
func (t *Target) died() <-chan struct{} {
	c := make(chan struct{})
	if len(t.procs) == 0 {
		return c
	}
	var once sync.Once
	for _, p := range t.procs {
		go func() {
			<-p.done
			once.Do(func() { close(c) })
		}()
	}
	return c
}

// checkAlive reports whether an etcd-API process exited (it crashed: the
// harness never stops one during a run). If so, it restarts it on the same
// data and port, waits until it serves and returns a description of the
// crash.
func (t *Target) checkAlive(ctx context.Context) (crash string, err error) {
	var crashes []string
	for i, old := range t.procs {
		if !old.exited() {
			continue
		}
		c := fmt.Sprintf("%s exited (%v): %s", old.name, old.err, old.crashLine())
		p, err := old.restart()
		if err != nil {
			return strings.Join(append(crashes, c), "; "), err
		}
		t.procs[i] = p
		if _, err := waitServing(ctx, t.Endpoints[i], p, readyWithin, nil); err != nil {
			return strings.Join(append(crashes, c), "; "), fmt.Errorf("restart after crash: %w", err)
		}
		crashes = append(crashes, c+"; restarted on the same data")
	}
	return strings.Join(crashes, "; "), nil
}

// Stop stops the server and everything it started.
func (t *Target) Stop() error {
	var errs []error
	for i := len(t.procs) - 1; i >= 0; i-- {
		errs = append(errs, t.procs[i].stop(15*time.Second))
	}
	for i := len(t.helpers) - 1; i >= 0; i-- {
		errs = append(errs, t.helpers[i].stop(30*time.Second))
	}
	if t.stopFn != nil {
		errs = append(errs, t.stopFn())
	}
	return errors.Join(errs...)
}

// join returns one target made of ts (the members of a cluster): their
// processes and endpoints in order.
func join(name string, ts []*Target) *Target {
	out := &Target{Name: name}
	for _, t := range ts {
		out.procs = append(out.procs, t.procs...)
		out.helpers = append(out.helpers, t.helpers...)
		out.Endpoints = append(out.Endpoints, t.Endpoints...)
		out.metricsURLs = append(out.metricsURLs, t.metricsURLs...)
	}
	if len(out.Endpoints) > 0 {
		out.Endpoint = out.Endpoints[0]
	}
	return out
}

// Env is what starting servers needs: binaries, directories, settings.
type Env struct {
	WorkDir   string // scratch space (removed by the caller)
	EtcdBin   string
	KineBin   string
	ZketcdBin string
	// SelfBin, when PprofChild is set, is the harness binary that runs
	// zketcd in-process with net/http/pprof (`zkbench serve-zketcd`).
	SelfBin    string
	PprofChild bool
	ZKHeap     string // JVM -Xmx for each ZooKeeper server, e.g. "1g"
	// ZKHeapMin is the JVM's -Xms (empty: ZKHeap, the heap committed from
	// the start).
	ZKHeapMin string
	// ZKJVMFlags replace ZKDefaultJVMFlags (the heap flags stay); nil:
	// the defaults. ZKConfig and ZKProps are more zoo.cfg lines and
	// system properties for every ZooKeeper server.
	ZKJVMFlags []string
	ZKConfig   map[string]string
	ZKProps    map[string]string
	// ZKJFRDir, if set, makes every ZooKeeper JVM record a flight
	// recording, dumped there after each cell (jfr.go).
	ZKJFRDir string
	// ZKRequestLog makes ZooKeeper log every request, which the cost
	// accounting counts by type and path (cost.go; costs ZooKeeper CPU).
	ZKRequestLog bool
	// EtcdExtraArgs and ZketcdExtraArgs are appended to every etcd
	// member's and zketcd instance's flags.
	EtcdExtraArgs, ZketcdExtraArgs []string
	// PGBinDir holds PostgreSQL's initdb, postgres and pg_isready;
	// empty: the newest /usr/lib/postgresql/*/bin.
	PGBinDir string
	// KubeAPIServer is the kube-apiserver binary of the kube stacks.
	KubeAPIServer string
	Log           *logrus.Logger
}

func (e *Env) dir(name string) (string, error) {
	d := filepath.Join(e.WorkDir, name)
	return d, os.MkdirAll(d, 0o755)
}

// StartEtcd starts etcd with production defaults (fsync on, 100 ms tick,
// 1 s election timeout) on a fresh data directory named name under WorkDir,
// or on the existing one.
func (e *Env) StartEtcd(ctx context.Context, name string) (*Target, error) {
	return e.StartEtcdCluster(ctx, name, 1)
}

// StartEtcdCluster starts an etcd cluster of members processes on
// 127.0.0.1 (as StartEtcd: production defaults, fsync on), each with its
// own data directory under WorkDir/name, and waits until every member
// serves. The target's endpoints are the members' client addresses.
func (e *Env) StartEtcdCluster(ctx context.Context, name string, members int) (*Target, error) {
	dir, err := e.dir(name)
	if err != nil {
		return nil, err
	}
	type member struct{ name, curl, purl, data, log string }
	ms := make([]member, members)
	var initial []string
	for i := range ms {
		cport, err1 := freePort()
		pport, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		m := member{name: fmt.Sprintf("n%d", i+1),
			curl: "http://127.0.0.1:" + strconv.Itoa(cport), purl: "http://127.0.0.1:" + strconv.Itoa(pport),
			data: filepath.Join(dir, "data"), log: filepath.Join(dir, "etcd.log")}
		if members > 1 {
			m.data = filepath.Join(dir, "data-"+m.name)
			m.log = filepath.Join(dir, "etcd-"+m.name+".log")
		}
		ms[i] = m
		initial = append(initial, m.name+"="+m.purl)
	}
	var ts []*Target
	stopAll := func() {
		for _, t := range ts {
			_ = t.Stop()
		}
	}
	for _, m := range ms {
		args := []string{
			"--name", m.name, "--data-dir", m.data,
			"--listen-client-urls", m.curl, "--advertise-client-urls", m.curl,
			"--listen-peer-urls", m.purl, "--initial-advertise-peer-urls", m.purl,
			"--initial-cluster", strings.Join(initial, ","), "--log-level", "warn",
		}
		if members > 1 {
			args = append(args, "--initial-cluster-token", name)
		}
		args = append(args, e.EtcdExtraArgs...)
		p, err := startProcess("etcd "+m.name, dir, m.log, e.EtcdBin, args, nil)
		if err != nil {
			stopAll()
			return nil, err
		}
		ep := strings.TrimPrefix(m.curl, "http://")
		ts = append(ts, &Target{Name: name, Endpoint: ep, Endpoints: []string{ep}, procs: []*process{p},
			metricsURLs: []string{metricsURL(ep)}})
	}
	for _, t := range ts {
		if _, err := waitServing(ctx, t.Endpoint, t.procs[0], readyWithin, nil); err != nil {
			stopAll()
			return nil, fmt.Errorf("etcd %s: %w\n%s", t.procs[0].name, err, t.procs[0].logTail(20))
		}
	}
	t := join(ServerEtcd, ts)
	if members > 1 {
		t.Name = ServerEtcd3
	}
	return t, nil
}

// StartKine starts kine on SQLite (its default ./db/state.db, in a fresh
// directory under WorkDir).
func (e *Env) StartKine(ctx context.Context) (*Target, error) {
	return e.startKine(ctx, ServerKine, "kine", nil)
}

// startKine starts kine as target name in directory WorkDir/dirName with
// extra flags (--endpoint selects the database; none: SQLite).
func (e *Env) startKine(ctx context.Context, name, dirName string, extra []string) (*Target, error) {
	dir, err := e.dir(dirName)
	if err != nil {
		return nil, err
	}
	port, err1 := freePort()
	mport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	args := append([]string{
		"--listen-address", "127.0.0.1:" + strconv.Itoa(port),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(mport),
	}, extra...)
	p, err := startProcess("kine", dir, filepath.Join(dir, "kine.log"), e.KineBin, args, nil)
	if err != nil {
		return nil, err
	}
	ep := "127.0.0.1:" + strconv.Itoa(port)
	t := &Target{Name: name, Endpoint: ep, Endpoints: []string{ep}, procs: []*process{p}}
	if _, err := waitServing(ctx, t.Endpoint, p, readyWithin, nil); err != nil {
		_ = t.Stop()
		return nil, fmt.Errorf("kine: %w\n%s", err, p.logTail(20))
	}
	return t, nil
}

// zkCluster is a standalone ZooKeeper or an ensemble.
type zkCluster struct {
	standalone *zkserver.Server
	ensemble   *zkserver.Ensemble
	// jfrDir receives the members' flight recordings of each cell
	// (-zk-jfr); empty: none.
	jfrDir string
}

func (z *zkCluster) connect() string {
	if z.standalone != nil {
		return z.standalone.Addr()
	}
	return z.ensemble.ConnectString()
}

// servers returns the standalone server or the ensemble's members.
func (z *zkCluster) servers() []*zkserver.Server {
	if z.standalone != nil {
		return []*zkserver.Server{z.standalone}
	}
	return z.ensemble.Members()
}

func (z *zkCluster) pids() []int {
	var out []int
	if z.standalone != nil {
		if pid := z.standalone.PID(); pid > 0 {
			out = append(out, pid)
		}
		return out
	}
	for _, m := range z.ensemble.Members() {
		if pid := m.PID(); pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

func (z *zkCluster) stop() error {
	if z.standalone != nil {
		return z.standalone.Stop()
	}
	return z.ensemble.Stop()
}

// ZKDefaultJVMFlags are the JVM flags of the benchmarks' ZooKeeper
// servers besides the heap: the serial collector, the C1 JIT only and no
// hsperfdata file. Measured under zketcd's loads (docs/bench/analysis.md,
// issue 38): C2's compilations cost ZooKeeper 0.1–1.4 ms of CPU per
// Kubernetes request during the minutes a benchmark's fresh JVM serves,
// which C1 avoids (a long-lived server recovers them: there C2 costs about
// a fifth less per request); the collector's share is a few percent with
// any of them. It returns a new slice on every call.
func ZKDefaultJVMFlags() []string {
	return []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData"}
}

// ZKDefaultConfig are the benchmarks' zoo.cfg settings besides
// internal/zkserver's: none that weakens durability (fsync stays on).
// It returns a new map on every call.
func ZKDefaultConfig() map[string]string { return map[string]string{} }

// ZKDefaultProps are the benchmarks' ZooKeeper system properties:
// zkserver.LowCPUSystemProps (the Netty connection factory). It returns
// a new map on every call.
func ZKDefaultProps() map[string]string { return zkserver.LowCPUSystemProps(nil) }

// zkSettings describes the ZooKeeper servers e starts (the heap
// included), for the report.
func (e *Env) zkSettings() *ZKSettings {
	flags := []string{"-Xmx" + e.ZKHeap, "-Xms" + cmp.Or(e.ZKHeapMin, e.ZKHeap)}
	if e.ZKJVMFlags != nil {
		flags = append(flags, e.ZKJVMFlags...)
	} else {
		flags = append(flags, ZKDefaultJVMFlags()...)
	}
	s := &ZKSettings{JVMFlags: flags, Config: ZKDefaultConfig(), Props: ZKDefaultProps()}
	maps.Copy(s.Config, e.ZKConfig)
	maps.Copy(s.Props, e.ZKProps)
	if e.ZKJFRDir != "" {
		s.Diagnostics = append(s.Diagnostics, "a flight recording")
	}
	if e.ZKRequestLog {
		s.Diagnostics = append(s.Diagnostics, "every request logged")
	}
	return s
}

// StartZooKeeper starts a standalone server (members == 1) or an ensemble
// with production-like settings: fsync on (ZooKeeper's default
// forceSync=yes), a heap of e.ZKHeap, the JVM flags, zoo.cfg lines and
// system properties of ZKDefaultJVMFlags, ZKDefaultConfig and
// ZKDefaultProps unless e says otherwise (not the test defaults of
// internal/zkserver: no -Xss, the heap committed at start).
//
// Its files go to WorkDir/name; a ZooKeeper started on an existing
// directory serves the data left there.
func (e *Env) StartZooKeeper(ctx context.Context, name string, members int) (*zkCluster, error) {
	dir, err := e.dir(name)
	if err != nil {
		return nil, err
	}
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	st := e.zkSettings()
	flags, cfg, props := st.JVMFlags, st.Config, st.Props
	var jfrDir string
	if e.ZKJFRDir != "" {
		if jfrDir, err = filepath.Abs(e.ZKJFRDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(jfrDir, 0o755); err != nil {
			return nil, err
		}
		flags = append(flags, jfrFlag())
	}
	if e.ZKRequestLog {
		props[zkRequestLogProp] = "debug"
	}
	opts := zkserver.Options{
		Dir:               dir,
		NoDefaultJVMFlags: true,
		JVMFlags:          flags,
		ExtraConfig:       cfg,
		SystemProps:       props,
		Logger:            logrus.NewEntry(lg),
		StartTimeout:      2 * time.Minute,
	}
	if members == 1 {
		s, err := zkserver.StartStandalone(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &zkCluster{standalone: s, jfrDir: jfrDir}, nil
	}
	en, err := zkserver.StartEnsemble(ctx, members, opts)
	if err != nil {
		return nil, err
	}
	return &zkCluster{ensemble: en, jfrDir: jfrDir}, nil
}

// StartZketcd starts one zketcd process on zk under root. name is the
// target's name; the process's files go to WorkDir/<dirName>.
func (e *Env) StartZketcd(ctx context.Context, name, dirName string, zk *zkCluster, root string, expectKeys int) (*Target, time.Duration, error) {
	dir, err := e.dir(dirName)
	if err != nil {
		return nil, 0, err
	}
	port, err1 := freePort()
	mport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, 0, err
	}
	endpoint := "127.0.0.1:" + strconv.Itoa(port)
	var args []string
	bin := e.ZketcdBin
	t := &Target{Name: name, Endpoint: endpoint, Endpoints: []string{endpoint}}
	if e.PprofChild {
		bin = e.SelfBin
		t.PprofAddr = "127.0.0.1:" + strconv.Itoa(mport)
		args = []string{"serve-zketcd", "--zk", zk.connect(), "--zk-root", root,
			"--listen", endpoint, "--pprof", t.PprofAddr}
	} else {
		args = []string{"serve", "--zk", zk.connect(), "--zk-root", root,
			"--name", dirName,
			"--listen-client-urls", "http://" + endpoint,
			"--listen-metrics-urls", "http://127.0.0.1:" + strconv.Itoa(mport),
			"--log-level", "warn"}
		t.metricsURLs = []string{metricsURL("127.0.0.1:" + strconv.Itoa(mport))}
		if readLeaseServer(name) {
			args = append(args, "--read-lease")
		}
		args = append(args, e.ZketcdExtraArgs...)
	}
	p, err := startProcess(name, dir, filepath.Join(dir, "zketcd.log"), bin, args, nil)
	if err != nil {
		return nil, 0, err
	}
	t.procs = []*process{p}
	var check func(*clientv3.Client, context.Context) error
	if expectKeys > 0 {
		check = countCheck(recoveryPrefix, expectKeys)
	}
	took, err := waitServing(ctx, endpoint, p, readyWithin, check)
	if err != nil {
		_ = t.Stop()
		return nil, 0, fmt.Errorf("zketcd: %w\n%s", err, p.logTail(20))
	}
	return t, took, nil
}

// readLeaseServer reports whether server name runs zketcd with
// --read-lease.
func readLeaseServer(name string) bool { return name == ServerZK3Lease || name == ServerZK3x2Lease }

// StartZketcds starts instances zketcd processes on one root of zk as
// target name (members and directories dir-1, dir-2, ...; one instance:
// dir) and returns them as one target whose endpoints are the instances'.
func (e *Env) StartZketcds(ctx context.Context, name, dir string, zk *zkCluster, root string, instances int) (*Target, error) {
	if instances == 1 {
		t, _, err := e.StartZketcd(ctx, name, dir, zk, root, 0)
		return t, err
	}
	var ts []*Target
	for i := 1; i <= instances; i++ {
		t, _, err := e.StartZketcd(ctx, name, fmt.Sprintf("%s-%d", dir, i), zk, root, 0)
		if err != nil {
			for _, t := range ts {
				_ = t.Stop()
			}
			return nil, fmt.Errorf("instance %d: %w", i, err)
		}
		ts = append(ts, t)
	}
	t := join(name, ts)
	t.PprofAddr = ts[0].PprofAddr
	return t, nil
}

// countCheck returns a readiness check that the store holds want keys
// under prefix (a linearizable count).
func countCheck(prefix string, want int) func(*clientv3.Client, context.Context) error {
	return func(c *clientv3.Client, ctx context.Context) error {
		r, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if r.Count != int64(want) {
			return fmt.Errorf("count %d, want %d", r.Count, want)
		}
		return nil
	}
}

// waitServing polls endpoint until a linearizable Get (and check, if not
// nil) succeeds and returns the time since p started.
func waitServing(ctx context.Context, endpoint string, p *process, within time.Duration, check func(*clientv3.Client, context.Context) error) (time.Duration, error) {
	// A probe client that redials fast: gRPC's default reconnect backoff
	// starts at 1 s, which would dominate a recovery time.
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 50 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return 0, fmt.Errorf("exited during start: %v", p.err)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Get(actx, "/bench/ready-probe")
		cancel()
		if err == nil && check != nil {
			// Serving: the check (a count of up to millions of keys) may
			// take longer than a probe.
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			err = check(c, cctx)
			ccancel()
		}
		if err == nil {
			return time.Since(p.started), nil
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("not serving after %v: %v", within, last)
}

// newClient dials endpoint with a quiet logger.
func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          []string{endpoint},
		DialTimeout:        10 * time.Second,
		Logger:             zap.NewNop(),
		MaxCallRecvMsgSize: 64 << 20,
	})
}

// fetchProfile saves a CPU profile of the pprof child for secs seconds.
func fetchProfile(addr, path string, secs int) error {
	hc := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("pprof: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
