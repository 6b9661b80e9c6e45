package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of utime/stime in
// /proc/<pid>/stat; 100 on every Linux this runs on.
const clockTicks = 100

// process is a child process started by the harness: in its own process
// group (so a stop reaches whatever it spawned) and killed by the kernel if
// the harness dies.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
	started time.Time
	// what started it, for restart
	dir, bin string
	args     []string
	env      []string
	cred     *syscall.Credential
}

// restart starts the same command again (after the process exited).
func (p *process) restart() (*process, error) {
	return startProcessAs(p.name, p.dir, p.logPath, p.bin, p.args, p.env, p.cred)
}

// crashLine returns the first line of the log that explains an exit (a Go
// panic or a fatal error), or the last line.
func (p *process) crashLine() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			out := l
			// the panicking function is a few lines below
			for _, m := range lines[i+1 : min(len(lines), i+8)] {
				if strings.Contains(m, "(") && !strings.HasPrefix(m, "goroutine") && !strings.HasPrefix(m, "[") && !strings.HasPrefix(m, "\t") {
					out += " in " + strings.TrimSpace(m)
					break
				}
			}
			return out
		}
	}
	return strings.TrimSpace(ansi.ReplaceAllString(fileTail(p.logPath, 1), ""))
}

// ansi matches terminal colour codes (kine colours its log).
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// startProcess starts bin with args in dir, its stdout and stderr appended
// to logPath.
func startProcess(name, dir, logPath, bin string, args []string, env []string) (*process, error) {
	return startProcessAs(name, dir, logPath, bin, args, env, nil)
}

// startProcessAs is startProcess with the child running as cred's user
// (nil: the harness's own), for servers that refuse to run as root.
func startProcessAs(name, dir, logPath, bin string, args []string, env []string, cred *syscall.Credential) (*process, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{}), started: time.Now(),
		dir: dir, bin: bin, args: args, env: env, cred: cred}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	pgid := p.pid()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
	}
}

// logTail returns the last lines of the process's log, for error messages.
func (p *process) logTail(n int) string { return fileTail(p.logPath, n) }

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a currently free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// cpuSeconds returns the user+system CPU time of process pid (all its
// threads), in seconds.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// After the command: state(3) ppid(4) ... utime(14) stime(15); f[0] is field 3.
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (ut + st) / clockTicks, nil
}

// withDescendants returns pids and every process descended from them (a
// server that forks workers, such as PostgreSQL's backends, spends its
// CPU in its children), read from /proc/*/stat.
func withDescendants(pids []int) []int {
	if len(pids) == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return pids
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentPID(pid); ok {
			children[pp] = append(children[pp], pid)
		}
	}
	out := append([]int(nil), pids...)
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// childrenRunning returns the PIDs of the harness's descendants that run
// the executable bin (children started by a library that does not expose
// them, such as kubelab's kube-apiservers).
func childrenRunning(bin string) []int {
	var out []int
	for _, pid := range withDescendants([]int{os.Getpid()})[1:] {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && exe == bin {
			out = append(out, pid)
		}
	}
	return out
}

// parentPID reads the parent of pid from /proc/<pid>/stat.
func parentPID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// totalCPU sums cpuSeconds over pids, ignoring processes that are gone.
func totalCPU(pids []int) float64 {
	var s float64
	for _, pid := range pids {
		if v, err := cpuSeconds(pid); err == nil {
			s += v
		}
	}
	return s
}

// selfCPU returns the harness's own CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// rssBytes returns VmRSS of process pid from /proc/<pid>/status.
func rssBytes(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fs := strings.Fields(rest)
			if len(fs) < 1 {
				break
			}
			kb, err := strconv.ParseInt(fs[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("no VmRSS in status")
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

// machineBusy returns the CPU time (seconds, all CPUs) the machine spent
// busy since boot: user, nice, system, irq, softirq and steal from
// /proc/stat (idle and iowait excluded).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, _ := strconv.ParseFloat(f[i], 64)
		busy += v
	}
	return busy / clockTicks
}
