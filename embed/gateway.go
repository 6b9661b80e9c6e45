package embed

import (
	"context"
	"net/http"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/httpgw"
	"github.com/zketcd/zketcd/internal/lockelect"
)

// gatewayConfig is the configuration of the client URLs' HTTP side: TLS
// and limits as the gRPC server's, health from the engine.
// The v3lock and v3election services are registered on srv through it
// (they are clients of srv); closeLockElect is set to release them.
func gatewayConfig(cfg Config, be *engine.Engine, srv *grpc.Server, metrics http.Handler, closeLockElect *func()) httpgw.Config {
	return httpgw.Config{
		Services:             func(conn *grpc.ClientConn) { *closeLockElect = lockelect.Register(srv, conn) },
		Gateways:             lockelect.Gateways(),
		GRPC:                 srv,
		TLS:                  cfg.TLS,
		HandshakeTimeout:     cfg.GRPC.ConnectionTimeout,
		MaxRequestBytes:      cfg.GRPC.MaxRequestBytes,
		MaxConcurrentStreams: cfg.GRPC.MaxConcurrentStreams,
		Leader:               be.Health,
		Alarms:               func(context.Context) ([]*pb.AlarmMember, error) { return be.Alarms(), nil },
		Read: func(ctx context.Context, serializable bool) error {
			_, err := be.Range(ctx, &pb.RangeRequest{Key: []byte{0}, KeysOnly: true, Limit: 1, Serializable: serializable})
			return err
		},
		Warnings:       be.Warnings,
		ReadTimeout:    cfg.HTTPReadTimeout,
		WriteTimeout:   cfg.HTTPWriteTimeout,
		IdleTimeout:    cfg.HTTPIdleTimeout,
		MaxConnections: cfg.MaxClientConnections,
		Registerer:     cfg.GRPC.Registerer,
		Metrics:        metrics,
		CORS:           cfg.CORS,
		HostWhitelist:  cfg.HostWhitelist,
		Logger:         cfg.Logger,
	}
}
