package etcdctl

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// server is a zketcd or etcd process on 127.0.0.1 with its output in a
// log file.
type server struct {
	name     string
	endpoint string // host:port of the client URL
	logPath  string
	cmd      *exec.Cmd
	done     chan struct{}
}

// startServer starts bin with args and stops it (SIGTERM, then SIGKILL)
// when the test ends.
func startServer(t *testing.T, name, endpoint, logPath, bin string, args ...string) *server {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child keeps its own descriptor
	s := &server{name: name, endpoint: endpoint, logPath: logPath, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = sysProcAttr()
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the forking thread exits: fork from a locked
		// thread that stays blocked in Wait while the child lives.
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = s.cmd.Wait()
		close(s.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(s.stop)
	return s
}

func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *server) stop() {
	if s.exited() {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// logTail returns the last n lines of the server's log.
func (s *server) logTail(n int) string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePorts returns n distinct free ports on 127.0.0.1 (all listeners are
// held until every port is found).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s", what, timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
