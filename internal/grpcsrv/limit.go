package grpcsrv

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// DefaultMaxConcurrentRequests is zketcd's default bound on requests in
// flight across all clients (--max-concurrent-requests). It is far above
// what kube-apiserver keeps in flight (its own default limits total 600
// concurrent requests) and low enough that a flood fails fast instead of
// growing the commit queue and the goroutine count without bound.
const DefaultMaxConcurrentRequests = 10000

// healthService is exempt from the request limit: a flooded instance must
// still answer its health checks.
const healthService = "/grpc.health.v1.Health/"

// requestLimiter bounds the requests in flight: unary RPCs and
// server-streaming RPCs (RangeStream; the health service excepted). Watch
// and LeaseKeepAlive streams are long-lived and bounded per connection by
// MaxConcurrentStreams and per stream by MaxWatchersPerStream instead. When
// full, a request fails at once with etcd's "too many requests"
// (ResourceExhausted), which clients see as etcd's overload error, rather
// than waiting in an unbounded queue.
type requestLimiter struct {
	slots    chan struct{}
	inflight prometheus.Gauge
	rejected prometheus.Counter
}

// newRequestLimiter returns a limiter for max requests, or nil (no bound)
// for max <= 0.
func newRequestLimiter(max int, reg prometheus.Registerer) *requestLimiter {
	if max <= 0 {
		return nil
	}
	l := &requestLimiter{
		slots: make(chan struct{}, max),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zketcd_grpc_requests_in_flight", Help: "Requests (unary RPCs and RangeStream) being handled.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zketcd_grpc_requests_rejected_total", Help: "Requests refused with \"too many requests\" (--max-concurrent-requests).",
		}),
	}
	if reg != nil {
		reg.MustRegister(l.inflight, l.rejected)
	}
	return l
}

// acquire takes a slot for method, or returns etcd's "too many requests".
func (l *requestLimiter) acquire(method string) (release func(), err error) {
	if strings.HasPrefix(method, healthService) {
		return func() {}, nil
	}
	select {
	case l.slots <- struct{}{}:
		l.inflight.Inc()
		return func() { l.inflight.Dec(); <-l.slots }, nil
	default:
		l.rejected.Inc()
		return nil, rpctypes.ErrGRPCRequestTooManyRequests
	}
}

func (l *requestLimiter) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	release, err := l.acquire(info.FullMethod)
	if err != nil {
		return nil, err
	}
	defer release()
	return handler(ctx, req)
}

func (l *requestLimiter) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.IsClientStream {
		return handler(srv, ss)
	}
	release, err := l.acquire(info.FullMethod)
	if err != nil {
		return err
	}
	defer release()
	return handler(srv, ss)
}
