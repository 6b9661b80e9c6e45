package zkserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Errors returned (wrapped) by [Server] methods.
var (
	// ErrRunning: the server's process is already running.
	ErrRunning = errors.New("server is already running")
	// ErrNotRunning: the server's process is not running.
	ErrNotRunning = errors.New("server is not running")
	// ErrExited: the server's process exited while it was being waited for.
	ErrExited = errors.New("server process exited")
	// ErrAddrInUse: the server could not bind one of its ports. A start
	// with ports picked by the package retries with new ports by itself.
	ErrAddrInUse = errors.New("address already in use")
)

// killWait bounds how long Stop and Kill wait for the process to disappear
// after SIGKILL. Only a process stuck in the kernel survives that long.
const killWait = 30 * time.Second

// pollInterval is how often a start checks whether the server serves.
const pollInterval = 50 * time.Millisecond

// Server is one ZooKeeper server process: a standalone server from
// [StartStandalone] or a member of an [Ensemble]. Its directory, ports and
// configuration are fixed for its lifetime (but for the tickTime of its
// next start, [Server.SetTickTime]); its process can be stopped,
// killed, paused and started again any number of times.
//
// All methods are safe for concurrent use. Launch, Stop, Kill, Pause and
// Resume are serialized with each other, and so is Start while it launches
// the process (not while it waits for it to serve). Mode and the accessors
// (Addr, Running, PID, ...) never wait for them.
type Server struct {
	opts      Options // with defaults; Dir is this server's own directory
	id        int     // myid for an ensemble member, 0 for standalone
	port      int
	addr      string
	dataDir   string
	cfgPath   string
	logPath   string
	mainClass string
	peers     []quorumPeer
	log       *logrus.Entry

	opMu sync.Mutex // serializes Launch, Stop, Kill, Pause and Resume

	mu     sync.Mutex // guards proc and paused; held only briefly
	proc   *process   // nil when not running
	paused bool
}

// current returns the current process (nil if none) and whether it is
// paused.
func (s *Server) current() (*process, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc, s.paused
}

func (s *Server) setCurrent(p *process, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc, s.paused = p, paused
}

// process is one run of the JVM.
type process struct {
	pid       int
	logOffset int64 // where this run's output starts in the log file
	done      chan struct{}
	waitErr   error       // valid after done is closed
	expected  atomic.Bool // set before the package signals it to exit
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func newServer(o Options, id, port int, peers []quorumPeer, mainClass string) *Server {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	fields := logrus.Fields{"dir": o.Dir, "addr": addr}
	if id > 0 {
		fields["member"] = id
	}
	return &Server{
		opts:      o,
		id:        id,
		port:      port,
		addr:      addr,
		dataDir:   filepath.Join(o.Dir, DataDirName),
		cfgPath:   filepath.Join(o.Dir, ConfigFileName),
		logPath:   filepath.Join(o.Dir, LogFileName),
		mainClass: mainClass,
		peers:     peers,
		log:       o.Logger.WithFields(fields),
	}
}

// StartStandalone writes zoo.cfg into opts.Dir, starts a standalone
// ZooKeeper server as a child process and waits until it serves requests
// (it answers "srvr" with a Mode line), bounded by ctx and
// opts.StartTimeout. When opts.ClientPort is 0 and the picked port turns out
// to be taken, it retries with another port.
//
// On error no process is left running and the error includes the tail of
// the server's log. A missing java or jar yields an error wrapping
// [ErrPrerequisites].
func StartStandalone(ctx context.Context, opts Options) (*Server, error) {
	o, err := prepared(opts)
	if err != nil {
		return nil, err
	}
	if err := o.preflight(); err != nil {
		return nil, err
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		port := o.ClientPort
		if port == 0 {
			if port, err = o.Ports.Pick(); err != nil {
				return nil, err
			}
		} else {
			o.Ports.Reserve(port)
		}
		s := newServer(o, 0, port, nil, standaloneMain)
		err := s.Start(ctx)
		if err == nil {
			return s, nil
		}
		if opts.ClientPort == 0 && errors.Is(err, ErrAddrInUse) && attempt < attempts && ctx.Err() == nil {
			s.log.WithError(err).Warn("client port taken, retrying with another port")
			continue
		}
		return nil, err
	}
}

// SetTickTime sets the tickTime (rounded down to milliseconds; 0:
// [DefaultTickTime]) that the server's next start writes into zoo.cfg, as
// an operator changes it in a rolling restart; a running process keeps the
// one it started with. The rest of the configuration never changes.
func (s *Server) SetTickTime(d time.Duration) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if d <= 0 {
		d = DefaultTickTime
	}
	s.opts.TickTime = d
}

