package engine

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// metrics are the engine's Prometheus collectors, registered per instance.
type metrics struct {
	commitSeconds *prometheus.HistogramVec
	batchRequests prometheus.Histogram
	conflicts     prometheus.Counter
	// pipelineLimit is the commit pipeline's depth in force (the pacer's
	// limit), pipelineInFlight the entries in flight; pipelineRefusals
	// counts the flights refused by reason: "predecessor" (chained on one
	// that failed), "reordered" (ZooKeeper received it before its
	// predecessor: sent again) and "guard" (a precondition).
	pipelineLimit, pipelineInFlight prometheus.Gauge
	pipelineRefusals                *prometheus.CounterVec
	barrierWait                     prometheus.Histogram
	// leasesExpired counts the leases this leader expired, under zketcd's
	// name and etcd's (etcdLeasesExpired).
	leasesExpired, etcdLeasesExpired prometheus.Counter
	// backendCommit is etcd's backend commit histogram (its name and
	// buckets) over the same commit multis as commitSeconds.
	backendCommit prometheus.Histogram
	// leaderChanges, proposalsFailed: etcd's counters (etcdmetrics.go);
	// sessionExpirations counts ZooKeeper sessions lost (a new one
	// replacing one this instance had).
	leaderChanges, proposalsFailed, sessionExpirations prometheus.Counter
	// renewals counts keepalives answered after a ZooKeeper multi,
	// renewalMultis those multis and renewalTokens the token writes in them
	// (keepalives of one lease in one multi share a write).
	renewals, renewalMultis, renewalTokens prometheus.Counter
	// renewalsInMemory counts keepalives the leader renewed in memory.
	renewalsInMemory prometheus.Counter
	// leaseTokenReads counts the expiry loop's reads of lease tokens: a
	// baseline for a lease whose clock the leader has not started, and a
	// check at each deadline.
	leaseTokenReads prometheus.Counter
	// linearizableReads counts linearizable reads (and no-op batches) by
	// what answered them: a barrier round trip or a commit that landed;
	// barrierTrips counts the round trips.
	linearizableReads *prometheus.CounterVec
	barrierTrips      prometheus.Counter
	// quotaRefused counts writes refused by the space quota check (or the
	// ZooKeeper heap check); dbSize and dbSizeInUse follow the space
	// accounting before compression, rootStored the stored bytes, alarms
	// the active alarms by type (updated every compaction check, 2 s).
	quotaRefused                    prometheus.Counter
	dbSize, dbSizeInUse, rootStored prometheus.Gauge
	alarms                          *prometheus.GaugeVec
	// corruptChecks counts the corruption check's rounds (on the leader),
	// corruptMismatches the members found with another hash.
	corruptChecks, corruptMismatches prometheus.Counter
	// rootFormat is the root's format as this instance last read it
	// (2: entries and base generations compressed).
	rootFormat prometheus.Gauge
	// proofWindow is the leader proof window in force (proofwindow.go; 0:
	// none), grantedTimeout and zkTick what it derives from; readLease is
	// the read lease's state (1 held, 0 not held, -1 refused: no window).
	proofWindow, grantedTimeout, zkTick, readLease prometheus.Gauge
	// pendingWrites counts the writes received and not answered yet
	// (etcd_server_proposals_pending, read when scraped: etcdmetrics.go).
	pendingWrites atomic.Int64
	// compactions counts the physical compactions this instance published
	// as the leader, by the generation each left: "log" (the log kept,
	// nothing written), "whole" (a whole base), "delta" (a layer).
	compactions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		commitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "zketcd", Name: "commit_duration_seconds",
			Help:    "Time of one commit multi to ZooKeeper, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}, []string{"outcome"}),
		batchRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "zketcd", Name: "commit_batch_ops",
			Help:    "Operations per committed log entry.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "commit_conflicts_total",
			Help: "Commits that lost the log position to another instance.",
		}),
		pipelineLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zketcd", Name: "commit_pipeline_limit",
			Help: "Most log entries the committer keeps in flight now: --commit-pipeline, or the depth the automatic pacing chose.",
		}),
		pipelineInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zketcd", Name: "commit_pipeline_in_flight",
			Help: "Log entries the committer has in flight to ZooKeeper.",
		}),
		pipelineRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "commit_refusals_total",
			Help: "Commits refused, nothing written, by reason: predecessor (chained on a commit that failed), reordered (ZooKeeper received it before the commit it is chained on; sent again as it is), guard (a precondition: fence, lease, read lease).",
		}, []string{"reason"}),
		barrierWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "zketcd", Name: "read_barrier_duration_seconds",
			Help:    "Time linearizable reads waited for the sync barrier and the view.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		leasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "leases_expired_total",
			Help: "Leases this instance expired as the leader.",
		}),
		etcdLeasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_debugging_server_lease_expired_total",
			Help: "Leases this instance expired as the leader (zketcd_leases_expired_total under etcd's name).",
		}),
		backendCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "etcd_disk_backend_commit_duration_seconds",
			Help:    "Time of one commit multi to ZooKeeper, whatever its outcome: what makes a batch of writes durable here (etcd: a bbolt commit). With etcd's buckets; zketcd_commit_duration_seconds has finer ones and the outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_server_leader_changes_seen_total",
			Help: "Changes of the leader instance this instance saw (to a leader other than the last one seen; the first election counts).",
		}),
		proposalsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_server_proposals_failed_total",
			Help: "Writes received by this instance that got no verdict: ZooKeeper or the leader not reached in time, the instance stopping, the client gone (not those etcd's rules refused).",
		}),
		sessionExpirations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "zookeeper_session_expirations_total",
			Help: "ZooKeeper sessions this instance lost: each time a new session replaced one it had (its member, election candidacy and pipeline marker went with the old one).",
		}),
	}
	m.leaseAndReadMetrics()
	m.spaceAndCheckMetrics()
	// Every label value a series can take exists from the start (at 0), so
	// that alerts and dashboards find the series before the first event.
	for _, reason := range []string{"predecessor", "reordered", "guard"} {
		m.pipelineRefusals.WithLabelValues(reason)
	}
	for _, via := range []string{"barrier", "commit", "lease"} {
		m.linearizableReads.WithLabelValues(via)
	}
	for _, gen := range []string{"log", "whole", "delta"} {
		m.compactions.WithLabelValues(gen)
	}
	if reg != nil {
		reg.MustRegister(m.compactions)
		reg.MustRegister(m.proofWindow, m.grantedTimeout, m.zkTick, m.readLease, m.rootFormat)
		reg.MustRegister(m.pipelineLimit, m.pipelineInFlight, m.pipelineRefusals)
		reg.MustRegister(m.etcdLeasesExpired, m.backendCommit, m.leaderChanges, m.proposalsFailed, m.sessionExpirations)
		reg.MustRegister(m.commitSeconds, m.batchRequests, m.conflicts, m.barrierWait, m.leasesExpired,
			m.renewals, m.renewalMultis, m.renewalTokens, m.renewalsInMemory, m.leaseTokenReads, m.linearizableReads, m.barrierTrips,
			m.quotaRefused, m.dbSize, m.dbSizeInUse, m.rootStored, m.alarms, m.corruptChecks, m.corruptMismatches)
	}
	return m
}

