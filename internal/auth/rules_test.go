package auth

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// noLeases is a view without leases whose barrier returns at once.
type noLeases struct{}

func (noLeases) Linearize(context.Context) error  { return nil }
func (noLeases) LeaseKeys(int64) ([][]byte, bool) { return nil, false }
func (noLeases) LeaseIDs() []int64                { return nil }

// enabledRules returns the rules of a store with root and auth enabled,
// and no leases.
func enabledRules(t *testing.T) *Rules {
	t.Helper()
	s := Initial()
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
	st := NewStore(func() ([]byte, int64) { return raw, 1 }, Config{BcryptCost: 4})
	t.Cleanup(st.Close)
	return NewRules(st, noLeases{}, nil)
}

func TestRulesExemptHealthAndDefaultOtherServicesToRoot(t *testing.T) {
	a := enabledRules(t)
	ctx := context.Background()
	if err := a.Check(ctx, "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, a.st.Checker()); err != nil {
		t.Fatalf("health check refused: %v", err)
	}
	if err := a.Check(ctx, "/zketcd.Unknown/Call", &healthpb.HealthCheckRequest{}, a.st.Checker()); err == nil {
		t.Fatal("unchecked service served without credentials")
	}
	if err := a.Check(ctx, "/etcdserverpb.KV/Compact", &pb.CompactionRequest{}, a.st.Checker()); err != rpctypes.ErrGRPCUserEmpty {
		t.Fatalf("compact without a user: %v", err)
	}
}
