// Package watchtest checks etcd's watch guarantees on zketcd (and on
// embedded etcd, as a control for the checker) with the watchcheck package:
// concurrent writers and watchers on one instance and across instances, a
// paginated LIST followed by a WATCH, faults (ZooKeeper restart, zketcd
// restart, session expiry, a slow consumer), and a watch latency benchmark.
package watchtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// zkAddr is one standalone ZooKeeper shared by the tests that do not break
// ZooKeeper; every zketcd instance gets a root of its own on it. Fault tests
// start their own servers.
var zkAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zketcd-watchtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := zkserver.StartStandalone(ctx, zkserver.Options{Dir: dir, Logger: logrus.NewEntry(lg),
		ExtraConfig: map[string]string{"forceSync": "no"}})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start zookeeper:", err)
		os.Exit(1)
	}
	zkAddr = srv.Addr()
	code := m.Run()
	_ = srv.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}