// leaseAndReadMetrics makes the lease renewal and linearizable read
// collectors of m.
func (m *metrics) leaseAndReadMetrics() {
	m.renewals = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "lease_keepalives_total",
		Help: "Keepalives this instance renewed through ZooKeeper.",
	})
	m.renewalMultis = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "lease_renewal_multis_total",
		Help: "ZooKeeper multis that renewed leases (each carries every keepalive queued while the previous one was in flight).",
	})
	m.renewalTokens = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "lease_renewal_token_writes_total",
		Help: "Lease renewal token writes in those multis (one per lease per multi).",
	})
	m.renewalsInMemory = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "lease_keepalives_in_memory_total",
		Help: "Keepalives the leader renewed in memory, without a ZooKeeper write.",
	})
	m.leaseTokenReads = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "lease_token_reads_total",
		Help: "Lease tokens the leader's expiry loop read from ZooKeeper: a baseline for each lease when a term begins (not for leases it granted itself) and a check when a deadline passes.",
	})
	m.linearizableReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "linearizable_reads_total",
		Help: "Linearizable reads by what proved them current: a barrier round trip (via=barrier) or a commit of this instance that landed after they arrived (via=commit), or the read lease (via=lease: answered from memory, --read-lease; counted at the leader for its own reads and the ReadIndex it serves).",
	}, []string{"via"})
	m.barrierTrips = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "read_barrier_round_trips_total",
		Help: "ZooKeeper round trips made for linearizable-read barriers.",
	})
}

