package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// AllServers lists every server the harness knows, in run order.
var AllServers = []string{ServerEtcd, ServerKine, ServerZK1, ServerZK3}

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
	}
	return name
}

// Target is a running server under test.
type Target struct {
	Name     string
	Endpoint string
	// PprofAddr is set when zketcd runs in the harness's pprof child.
	PprofAddr string
	procs     []*process
	zk        *zkCluster
	stopFn    func() error
}

// pids are the processes whose CPU time counts as the server's.
func (t *Target) pids() []int {
	var out []int
	for _, p := range t.procs {
		if !p.exited() {
			out = append(out, p.pid())
		}
	}
	if t.zk != nil {
		out = append(out, t.zk.pids()...)
	}
	return out
}

// mainPID is the PID of the etcd-API process (etcd, kine or zketcd).
func (t *Target) mainPID() int {
	if len(t.procs) == 0 {
		return 0
	}
	return t.procs[0].pid()
}

// checkAlive reports whether the etcd-API process exited (it crashed: the
// harness never stops it during a run). If so, it restarts it on the same
// data and port, waits until it serves and returns a description of the
// crash.
func (t *Target) checkAlive(ctx context.Context) (crash string, err error) {
	if len(t.procs) == 0 || !t.procs[0].exited() {
		return "", nil
	}
	old := t.procs[0]
	crash = fmt.Sprintf("%s exited (%v): %s", old.name, old.err, old.crashLine())
	p, err := old.restart()
	if err != nil {
		return crash, err
	}
	t.procs[0] = p
	if _, err := waitServing(ctx, t.Endpoint, p, readyWithin, nil); err != nil {
		return crash, fmt.Errorf("restart after crash: %w", err)
	}
	return crash + "; restarted on the same data", nil
}

// Stop stops the server and everything it started.
func (t *Target) Stop() error {
	var errs []error
	for i := len(t.procs) - 1; i >= 0; i-- {
		errs = append(errs, t.procs[i].stop(15*time.Second))
	}
	if t.stopFn != nil {
		errs = append(errs, t.stopFn())
	}
	return errors.Join(errs...)
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
	Log        *logrus.Logger
}

func (e *Env) dir(name string) (string, error) {
	d := filepath.Join(e.WorkDir, name)
	return d, os.MkdirAll(d, 0o755)
}

// StartEtcd starts etcd with production defaults (fsync on, 100 ms tick,
// 1 s election timeout) on a fresh data directory named name under WorkDir,
// or on the existing one.
func (e *Env) StartEtcd(ctx context.Context, name string) (*Target, error) {
	dir, err := e.dir(name)
	if err != nil {
		return nil, err
	}
	cport, err1 := freePort()
	pport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	curl := "http://127.0.0.1:" + strconv.Itoa(cport)
	purl := "http://127.0.0.1:" + strconv.Itoa(pport)
	args := []string{
		"--name", "n1", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "n1=" + purl, "--log-level", "warn",
	}
	p, err := startProcess("etcd", dir, filepath.Join(dir, "etcd.log"), e.EtcdBin, args, nil)
	if err != nil {
		return nil, err
	}
	t := &Target{Name: ServerEtcd, Endpoint: "127.0.0.1:" + strconv.Itoa(cport), procs: []*process{p}}
	if _, err := waitServing(ctx, t.Endpoint, p, readyWithin, nil); err != nil {
		_ = t.Stop()
		return nil, fmt.Errorf("etcd: %w\n%s", err, p.logTail(20))
	}
	return t, nil
}

// StartKine starts kine on SQLite (its default ./db/state.db, in a fresh
// directory under WorkDir).
func (e *Env) StartKine(ctx context.Context) (*Target, error) {
	dir, err := e.dir("kine")
	if err != nil {
		return nil, err
	}
	port, err1 := freePort()
	mport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	args := []string{
		"--listen-address", "127.0.0.1:" + strconv.Itoa(port),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(mport),
	}
	p, err := startProcess("kine", dir, filepath.Join(dir, "kine.log"), e.KineBin, args, nil)
	if err != nil {
		return nil, err
	}
	t := &Target{Name: ServerKine, Endpoint: "127.0.0.1:" + strconv.Itoa(port), procs: []*process{p}}
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
}

func (z *zkCluster) connect() string {
	if z.standalone != nil {
		return z.standalone.Addr()
	}
	return z.ensemble.ConnectString()
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

// StartZooKeeper starts a standalone server (members == 1) or an ensemble
// with production-like settings: fsync on (ZooKeeper's default
// forceSync=yes), the JVM's default collector and JIT (not the test
// defaults of internal/zkserver), a heap of e.ZKHeap.
func (e *Env) StartZooKeeper(ctx context.Context, members int) (*zkCluster, error) {
	dir, err := e.dir(fmt.Sprintf("zk%d", members))
	if err != nil {
		return nil, err
	}
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	opts := zkserver.Options{
		Dir:               dir,
		NoDefaultJVMFlags: true,
		JVMFlags:          []string{"-Xmx" + e.ZKHeap, "-Xms" + e.ZKHeap, "-XX:-UsePerfData"},
		Logger:            logrus.NewEntry(lg),
		StartTimeout:      2 * time.Minute,
	}
	if members == 1 {
		s, err := zkserver.StartStandalone(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &zkCluster{standalone: s}, nil
	}
	en, err := zkserver.StartEnsemble(ctx, members, opts)
	if err != nil {
		return nil, err
	}
	return &zkCluster{ensemble: en}, nil
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
	t := &Target{Name: name, Endpoint: endpoint}
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
