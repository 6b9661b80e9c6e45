package zkservertest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// Shared is one standalone ZooKeeper shared by the tests of a test binary
// that do not break ZooKeeper (each test uses a root of its own on it; tests
// that stop or partition ZooKeeper start their own servers). It starts when
// the first test asks for its address, so a binary whose selected tests
// need no ZooKeeper starts none, and [Shared.Run], called from TestMain,
// stops it after the tests. The server lives in a new temporary directory
// named after the binary, logs at warn level and runs with forceSync=no
// unless the options say otherwise.
//
// Declare one per test binary and run it from TestMain:
//
//	var zk = zkservertest.NewShared("engine", zkserver.Options{})
//
//	func TestMain(m *testing.M) { os.Exit(zk.Run(m)) }
//
// A test then calls zk.Addr(t). Safe for use by parallel tests.
type Shared struct {
	name string
	opts zkserver.Options

	once sync.Once
	mu   sync.Mutex // guards srv and dir against Run's stop
	srv  *zkserver.Server
	dir  string
	err  error

	roots atomic.Int64 // FreshRoot's counter
}

// NewShared returns a shared server named name (the prefix of its
// directory) that will start with opts; opts may set JVM flags and the
// like, and its Dir and Logger are replaced.
func NewShared(name string, opts zkserver.Options) *Shared {
	return &Shared{name: name, opts: opts}
}

// Addr returns the shared server's client address, starting the server on
// the first call. Under go test -short it skips the test instead (the
// server needs Java). It fails the test if the server could not start,
// and every later caller with the same error.
func (s *Shared) Addr(tb testing.TB) string {
	tb.Helper()
	SkipShort(tb)
	s.once.Do(s.start)
	if s.err != nil {
		tb.Fatalf("zkservertest: start the shared ZooKeeper: %v", s.err)
	}
	return s.srv.Addr()
}

// FreshRoot returns a znode path no earlier call returned, under a folder
// named after the server ("/engine/7"): a root of its own for one test.
// The path need not exist; the server is new for every test binary, so the
// path is unused. Safe for use by parallel tests.
func (s *Shared) FreshRoot() string {
	return fmt.Sprintf("/%s/%d", s.name, s.roots.Add(1))
}

func (s *Shared) start() {
	dir, err := os.MkdirTemp("", "zketcd-"+s.name+"-")
	if err != nil {
		s.err = err
		return
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	opts := s.opts
	opts.Dir, opts.Logger = dir, logrus.NewEntry(lg)
	if opts.ExtraConfig == nil {
		opts.ExtraConfig = map[string]string{"forceSync": "no"}
	}
	if err := zkserver.Preflight(opts); err != nil {
		s.err = err
		os.RemoveAll(dir)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), startBudget)
	defer cancel()
	srv, err := zkserver.StartStandalone(ctx, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dir = dir
	if err != nil {
		s.err = fmt.Errorf("start standalone ZooKeeper: %w", err)
		return
	}
	s.srv = srv
}

// Run runs the tests (m.Run), then stops the server if a test started it
// and removes its directory; it returns the tests' exit code for os.Exit.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		if err := s.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "zkservertest: stop the shared ZooKeeper:", err)
		}
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
	return code
}

// SkipShort skips the test under go test -short: it needs Java and
// ZooKeeper. Every helper of this package that starts a server calls it;
// a test that needs Java some other way calls it first.
func SkipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs Java and ZooKeeper: skipped under -short")
	}
}
