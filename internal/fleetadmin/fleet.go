package fleetadmin

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// Fleet is what the administration acts on (embed's fleet). Its methods
// are safe for concurrent use.
type Fleet interface {
	// TenantRegistry is the fleet's registry of tenants and roles.
	TenantRegistry() *zkstore.Registry
	// KV is the KV service of tenant name's cluster as the tenant's own
	// clients reach it (its engine started on this instance if needed).
	KV(ctx context.Context, name string) (pb.KVClient, error)
	// Delete begins tenant name's deletion: its engines stop on every
	// instance, and the fleet deletes its znodes once none serves it.
	Delete(name string) error
	// Snapshot writes tenant name's data as an etcd snapshot file (with
	// etcd's SHA-256 trailer) to w, and returns its revision.
	Snapshot(ctx context.Context, name string, w io.Writer) (int64, error)
}

// Register registers the administration's etcd services (Auth and KV) on
// srv for f. Every other etcd call on srv is the caller's to refuse.
func Register(srv *grpc.Server, f Fleet) {
	pb.RegisterAuthServer(srv, &authServer{f: f})
	pb.RegisterKVServer(srv, &kvServer{f: f})
}

// header is the response header of the administration's answers: it is
// no cluster's, so it carries no cluster, member or revision.
func header() *pb.ResponseHeader { return &pb.ResponseHeader{} }

// registryErr maps the registry's refusals to etcd's errors.
func registryErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zkstore.ErrTenantNotFound):
		return rpctypes.ErrGRPCUserNotFound
	case errors.Is(err, zkstore.ErrTenantExists):
		return rpctypes.ErrGRPCUserAlreadyExist
	case errors.Is(err, zkstore.ErrRoleNotFound):
		return rpctypes.ErrGRPCRoleNotFound
	case errors.Is(err, zkstore.ErrRoleExists):
		return rpctypes.ErrGRPCRoleAlreadyExist
	case errors.Is(err, zkstore.ErrUnavailable):
		return rpctypes.ErrGRPCNoLeader
	}
	return rpctypes.ErrGRPCTimeout
}
