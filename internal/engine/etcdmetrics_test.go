package engine

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zketcd/zketcd/internal/engine/memlog"
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
