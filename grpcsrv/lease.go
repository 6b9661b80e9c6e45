package grpcsrv

import (
	"context"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/backend"
)

type leaseServer struct {
	pb.UnsafeLeaseServer
	be  *backend.Backend
	hdr header
	lg  *logrus.Entry
}

var _ pb.LeaseServer = (*leaseServer)(nil)

func (s *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	resp, err := s.be.LeaseGrant(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := s.be.LeaseRevoke(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *leaseServer) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := s.be.Leases(ctx)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	s.hdr.fill(resp.Header)
	return resp, nil
}

// Lease expiry, keepalives and time-to-live need the elected expiry
// instance; until it exists these answer Unimplemented rather than
// pretending a lease is being timed.
const leaseExpiryMsg = "zketcd: lease keepalive and time-to-live are not implemented yet (leases do not expire)"

func (s *leaseServer) LeaseKeepAlive(grpc.BidiStreamingServer[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]) error {
	return status.Error(codes.Unimplemented, leaseExpiryMsg)
}

func (s *leaseServer) LeaseTimeToLive(context.Context, *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return nil, status.Error(codes.Unimplemented, leaseExpiryMsg)
}
