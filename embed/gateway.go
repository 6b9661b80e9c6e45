package embed

import (
	"context"
	"net/http"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/backend"
	"github.com/zketcd/zketcd/httpgw"
)

// gatewayConfig is the configuration of the client URLs' HTTP side: TLS
// and limits as the gRPC server's, health from the backend.
func gatewayConfig(cfg Config, be *backend.Backend, srv *grpc.Server, metrics http.Handler) httpgw.Config {
	return httpgw.Config{
		GRPC:                 srv,
		TLS:                  cfg.TLS,
		HandshakeTimeout:     cfg.GRPC.ConnectionTimeout,
		MaxRequestBytes:      cfg.GRPC.MaxRequestBytes,
		MaxConcurrentStreams: cfg.GRPC.MaxConcurrentStreams,
		Leader:               be.Health,
		Read: func(ctx context.Context, serializable bool) error {
			_, err := be.Range(ctx, &pb.RangeRequest{Key: []byte{0}, KeysOnly: true, Limit: 1, Serializable: serializable})
			return err
		},
		Metrics: metrics,
		Logger:  cfg.Logger,
	}
}
