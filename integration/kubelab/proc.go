package kubelab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process in a process group of its own, with its output
// in a log file. It is SIGKILLed if the lab's process dies (Pdeathsig).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{}

	mu      sync.Mutex
	waitErr error
	exitAt  time.Time
}

// startProc starts path with args, appending its stdout and stderr to
// logPath.
func startProc(name, logPath, path string, args []string, env []string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	fmt.Fprintf(logFile, "---- kubelab: starting %s at %s: %s %s\n", name, time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = sysProcAttr()
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child exits: fork
		// from a locked thread that stays blocked in Wait as long as the
		// child lives (the thread is discarded when this goroutine returns).
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.started = time.Now()
		started <- nil
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr, p.exitAt = err, time.Now()
		p.mu.Unlock()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// exited tells whether the process has exited, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.waitErr
	default:
		return false, nil
	}
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// stop sends SIGTERM to the group, waits up to grace, then SIGKILLs it. It
// returns how long the process took to exit.
func (p *proc) stop(grace time.Duration) time.Duration {
	start := time.Now()
	if done, _ := p.exited(); done {
		return 0
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.done
	}
	return time.Since(start)
}

// kill SIGKILLs the process group and waits for the process.
func (p *proc) kill() {
	if done, _ := p.exited(); done {
		return
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

func grepFile(path string, re *regexp.Regexp, max int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			out = append(out, sc.Text())
			if max > 0 && len(out) > max {
				out = out[1:]
			}
		}
	}
	return out
}

// tail returns the last n lines of the log.
func (p *proc) tail(n int) string {
	lines := grepFile(p.logPath, regexp.MustCompile(``), n)
	return strings.Join(lines, "\n")
}

var errNotRunning = errors.New("process exited")
