package engine_test

import (
	"os"
	"testing"

	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// sharedZK is one standalone ZooKeeper shared by the package's
// ZooKeeper-backed tests, started by the first of them (the engine's unit
// tests on memlog need none); each test uses its own root. Tests that stop
// ZooKeeper start their own.
var sharedZK = zkservertest.NewShared("engine-test", zkserver.Options{})

// zkAddr returns the shared ZooKeeper's address, starting it if needed; it
// skips the test under -short.
func zkAddr(tb testing.TB) string {
	tb.Helper()
	return sharedZK.Addr(tb)
}

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }
