package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/translate"
)

// Sizing: ZooKeeper keeps every byte of its tree in the JVM heap of each
// server. zketcd cannot read that heap's size (no four-letter word reports
// the JVM's maximum), so the operator gives it (Config.ZooKeeperHeapBytes,
// --zk-heap-bytes: each server's -Xmx). From it:
//
//   - the ZooKeeper heap check (Engine.checkQuota), while --quota-backend-bytes
//     is left at its default: a write that would take the root's bytes as
//     stored (ZooKeeperBytes: compressed, a compaction's previous
//     generation counted too) past ZKHeapDataShare of the heap is refused
//     with NOSPACE, as one past the quota is. The quota counts the bytes
//     before compression (DBSize, what every instance holds), this check
//     what ZooKeeper holds; an explicit quota is the operator's choice for
//     both (a quota bounds the stored bytes too: they are never more than
//     the bytes before compression), and the heap then only warns;
//   - zketcd warns (log, zketcd_zookeeper_heap_warning) when ZooKeeper's
//     data nears that share: zk_approximate_data_size from mntr when the
//     servers answer it (every tenant of the ensemble counted), else the
//     root's own ZooKeeperBytes.
const (
	// ZKHeapDataShare is the share of a ZooKeeper server's heap its data
	// may take (docs/operations.md: a stored byte costs the heap about
	// 1.5–2 bytes with the JVM's collector running).
	ZKHeapDataShare = 0.5
	// zkHeapWarnShare of ZKHeapDataShare × heap starts the warning.
	zkHeapWarnShare = 0.8
	// mntrEvery is how often the servers are asked for their data size.
	mntrEvery = 30 * time.Second
	// warnEvery is how often the warning is logged while it holds.
	warnEvery = 10 * time.Minute
)

// quotaBytes returns the quota in force over DBSize: --quota-backend-bytes
// resolved as etcd does (0: etcd's default of 2 GiB; negative: none).
func (c *Config) quotaBytes() int64 {
	return translate.QuotaBytes(c.QuotaBackendBytes)
}

// zkHeapLimit returns the most bytes the root may hold in ZooKeeper as
// stored (ZooKeeperBytes): ZKHeapDataShare of --zk-heap-bytes while
// --quota-backend-bytes is left at its default, else -1 (no check beyond
// the quota).
func (c *Config) zkHeapLimit() int64 {
	if c.ZooKeeperHeapBytes <= 0 || c.QuotaBackendBytes != 0 {
		return -1
	}
	return c.zkHeapHolds()
}

// zkHeapHolds returns what --zk-heap-bytes holds of data:
// ZKHeapDataShare of it (the heap warning's reference).
func (c *Config) zkHeapHolds() int64 {
	return int64(float64(c.ZooKeeperHeapBytes) * ZKHeapDataShare)
}

// sizing is the state of the heap warning. Used by the compaction loop's
// goroutine only.
type sizing struct {
	dataBytes, heapBytes, warning prometheus.Gauge
	lastMntr                      time.Time
	mntrSize                      int64
	mntrOK                        bool
	lastWarn                      time.Time
}

func newSizing(reg prometheus.Registerer) *sizing {
	s := &sizing{
		dataBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zketcd", Name: "zookeeper_data_bytes",
			Help: "ZooKeeper's data: zk_approximate_data_size from mntr when the servers answer it, else the bytes this root holds as stored (zketcd_zookeeper_root_bytes).",
		}),
		heapBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zketcd", Name: "zookeeper_heap_bytes",
			Help: "The heap of each ZooKeeper server as --zk-heap-bytes gives it (0: not given).",
		}),
		warning: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zketcd", Name: "zookeeper_heap_warning",
			Help: "1 while ZooKeeper's data is above 80% of what its heap holds (half of --zk-heap-bytes; past it, while --quota-backend-bytes is left at its default, writes are refused with NOSPACE).",
		}),
	}
	if reg != nil {
		reg.MustRegister(s.dataBytes, s.heapBytes, s.warning)
	}
	return s
}

// dataSizer is what a Log offers for ZooKeeper's own data size
// (*zkstore.Store: mntr).
type dataSizer interface {
	ApproximateDataSize(ctx context.Context, timeout time.Duration) (int64, bool)
}

// check updates the sizing metrics and warns when ZooKeeper's data nears
// what its heap holds (cfg's --zk-heap-bytes): its data as the servers'
// mntr tells it, asked of store every mntrEvery, else stored, the root's
// bytes as stored. Called from the compaction loop.
func (s *sizing) check(ctx context.Context, store Log, cfg Config, stored int64, lg *logrus.Entry) {
	heap := cfg.ZooKeeperHeapBytes
	s.heapBytes.Set(float64(heap))
	if ds, ok := store.(dataSizer); ok && time.Since(s.lastMntr) >= mntrEvery {
		s.lastMntr = time.Now()
		s.mntrSize, s.mntrOK = ds.ApproximateDataSize(ctx, 2*time.Second)
	}
	data, source := stored, "root"
	if s.mntrOK {
		data, source = s.mntrSize, "mntr zk_approximate_data_size"
	}
	s.dataBytes.Set(float64(data))
	if heap <= 0 {
		return
	}
	holds := cfg.zkHeapHolds()
	if float64(data) < zkHeapWarnShare*float64(holds) {
		s.warning.Set(0)
		return
	}
	s.warning.Set(1)
	if time.Since(s.lastWarn) >= warnEvery {
		s.lastWarn = time.Now()
		lg.WithFields(logrus.Fields{"zookeeper_data_bytes": data, "source": source, "zookeeper_heap_bytes": heap,
			"heap_holds_bytes": holds, "quota_bytes": cfg.quotaBytes()}).
			Warn("ZooKeeper's data nears what its heap holds: compact and defragment, or give the ZooKeeper servers more heap (and --zk-heap-bytes)")
	}
}
