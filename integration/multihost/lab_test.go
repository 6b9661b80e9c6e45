// Package multihost runs zketcd instances on separate "hosts": network
// namespaces the test makes, each with its own loopback and one address on
// a bridge in the root namespace, where the test's ZooKeeper is reachable
// (through a proxy on the bridge's address; the server itself listens on
// 127.0.0.1 only). It needs root and ip(8); otherwise it skips. The
// instances run the zketcd binary ($ZKETCD_BINARY, else built from
// cmd/zketcd) with the commands docs/operations.md gives.
package multihost

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// prefix starts the name of every namespace and link the test makes; the
// process ID follows it, so that leftovers of a killed run are recognised.
const prefix = "zkmh"

// lab is a set of hosts on one bridge, and a ZooKeeper they reach.
type lab struct {
	t      *testing.T
	id     string // prefix and pid, in hex
	bridge string // its name; the root namespace's address on it is subnet.1
	subnet string // "10.a.b"
	zk     string // host:port of the ZooKeeper proxy on the bridge
	bin    string // the zketcd binary
	hosts  []*host
}

// host is one network namespace with an address on the bridge.
type host struct {
	lab  *lab
	name string // the instance's name, zketcd-<i>
	ns   string
	addr string
}

// instance is a zketcd process on a host.
type instance struct {
	*host
	proc *exec.Cmd
	log  *embedtest.SyncBuffer
	done chan error
	once sync.Once
}

// need skips the test unless namespaces can be made.
func need(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("multihost: needs Java (ZooKeeper) and namespaces; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("multihost: needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("multihost: needs ip(8)")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("multihost: needs openssl(1), as the documented steps do")
	}
	probe := fmt.Sprintf("%s%x-probe", prefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("multihost: ip netns add: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
}

// ip runs ip(8) with args, failing the test on an error.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// removeLeftovers deletes the namespaces and bridges of earlier runs whose
// process is gone.
func removeLeftovers() {
	stale := regexp.MustCompile("^" + prefix + `([0-9a-f]+)\b`)
	gone := func(name string) bool {
		m := stale.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.ParseInt(m[1], 16, 64)
		return err == nil && pid != int64(os.Getpid()) && syscall.Kill(int(pid), 0) == syscall.ESRCH
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !gone(f[0]) {
				continue
			}
			// Instances of a run killed before its cleanup.
			if pids, err := exec.Command("ip", "netns", "pids", f[0]).Output(); err == nil {
				for _, p := range strings.Fields(string(pids)) {
					if pid, err := strconv.Atoi(p); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 && gone(strings.TrimSuffix(f[1], ":")) {
				_ = exec.Command("ip", "link", "del", strings.TrimSuffix(f[1], ":")).Run()
			}
		}
	}
}

// freeSubnet picks a 10.x.y.0/24 that no route of this machine overlaps.
func freeSubnet(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	var nets []*net.IPNet
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		if dst == "local" || dst == "broadcast" || dst == "unreachable" || dst == "blackhole" {
			if len(f) < 2 {
				continue
			}
			dst = f[1]
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, n, err := net.ParseCIDR(dst); err == nil && !n.IP.IsUnspecified() {
			nets = append(nets, n)
		}
	}
	for i := 0; i < 500; i++ {
		s := fmt.Sprintf("10.%d.%d", 100+(os.Getpid()+i)%150, (os.Getpid()/150+i*7)%256)
		_, mine, _ := net.ParseCIDR(s + ".0/24")
		free := true
		for _, n := range nets {
			free = free && !n.Contains(mine.IP) && !mine.Contains(n.IP)
		}
		if free {
			return s
		}
	}
	t.Fatal("no free 10.x.y.0/24")
	return ""
}

// newLab makes n hosts, a ZooKeeper, and the proxy to it on the bridge;
// everything is removed when the test ends, however it ends.
func newLab(t *testing.T, n int) *lab {
	t.Helper()
	need(t)
	removeLeftovers()
	l := &lab{t: t, id: fmt.Sprintf("%s%x", prefix, os.Getpid()), subnet: freeSubnet(t)}
	l.bridge = l.id
	ip(t, "link", "add", l.bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", l.bridge).Run() })
	ip(t, "addr", "add", l.subnet+".1/24", "dev", l.bridge)
	ip(t, "link", "set", l.bridge, "up")
	for i := 1; i <= n; i++ {
		h := &host{lab: l, name: fmt.Sprintf("zketcd-%d", i), ns: fmt.Sprintf("%s-%d", l.id, i), addr: fmt.Sprintf("%s.%d", l.subnet, 10+i)}
		veth, peer := fmt.Sprintf("%s-v%d", l.id, i), fmt.Sprintf("%s-p%d", l.id, i)
		ip(t, "netns", "add", h.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.ns).Run() })
		ip(t, "link", "add", veth, "type", "veth", "peer", "name", peer)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth).Run() })
		ip(t, "link", "set", veth, "master", l.bridge, "up")
		ip(t, "link", "set", peer, "netns", h.ns)
		ip(t, "-n", h.ns, "link", "set", peer, "name", "eth0")
		ip(t, "-n", h.ns, "addr", "add", h.addr+"/24", "dev", "eth0")
		ip(t, "-n", h.ns, "link", "set", "eth0", "up")
		ip(t, "-n", h.ns, "link", "set", "lo", "up")
		l.hosts = append(l.hosts, h)
	}
	zk := zkservertest.Standalone(t)
	lis, err := net.Listen("tcp", l.subnet+".1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go proxy(lis, zk.Addr())
	l.zk = lis.Addr().String()
	l.bin = zketcdBinary(t)
	return l
}

