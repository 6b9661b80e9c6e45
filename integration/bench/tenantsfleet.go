package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/integration/kubelab"
	"github.com/zketcd/zketcd/internal/zkserver"
)

// The fleet of the tenants benchmark: `zketcd serve --tenants` processes
// on one fleet root, client TLS with a certificate per tenant (CN = the
// tenant's name), as docs/operations.md runs them.

// tenantsFleetRoot is the fleet root the benchmark serves.
const tenantsFleetRoot = "/fleet"

// fleetInstance is one `zketcd serve --tenants` process.
type fleetInstance struct {
	name        string
	addr        string // client address (https)
	metricsAddr string // /metrics, /health, /debug/pprof (http)
	p           *process
}

// tenantFleet is the running fleet and what reaching it needs.
type tenantFleet struct {
	zk        *zkCluster
	sec       *kubelab.Security
	instances []*fleetInstance
	zketcd    string // the binary, for zketcd tenant
	dir       string
}

// startTenantFleet starts instances fleet processes on zk under
// tenantsFleetRoot in dir, with the benchmark's flags and extra, and waits
// until each one's /health is ok.
func startTenantFleet(ctx context.Context, env *Env, zk *zkCluster, sec *kubelab.Security, dir string, instances int, extra []string) (*tenantFleet, error) {
	f := &tenantFleet{zk: zk, sec: sec, zketcd: env.ZketcdBin, dir: dir}
	for i := 1; i <= instances; i++ {
		in, err := f.startInstance(ctx, fmt.Sprintf("fleet-%d", i), extra)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.instances = append(f.instances, in)
	}
	return f, nil
}

