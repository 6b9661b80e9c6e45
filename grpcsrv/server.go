package grpcsrv

import (
	"context"
	"crypto/tls"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/zketcd/zketcd/backend"
)

// grpcOverheadBytes is what etcd adds to --max-request-bytes for the gRPC
// receive limit, so that an oversized request reaches the handler and gets
// "request is too large" rather than a transport error.
const grpcOverheadBytes = 512 * 1024

// DefaultConnectionTimeout is the default ConnectionTimeout: ample for a
// TLS and HTTP/2 handshake over a slow link, short enough that connections
// that never finish one (slowloris) do not pile up for gRPC's default two
// minutes.
const DefaultConnectionTimeout = 20 * time.Second

// Config configures the gRPC server.
type Config struct {
	MaxRequestBytes int
	MaxTxnOps       int
	// TLS, if not nil, serves TLS (client certificates per its ClientAuth).
	TLS *tls.Config
	// KeepaliveMinTime is the shortest client keepalive interval accepted
	// (etcd's --grpc-keepalive-min-time).
	KeepaliveMinTime time.Duration
	// KeepaliveInterval and KeepaliveTimeout are the server's pings
	// (etcd's --grpc-keepalive-interval and --grpc-keepalive-timeout).
	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
	// WatchProgressNotifyInterval is the period of progress notifications
	// to watchers that asked for them (etcd's
	// --experimental-watch-progress-notify-interval, default 10 minutes).
	WatchProgressNotifyInterval time.Duration
	// MaxWatchersPerStream bounds the watchers of one watch stream (0: no
	// bound); a create beyond it is answered canceled with a reason.
	MaxWatchersPerStream int
	// MaxConcurrentStreams bounds the concurrent gRPC streams per client
	// connection (etcd's --max-concurrent-streams; 0: unbounded).
	MaxConcurrentStreams uint32
	// MaxConcurrentRequests bounds the unary RPCs and RangeStreams in
	// flight across all clients (0: unbounded); one more fails at once with
	// etcd's "too many requests". The health service is exempt.
	MaxConcurrentRequests int
	// ConnectionTimeout bounds the TLS and HTTP/2 handshakes of a new
	// connection; one not done by then is closed (0:
	// DefaultConnectionTimeout).
	ConnectionTimeout time.Duration
	// Auth configures authentication (etcd's --auth-token, --bcrypt-cost).
	Auth       AuthConfig
	Logger     *logrus.Entry
	Registerer prometheus.Registerer
}

// New returns a gRPC server with every etcd service registered on be, and
// the gRPC health service, whose status follows be.Health until ctx ends.
func New(ctx context.Context, cfg Config, be *backend.Backend) *grpc.Server {
	if cfg.Logger == nil {
		cfg.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = backend.DefaultMaxRequestBytes
	}
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = backend.DefaultMaxTxnOps
	}
	if cfg.WatchProgressNotifyInterval == 0 {
		cfg.WatchProgressNotifyInterval = 10 * time.Minute
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = math.MaxUint32
	}
	if cfg.ConnectionTimeout == 0 {
		cfg.ConnectionTimeout = DefaultConnectionTimeout
	}
	if cfg.KeepaliveMinTime == 0 {
		cfg.KeepaliveMinTime = 5 * time.Second
	}
	if cfg.KeepaliveInterval == 0 {
		cfg.KeepaliveInterval = 2 * time.Hour
	}
	if cfg.KeepaliveTimeout == 0 {
		cfg.KeepaliveTimeout = 20 * time.Second
	}
	lg := cfg.Logger.WithField("component", "grpc")
	m := newRPCMetrics(cfg.Registerer)
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes + grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: false,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: cfg.KeepaliveInterval, Timeout: cfg.KeepaliveTimeout,
		}),
		grpc.ConnectionTimeout(cfg.ConnectionTimeout),
	}
	az := newAuthorizer(ctx, cfg, be)
	if l := newRequestLimiter(cfg.MaxConcurrentRequests, cfg.Registerer); l != nil {
		// Metrics first, so that refused requests are counted with their code.
		opts = append(opts, grpc.ChainUnaryInterceptor(m.unary, l.unary, az.unary), grpc.ChainStreamInterceptor(m.stream, l.stream, az.stream))
	} else {
		opts = append(opts, grpc.ChainUnaryInterceptor(m.unary, az.unary), grpc.ChainStreamInterceptor(m.stream, az.stream))
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	srv := grpc.NewServer(opts...)
	hdr := header{be: be}
	pb.RegisterKVServer(srv, &kvServer{be: be, hdr: hdr, lg: lg, maxTxnOps: cfg.MaxTxnOps})
	pb.RegisterMaintenanceServer(srv, &maintenanceServer{be: be, hdr: hdr, lg: lg})
	pb.RegisterClusterServer(srv, &clusterServer{be: be, hdr: hdr, lg: lg})
	pb.RegisterLeaseServer(srv, &leaseServer{be: be, hdr: hdr, lg: lg, stop: ctx.Done(), authz: az})
	pb.RegisterAuthServer(srv, newAuthServer(az, be, hdr, lg))
	pb.RegisterWatchServer(srv, &watchServer{be: be, hdr: hdr, lg: lg,
		maxRequestBytes: cfg.MaxRequestBytes, progressInterval: cfg.WatchProgressNotifyInterval, stop: ctx.Done(),
		maxWatchers: cfg.MaxWatchersPerStream, authz: az})

	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go followHealth(ctx, be, hs, lg)
	return srv
}

// followHealth keeps the gRPC health status in step with the backend:
// SERVING only with a live ZooKeeper session and a caught-up view.
func followHealth(ctx context.Context, be *backend.Backend, hs *health.Server, lg *logrus.Entry) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		st := healthpb.HealthCheckResponse_SERVING
		err := be.Health()
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last {
			hs.SetServingStatus("", st)
			if err != nil {
				lg.WithError(err).Warn("not serving")
			} else if last != healthpb.HealthCheckResponse_UNKNOWN {
				lg.Info("serving again")
			}
			last = st
		}
		select {
		case <-ctx.Done():
			hs.Shutdown()
			return
		case <-t.C:
		}
	}
}