// proxy forwards every connection lis accepts to target.
func proxy(lis net.Listener, target string) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildOnce.path != "" {
		_ = os.RemoveAll(filepath.Dir(buildOnce.path))
	}
	os.Exit(code)
}

var buildOnce struct {
	sync.Once
	path string
	err  error
}

// zketcdBinary is $ZKETCD_BINARY, or cmd/zketcd built once per test run.
func zketcdBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ZKETCD_BINARY"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "multihost-bin-")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.path = filepath.Join(dir, "zketcd")
		if out, err := exec.Command("go", "build", "-o", buildOnce.path, "github.com/zketcd/zketcd/cmd/zketcd").CombinedOutput(); err != nil {
			buildOnce.err = fmt.Errorf("go build zketcd: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.path
}

// docSteps returns the shell blocks of docs/operations.md marked
// <!-- multihost-test: NAME -->, by name.
func docSteps(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]string{}
	marker := regexp.MustCompile(`<!-- multihost-test: (\w+) -->`)
	sc := bufio.NewScanner(bytes.NewReader(b))
	var name string
	var block []string
	in := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case marker.MatchString(line):
			name = marker.FindStringSubmatch(line)[1]
		case name != "" && !in && strings.HasPrefix(line, "```sh"):
			in, block = true, nil
		case in && line == "```":
			steps[name], name, in = strings.Join(block, "\n"), "", false
		case in:
			block = append(block, line)
		}
	}
	for _, want := range []string{"ca", "cert", "serve"} {
		if steps[want] == "" {
			t.Fatalf("docs/operations.md has no %q step for this test", want)
		}
	}
	return steps
}

// sh runs a documented step in dir with env, in the root namespace.
func sh(t *testing.T, dir, script string, env ...string) {
	t.Helper()
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v:\n%s\n%s", err, script, out)
	}
}

// start runs script (a zketcd serve command) in h's namespace, in dir,
// with env and zketcd on the PATH; the process is killed when the test
// ends.
func (h *host) start(t *testing.T, dir, script string, env ...string) *instance {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", h.ns, "sh", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(h.lab.bin)+":"+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	in := &instance{host: h, proc: cmd, log: &embedtest.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = in.log, in.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { in.done <- cmd.Wait() }()
	t.Cleanup(func() {
		in.kill()
		if t.Failed() {
			t.Logf("%s's log:\n%s", h.name, tail(in.log.String(), 60))
		}
	})
	return in
}

// kill kills the instance (its process group) and waits for it.
func (in *instance) kill() {
	in.once.Do(func() {
		_ = syscall.Kill(-in.proc.Process.Pid, syscall.SIGKILL)
		<-in.done
	})
}

// exited waits up to d for the instance to exit by itself and returns its
// error (ok false: still running).
func (in *instance) exited(d time.Duration) (err error, ok bool) {
	select {
	case err := <-in.done:
		in.once.Do(func() {})
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// dialer dials from inside namespace ns: the socket is made on a thread
// moved into ns (and never moved back: it ends with its goroutine), and
// stays in ns whatever thread uses it later.
func dialer(ns string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			f, err := os.Open("/run/netns/" + ns)
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// client returns an etcd client in h's namespace of the instances at
// endpoints.
func (h *host) client(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dialer(h.ns))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// metric reads the value of series (a metric name and its labels as the
// exposition prints them) from the /metrics of the instance at endpoint,
// from h's namespace; 0 if absent.
func (h *host) metric(t *testing.T, endpoint, series string) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialer(h.ns)(ctx, addr) }}}
	resp, err := hc.Get("http://" + endpoint + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", endpoint, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// eventually retries check until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