// Addr returns the client address, "127.0.0.1:port". It does not change
// across restarts.
func (s *Server) Addr() string { return s.addr }

// Port returns the client port.
func (s *Server) Port() int { return s.port }

// ID returns the member's myid (1..n) for an ensemble member and 0 for a
// standalone server.
func (s *Server) ID() int { return s.id }

// Dir returns the server's directory, holding zoo.cfg, the data directory
// and the log file.
func (s *Server) Dir() string { return s.opts.Dir }

// LogPath returns the file that receives the JVM's stdout and stderr. Output
// of all runs is appended to it, each run after a line starting with
// "---- zkserver: starting".
func (s *Server) LogPath() string { return s.logPath }

// Running reports whether the server's process is running (possibly paused).
func (s *Server) Running() bool {
	p, _ := s.current()
	return p != nil && !p.exited()
}

// Paused reports whether the server's process is running and paused by
// [Server.Pause].
func (s *Server) Paused() bool {
	p, paused := s.current()
	return p != nil && !p.exited() && paused
}

// PID returns the process id of the running JVM (also its process group
// id), or 0 when it is not running.
func (s *Server) PID() int {
	p, _ := s.current()
	if p == nil || p.exited() {
		return 0
	}
	return p.pid
}

// Mode asks the server with the "srvr" four-letter word for its mode:
// [ModeStandalone], [ModeLeader], [ModeFollower] or [ModeObserver]. It fails
// if the server cannot be reached (not running, paused: bounded by ctx, or
// 5 s when ctx has no deadline) or does not serve yet ([ErrNotServing]).
func (s *Server) Mode(ctx context.Context) (string, error) {
	return queryMode(ctx, s.addr)
}

// Start starts the server's process again on the same directory and ports
// (the data is kept) and waits until it serves requests, bounded by ctx and
// Options.StartTimeout. It is [Server.Launch] followed by
// [Server.WaitServing]; if waiting fails, Start kills the process again and
// returns an error that includes the log tail.
//
// An ensemble member serves only once it has joined a quorum. To restart
// several members of an ensemble that has lost its quorum, Launch them all
// and then wait, or use [Ensemble.Start].
func (s *Server) Start(ctx context.Context) error {
	if err := s.Launch(); err != nil {
		return err
	}
	p, _ := s.current()
	if p == nil {
		return fmt.Errorf("zkserver: start %s: %w (stopped while starting)", s.addr, ErrNotRunning)
	}
	if err := s.waitServing(ctx, p); err != nil {
		s.killProc(p)
		return fmt.Errorf("zkserver: start in %s: %w", s.opts.Dir, err)
	}
	return nil
}

