// Package watchtest checks etcd's watch guarantees on zketcd (and on
// embedded etcd, as a control for the checker) with the watchcheck package:
// concurrent writers and watchers on one instance and across instances, a
// paginated LIST followed by a WATCH, faults (ZooKeeper restart, zketcd
// restart, session expiry, a slow consumer), and a watch latency benchmark.
package watchtest

import (
	"os"
	"testing"

	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// sharedZK is one standalone ZooKeeper shared by the tests that do not break
// ZooKeeper; every zketcd instance gets a root of its own on it. Fault tests
// start their own servers.
var sharedZK = zkservertest.NewShared("watchtest", zkserver.Options{})

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }
