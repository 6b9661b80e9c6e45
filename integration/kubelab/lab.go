// Package kubelab runs the experiment "kube-apiserver on ZooKeeper": real
// ZooKeeper servers (Debian's package), the zketcd binary, embedded etcd
// 3.7.3 for comparison and kube-apiserver as child processes, and the
// scenarios that exercise them through kube-apiserver's REST API. The e2e
// tests (integration/e2e) and `make demo` (integration/kubedemo) run the
// same scenarios: each returns its measurements as report lines and fails
// with an error when a check fails.
package kubelab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// Lab owns the processes and files of one experiment. Close stops
// everything it started, newest first.
type Lab struct {
	// Dir holds every file: logs, certificates, ZooKeeper data.
	Dir string
	// KubeAPIServer is the kube-apiserver binary.
	KubeAPIServer string
	// Zketcd is the zketcd binary.
	Zketcd string
	// Logf receives progress lines.
	Logf func(format string, args ...any)

	// ManualAuth leaves etcd's authentication as it finds it: StartZketcd
	// then does not turn it on (a test that runs the documented etcdctl
	// commands itself sets it).
	ManualAuth bool

	ports *zkserver.PortAllocator

	mu       sync.Mutex
	cleanups []func()
	seq      int
	logs     []string
	security *Security
}

// Security returns the lab's secure shape (certificates and ZooKeeper
// identity), made in Dir/pki on first use unless SetSecurity gave one.
func (l *Lab) Security() (*Security, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.security == nil {
		s, err := NewSecurity(filepath.Join(l.Dir, "pki"))
		if err != nil {
			return nil, fmt.Errorf("lab certificates: %w", err)
		}
		l.security = s
	}
	return l.security, nil
}

// SetSecurity makes the lab use s (files made as docs/kubernetes.md says)
// instead of its own.
func (l *Lab) SetSecurity(s *Security) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.security = s
}

// New returns a lab working in dir (created if missing).
func New(dir, kubeAPIServer, zketcd string, logf func(string, ...any)) (*Lab, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Lab{Dir: dir, KubeAPIServer: kubeAPIServer, Zketcd: zketcd, Logf: logf, ports: zkserver.NewPortAllocator()}, nil
}

// Defer registers f to run at Close (last registered, first run).
func (l *Lab) Defer(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

// Close runs the registered cleanups.
func (l *Lab) Close() {
	for {
		l.mu.Lock()
		n := len(l.cleanups)
		if n == 0 {
			l.mu.Unlock()
			return
		}
		f := l.cleanups[n-1]
		l.cleanups = l.cleanups[:n-1]
		l.mu.Unlock()
		f()
	}
}

// addLog registers a component's log file.
func (l *Lab) addLog(path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logs = append(l.logs, path)
}

// LogFiles returns the log files of the components started so far.
func (l *Lab) LogFiles() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.logs...)
}

// TailLog returns the last n lines of a log file.
func TailLog(path string, n int) string {
	return strings.Join(grepFile(path, regexp.MustCompile(``), n), "\n")
}

// Port returns a free 127.0.0.1 port no other component of the lab got.
func (l *Lab) Port() (int, error) { return l.ports.Pick() }

// subdir returns a new directory dir/<name>-<n>.
func (l *Lab) subdir(name string) (string, error) {
	l.mu.Lock()
	l.seq++
	n := l.seq
	l.mu.Unlock()
	d := filepath.Join(l.Dir, fmt.Sprintf("%02d-%s", n, name))
	return d, os.MkdirAll(d, 0o755)
}

// BuildZketcd builds cmd/zketcd of the repository this module replaces
// github.com/zketcd/zketcd with into dir and returns its path.
func BuildZketcd(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "zketcd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/zketcd/zketcd/cmd/zketcd")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build zketcd: %v\n%s", err, b)
	}
	return out, nil
}

// zkLogger logs ZooKeeper management at warn level into w.
func zkLogger(w io.Writer) *logrus.Entry {
	lg := logrus.New()
	lg.SetOutput(w)
	lg.SetLevel(logrus.WarnLevel)
	return logrus.NewEntry(lg)
}

// ZooKeeper starts a standalone ZooKeeper server, with jvmFlags after the
// default ones (e.g. "-Xmx4g" for a large root). forceSync=no, as in the
// other tests: the experiment measures zketcd, not the disk.
func (l *Lab) ZooKeeper(ctx context.Context, jvmFlags ...string) (*zkserver.Server, error) {
	dir, err := l.subdir("zookeeper")
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "zkserver.log"))
	if err != nil {
		return nil, err
	}
	s, err := zkserver.StartStandalone(ctx, zkserver.Options{Dir: dir, Logger: zkLogger(logf), Ports: l.ports,
		ExtraConfig: map[string]string{"forceSync": "no"}, JVMFlags: jvmFlags})
	if err != nil {
		logf.Close()
		return nil, err
	}
	l.Defer(func() { _ = s.Stop(); logf.Close() })
	l.addLog(s.LogPath())
	return s, nil
}

// Ensemble starts an ensemble of n ZooKeeper servers (ZooKeeper's default
// tickTime 2s, forceSync=no) and waits for its quorum.
func (l *Lab) Ensemble(ctx context.Context, n int) (*zkserver.Ensemble, error) {
	dir, err := l.subdir("ensemble")
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "zkserver.log"))
	if err != nil {
		return nil, err
	}
	e, err := zkserver.StartEnsemble(ctx, n, zkserver.Options{Dir: dir, Logger: zkLogger(logf), Ports: l.ports,
		ExtraConfig: map[string]string{"forceSync": "no"}})
	if err != nil {
		logf.Close()
		return nil, err
	}
	l.Defer(func() { _ = e.Stop(); logf.Close() })
	for _, m := range e.Members() {
		l.addLog(m.LogPath())
	}
	return e, nil
}

// waitFor polls cond every interval until it returns true, or until
// timeout. cond returns (false, err) for a transient failure (reported if
// the time runs out) and (true, err) for a permanent one (returned at once).
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return err
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not done after %v: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not done after %v", what, timeout)
		case <-time.After(interval):
		}
	}
}

// ms formats a duration in seconds with millisecond precision.
func ms(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}