// Launch (re)writes the configuration and starts the server's process
// without waiting for it to serve. It fails with [ErrRunning] if the process
// is running. See [Server.WaitServing].
func (s *Server) Launch() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if p, _ := s.current(); p != nil && !p.exited() {
		return fmt.Errorf("zkserver: start %s: %w", s.addr, ErrRunning)
	}
	s.setCurrent(nil, false)

	if err := os.MkdirAll(s.dataDir, 0o755); err != nil {
		return fmt.Errorf("zkserver: create data dir: %w", err)
	}
	if s.id > 0 {
		if err := writeFileAtomic(filepath.Join(s.dataDir, "myid"), []byte(strconv.Itoa(s.id)+"\n")); err != nil {
			return fmt.Errorf("zkserver: write myid: %w", err)
		}
	}
	cfg := s.opts.config(s.dataDir, s.port, s.peers)
	if err := writeFileAtomic(s.cfgPath, []byte(cfg)); err != nil {
		return fmt.Errorf("zkserver: write %s: %w", ConfigFileName, err)
	}

	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("zkserver: open log file: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor
	if _, err := fmt.Fprintf(logFile, "---- zkserver: starting %s at %s ----\n", s.mainClass, time.Now().Format(time.RFC3339Nano)); err != nil {
		return fmt.Errorf("zkserver: write log file: %w", err)
	}
	fi, err := logFile.Stat()
	if err != nil {
		return fmt.Errorf("zkserver: stat log file: %w", err)
	}

	cmd := exec.Command(s.opts.Java, s.opts.jvmArgs(s.mainClass, s.cfgPath)...)
	cmd.Dir = s.opts.Dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if len(s.opts.Env) > 0 {
		cmd.Env = append(os.Environ(), s.opts.Env...)
	}
	p := &process{logOffset: fi.Size(), done: make(chan struct{})}
	type startResult struct {
		pid int
		err error
	}
	started := make(chan startResult, 1)
	go func() {
		// Pdeathsig (see sysProcAttr) fires when the thread that forked the
		// child exits. Forking from a locked thread that then blocks in
		// Wait keeps that thread alive exactly as long as the child; the
		// thread is discarded when this goroutine returns still locked.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- startResult{err: err}
			return
		}
		pid := cmd.Process.Pid
		log := s.log.WithField("pid", pid)
		started <- startResult{pid: pid}
		err := cmd.Wait()
		p.waitErr = err
		close(p.done)
		if !p.expected.Load() {
			log.WithError(err).Warn("ZooKeeper process exited unexpectedly; see " + s.logPath)
		}
	}()
	res := <-started
	if res.err != nil {
		return fmt.Errorf("zkserver: start %s: %w", s.opts.Java, res.err)
	}
	p.pid = res.pid
	s.setCurrent(p, false)
	log := s.log.WithField("pid", p.pid)
	log.Debug("ZooKeeper process launched")
	return nil
}

// WaitServing waits until the running process serves requests, bounded by
// ctx and Options.StartTimeout. It fails with [ErrNotRunning] if no process
// is running, and with an error wrapping [ErrExited] (and [ErrAddrInUse] if
// a port was taken) that includes the log tail if the process exits
// meanwhile. It does not stop the process on failure.
func (s *Server) WaitServing(ctx context.Context) error {
	p, _ := s.current()
	if p == nil {
		return fmt.Errorf("zkserver: wait for %s: %w", s.addr, ErrNotRunning)
	}
	return s.waitServing(ctx, p)
}

func (s *Server) waitServing(ctx context.Context, p *process) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		if p.exited() {
			return s.startError(p, fmt.Errorf("%w (%v)", ErrExited, p.waitErr))
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		mode, err := queryMode(pctx, s.addr)
		pcancel()
		if err == nil {
			s.log.WithFields(logrus.Fields{"pid": p.pid, "mode": mode, "took": time.Since(start).Round(time.Millisecond)}).Info("ZooKeeper serving")
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return s.startError(p, fmt.Errorf("not serving after %s: %w (last probe: %v)", time.Since(start).Round(time.Millisecond), ctx.Err(), lastErr))
		case <-p.done:
		case <-ticker.C:
		}
	}
}

// startError wraps cause with the server's name and the tail of this run's
// log, and with ErrAddrInUse if the log says a port was taken.
func (s *Server) startError(p *process, cause error) error {
	tail := readLogTail(s.logPath, p.logOffset, 8<<10, 40)
	if strings.Contains(tail, "Address already in use") {
		cause = fmt.Errorf("%w: %w", ErrAddrInUse, cause)
	}
	return fmt.Errorf("zkserver: %s: %w\n--- tail of %s ---\n%s", s.name(), cause, s.logPath, tail)
}

// name describes the server for messages: "standalone 127.0.0.1:2181" or
// "member 2 127.0.0.1:2182".
func (s *Server) name() string {
	if s.id > 0 {
		return "member " + strconv.Itoa(s.id) + " " + s.addr
	}
	return "standalone " + s.addr
}

