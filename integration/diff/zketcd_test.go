package diff_test

import (
	"os"
	"testing"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/diff"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// sharedZK is one ZooKeeper shared by the package's tests: every scenario
// gets a fresh zketcd root on it, so revisions start at 1 as on a fresh etcd.
var sharedZK = zkservertest.NewShared("diff", zkserver.Options{})

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }

// zketcdFactory starts a fresh zketcd (a new root) per scenario.
func zketcdFactory() diff.Factory {
	return diff.EndpointFactory("zketcd", func(t testing.TB) string {
		return embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{}).Endpoint()
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
