package diff_test

import (
	"testing"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/diff"
	"github.com/zketcd/zketcd/integration/etcdoracle"
)

// watchEtcd and watchZketcd start the targets of the watch scenarios with
// the settings they require (diff.WatchProgressInterval and
// diff.WatchMaxRequestBytes).
//
// etcd keeps its progress interval in a process-wide variable that every
// embedded server started with a non-zero interval overwrites; the watch
// tests run after the KV tests' parallel subtests have finished (top-level
// tests run one at a time) and all use the same interval.
func watchEtcd() diff.Factory {
	return diff.EtcdFactory(
		etcdoracle.WithWatchProgressNotifyInterval(diff.WatchProgressInterval),
		etcdoracle.WithMaxRequestBytes(diff.WatchMaxRequestBytes),
	)
}

func watchZketcd() diff.Factory {
	return diff.EndpointFactory("zketcd", func(t testing.TB) string {
		return embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{
			ProgressNotifyInterval: diff.WatchProgressInterval,
			MaxRequestBytes:        diff.WatchMaxRequestBytes,
		}).Endpoint()
	})
}

// TestWatchDiffEtcdVsEtcd runs the watch scenarios against two embedded etcd
// servers: it proves the scenarios deterministic.
func TestWatchDiffEtcdVsEtcd(t *testing.T) {
	diff.Runner{A: watchEtcd(), B: watchEtcd(), KeepGoing: true}.Run(t, diff.WatchScenarios())
}

// TestWatchDiffEtcdVsZketcd runs the watch scenarios against embedded etcd
// and zketcd; every watch response must match field by field (cluster_id,
// member_id and raft_term aside).
func TestWatchDiffEtcdVsZketcd(t *testing.T) {
	diff.Runner{A: watchEtcd(), B: watchZketcd(), KeepGoing: true}.Run(t, diff.WatchScenarios())
}