func (f *tenantFleet) startInstance(ctx context.Context, name string, extra []string) (*fleetInstance, error) {
	dir := filepath.Join(f.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err1 := freePort()
	mport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	in := &fleetInstance{name: name, addr: "127.0.0.1:" + strconv.Itoa(port), metricsAddr: "127.0.0.1:" + strconv.Itoa(mport)}
	args := append([]string{"serve", "--tenants",
		"--zk", f.zk.connect(), "--zk-root", tenantsFleetRoot, "--name", name,
		"--listen-client-urls", "https://" + in.addr, "--advertise-client-urls", "https://" + in.addr,
		"--listen-metrics-urls", "http://" + in.metricsAddr,
		"--cert-file", f.sec.ServerCert, "--key-file", f.sec.ServerKey,
		"--trusted-ca-file", f.sec.CAFile, "--client-cert-auth",
		// The measured state must not change under the benchmark: an
		// engine idle for the default 10 min would stop between phases.
		"--tenant-idle-timeout", "24h",
		"--enable-pprof", "--log-level", "warn"}, extra...)
	p, err := startProcess(name, dir, filepath.Join(dir, "zketcd.log"), f.zketcd, args, nil)
	if err != nil {
		return nil, err
	}
	in.p = p
	deadline := time.Now().Add(time.Minute)
	for {
		if p.exited() {
			return nil, fmt.Errorf("%s exited during start: %v\n%s", name, p.err, p.logTail(20))
		}
		if in.healthy(ctx) {
			return in, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = p.stop(5 * time.Second)
			return nil, fmt.Errorf("%s not healthy after a minute\n%s", name, p.logTail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (in *fleetInstance) healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.metricsAddr+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

func (f *tenantFleet) stop() error {
	var errs []error
	for _, in := range f.instances {
		errs = append(errs, in.p.stop(10*time.Second))
	}
	return errors.Join(errs...)
}

func (f *tenantFleet) pids() []int {
	out := make([]int, len(f.instances))
	for i, in := range f.instances {
		out[i] = in.p.pid()
	}
	return out
}

// tenantCmd runs `zketcd tenant ARGS` against the fleet root.
func (f *tenantFleet) tenantCmd(ctx context.Context, args ...string) (string, error) {
	all := append([]string{"tenant"}, args...)
	all = append(all, "--zk", f.zk.connect(), "--zk-root", tenantsFleetRoot, "--log-level", "warn")
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, f.zketcd, all...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("zketcd %s: %v: %s", strings.Join(all, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// createTenants registers names with `zketcd tenant create` (4 at a time).
func (f *tenantFleet) createTenants(ctx context.Context, names []string) error {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, errs[i] = f.tenantCmd(ctx, "create", n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tenantTLS returns the client TLS configuration of tenant name (its
// certificate issued on first use).
func tenantTLS(sec *kubelab.Security, name string) (*tls.Config, error) {
	cert, key, err := sec.IssueClient(name)
	if err != nil {
		return nil, err
	}
	return sec.ClientTLS(cert, key)
}

// tenantClient dials the given addresses with cfg.
func tenantClient(cfg *tls.Config, addrs ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: addrs, TLS: cfg, DialTimeout: 10 * time.Second,
		Logger: zap.NewNop(), MaxCallRecvMsgSize: 64 << 20})
}

// metricSample is one sample of a Prometheus text exposition.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrapeSamples reads the samples of the families in names (all if empty)
// at url.
func scrapeSamples(ctx context.Context, url string, names ...string) ([]metricSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []metricSample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s, ok := parseSample(line)
		if ok && (len(want) == 0 || want[s.name]) {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// parseSample parses `name{k="v",...} value` (labels optional).
func parseSample(line string) (metricSample, bool) {
	s := metricSample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i > 0 {
		s.name = line[:i]
		rest = line[i:]
	} else {
		return s, false
	}
	if strings.HasPrefix(rest, "{") {
		end := strings.LastIndex(rest, "}")
		if end < 0 {
			return s, false
		}
		for _, kv := range splitLabels(rest[1:end]) {
			k, v, ok := strings.Cut(kv, "=")
			if ok {
				s.labels[k] = strings.Trim(v, `"`)
			}
		}
		rest = rest[end+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, false
	}
	s.value = v
	return s, true
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// forceGC makes the instance collect its garbage (pprof's heap profile
// with gc=1), so that the heap in use read next is the live heap.
func (in *fleetInstance) forceGC(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.metricsAddr+"/debug/pprof/heap?gc=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: /debug/pprof/heap: %s", in.name, resp.Status)
	}
	return err
}

// zkConnections counts the established TCP connections process pid holds
// to any of ports (ZooKeeper's client ports), from /proc: the sockets among
// its file descriptors, matched by inode against /proc/<pid>/net/tcp{,6}.
func zkConnections(pid int, ports map[int]bool) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "01" { // ESTABLISHED
				continue
			}
			_, rport, ok := strings.Cut(f[2], ":")
			if !ok {
				continue
			}
			port, err := strconv.ParseInt(rport, 16, 32)
			if err == nil && ports[int(port)] && inodes[f[9]] {
				n++
			}
		}
	}
	return n, nil
}

// zkPorts returns the client ports of zk's servers.
func zkPorts(z *zkCluster) map[int]bool {
	out := map[int]bool{}
	for _, a := range strings.Split(z.connect(), ",") {
		if _, p, ok := strings.Cut(a, ":"); ok {
			if n, err := strconv.Atoi(p); err == nil {
				out[n] = true
			}
		}
	}
	return out
}

// tenantSessions reads, for every tenant root under the fleet root, the
// ZooKeeper session that owns each instance's member znode: the sessions
// the instances' tenants share. It returns, per instance name, the
// distinct sessions, and per tenant and instance the session.
func tenantSessions(z *zkCluster, names []string) (perInstance map[string]map[int64]bool, owner map[string]map[string]int64, err error) {
	conn, _, err := zk.Connect(strings.Split(z.connect(), ","), 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	perInstance, owner = map[string]map[int64]bool{}, map[string]map[string]int64{}
	for _, n := range names {
		dir := tenantsFleetRoot + "/roots/" + n + "/members"
		kids, _, err := conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", dir, err)
		}
		for _, k := range kids {
			data, st, err := conn.Get(dir + "/" + k)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			var m struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(data, &m) != nil || m.Name == "" || st.EphemeralOwner == 0 {
				continue
			}
			if perInstance[m.Name] == nil {
				perInstance[m.Name] = map[int64]bool{}
			}
			perInstance[m.Name][st.EphemeralOwner] = true
			if owner[n] == nil {
				owner[n] = map[string]int64{}
			}
			owner[n][m.Name] = st.EphemeralOwner
		}
	}
	return perInstance, owner, nil
}

// quietZK discards go-zookeeper's log lines.
type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// zkServers returns zk's servers (one for a standalone server).
func zkServers(z *zkCluster) []*zkserver.Server {
	if z.standalone != nil {
		return []*zkserver.Server{z.standalone}
	}
	return z.ensemble.Members()
}
