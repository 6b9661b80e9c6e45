package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Zketcd is a `zketcd serve` child process in a process group of its own
// (signals reach it alone; the kernel kills it if the test binary dies). It
// can be killed (SIGKILL), paused (SIGSTOP), resumed and started again on the
// same address, root and name.
type Zketcd struct {
	Name    string
	Addr    string // etcd API, 127.0.0.1:port
	Metrics string // /health and /metrics, 127.0.0.1:port
	bin     string
	args    []string
	env     []string // added to the test's environment
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
	starts int
}

// ZketcdConfig configures a Zketcd.
type ZketcdConfig struct {
	Bin, Name, Root, Dir string
	ZK                   []string // ZooKeeper addresses (or proxies)
	Addr, Metrics        string   // 127.0.0.1:port each
	SessionTimeout       time.Duration
	ProgressInterval     time.Duration
	LogLevel             string // default info
	// Internal, if set, is the internal endpoint's listen address
	// (127.0.0.1:port) and AdvertiseInternal the address advertised to
	// the other instances (a fault proxy in front of it).
	Internal, AdvertiseInternal string
	// ReadLease runs the instance with --read-lease.
	ReadLease bool
	// Env is added to the process's environment (KEY=value), e.g. a
	// fault-injection hook.
	Env []string
	// Args are added to the serve command's flags (after the ones above,
	// so that they override them), e.g. --commit-pipeline 8.
	Args []string
}

// NewZketcd prepares (does not start) an instance.
func NewZketcd(c ZketcdConfig) *Zketcd {
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	args := []string{"serve",
		"--zk", strings.Join(c.ZK, ","), "--zk-root", c.Root, "--name", c.Name,
		"--listen-client-urls", "http://" + c.Addr,
		"--listen-metrics-urls", "http://" + c.Metrics,
		"--zk-session-timeout", c.SessionTimeout.String(),
		"--watch-progress-notify-interval", c.ProgressInterval.String(),
		"--log-level", c.LogLevel,
		"--enable-pprof", // the soak saves goroutine profiles from /debug/pprof
	}
	if c.ReadLease {
		args = append(args, "--read-lease")
	}
	if c.Internal != "" {
		args = append(args, "--internal-listen-url", "http://"+c.Internal)
	}
	if c.AdvertiseInternal != "" {
		args = append(args, "--advertise-internal-url", "http://"+c.AdvertiseInternal)
	}
	args = append(args, c.Args...)
	return &Zketcd{Name: c.Name, Addr: c.Addr, Metrics: c.Metrics, bin: c.Bin, args: args, env: c.Env,
		logPath: filepath.Join(c.Dir, "zketcd-"+c.Name+".log")}
}

// SetZK replaces the --zk connect string of the next Start (a running
// process keeps its own until restarted).
func (z *Zketcd) SetZK(addrs []string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for i := 0; i+1 < len(z.args); i++ {
		if z.args[i] == "--zk" {
			z.args[i+1] = strings.Join(addrs, ",")
			return
		}
	}
}

// LogPath is the file holding the output of every run.
func (z *Zketcd) LogPath() string { return z.logPath }

// Start launches the process and waits until /health answers 200, bounded
// by ctx. Address-in-use errors of a quick restart are retried.
func (z *Zketcd) Start(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := z.start(ctx)
		if err == nil || attempt >= 30 || !strings.Contains(err.Error(), "address already in use") || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (z *Zketcd) start(ctx context.Context) error {
	z.mu.Lock()
	if z.cmd != nil {
		z.mu.Unlock()
		return fmt.Errorf("zketcd %s is running", z.Name)
	}
	lf, err := os.OpenFile(z.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		z.mu.Unlock()
		return err
	}
	z.starts++
	fmt.Fprintf(lf, "---- faults: start %d at %s ----\n", z.starts, time.Now().Format(time.RFC3339Nano))
	off, _ := lf.Seek(0, io.SeekCurrent)
	cmd := exec.Command(z.bin, append([]string(nil), z.args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if len(z.env) > 0 {
		cmd.Env = append(os.Environ(), z.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the forking thread exits: fork from a locked
		// thread that lives as long as the child.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	err = <-started
	lf.Close()
	if err != nil {
		z.mu.Unlock()
		return err
	}
	z.cmd, z.done, z.paused = cmd, done, false
	z.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			z.mu.Lock()
			z.cmd = nil
			z.mu.Unlock()
			return fmt.Errorf("zketcd %s exited during start: %s", z.Name, tailFrom(z.logPath, off, 15))
		default:
		}
		if z.Healthy(ctx) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = z.Kill()
			return fmt.Errorf("zketcd %s not healthy after 60s: %s", z.Name, tailFrom(z.logPath, off, 15))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Healthy tells whether /health answers 200 (a session, caught up).
func (z *Zketcd) Healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+z.Metrics+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// PID returns the running process's ID, 0 if none.
func (z *Zketcd) PID() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd == nil {
		return 0
	}
	return z.cmd.Process.Pid
}

// Kill sends SIGKILL to the process group and waits for the exit. Killing
// a stopped instance is a no-op.
func (z *Zketcd) Kill() error { return z.stop(syscall.SIGKILL) }

// Stop sends SIGTERM (SIGKILL after 10 s) and waits for the exit.
func (z *Zketcd) Stop() error { return z.stop(syscall.SIGTERM) }

func (z *Zketcd) stop(sig syscall.Signal) error {
	z.mu.Lock()
	cmd, done := z.cmd, z.done
	z.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, sig)
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("zketcd %s (pid %d) still there after SIGKILL", z.Name, pid)
		}
	}
	z.mu.Lock()
	z.cmd, z.paused = nil, false
	z.mu.Unlock()
	return nil
}

// Pause freezes the process with SIGSTOP.
func (z *Zketcd) Pause() error { return z.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (z *Zketcd) Resume() error { return z.signal(syscall.SIGCONT, false) }

func (z *Zketcd) signal(sig syscall.Signal, paused bool) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd == nil {
		return fmt.Errorf("zketcd %s is not running", z.Name)
	}
	if err := syscall.Kill(-z.cmd.Process.Pid, sig); err != nil {
		return err
	}
	z.paused = paused
	return nil
}

// Running tells whether the process runs.
func (z *Zketcd) Running() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.cmd != nil
}

// Grep counts the log lines containing s.
func (z *Zketcd) Grep(s string) int {
	b, err := os.ReadFile(z.logPath)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), s)
}

// tailFrom returns the last n lines of path after offset off.
func tailFrom(path string, off int64, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if off > 0 && off <= int64(len(b)) {
		b = b[off:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\n" + strings.Join(lines, "\n")
}

// BuildZketcd builds cmd/zketcd (of the repository the integration module
// replaces github.com/zketcd/zketcd with) into dir.
func BuildZketcd(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "zketcd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/zketcd/zketcd/cmd/zketcd")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build zketcd: %v\n%s", err, b)
	}
	return out, nil
}
