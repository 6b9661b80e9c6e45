package httpgw

import "github.com/prometheus/client_golang/prometheus"

// metrics are the client URLs' connection and refusal counts.
type metrics struct {
	connections prometheus.Gauge
	refused     *prometheus.CounterVec
}

// newMetrics registers them on reg (nil: kept unregistered); limit is the
// connection bound (0 or less: unbounded).
func newMetrics(reg prometheus.Registerer, limit int) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zketcd_client_connections",
			Help: "Open connections on the client URLs (gRPC and HTTP).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zketcd_http_requests_refused_total",
			Help: "HTTP requests on the client URLs refused by reason: host (not in --host-whitelist), origin (not in --cors).",
		}, []string{"reason"}),
	}
	for _, r := range []string{"host", "origin"} {
		m.refused.WithLabelValues(r)
	}
	limitGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "zketcd_client_connections_limit",
		Help: "Bound of the client URLs' connections (0: unbounded); Accept waits while it is reached.",
	})
	limitGauge.Set(float64(max(limit, 0)))
	if reg != nil {
		reg.MustRegister(m.connections, m.refused, limitGauge)
	}
	return m
}
