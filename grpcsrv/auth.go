package grpcsrv

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// authServer answers etcd's Auth service as etcd 3.7.3 does with
// authentication disabled and an empty user store: clients configured with a
// user name get ErrAuthNotEnabled from Authenticate and carry on without a
// token.
type authServer struct {
	pb.UnimplementedAuthServer
	hdr header
}

// Authenticate answers etcd's "authentication is not enabled".
func (s authServer) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, rpctypes.ErrGRPCAuthNotEnabled
}

// AuthStatus reports authentication as disabled at auth revision 1 (a fresh
// etcd's).
func (s authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	resp := &pb.AuthStatusResponse{Header: &pb.ResponseHeader{}, Enabled: false, AuthRevision: 1}
	s.hdr.fill(resp.Header)
	return resp, nil
}

// AuthEnable fails as on etcd without a root user.
func (s authServer) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return nil, rpctypes.ErrGRPCRootUserNotExist
}

// AuthDisable is a no-op, as on etcd when authentication is off.
func (s authServer) AuthDisable(context.Context, *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	resp := &pb.AuthDisableResponse{Header: &pb.ResponseHeader{}}
	s.hdr.fill(resp.Header)
	return resp, nil
}

// UserList lists no users.
func (s authServer) UserList(context.Context, *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	resp := &pb.AuthUserListResponse{Header: &pb.ResponseHeader{}}
	s.hdr.fill(resp.Header)
	return resp, nil
}

// RoleList lists no roles.
func (s authServer) RoleList(context.Context, *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	resp := &pb.AuthRoleListResponse{Header: &pb.ResponseHeader{}}
	s.hdr.fill(resp.Header)
	return resp, nil
}

// UserGet finds no user.
func (s authServer) UserGet(context.Context, *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	return nil, rpctypes.ErrGRPCUserNotFound
}

// RoleGet finds no role.
func (s authServer) RoleGet(context.Context, *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	return nil, rpctypes.ErrGRPCRoleNotFound
}

var errNoUserStore = status.Error(codes.Unimplemented, "zketcd: the user store is not implemented yet")

// UserAdd is not supported yet.
func (s authServer) UserAdd(context.Context, *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	return nil, errNoUserStore
}

// RoleAdd is not supported yet.
func (s authServer) RoleAdd(context.Context, *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return nil, errNoUserStore
}