// Stop shuts the server down gracefully: SIGTERM (and SIGCONT, in case it is
// paused) to its process group, then SIGKILL if it has not exited after
// Options.StopTimeout. It returns when the process is gone. Stopping a
// server that is not running is a no-op returning nil, so Stop may be
// called from several goroutines and from test cleanup after Kill.
func (s *Server) Stop() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	p, _ := s.current()
	if p == nil {
		return nil
	}
	if p.exited() {
		s.setCurrent(nil, false)
		return nil
	}
	p.expected.Store(true)
	start := time.Now()
	s.signal(p, syscall.SIGTERM)
	s.signal(p, syscall.SIGCONT)
	timer := time.NewTimer(s.opts.StopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		s.setCurrent(nil, false)
		s.log.WithFields(logrus.Fields{"pid": p.pid, "took": time.Since(start).Round(time.Millisecond)}).Info("ZooKeeper stopped")
		return nil
	case <-timer.C:
	}
	s.log.WithField("pid", p.pid).Warnf("ZooKeeper did not exit %s after SIGTERM; sending SIGKILL", s.opts.StopTimeout)
	return s.killAndWait(p)
}

// Kill sends SIGKILL to the server's process group at once, simulating a
// crash, and returns when the process is gone. Killing a server that is not
// running is a no-op returning nil.
func (s *Server) Kill() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	p, _ := s.current()
	if p == nil {
		return nil
	}
	if p.exited() {
		s.setCurrent(nil, false)
		return nil
	}
	p.expected.Store(true)
	if err := s.killAndWait(p); err != nil {
		return err
	}
	s.log.WithField("pid", p.pid).Info("ZooKeeper killed")
	return nil
}

// killProc kills p if it is still the server's current process.
func (s *Server) killProc(p *process) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if cur, _ := s.current(); cur != p {
		return
	}
	p.expected.Store(true)
	if err := s.killAndWait(p); err != nil {
		s.log.WithError(err).Error("could not kill ZooKeeper after a failed start")
	}
}

// killAndWait sends SIGKILL to p's group, waits for p to exit and then
// forgets it. The caller holds opMu.
func (s *Server) killAndWait(p *process) error {
	s.signal(p, syscall.SIGKILL)
	select {
	case <-p.done:
		s.setCurrent(nil, false)
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("zkserver: %s: process %d still there %s after SIGKILL", s.addr, p.pid, killWait)
	}
}

// Pause freezes the server's process group with SIGSTOP, simulating a hung
// server or a long GC pause: connections stay open but nothing answers. It
// fails with [ErrNotRunning] if the process is not running.
func (s *Server) Pause() error {
	return s.setPaused(true)
}

// Resume continues a paused server with SIGCONT. It fails with
// [ErrNotRunning] if the process is not running; resuming a server that is
// not paused is harmless.
func (s *Server) Resume() error {
	return s.setPaused(false)
}

func (s *Server) setPaused(pause bool) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	p, _ := s.current()
	if p == nil || p.exited() {
		return fmt.Errorf("zkserver: pause/resume %s: %w", s.addr, ErrNotRunning)
	}
	sig, what := syscall.SIGCONT, "resumed"
	if pause {
		sig, what = syscall.SIGSTOP, "paused"
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("zkserver: %s process group %d: %w", what, p.pid, err)
	}
	if pause {
		waitStopped(p.pid, 2*time.Second)
	}
	s.setCurrent(p, pause)
	s.log.WithField("pid", p.pid).Info("ZooKeeper " + what)
	return nil
}

// signal sends sig to p's process group. Errors (the group is already gone)
// are logged at debug level only.
func (s *Server) signal(p *process, sig syscall.Signal) {
	if err := syscall.Kill(-p.pid, sig); err != nil {
		s.log.WithError(err).WithField("pid", p.pid).Debugf("signal %v", sig)
	}
}

// writeFileAtomic writes data to path through a temporary file and rename.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readLogTail returns at most the last maxLines lines of the last maxBytes
// bytes of path after offset. It never fails: problems are reported inline.
func readLogTail(path string, offset int64, maxBytes int64, maxLines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	start := max(offset, fi.Size()-maxBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	b = bytes.TrimRight(b, "\n")
	if len(b) == 0 {
		return "(log is empty)"
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}
