package engine_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// shared is one standalone ZooKeeper shared by the package's
// ZooKeeper-backed tests, started by the first of them (the engine's unit
// tests on memlog need none); each test uses its own root. Tests
// that stop ZooKeeper start their own.
var shared struct {
	once sync.Once
	srv  *zkserver.Server
	dir  string
	err  error
}

// zkAddr returns the shared ZooKeeper's address, starting it if needed.
func zkAddr(tb testing.TB) string {
	tb.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "zketcd-engine-test-"); shared.err != nil {
			return
		}
		lg := logrus.New()
		lg.SetLevel(logrus.WarnLevel)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.srv, shared.err = zkserver.StartStandalone(ctx, zkserver.Options{Dir: shared.dir, Logger: logrus.NewEntry(lg)})
	})
	if shared.err != nil {
		tb.Fatalf("start zookeeper: %v", shared.err)
	}
	return shared.srv.Addr()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		_ = shared.srv.Stop()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}
