package engine

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
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

// ReadIndex returns a log position read after the call (a quorum barrier,
// shared with the linearizable reads of this instance), for another
// instance's linearizable read: once its view applied the position, it
// holds every write acknowledged before the call. Errors as Linearize.
func (b *Engine) ReadIndex(ctx context.Context) (int64, error) {
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

// ServeKeepAlive renews lease id for another instance's keepalive, here
// (never forwarded again), and returns its TTL (0: no such lease).
func (b *Engine) ServeKeepAlive(ctx context.Context, id int64) (int64, error) {
	if err := b.servable(); err != nil {
		return 0, err
	}
	return b.leases.renewHere(ctx, id)
}

// ServeLeaseTimeToLive answers another instance's LeaseTimeToLive here
// (never forwarded again): the whole response as LeaseTimeToLive at the
// leader answers it (after a barrier; the remaining TTL from this
// instance's deadlines, which keepalives renewed in its memory move; the
// keys if asked), and the position the view had applied once it was read,
// for the caller to wait for. Errors: ErrNotLeader when this instance does
// not lead or does not forward (its answer would be no better than the
// caller's own), else as LeaseTimeToLive. Safe for concurrent use.
func (b *Engine) ServeLeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, int64, error) {
	return serveRead(b, "lease_time_to_live", func() (*pb.LeaseTimeToLiveResponse, error) { return b.leaseTimeToLiveHere(ctx, req) })
}

// ServeLeases answers another instance's LeaseLeases here, as
// ServeLeaseTimeToLive answers LeaseTimeToLive (the order from this
// instance's deadlines).
func (b *Engine) ServeLeases(ctx context.Context) (*pb.LeaseLeasesResponse, int64, error) {
	return serveRead(b, "lease_leases", func() (*pb.LeaseLeasesResponse, error) { return b.leasesHere(ctx) })
}

// serveRead runs read at the leader for another instance and returns its
// answer with the position to wait for.
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
