package engine

import (
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/translate"
)

// The quota is etcd's whatever --zk-heap-bytes says; the heap bounds the
// root's stored bytes on its own (half the heap) while the quota is left
// at its default, and its warning turns on once the root's data passes 80%
// of that half.
func TestTheZooKeeperHeapSetsItsOwnLimitAndTheWarning(t *testing.T) {
	for _, tc := range []struct {
		quota, heap, want, heapLimit int64
	}{
		{0, 0, translate.DefaultQuotaBytes, -1},
		{0, 8 << 30, translate.DefaultQuotaBytes, 4 << 30},
		{1 << 30, 8 << 30, 1 << 30, -1},
		{-1, 8 << 30, -1, -1},
	} {
		cfg := Config{QuotaBackendBytes: tc.quota, ZooKeeperHeapBytes: tc.heap}
		if got, limit := cfg.quotaBytes(), cfg.zkHeapLimit(); got != tc.want || limit != tc.heapLimit {
			t.Errorf("quota %d, heap %d: quota %d, heap limit %d; want %d, %d", tc.quota, tc.heap, got, limit, tc.want, tc.heapLimit)
		}
	}

	st := memlog.New(memlog.Options{})
	reg := prometheus.NewRegistry()
	b, _ := engine(t, st, "a", func(c *Config) { c.ZooKeeperHeapBytes = 256 << 10; c.Registerer = reg })
	lg := logrus.NewEntry(logrus.New())
	b.compaction.checkSizing(lg)
	if v := testutil.ToFloat64(b.compaction.sizing.warning); v != 0 {
		t.Fatalf("warning %v on an empty root", v)
	}
	// 128 KiB hold 102 KiB before the warning.
	for i := 0; i < 30; i++ {
		put(t, b, "k"+strings.Repeat("x", i), strings.Repeat("v", 4<<10))
	}
	b.compaction.checkSizing(lg)
	if v := testutil.ToFloat64(b.compaction.sizing.warning); v != 1 {
		t.Fatalf("warning %v with %d bytes of a 256 KiB heap", v, b.DBSize())
	}
	if v := testutil.ToFloat64(b.compaction.sizing.heapBytes); v != 256<<10 {
		t.Fatalf("zketcd_zookeeper_heap_bytes %v", v)
	}
}

// With the quota at its default (2 GiB, far off here), --zk-heap-bytes
// refuses the write that would take the root's stored bytes past half the
// heap, with etcd's NOSPACE.
func TestTheZooKeeperHeapCheckRefusesWritesPastHalfTheHeap(t *testing.T) {
	st := memlog.New(memlog.Options{})
	b, _ := engine(t, st, "a", func(c *Config) { c.ZooKeeperHeapBytes = 64 << 10 })
	n := fill(t, b)
	if stored := b.ZooKeeperBytes(); n == 0 || stored > 32<<10 || stored < 32<<10-2<<10 {
		t.Fatalf("refused after %d puts with %d bytes stored, want just under 32 KiB", n, stored)
	}
	if !alarmOf(b, pb.AlarmType_NOSPACE, b.MemberID()) {
		t.Fatalf("alarms: %v", b.Alarms())
	}
}
