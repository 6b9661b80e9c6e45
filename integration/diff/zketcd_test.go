package diff_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/integration/diff"
	"github.com/zketcd/zketcd/internal/zketcdtest"
	"github.com/zketcd/zketcd/internal/zkserver"
)

// zkAddr is one ZooKeeper shared by the package's tests: every scenario
// gets a fresh zketcd root on it, so revisions start at 1 as on a fresh etcd.
var zkAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zketcd-diff-")
	if err != nil {
		panic(err)
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := zkserver.StartStandalone(ctx, zkserver.Options{Dir: dir, Logger: logrus.NewEntry(lg),
		ExtraConfig: map[string]string{"forceSync": "no"}})
	cancel()
	if err != nil {
		panic("start zookeeper: " + err.Error())
	}
	zkAddr = srv.Addr()
	code := m.Run()
	_ = srv.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// zketcdFactory starts a fresh zketcd (a new root) per scenario.
func zketcdFactory() diff.Factory {
	return diff.EndpointFactory("zketcd", func(t testing.TB) string {
		return zketcdtest.Start(t, []string{zkAddr}, zketcdtest.Options{}).Endpoint()
	})
}

// knownDifferences are scenarios where zketcd does not behave as etcd yet,
// with the reason. Each one is a tracked gap, not an accepted difference.
var knownDifferences = map[string]string{}

// TestDiffEtcdVsZketcd runs the KV table against embedded etcd (the oracle)
// and zketcd; every response must match field by field.
func TestDiffEtcdVsZketcd(t *testing.T) {
	var scenarios []diff.Scenario
	for _, s := range diff.KVScenarios() {
		if why, ok := knownDifferences[s.Name]; ok {
			t.Logf("skipping %s: %s", s.Name, why)
			continue
		}
		scenarios = append(scenarios, s)
	}
	diff.Runner{A: diff.EtcdFactory(), B: zketcdFactory(), KeepGoing: true}.Run(t, scenarios)
}
