package grpcsrv

import (
	"context"
	"errors"
	"io"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/translate"
)

// Leases is the engine's lease side, with etcd's lease rules (translate)
// applied.
type Leases interface {
	LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	// LeaseRevoke removes a lease and, in one revision, its keys.
	LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error)
	// LeaseRenew renews a lease and returns its TTL, or 0 if it does not
	// exist (etcd's keepalive answer).
	LeaseRenew(ctx context.Context, id int64) (int64, error)
	LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)
	Leases(ctx context.Context) (*pb.LeaseLeasesResponse, error)
}

type leaseServer struct {
	pb.UnsafeLeaseServer
	be   Leases
	hdr  header
	lg   *logrus.Entry
	stop <-chan struct{} // closed when the server shuts down
	// maxRequestBytes bounds grant and revoke requests, as every write.
	maxRequestBytes int
	// authz checks each keepalive (nil: no checks).
	authz *authorizer
}

var _ pb.LeaseServer = (*leaseServer)(nil)

func (s *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if err := translate.CheckRequestSize(r, s.maxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := s.be.LeaseGrant(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

func (s *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if err := translate.CheckRequestSize(r, s.maxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := s.be.LeaseRevoke(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

func (s *leaseServer) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := s.be.Leases(ctx)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

// LeaseKeepAlive renews leases as clients ask, answering each request with
// the lease's TTL (0 if it does not exist), as etcd does.
// The stream ends with etcd's "server stopped" when the server shuts down,
// so clients move to another endpoint at once.
func (s *leaseServer) LeaseKeepAlive(stream grpc.BidiStreamingServer[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]) error {
	type recv struct {
		req *pb.LeaseKeepAliveRequest
		err error
	}
	reqs := make(chan recv)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case reqs <- recv{req, err}:
			case <-stream.Context().Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var r recv
		select {
		case r = <-reqs:
		case <-s.stop:
			return rpctypes.ErrGRPCStopped
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		req, err := r.req, r.err
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.authz.leaseRenew(stream.Context(), req.ID); err != nil {
			return err
		}
		ttl, err := s.be.LeaseRenew(s.authz.withCaller(stream.Context()), req.ID)
		if err != nil {
			return toGRPCError(s.lg, err)
		}
		resp := &pb.LeaseKeepAliveResponse{Header: &pb.ResponseHeader{}, ID: req.ID, TTL: ttl}
		resp.Header = s.hdr.filled(resp.Header)
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := s.be.LeaseTimeToLive(ctx, r)
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}
