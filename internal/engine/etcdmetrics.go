package engine

import (
	"fmt"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/zketcd/zketcd/internal/buildinfo"
)

// etcd's own metric names, where what they measure has a counterpart here
// (docs/metrics.md tables each one, and those without one). The state an
// operator reads at a glance (leader, positions, sizes, keys, watchers,
// versions) is read from the engine when scraped, by stateCollector, so it
// is right from the moment the instance serves (after a recovery, before
// any write) and costs nothing between scrapes; what happens (leader
// changes, failed proposals, commit times, session expirations) is counted
// as it happens, in metrics (metrics.go).

// stateCollector is the Prometheus collector of an engine's state: etcd's
// gauges (has_leader, is_leader, proposals committed/applied/pending,
// quota, DB sizes, keys, revisions, watchers, versions, member ID,
// alarms), the build, and zketcd's own position, lag and ZooKeeper
// session. Collect is safe for concurrent use and takes no lock for long
// (the watch hub's statistics visit every watcher once).
type stateCollector struct {
	b *Engine

	hasLeader, isLeader                                  *prometheus.Desc
	proposalsCommitted, proposalsApplied, proposalsPend  *prometheus.Desc
	quota, dbTotal, dbInUse                              *prometheus.Desc
	keys, currentRev, compactRev                         *prometheus.Desc
	watchers, watchStreams, slowWatchers                 *prometheus.Desc
	serverVersion, clusterVersion, goVersion, serverID   *prometheus.Desc
	alarms                                               *prometheus.Desc
	buildInfo                                            *prometheus.Desc
	appliedRev, appliedLSN, staleSeconds                 *prometheus.Desc
	sessionConnected                                     *prometheus.Desc
	build                                                buildinfo.Info
	serverVersionValue, clusterVersionValue, goVersionID string
}

var _ prometheus.Collector = (*stateCollector)(nil)

func newStateCollector(b *Engine) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &stateCollector{
		b: b,
		hasLeader: d("etcd_server_has_leader",
			"1 while this instance serves: it has a ZooKeeper session, its view caught up with the log's head within the last 3 s and it has not halted; Status then names a leader (etcd: raft knows a leader)."),
		isLeader: d("etcd_server_is_leader",
			"1 while this instance is the elected leader instance (it expires leases, compacts and, with --forward-writes, commits every write)."),
		proposalsCommitted: d("etcd_server_proposals_committed_total",
			"The log position of the newest entry in ZooKeeper as this instance last saw it (etcd: the raft commit index). A gauge, as in etcd."),
		proposalsApplied: d("etcd_server_proposals_applied_total",
			"The log position this instance's view has applied (etcd: the applied index). A gauge, as in etcd."),
		proposalsPend: d("etcd_server_proposals_pending",
			"Writes received by this instance and not answered yet (queued, in the commit pipeline, or forwarded to the leader)."),
		quota: d("etcd_server_quota_backend_bytes",
			"The space quota in force (--quota-backend-bytes; -1: none): what etcd_mvcc_db_total_size_in_bytes may reach before writes raise NOSPACE."),
		dbTotal: d("etcd_mvcc_db_total_size_in_bytes",
			"Bytes the root holds before compression: the current base generation and the log after it, plus what the last physical compaction keeps for one cycle (etcd: the bbolt file). What the quota counts."),
		dbInUse: d("etcd_mvcc_db_total_size_in_use_in_bytes",
			"Bytes before compression of the current base generation and the log after it: what a defragment leaves."),
		keys: d("etcd_debugging_mvcc_keys_total",
			"Keys in the view's index: live keys and deleted ones whose history a compaction has not dropped yet."),
		currentRev: d("etcd_debugging_mvcc_current_revision",
			"The revision of this instance's view."),
		compactRev: d("etcd_debugging_mvcc_compact_revision",
			"The revision of the last compaction the view applied (-1: none yet)."),
		watchers: d("etcd_debugging_mvcc_watcher_total",
			"Watchers on this instance's watch streams."),
		watchStreams: d("etcd_debugging_mvcc_watch_stream_total",
			"Open watch streams on this instance."),
		slowWatchers: d("etcd_debugging_mvcc_slow_watcher_total",
			"Watchers not caught up: catching up from history, or whose stream's buffer is full (victims)."),
		serverVersion: d("etcd_server_version",
			"The etcd API version this instance implements (1, with it as the label); zketcd's own version is zketcd_build_info's.", "server_version"),
		clusterVersion: d("etcd_cluster_version",
			"The etcd cluster version Status and /version report (1, with it as the label).", "cluster_version"),
		goVersion: d("etcd_server_go_version",
			"The Go toolchain of this build (1, with it as the label).", "server_go_version"),
		serverID: d("etcd_server_id",
			"This instance's member ID in hexadecimal (1, with it as the label).", "server_id"),
		alarms: d("etcd_debugging_server_alarms",
			"Active alarms (1 per alarm, with the member it is for and its type).", "server_id", "alarm_type"),
		buildInfo: d("zketcd_build_info",
			"The running build (1, with its zketcd version, git commit and Go toolchain as labels).", "version", "commit", "goversion"),
		appliedRev: d("zketcd_applied_revision",
			"Revision of this instance's view (set from recovery on)."),
		appliedLSN: d("zketcd_applied_log_position",
			"Log entry this instance's view has applied (set from recovery on): compare across instances for lag."),
		staleSeconds: d("zketcd_view_stale_seconds",
			"Seconds since this instance's view was last caught up with the log's head (the tailer looks at least every second; past 3 s the instance reports no leader)."),
		sessionConnected: d("zketcd_zookeeper_session_connected",
			"1 while this instance is connected to ZooKeeper with a live session."),
		build:               buildinfo.Get(),
		serverVersionValue:  version.Version,
		clusterVersionValue: version.Cluster(version.Version),
		goVersionID:         runtime.Version(),
	}
}

