package grpcsrv

import (
	"context"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Members lists the cluster's members: the live zketcd instances on the
// same ZooKeeper root.
type Members interface {
	Members() ([]*pb.Member, error)
}

type clusterServer struct {
	pb.UnsafeClusterServer
	be  Members
	hdr header
	lg  *logrus.Entry
}

var _ pb.ClusterServer = (*clusterServer)(nil)

// MemberList lists the live zketcd instances on this root (their ephemeral
// member znodes).
func (s *clusterServer) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	members, err := s.be.Members()
	if err != nil {
		return nil, toGRPCError(s.lg, err)
	}
	resp := &pb.MemberListResponse{Header: &pb.ResponseHeader{}, Members: members}
	resp.Header = s.hdr.filled(resp.Header)
	return resp, nil
}

const membershipMsg = "zketcd: members join by starting an instance on the same ZooKeeper root; membership calls are not supported"

func (s *clusterServer) MemberAdd(context.Context, *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, status.Error(codes.Unimplemented, membershipMsg)
}

func (s *clusterServer) MemberRemove(context.Context, *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return nil, status.Error(codes.Unimplemented, membershipMsg)
}

func (s *clusterServer) MemberUpdate(context.Context, *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return nil, status.Error(codes.Unimplemented, membershipMsg)
}

func (s *clusterServer) MemberPromote(context.Context, *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return nil, status.Error(codes.Unimplemented, membershipMsg)
}
