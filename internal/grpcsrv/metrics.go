package grpcsrv

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// rpcMetrics counts RPCs with the metric names etcd exposes
// (grpc_server_handled_total, grpc_server_started_total,
// grpc_server_handling_seconds), so etcd dashboards work.
type rpcMetrics struct {
	started  *prometheus.CounterVec
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_started_total", Help: "RPCs started on the server.",
		}, []string{"grpc_type", "grpc_service", "grpc_method"}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_handled_total", Help: "RPCs completed on the server, by code.",
		}, []string{"grpc_type", "grpc_service", "grpc_method", "grpc_code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpc_server_handling_seconds", Help: "Time to handle unary RPCs.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"grpc_type", "grpc_service", "grpc_method"}),
	}
	if reg != nil {
		reg.MustRegister(m.started, m.handled, m.duration)
	}
	return m
}

func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

func (m *rpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	svc, meth := splitMethod(info.FullMethod)
	m.started.WithLabelValues("unary", svc, meth).Inc()
	start := time.Now()
	resp, err := handler(ctx, req)
	m.handled.WithLabelValues("unary", svc, meth, status.Code(err).String()).Inc()
	m.duration.WithLabelValues("unary", svc, meth).Observe(time.Since(start).Seconds())
	return resp, err
}

func (m *rpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	svc, meth := splitMethod(info.FullMethod)
	typ := "bidi_stream"
	if !info.IsClientStream {
		typ = "server_stream"
	}
	m.started.WithLabelValues(typ, svc, meth).Inc()
	err := handler(srv, ss)
	m.handled.WithLabelValues(typ, svc, meth, status.Code(err).String()).Inc()
	return err
}

// countingCodec is gRPC's protobuf codec counting the bytes of every
// message it decodes from and encodes for clients (etcd's
// etcd_network_client_grpc_received_bytes_total and _sent_bytes_total,
// counted as etcd counts them: the messages' bytes, before any transport
// compression). Safe for concurrent use.
type countingCodec struct {
	encoding.CodecV2
	sent, received prometheus.Counter
}

// newCountingCodec returns the codec, its counters registered with reg
// (when not nil).
func newCountingCodec(reg prometheus.Registerer) countingCodec {
	c := countingCodec{
		CodecV2: encoding.GetCodecV2(proto.Name),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_network_client_grpc_sent_bytes_total", Help: "Bytes of the gRPC messages sent to clients.",
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_network_client_grpc_received_bytes_total", Help: "Bytes of the gRPC messages received from clients.",
		}),
	}
	if reg != nil {
		reg.MustRegister(c.sent, c.received)
	}
	return c
}

func (c countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := c.CodecV2.Marshal(v)
	c.sent.Add(float64(out.Len()))
	return out, err
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.received.Add(float64(data.Len()))
	return c.CodecV2.Unmarshal(data, v)
}