// Describe sends every series' description.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.hasLeader, c.isLeader, c.proposalsCommitted, c.proposalsApplied, c.proposalsPend,
		c.quota, c.dbTotal, c.dbInUse, c.keys, c.currentRev, c.compactRev,
		c.watchers, c.watchStreams, c.slowWatchers,
		c.serverVersion, c.clusterVersion, c.goVersion, c.serverID, c.alarms, c.buildInfo,
		c.appliedRev, c.appliedLSN, c.staleSeconds, c.sessionConnected,
	} {
		ch <- d
	}
}

// Collect reads the engine's state once and sends every series.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.b
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	bool01 := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	st := b.view.State()
	head := b.Head()
	leader, _ := b.Leader()
	_, connected := b.store.Session()
	logical, _ := b.space.sizes(st.LSN)
	ws := b.hub.Stats()

	gauge(c.hasLeader, bool01(b.Health() == nil))
	gauge(c.isLeader, bool01(leader))
	gauge(c.proposalsCommitted, float64(max(head.LSN, st.LSN)))
	gauge(c.proposalsApplied, float64(st.LSN))
	gauge(c.proposalsPend, float64(b.metrics.pendingWrites.Load()))
	gauge(c.quota, float64(b.QuotaBytes()))
	gauge(c.dbTotal, float64(logical.total))
	gauge(c.dbInUse, float64(logical.inUse))
	gauge(c.keys, float64(b.view.IndexLen()))
	gauge(c.currentRev, float64(st.Rev))
	gauge(c.compactRev, float64(st.CompactRev))
	gauge(c.watchers, float64(ws.Synced+ws.Unsynced+ws.Victims))
	gauge(c.watchStreams, float64(ws.Streams))
	gauge(c.slowWatchers, float64(ws.Unsynced+ws.Victims))
	gauge(c.serverVersion, 1, c.serverVersionValue)
	gauge(c.clusterVersion, 1, c.clusterVersionValue)
	gauge(c.goVersion, 1, c.goVersionID)
	gauge(c.serverID, 1, fmt.Sprintf("%x", b.memberID))
	for _, a := range b.view.Alarms() {
		gauge(c.alarms, 1, fmt.Sprintf("%x", a.Member), pb.AlarmType(a.Type).String())
	}
	gauge(c.buildInfo, 1, c.build.Version, c.build.Commit, c.build.GoVersion)
	gauge(c.appliedRev, float64(st.Rev))
	gauge(c.appliedLSN, float64(st.LSN))
	stale := 0.0
	if hs := b.tail.lastHead.Load(); hs != nil {
		stale = time.Since(hs.at).Seconds()
	}
	gauge(c.staleSeconds, stale)
	gauge(c.sessionConnected, bool01(connected))
}

// registerStateMetrics registers the engine's state collector (see
// stateCollector) when reg is not nil. Called once the view is recovered.
func (b *Engine) registerStateMetrics(reg prometheus.Registerer) {
	if reg != nil {
		reg.MustRegister(newStateCollector(b))
	}
}

// followLeaderAndSession counts the leader changes this instance sees
// (etcd_server_leader_changes_seen_total: as etcd, a change to a leader
// other than the last one seen, the first election included) and the
// ZooKeeper sessions it lost (zketcd_zookeeper_session_expirations_total:
// a new session replacing one it had), until the engine stops.
func (b *Engine) followLeaderAndSession() {
	var lead uint64
	sid, _ := b.store.Session()
	for {
		elected, session := b.election.Changed(), b.store.SessionChanged()
		if _, _, id := b.election.State(); id != lead {
			if id != 0 {
				b.metrics.leaderChanges.Inc()
			}
			lead = id
		}
		if id, _ := b.store.Session(); id != 0 && id != sid {
			if sid != 0 {
				b.metrics.sessionExpirations.Inc()
			}
			sid = id
		}
		select {
		case <-elected:
		case <-session:
		case <-b.ctx.Done():
			return
		}
	}
}
