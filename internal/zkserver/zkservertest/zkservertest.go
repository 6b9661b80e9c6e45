// Package zkservertest starts real ZooKeeper servers for tests.
//
// Every server lives under t.TempDir(), logs through t.Log (visible with
// go test -v or when the test fails) and is stopped by t.Cleanup before the
// temporary directory is removed. Under go test -short every helper skips
// the test (see [SkipShort]), so the short suite needs no Java; otherwise a
// helper fails the test with t.Fatalf, never skips it, when Java or the
// ZooKeeper jars are missing, since the project's tests need a real
// ZooKeeper. [Shared] is one server shared by a test binary's tests.
//
// The helpers may be called from parallel tests; all servers of a test
// binary draw their ports from one process-wide allocator, so they never
// collide with each other.
package zkservertest

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// startBudget bounds a helper's whole start, retries included.
const startBudget = 3 * time.Minute

// Options returns the options the helpers use: Dir is a new t.TempDir() and
// Logger writes through t.Log at info level. Change fields before passing
// them to [StandaloneWith] or [EnsembleWith]. It skips the test under
// go test -short: whatever the options are for needs Java.
func Options(t testing.TB) zkserver.Options {
	t.Helper()
	SkipShort(t)
	return zkserver.Options{
		Dir:    t.TempDir(),
		Logger: logrus.NewEntry(testLogger(t)),
	}
}

// Standalone starts a standalone ZooKeeper server with [Options] and
// registers its Stop with t.Cleanup. It fails the test if the server cannot
// be started.
func Standalone(t testing.TB) *zkserver.Server {
	t.Helper()
	return StandaloneWith(t, Options(t))
}

// StandaloneWith is [Standalone] with caller-supplied options; an empty Dir
// becomes t.TempDir() and a nil Logger logs through t.Log.
func StandaloneWith(t testing.TB, opts zkserver.Options) *zkserver.Server {
	t.Helper()
	opts = fill(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), startBudget)
	defer cancel()
	s, err := zkserver.StartStandalone(ctx, opts)
	if err != nil {
		t.Fatalf("zkservertest: start standalone ZooKeeper: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("zkservertest: stop ZooKeeper %s: %v", s.Addr(), err)
		}
	})
	return s
}

// Ensemble starts an ensemble of n members with [Options], waits for its
// quorum and registers its Stop with t.Cleanup. It fails the test if the
// ensemble cannot be started.
func Ensemble(t testing.TB, n int) *zkserver.Ensemble {
	t.Helper()
	return EnsembleWith(t, n, Options(t))
}

// EnsembleWith is [Ensemble] with caller-supplied options; an empty Dir
// becomes t.TempDir() and a nil Logger logs through t.Log.
func EnsembleWith(t testing.TB, n int, opts zkserver.Options) *zkserver.Ensemble {
	t.Helper()
	opts = fill(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), startBudget)
	defer cancel()
	e, err := zkserver.StartEnsemble(ctx, n, opts)
	if err != nil {
		t.Fatalf("zkservertest: start ZooKeeper ensemble of %d: %v", n, err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("zkservertest: stop ZooKeeper ensemble %s: %v", e.ConnectString(), err)
		}
	})
	return e
}

// fill completes opts and fails the test if ZooKeeper cannot run here.
func fill(t testing.TB, opts zkserver.Options) zkserver.Options {
	t.Helper()
	SkipShort(t)
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(testLogger(t))
	}
	if err := zkserver.Preflight(opts); err != nil {
		t.Fatalf("zkservertest: cannot run ZooKeeper for this test: %v", err)
	}
	return opts
}

// testLogger returns a logger that writes through t.Log while the test runs
// and to stderr afterwards (t.Log would panic then).
func testLogger(t testing.TB) *logrus.Logger {
	w := &tbWriter{tb: t}
	// Registered before the servers' Stop, so it runs after it (cleanups
	// run last-in first-out) and Stop's log lines still reach t.Log.
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(logrus.InfoLevel)
	return l
}

type tbWriter struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return os.Stderr.Write(p)
	}
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
