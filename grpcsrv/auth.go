package grpcsrv

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// authServer answers etcd's Auth service: authentication is off (use TLS
// client certificates and ZooKeeper ACLs); enabling it is refused.
type authServer struct {
	pb.UnimplementedAuthServer
}

// AuthStatus reports authentication as disabled.
func (authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: &pb.ResponseHeader{}, Enabled: false}, nil
}

// AuthEnable is refused: zketcd has no user store.
func (authServer) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return nil, status.Error(codes.Unimplemented, "zketcd: etcd authentication is not supported; use client certificates")
}
