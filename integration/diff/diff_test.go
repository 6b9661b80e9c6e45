package diff_test

import (
	"testing"

	"github.com/zketcd/zketcd/integration/diff"
	"github.com/zketcd/zketcd/integration/etcdoracle"
)

// TestDiffEtcdVsEtcd runs the whole KV table against two independent
// embedded etcd servers. It proves the framework and that every scenario is
// deterministic: any difference here is a bug in a scenario, not in a server.
func TestDiffEtcdVsEtcd(t *testing.T) {
	diff.Run(t, diff.KVScenarios(), diff.EtcdFactory(), diff.EtcdFactory())
}

func TestCheckStatus(t *testing.T) {
	o := etcdoracle.Start(t)
	resp := diff.CheckStatus(t, o.Client(t))
	t.Logf("etcd version %s", resp.Version)
}