// spaceAndCheckMetrics makes the space, quota, corruption check, format,
// proof window and compaction collectors of m.
func (m *metrics) spaceAndCheckMetrics() {
	m.quotaRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "quota_refused_total",
		Help: "Writes refused because they did not fit in --quota-backend-bytes, or in what ZooKeeper's heap holds (half of --zk-heap-bytes, while the quota is left at its default).",
	})
	m.dbSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "db_size_bytes",
		Help: "Bytes the root holds (base generations and log entries) before compression: etcd's DB size, what the quota counts.",
	})
	m.dbSizeInUse = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "db_size_in_use_bytes",
		Help: "Bytes before compression of the current base generation and the log after it (what a defragment leaves).",
	})
	m.rootStored = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "zookeeper_root_bytes",
		Help: "Bytes the root holds in ZooKeeper as stored (compressed), counted as db_size_bytes is: what ZooKeeper's heap holds of it, what the ZooKeeper heap check counts.",
	})
	m.alarms = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "alarms_active",
		Help: "Active alarms, by type.",
	}, []string{"alarm"})
	m.corruptChecks = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "corrupt_checks_total",
		Help: "Rounds of the corruption check (--corrupt-check-time) this instance ran as the leader.",
	})
	m.corruptMismatches = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "corrupt_check_mismatches_total",
		Help: "Members whose HashKV differed in a corruption check (each raised the CORRUPT alarm).",
	})
	m.rootFormat = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "root_format",
		Help: "The root's format (<root>/meta) as this instance last read it: what it writes (2: log entries and base generations compressed).",
	})
	m.proofWindow = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "leader_proof_window_seconds",
		Help: "How long after a ZooKeeper transaction of its session the leader answers read-lease reads and keepalives from memory, derived from the granted session timeout and ZooKeeper's tick (0: none, each waits for a round trip).",
	})
	m.grantedTimeout = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "zk_session_timeout_granted_seconds",
		Help: "The session timeout ZooKeeper granted this instance's current connection (it clamps the requested --zk-session-timeout to its minSessionTimeout and maxSessionTimeout).",
	})
	m.zkTick = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "zk_tick_seconds",
		Help: "ZooKeeper's tickTime as the servers' conf four-letter word answered it, or as --zk-tick-time declares it (0: unknown).",
	})
	m.readLease = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "read_lease_state",
		Help: "The read lease (--read-lease): 1 held by this instance, 0 not held, -1 refused because no leader proof window can be shown.",
	})
	m.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "physical_compactions_total",
		Help: "Physical compactions this instance published as the leader, by the generation each left: log (the log kept as it is: mostly live data, nothing written), whole (a whole base written), delta (only what changed since the last generation written).",
	}, []string{"generation"})
}

// commitTimer starts timing a commit; call the result with its outcome.
func (m *metrics) commitTimer() func(zkstore.Outcome, error) {
	start := time.Now()
	return func(o zkstore.Outcome, err error) {
		label := o.String()
		if err != nil {
			label = "error"
		}
		took := time.Since(start).Seconds()
		m.commitSeconds.WithLabelValues(label).Observe(took)
		m.backendCommit.Observe(took)
	}
}

// applied observes an applied entry (the view's position is read when
// scraped: etcdmetrics.go).
func (m *metrics) applied(e *revision.Entry) {
	m.batchRequests.Observe(float64(len(e.Ops)))
}

// leaseExpired counts a lease this leader expired.
func (m *metrics) leaseExpired() {
	m.leasesExpired.Inc()
	m.etcdLeasesExpired.Inc()
}

// writeStarted counts a write as pending (etcd_server_proposals_pending)
// until the function it returns is called with the write's error, which
// counts it as failed (etcd_server_proposals_failed_total) when it did not
// get a verdict: etcd counts a proposal failed when raft would not take it
// or it timed out; here when ZooKeeper or the leader could not be reached
// in time, the instance stopped, or the client went away — not when etcd's
// rules refused it (a failed compare, a missing lease, NOSPACE).
func (m *metrics) writeStarted() func(err error) {
	m.pendingWrites.Add(1)
	return func(err error) {
		m.pendingWrites.Add(-1)
		if proposalFailed(err) {
			m.proposalsFailed.Inc()
		}
	}
}

// proposalFailed reports whether a write's error says it never got a
// verdict (see writeStarted).
func proposalFailed(err error) bool {
	if err == nil {
		return false
	}
	st, ok := translate.Status(err)
	if !ok {
		return true // the log's unavailability: answered "no leader"
	}
	switch status.Code(st) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.Aborted:
		return true
	}
	return false
}
