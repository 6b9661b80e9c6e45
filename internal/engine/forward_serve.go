package engine

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The leader's side of forwarding: the internal endpoint calls these.

// ServeForward commits a write another instance forwarded (call.Req, with
// its tag, its caller's credential as sent and the auth fingerprint;
// call.Resp and call.Fresh are not used; an auth change is evaluated with
// entropy drawn here, never call.Entropy) under ctx's auth check
// (auth.WithCheck: the caller's, which the endpoint attaches) and returns
// its response (nil for a duplicate) and the position to wait for. The
// tag is bound to the request and its caller (boundTag): only the same
// request of the same caller under the same tag joins the call being
// served, gets the answer given in the last 10 s again, or is answered as
// a duplicate of one found in the log; another request under the tag is a
// request of its own. Errors: ErrNotLeader (nothing done), ErrAuthChanged,
// a *FinalError for the request's own failure (nothing written); any other
// error leaves the outcome unknown (the origin sends the request again).
// Safe for concurrent use.
func (b *Engine) ServeForward(ctx context.Context, call ForwardCall) (proto.Message, ForwardReply, error) {
	if err := b.servable(); err != nil {
		return nil, ForwardReply{}, err
	}
	if leader, _, _ := b.election.State(); !leader || !b.cfg.ForwardWrites {
		return nil, ForwardReply{}, ErrNotLeader
	}
	k, ok := kindOf(call.Req)
	if !ok {
		return nil, ForwardReply{}, &FinalError{Err: fmt.Errorf("zketcd: %T cannot be forwarded", call.Req)}
	}
	bound, err := boundTag(call.Origin, k.rpc(), call.Req, call.Caller)
	if err != nil {
		return nil, ForwardReply{}, &FinalError{Err: err}
	}
	return b.fwd.serveOnce(ctx, k.label(), bound, func(ctx context.Context) (proto.Message, ForwardReply, error) {
		p := &proposal{size: proto.Size(call.Req), origin: &bound, sent: call.Origin, authFP: call.AuthFP, checkFP: true, after: call.After}
		return k.serve(ctx, b, p, call)
	})
}

// ServeCall answers another instance's call of the calls' table
// (CallKinds: method, with its request) here, never forwarded again: the
// response and, for a Positioned call, the log position the view had
// applied once it was read, for the caller to wait for (0 for the
// others). Errors: a *FinalError for a call of no kind or a request of
// another type; ErrNotLeader for a Positioned call at an instance that does
// not lead or does not forward (its answer would be no better than the
// caller's own); else the call's own. Safe for concurrent use.
func (b *Engine) ServeCall(ctx context.Context, method string, req proto.Message) (proto.Message, int64, error) {
	switch method {
	case readIndexCall.method:
		return serveCall(readIndexCall, req, func(*emptypb.Empty) (*wrapperspb.Int64Value, int64, error) {
			lsn, err := b.readIndexHere(ctx)
			return wrapperspb.Int64(lsn), 0, err
		})
	case keepAliveCall.method:
		return serveCall(keepAliveCall, req, func(req *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, int64, error) {
			ttl, err := b.keepAliveHere(ctx, req.ID)
			return &pb.LeaseKeepAliveResponse{ID: req.ID, TTL: ttl}, 0, err
		})
	case leaseTimeToLiveCall.method:
		return serveCall(leaseTimeToLiveCall, req, func(req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, int64, error) {
			return serveRead(b, leaseTimeToLiveCall.label, func() (*pb.LeaseTimeToLiveResponse, error) { return b.leaseTimeToLiveHere(ctx, req) })
		})
	case leaseLeasesCall.method:
		return serveCall(leaseLeasesCall, req, func(*pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, int64, error) {
			return serveRead(b, leaseLeasesCall.label, func() (*pb.LeaseLeasesResponse, error) { return b.leasesHere(ctx) })
		})
	}
	return nil, 0, &FinalError{Err: fmt.Errorf("zketcd: no call %q on the internal endpoint", method)}
}

// serveCall answers req, a call of kind k, with serve.
func serveCall[R, T proto.Message](k *callKind[R, T], req proto.Message, serve func(R) (T, int64, error)) (proto.Message, int64, error) {
	r, ok := req.(R)
	if !ok {
		return nil, 0, &FinalError{Err: fmt.Errorf("zketcd: %T is not a %s request", req, k.method)}
	}
	resp, lsn, err := serve(r)
	if err != nil {
		return nil, 0, err
	}
	return resp, lsn, nil
}

// readIndexHere returns a log position read after the call (a quorum
// barrier, shared with the linearizable reads of this instance, or the
// read lease's), for another instance's linearizable read: once its view
// applied the position, it holds every write acknowledged before the
// call. Errors as Linearize.
func (b *Engine) readIndexHere(ctx context.Context) (int64, error) {
	if err := b.servable(); err != nil {
		return 0, err
	}
	if lsn, ok, err := b.reads.index(ctx); ok || err != nil {
		return lsn, err
	}
	lsn, err := b.barrier.wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, stopped(err)
	}
	return lsn, nil
}

// keepAliveHere renews lease id for another instance's keepalive, here
// (never forwarded again), and returns its TTL (0: no such lease).
func (b *Engine) keepAliveHere(ctx context.Context, id int64) (int64, error) {
	if err := b.servable(); err != nil {
		return 0, err
	}
	return b.leases.renewHere(ctx, id)
}

// serveRead runs a lease read at the leader for another instance (its
// answer as LeaseTimeToLive or LeaseLeases at the leader gives it: after a
// barrier, from this instance's deadlines, which keepalives renewed in its
// memory move) and returns its answer with the position to wait for.
// Errors: ErrNotLeader when this instance does not lead or does not
// forward, else read's.
func serveRead[T proto.Message](b *Engine, method string, read func() (T, error)) (T, int64, error) {
	var zero T
	if err := b.servable(); err != nil {
		return zero, 0, err
	}
	if leader, _ := b.leader(); !leader || !b.cfg.ForwardWrites {
		b.fwd.metrics.served.WithLabelValues(method, "not_leader").Inc()
		return zero, 0, ErrNotLeader
	}
	resp, err := read()
	if err != nil {
		b.fwd.metrics.served.WithLabelValues(method, "error").Inc()
		return zero, 0, err
	}
	b.fwd.metrics.served.WithLabelValues(method, "ok").Inc()
	return resp, b.view.State().LSN, nil
}
