package zkservertest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// Main runs a test binary's tests (m.Run) against one standalone ZooKeeper
// shared by all of them, whose address it stores in *addr first, then stops
// the server and exits with the tests' code. The server lives in a new
// temporary directory named after name, logs at warn level, and runs with
// forceSync=no unless opts.ExtraConfig says otherwise; opts may set JVM
// flags and the like. Call it from TestMain. It exits with status 1 if
// ZooKeeper does not start.
func Main(m *testing.M, name string, opts zkserver.Options, addr *string) {
	dir, err := os.MkdirTemp("", "zketcd-"+name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	opts.Dir, opts.Logger = dir, logrus.NewEntry(lg)
	if opts.ExtraConfig == nil {
		opts.ExtraConfig = map[string]string{"forceSync": "no"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startBudget)
	srv, err := zkserver.StartStandalone(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start zookeeper:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	*addr = srv.Addr()
	code := m.Run()
	_ = srv.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}
