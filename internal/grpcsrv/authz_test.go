package grpcsrv

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
)

// enabledAuthorizer returns an authorizer on a store with root and auth
// enabled, and no leases.
func enabledAuthorizer(t *testing.T) *authorizer {
	t.Helper()
	s := auth.Initial()
	for _, req := range []proto.Message{
		&pb.AuthUserAddRequest{Name: "root", Options: &authpb.UserAddOptions{NoPassword: true}},
		&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"},
		&pb.AuthEnableRequest{},
	} {
		var err error
		if s, _, err = s.Apply(req, make([]byte, 32)); err != nil {
			t.Fatal(err)
		}
	}
	raw := s.Encode()
	st := auth.NewStore(func() ([]byte, int64) { return raw, 1 }, auth.Config{BcryptCost: 4})
	t.Cleanup(st.Close)
	return &authorizer{st: st,
		linearize: func(context.Context) error { return nil },
		leaseKeys: func(int64) ([][]byte, bool) { return nil, false },
		leaseIDs:  func() []int64 { return nil },
	}
}

func TestAuthorizerExemptsHealthAndDefaultsOtherServicesToRoot(t *testing.T) {
	a := enabledAuthorizer(t)
	ctx := context.Background()
	if err := a.check(ctx, "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, a.st.Checker()); err != nil {
		t.Fatalf("health check refused: %v", err)
	}
	if err := a.check(ctx, "/zketcd.Unknown/Call", &healthpb.HealthCheckRequest{}, a.st.Checker()); err == nil {
		t.Fatal("unchecked service served without credentials")
	}
	if err := a.check(ctx, "/etcdserverpb.KV/Compact", &pb.CompactionRequest{}, a.st.Checker()); err != rpctypes.ErrGRPCUserEmpty {
		t.Fatalf("compact without a user: %v", err)
	}
}
