package auth

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Eval evaluates one auth change against the current encoded auth state
// (as staged in the commit batch) and returns the next state (nil: nothing
// changes) and the response. The engine may call it again if another
// instance took the log position, so it must not keep state.
type Eval func(cur []byte) (next []byte, resp any, err error)

// Check checks a write against the encoded auth state it is about to be
// committed on and returns the error to answer instead, or nil.
type Check func(state []byte) error

type checkKey struct{}

// WithCheck returns a context whose writes run check inside their commit
// batch, right before their evaluation, on the auth state as staged there:
// a permission revoked by an entry committed before the write's is
// enforced, as etcd checks writes when it applies them.
func WithCheck(ctx context.Context, check Check) context.Context {
	return context.WithValue(ctx, checkKey{}, check)
}

// CheckFrom returns the check WithCheck attached to ctx, or nil.
func CheckFrom(ctx context.Context) Check {
	c, _ := ctx.Value(checkKey{}).(Check)
	return c
}

// Change returns the Eval of a changing request as it goes into the log
// (prepared by Store.Prepare), with entropy drawn once for the request:
// every evaluation of it, on any instance, computes the same change. The
// response is Apply's (its header left to the caller).
func Change(req proto.Message, entropy []byte) Eval {
	return func(cur []byte) ([]byte, any, error) {
		st, err := Decode(cur)
		if err != nil {
			return nil, nil, err
		}
		next, resp, err := st.Apply(req, entropy)
		if err != nil {
			return nil, nil, err
		}
		if next == st {
			return nil, resp, nil
		}
		return next.Encode(), resp, nil
	}
}

// NewResponse returns an empty message of the type Apply answers req with,
// and false if req is not a changing request.
func NewResponse(req proto.Message) (proto.Message, bool) {
	switch req.(type) {
	case *pb.AuthEnableRequest:
		return &pb.AuthEnableResponse{}, true
	case *pb.AuthDisableRequest:
		return &pb.AuthDisableResponse{}, true
	case *pb.AuthUserAddRequest:
		return &pb.AuthUserAddResponse{}, true
	case *pb.AuthUserDeleteRequest:
		return &pb.AuthUserDeleteResponse{}, true
	case *pb.AuthUserChangePasswordRequest:
		return &pb.AuthUserChangePasswordResponse{}, true
	case *pb.AuthUserGrantRoleRequest:
		return &pb.AuthUserGrantRoleResponse{}, true
	case *pb.AuthUserRevokeRoleRequest:
		return &pb.AuthUserRevokeRoleResponse{}, true
	case *pb.AuthRoleAddRequest:
		return &pb.AuthRoleAddResponse{}, true
	case *pb.AuthRoleDeleteRequest:
		return &pb.AuthRoleDeleteResponse{}, true
	case *pb.AuthRoleGrantPermissionRequest:
		return &pb.AuthRoleGrantPermissionResponse{}, true
	case *pb.AuthRoleRevokePermissionRequest:
		return &pb.AuthRoleRevokePermissionResponse{}, true
	}
	return nil, false
}
