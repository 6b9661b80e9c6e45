package backend_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// zkAddr is one standalone ZooKeeper shared by the package's tests; each
// test uses its own root. Tests that stop ZooKeeper start their own.
var zkAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zketcd-backend-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := zkserver.StartStandalone(ctx, zkserver.Options{Dir: dir, Logger: logrus.NewEntry(lg)})
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
