package diff

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AuthRaw sends req through the generated Auth client on the scenario's
// (unauthenticated, or whatever the scenario logged in as) connection.
func AuthRaw(req proto.Message) Step {
	kind := "Auth " + string(req.ProtoReflect().Descriptor().Name())
	return Step{kind: kind, exec: func(ctx context.Context, e *endpoint) Result {
		return authCall(ctx, pb.NewAuthClient(e.client.ActiveConnection()), req)
	}}
}

// authCall sends one Auth request through ac.
func authCall(ctx context.Context, ac pb.AuthClient, req proto.Message) Result {
	var resp proto.Message
	var err error
	switch r := req.(type) {
	case *pb.AuthEnableRequest:
		resp, err = ac.AuthEnable(ctx, r)
	case *pb.AuthDisableRequest:
		resp, err = ac.AuthDisable(ctx, r)
	case *pb.AuthStatusRequest:
		resp, err = ac.AuthStatus(ctx, r)
	case *pb.AuthenticateRequest:
		resp, err = ac.Authenticate(ctx, r)
	case *pb.AuthUserAddRequest:
		resp, err = ac.UserAdd(ctx, r)
	case *pb.AuthUserGetRequest:
		resp, err = ac.UserGet(ctx, r)
	case *pb.AuthUserListRequest:
		resp, err = ac.UserList(ctx, r)
	case *pb.AuthUserDeleteRequest:
		resp, err = ac.UserDelete(ctx, r)
	case *pb.AuthUserChangePasswordRequest:
		resp, err = ac.UserChangePassword(ctx, r)
	case *pb.AuthUserGrantRoleRequest:
		resp, err = ac.UserGrantRole(ctx, r)
	case *pb.AuthUserRevokeRoleRequest:
		resp, err = ac.UserRevokeRole(ctx, r)
	case *pb.AuthRoleAddRequest:
		resp, err = ac.RoleAdd(ctx, r)
	case *pb.AuthRoleGetRequest:
		resp, err = ac.RoleGet(ctx, r)
	case *pb.AuthRoleListRequest:
		resp, err = ac.RoleList(ctx, r)
	case *pb.AuthRoleDeleteRequest:
		resp, err = ac.RoleDelete(ctx, r)
	case *pb.AuthRoleGrantPermissionRequest:
		resp, err = ac.RoleGrantPermission(ctx, r)
	case *pb.AuthRoleRevokePermissionRequest:
		resp, err = ac.RoleRevokePermission(ctx, r)
	default:
		panic(fmt.Sprintf("diff.AuthRaw: unsupported request type %T", req))
	}
	res := Result{Request: req, Err: err}
	if err == nil {
		res.Responses = []proto.Message{resp}
	}
	return res
}

// AsUser runs f with a fresh client that logs in as user with password
// (clientv3's Username and Password: it calls Authenticate when it connects
// and sends the token with every request). A failed login is the step's
// error.
func AsUser(user, password string, f func(ctx context.Context, c *clientv3.Client) Result) Step {
	return Step{kind: "as " + user, exec: func(ctx context.Context, e *endpoint) Result {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   e.client.Endpoints(),
			DialTimeout: 10 * time.Second,
			Username:    user,
			Password:    password,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return Result{Err: err}
		}
		defer c.Close()
		return f(ctx, c)
	}}
}

// getAs is a Get of key through a client logged in as user.
func getAs(user, password, key string, opts ...clientv3.OpOption) Step {
	return AsUser(user, password, func(ctx context.Context, c *clientv3.Client) Result {
		resp, err := c.Get(ctx, key, opts...)
		if err != nil {
			return Result{Err: err}
		}
		return Result{Responses: []proto.Message{(*pb.RangeResponse)(resp)}}
	})
}

// putAs is a Put through a client logged in as user.
func putAs(user, password, key, val string, opts ...clientv3.OpOption) Step {
	return AsUser(user, password, func(ctx context.Context, c *clientv3.Client) Result {
		resp, err := c.Put(ctx, key, val, opts...)
		if err != nil {
			return Result{Err: err}
		}
		return Result{Responses: []proto.Message{(*pb.PutResponse)(resp)}}
	})
}

// AuthOffScenarios pin down etcd 3.7.3's Auth service with authentication
// disabled on a fresh server: Authenticate answers "authentication is not
// enabled", and a client configured with a user name carries on without a
// token.
func AuthOffScenarios() []Scenario {
	return []Scenario{
		{Name: "auth-off/status-and-authenticate", Steps: Steps(
			AuthRaw(&pb.AuthStatusRequest{}).WantOK(),
			AuthRaw(&pb.AuthenticateRequest{Name: "root", Password: "pw"}).WantErr(rpctypes.ErrGRPCAuthNotEnabled),
			AuthRaw(&pb.AuthenticateRequest{}).WantErr(rpctypes.ErrGRPCAuthNotEnabled),
			AuthRaw(&pb.AuthDisableRequest{}).WantOK(),
			AuthRaw(&pb.AuthEnableRequest{}),
			AuthRaw(&pb.AuthStatusRequest{}).WantOK(),
		)},
		{Name: "auth-off/empty-store", Steps: Steps(
			AuthRaw(&pb.AuthUserListRequest{}).WantOK(),
			AuthRaw(&pb.AuthRoleListRequest{}).WantOK(),
			AuthRaw(&pb.AuthUserGetRequest{Name: "root"}),
			AuthRaw(&pb.AuthRoleGetRequest{Role: "root"}),
		)},
		{Name: "auth-off/client-with-username-carries-on", Steps: Steps(
			Put("foo", "bar"),
			getAs("root", "pw", "foo").WantOK(),
			putAs("nobody", "", "foo", "baz").WantOK(),
			Get("foo"),
		)},
	}
}
