package grpcsrv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/translate"
)

// Engine is everything the services need from the storage engine (embed
// passes a *engine.Engine). Each service declares its part next to its
// handlers; a new service adds its interface here.
type Engine interface {
	Identity
	KV
	Leases
	Watches
	Members
	Maintenance
	Auth
}

// Health is whether the instance can serve.
type Health interface {
	// Health reports nil while the instance can serve (a live ZooKeeper
	// session and a caught-up view), otherwise why not.
	Health() error
	// Halted is closed when the instance halts for good (its history is no
	// longer the cluster's): Health's error then says what happened and
	// what to do (see Status), and open watch streams end.
	Halted() <-chan struct{}
}

// grpcOverheadBytes is what etcd adds to --max-request-bytes for the gRPC
// receive limit, so that an oversized request reaches the handler and gets
// "request is too large" rather than a transport error.
const grpcOverheadBytes = 512 * 1024

// DefaultConnectionTimeout is the default ConnectionTimeout: ample for a
// TLS and HTTP/2 handshake over a slow link, short enough that connections
// that never finish one (slowloris) do not pile up for gRPC's default two
// minutes.
const DefaultConnectionTimeout = 20 * time.Second

// Defaults for zero Config fields, etcd's where etcd has the setting.
const (
	DefaultKeepaliveMinTime            = 5 * time.Second
	DefaultKeepaliveInterval           = 2 * time.Hour
	DefaultKeepaliveTimeout            = 20 * time.Second
	DefaultWatchProgressNotifyInterval = 10 * time.Minute
)

// Config configures the gRPC server.
type Config struct {
	// MaxRequestBytes is etcd's --max-request-bytes: the largest write
	// request, the RangeStream chunk target and the watch fragment size
	// (0: translate.DefaultMaxRequestBytes).
	MaxRequestBytes int
	// MaxTxnOps is etcd's --max-txn-ops (0: translate.DefaultMaxTxnOps).
	MaxTxnOps int
	// TLS, if not nil, serves TLS (client certificates per its ClientAuth)
	// unless Creds is set; its ClientAuth also tells whether a verified
	// client certificate authenticates (etcd's --client-cert-auth).
	TLS *tls.Config
	// Creds, if not nil, are the transport credentials instead of TLS
	// (httpgw.Creds: connections arrive already past their TLS handshake).
	Creds credentials.TransportCredentials
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
	Auth AuthConfig
	// Admission, if not nil, admits every call before it runs (a tenant's
	// rate limits; admission.go).
	Admission Admission
	// StreamWorkers is how many goroutines the server keeps to serve its
	// streams before it starts one per stream (0: DefaultStreamWorkers;
	// negative: none, a goroutine per stream). A fleet gives each tenant's
	// server few: it runs a server per tenant.
	StreamWorkers int
	// Logger receives structured logs (required; embed fills it).
	Logger     *logrus.Entry
	Registerer prometheus.Registerer
}

// WithDefaults returns cfg with every unset setting at its default (what
// New serves with).
func (cfg Config) WithDefaults() Config {
	cfg.setDefaults()
	return cfg
}

