package engine

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/translate"
)

// With --zk-heap-bytes the quota's default is half the heap (an explicit
// quota still wins), and the heap warning turns on once the root's data
// passes 80% of that half, and off again below it.
func TestTheZooKeeperHeapSetsTheQuotaDefaultAndTheWarning(t *testing.T) {
	for _, tc := range []struct {
		quota, heap, want int64
	}{
		{0, 0, translate.DefaultQuotaBytes},
		{0, 8 << 30, 4 << 30},
		{1 << 30, 8 << 30, 1 << 30},
		{-1, 8 << 30, -1},
	} {
		b := &Engine{cfg: Config{QuotaBackendBytes: tc.quota, ZooKeeperHeapBytes: tc.heap}}
		if got := b.QuotaBytes(); got != tc.want {
			t.Errorf("quota %d, heap %d: %d, want %d", tc.quota, tc.heap, got, tc.want)
		}
	}

	st := memlog.New(memlog.Options{})
	reg := prometheus.NewRegistry()
	b, _ := engine(t, st, "a", func(c *Config) { c.ZooKeeperHeapBytes = 256 << 10; c.Registerer = reg })
	lg := logrus.NewEntry(logrus.New())
	b.checkSizing(lg)
	if v := testutil.ToFloat64(b.sizing.warning); v != 0 {
		t.Fatalf("warning %v on an empty root", v)
	}
	// 128 KiB hold 102 KiB before the warning.
	for i := 0; i < 30; i++ {
		put(t, b, "k"+strings.Repeat("x", i), strings.Repeat("v", 4<<10))
	}
	b.checkSizing(lg)
	if v := testutil.ToFloat64(b.sizing.warning); v != 1 {
		t.Fatalf("warning %v with %d bytes of a 256 KiB heap", v, b.DBSize())
	}
	if v := testutil.ToFloat64(b.sizing.heapBytes); v != 256<<10 {
		t.Fatalf("zketcd_zookeeper_heap_bytes %v", v)
	}
}
