package engine

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/zketcd/zketcd/internal/buildinfo"
	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/watchbridge"
)

// gathered returns the value of the one series of name in reg whose labels
// include want (nil: any), and whether there is one.
func gathered(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// A restarted instance reports where its recovered view is at once, not 0
// until the next write: operators compare these across instances for lag.
func TestAppliedPositionIsReportedFromRecovery(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	for _, k := range []string{"a", "b", "c"} {
		put(t, a, k, "v")
	}
	a.Close()

	reg := prometheus.NewRegistry()
	b, _ := engine(t, st, "b", func(c *Config) { c.Registerer = reg })
	s := b.State()
	if s.Rev < 4 {
		t.Fatalf("recovered at revision %d", s.Rev)
	}
	for name, want := range map[string]int64{"zketcd_applied_revision": s.Rev, "zketcd_applied_log_position": s.LSN} {
		if got, _ := gathered(t, reg, name, nil); got != float64(want) {
			t.Errorf("%s = %v after recovery, want %d", name, got, want)
		}
	}
}

// etcd's series mean here what the docs say: leader and leader changes,
// log positions, pending and failed writes (a refused compare is not a
// failure), sizes and quota, keys (deleted ones until compacted),
// watchers and streams, versions and IDs, and ZooKeeper sessions lost.
func TestEtcdSeriesReportTheInstance(t *testing.T) {
	st := memlog.New(memlog.Options{})
	ra, rb := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, ca := engine(t, st, "a", func(c *Config) { c.Registerer = ra })
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { l, _ := a.Leader(); return l })
	engine(t, st, "b", func(c *Config) { c.Registerer = rb; c.QuotaBackendBytes = 1 << 20 })
	value := func(reg *prometheus.Registry, name string, labels map[string]string) float64 {
		t.Helper()
		return mustGather(t, reg, name, labels)
	}
	testutil.Eventually(t, 5*time.Second, "b has a leader", func() bool { return value(rb, "etcd_server_has_leader", nil) == 1 })
	for _, tc := range []struct {
		reg  *prometheus.Registry
		name string
		want float64
	}{
		{ra, "etcd_server_is_leader", 1},
		{rb, "etcd_server_is_leader", 0},
		{ra, "etcd_server_has_leader", 1},
		{ra, "etcd_server_leader_changes_seen_total", 1},
		{rb, "etcd_server_leader_changes_seen_total", 1},
		{ra, "etcd_server_quota_backend_bytes", float64(translate.DefaultQuotaBytes)},
		{rb, "etcd_server_quota_backend_bytes", 1 << 20},
		{ra, "etcd_server_proposals_pending", 0},
		{ra, "etcd_server_proposals_failed_total", 0},
		{ra, "zketcd_zookeeper_session_connected", 1},
	} {
		if got := value(tc.reg, tc.name, nil); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}

	put(t, a, "k1", "v")
	put(t, a, "k2", "v")
	ctx, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelAll()
	if _, err := a.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k1")}); err != nil {
		t.Fatal(err)
	}
	refused := &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("k2"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_Version{Version: 7}}}, Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k3"), Value: []byte("v")}}}}}
	if _, err := a.Txn(ctx, refused); err != nil {
		t.Fatal(err)
	}
	s := a.State()
	ws := a.NewWatchStream(0)
	defer ws.Close()
	for _, k := range []string{"k1", "k2"} {
		if _, err := ws.Watch(watchbridge.AutoWatchID, []byte(k), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]float64{
		"etcd_server_proposals_applied_total":     float64(s.LSN),
		"etcd_debugging_mvcc_current_revision":    float64(s.Rev),
		"etcd_debugging_mvcc_compact_revision":    -1,
		"etcd_debugging_mvcc_keys_total":          3, // k1 deleted, still indexed; k2; k3
		"etcd_mvcc_db_total_size_in_bytes":        float64(a.DBSize()),
		"etcd_mvcc_db_total_size_in_use_in_bytes": float64(a.DBSizeInUse()),
		"etcd_debugging_mvcc_watcher_total":       2,
		"etcd_debugging_mvcc_watch_stream_total":  1,
		"etcd_debugging_mvcc_slow_watcher_total":  0,
		"etcd_server_proposals_failed_total":      0,
		"etcd_server_proposals_pending":           0,
	} {
		if got := value(ra, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value(ra, "etcd_server_proposals_committed_total", nil); got < float64(s.LSN) {
		t.Errorf("proposals committed %v below applied %d", got, s.LSN)
	}
	if got := value(ra, "etcd_disk_backend_commit_duration_seconds", nil); got < 4 {
		t.Errorf("%v commits observed after 4 writes", got)
	}
	checkVersionSeries(t, ra, a.MemberID())
	if _, err := a.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 0xab, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if got := value(ra, "etcd_debugging_server_alarms", map[string]string{"server_id": "ab", "alarm_type": "NOSPACE"}); got != 1 {
		t.Errorf("alarm series %v", got)
	}

	// A write that cannot reach ZooKeeper fails, and is no longer pending.
	st.SetUnavailable(true)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := a.DeleteRange(short, &pb.DeleteRangeRequest{Key: []byte("k2")})
	cancel()
	st.SetUnavailable(false)
	if err == nil {
		t.Fatal("a delete succeeded with the log unavailable")
	}
	if got := value(ra, "etcd_server_proposals_failed_total", nil); got != 1 {
		t.Errorf("proposals failed %v after one write timed out (%v)", got, err)
	}
	testutil.Eventually(t, 5*time.Second, "nothing pending", func() bool { return value(ra, "etcd_server_proposals_pending", nil) == 0 })

	// A lost session is counted; the new one is connected.
	ca.ExpireSession()
	testutil.Eventually(t, 5*time.Second, "the expiration counted", func() bool {
		return value(ra, "zketcd_zookeeper_session_expirations_total", nil) == 1
	})
	if got := value(ra, "zketcd_zookeeper_session_connected", nil); got != 1 {
		t.Errorf("connected %v on the new session", got)
	}
	// The expiry gave b the lead: one more change seen by b.
	testutil.Eventually(t, 5*time.Second, "b leads and counts the change", func() bool {
		return value(rb, "etcd_server_is_leader", nil) == 1 && value(rb, "etcd_server_leader_changes_seen_total", nil) == 2
	})
}

// mustGather returns the value of the series name with labels in reg,
// failing the test if there is none.
func mustGather(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := gathered(t, reg, name, labels)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// checkVersionSeries checks the series of reg that say which build, API
// and member answer (1, with it in their labels).
func checkVersionSeries(t *testing.T, reg *prometheus.Registry, member uint64) {
	t.Helper()
	info := buildinfo.Get()
	for name, labels := range map[string]map[string]string{
		"etcd_server_version":    {"server_version": version.Version},
		"etcd_cluster_version":   {"cluster_version": version.Cluster(version.Version)},
		"etcd_server_go_version": {"server_go_version": runtime.Version()},
		"etcd_server_id":         {"server_id": fmt.Sprintf("%x", member)},
		"zketcd_build_info":      {"version": info.Version, "commit": info.Commit, "goversion": info.GoVersion},
	} {
		if got := mustGather(t, reg, name, labels); got != 1 {
			t.Errorf("%s%v = %v", name, labels, got)
		}
	}
}