func (cfg *Config) setDefaults() {
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = translate.DefaultMaxRequestBytes
	}
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = translate.DefaultMaxTxnOps
	}
	if cfg.WatchProgressNotifyInterval == 0 {
		cfg.WatchProgressNotifyInterval = DefaultWatchProgressNotifyInterval
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = math.MaxUint32
	}
	if cfg.ConnectionTimeout == 0 {
		cfg.ConnectionTimeout = DefaultConnectionTimeout
	}
	if cfg.StreamWorkers == 0 {
		cfg.StreamWorkers = DefaultStreamWorkers
	}
	if cfg.KeepaliveMinTime == 0 {
		cfg.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	if cfg.KeepaliveInterval == 0 {
		cfg.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if cfg.KeepaliveTimeout == 0 {
		cfg.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
}

// Validate reports the first invalid setting.
func (cfg *Config) Validate() error {
	switch {
	case cfg.Logger == nil:
		return errors.New("grpcsrv: no logger")
	case cfg.MaxTxnOps < 1:
		return fmt.Errorf("max txn ops %d must be positive", cfg.MaxTxnOps)
	case cfg.MaxRequestBytes < 1:
		return fmt.Errorf("max request bytes %d must be positive", cfg.MaxRequestBytes)
	}
	return nil
}

// RecvMsgLimit is the largest message the server reads: MaxRequestBytes
// and etcd's gRPC overhead.
func (cfg Config) RecvMsgLimit() int {
	cfg.setDefaults()
	return cfg.MaxRequestBytes + grpcOverheadBytes
}

// New returns a gRPC server with every etcd service registered on be, and
// the gRPC health service, whose status follows be.Health until ctx ends.
// Errors: an invalid Config.
func New(ctx context.Context, cfg Config, be Engine) (*grpc.Server, error) {
	srv, _, err := NewWithForwardAuthorizer(ctx, cfg, be)
	return srv, err
}

// DefaultStreamWorkers is Config.StreamWorkers' default: how many
// goroutines serve the client port's streams before it starts one per
// stream.
const DefaultStreamWorkers = 64

// NewWithForwardAuthorizer is New, and the rules that check the requests
// other instances forward to this one (auth.Rules.Authorize, package
// forward's Authorizer), on the same auth store.
func NewWithForwardAuthorizer(ctx context.Context, cfg Config, be Engine) (*grpc.Server, *auth.Rules, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	lg := cfg.Logger.WithField("component", "grpc")
	m := newRPCMetrics(cfg.Registerer)
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.RecvMsgLimit()),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: false,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: cfg.KeepaliveInterval, Timeout: cfg.KeepaliveTimeout,
		}),
		grpc.ConnectionTimeout(cfg.ConnectionTimeout),
		// Streams run on reused workers: a goroutine per request would grow
		// its stack anew for every put (runtime.newstack was ~9% of the CPU
		// of one-client puts). Busy workers (long watches) fall back to a
		// goroutine per stream.
		grpc.NumStreamWorkers(uint32(max(cfg.StreamWorkers, 0))),
		grpc.ForceServerCodecV2(newCountingCodec(cfg.Registerer)),
	}
	az := newAuthorizer(ctx, cfg, be)
	// Metrics first, so that refused requests are counted with their code;
	// admission before the concurrency limit, so that a call waiting for
	// its tenant's rate holds no slot.
	unary, stream := []grpc.UnaryServerInterceptor{m.unary}, []grpc.StreamServerInterceptor{m.stream}
	if cfg.Admission != nil {
		a := admitter{a: cfg.Admission}
		unary, stream = append(unary, a.unary), append(stream, a.stream)
	}
	if l := newRequestLimiter(cfg.MaxConcurrentRequests, cfg.Registerer); l != nil {
		unary, stream = append(unary, l.unary), append(stream, l.stream)
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(append(unary, az.unary)...), grpc.ChainStreamInterceptor(append(stream, az.stream)...))
	if cfg.Creds != nil {
		opts = append(opts, grpc.Creds(cfg.Creds))
	} else if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	srv := grpc.NewServer(opts...)
	hdr := header{be: be}
	pb.RegisterKVServer(srv, &kvServer{be: be, hdr: hdr, lg: lg, maxTxnOps: cfg.MaxTxnOps, maxRequestBytes: cfg.MaxRequestBytes})
	pb.RegisterMaintenanceServer(srv, newMaintenanceServer(be, hdr, lg))
	pb.RegisterClusterServer(srv, &clusterServer{be: be, hdr: hdr, lg: lg})
	pb.RegisterLeaseServer(srv, &leaseServer{be: be, hdr: hdr, lg: lg, stop: ctx.Done(), maxRequestBytes: cfg.MaxRequestBytes, authz: az})
	pb.RegisterAuthServer(srv, newAuthServer(az, be, hdr, lg, cfg.Registerer))
	pb.RegisterWatchServer(srv, &watchServer{be: be, hdr: hdr, lg: lg,
		maxRequestBytes: cfg.MaxRequestBytes, progressInterval: cfg.WatchProgressNotifyInterval, stop: ctx.Done(),
		maxWatchers: cfg.MaxWatchersPerStream, authz: az})

	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go followHealth(ctx, be, hs, lg)
	return srv, az.rules, nil
}

// followHealth keeps the gRPC health status in step with the engine:
// SERVING only with a live ZooKeeper session and a caught-up view.
func followHealth(ctx context.Context, be Health, hs *health.Server, lg *logrus.Entry) {
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
