package grpcsrv

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
)

// ForwardAuthorizer checks the requests other instances forward to this
// one (package forward's server) against this instance's own auth state,
// as the client API checks them: the forwarding instance checked them
// already, but holding the internal endpoint must not be holding root. The
// identity is the caller's credential carried with the request
// (auth.Caller), never the forwarding instance's. Safe for concurrent
// use.
type ForwardAuthorizer struct{ a *authorizer }

// Authorize checks req, forwarded on behalf of caller, as the client API
// method rpc (its full gRPC name, e.g. "/etcdserverpb.KV/Put") would be
// checked on this instance, and returns the context to serve it with: the
// caller's identity and, for a write, the check again inside its commit
// batch if the auth state changed by then (as the client API's
// interceptor does). A refusal is checked once more after a barrier (the
// caller may have been checked on a state this view has not applied yet).
// An alarm activation without a caller is the forwarding instance raising
// it (NOSPACE from its quota check, CORRUPT from its corruption check) and
// is accepted: all a holder of the endpoint can do without a credential
// is stop writes until an administrator disarms the alarm. Errors: etcd's
// (ErrGRPCUserEmpty, ErrGRPCPermissionDenied, ErrGRPCInvalidAuthToken,
// ...), or the barrier's; an AuthEnable refused while ZooKeeper's data is
// world-readable has code FailedPrecondition (refused whoever the caller).
func (f *ForwardAuthorizer) Authorize(ctx context.Context, rpc string, req proto.Message, caller auth.Caller) (context.Context, error) {
	if _, ok := req.(*pb.AuthEnableRequest); ok && f.a.canEnable != nil {
		// Refused here too while ZooKeeper's data is world-readable
		// (whoever forwards it; FailedPrecondition: the request's final
		// failure, not a refusal of its caller's credential, which its
		// origin may answer by committing it itself).
		if err := f.a.canEnable(); err != nil {
			return nil, err
		}
	}
	ctx = auth.WithForwardedCaller(ctx, caller)
	c := f.a.st.Checker()
	if err := f.check(ctx, rpc, req, caller, c); err != nil {
		if lerr := f.a.linearize(ctx); lerr != nil {
			return nil, lerr
		}
		if c = f.a.st.Checker(); f.check(ctx, rpc, req, caller, c) != nil {
			return nil, err
		}
	}
	recheck := auth.Check(func(state []byte) error {
		if c.Same(state) {
			return nil
		}
		at, err := f.a.st.CheckerFor(state)
		if err != nil {
			return err
		}
		return f.check(context.WithValue(ctx, recheckKey{}, true), rpc, req, caller, at)
	})
	return auth.WithCheck(ctx, recheck), nil
}

func (f *ForwardAuthorizer) check(ctx context.Context, rpc string, req proto.Message, caller auth.Caller, c auth.Checker) error {
	if !c.Enabled() {
		return nil
	}
	switch r := req.(type) {
	case *pb.LeaseKeepAliveRequest:
		return f.a.leaseRenewAt(ctx, c, r.ID)
	case *pb.AlarmRequest:
		if r.Action == pb.AlarmRequest_ACTIVATE && caller.Empty() {
			return nil
		}
	}
	return f.a.check(ctx, rpc, req, c)
}
