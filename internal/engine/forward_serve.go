package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/revision"
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
	method := k.label()
	bound, err := boundTag(call.Origin, k, call.Req, call.Caller)
	if err != nil {
		return nil, ForwardReply{}, &FinalError{Err: err}
	}
	f := &b.fwd
	f.mu.Lock()
	now := time.Now()
	for len(f.done) > 0 && now.Sub(f.done[0].at) > callKeep {
		if f.calls[f.done[0].tag] == f.done[0] {
			delete(f.calls, f.done[0].tag)
		}
		f.done = f.done[1:]
	}
	if c := f.calls[bound]; c != nil {
		f.mu.Unlock()
		select {
		case <-c.ready:
			f.metrics.served.WithLabelValues(method, "joined").Inc()
			return c.resp, c.reply, c.err
		case <-ctx.Done():
			return nil, ForwardReply{}, ctx.Err()
		}
	}
	c := &fwdCall{tag: bound, ready: make(chan struct{})}
	if f.calls == nil {
		f.calls = map[revision.WriterTag]*fwdCall{}
	}
	f.calls[bound] = c
	f.mu.Unlock()

	// The request is answered when the committer answers it, even if the
	// caller went away meanwhile: until then a re-send of the same tag
	// joins it, never evaluates it a second time.
	c.resp, c.reply, c.err = b.serveForward(context.WithoutCancel(ctx), k, bound, call)
	var final *FinalError
	keep := c.err == nil || errors.As(c.err, &final)
	f.mu.Lock()
	c.at = time.Now()
	close(c.ready)
	if keep {
		f.done = append(f.done, c)
	} else {
		delete(f.calls, bound) // the committer is done with it: a re-send evaluates it anew
	}
	f.mu.Unlock()
	outcome := "ok"
	switch {
	case c.reply.Dup:
		outcome = "duplicate"
	case final != nil:
		outcome = "failed"
	case c.err != nil:
		outcome = "error"
	}
	f.metrics.served.WithLabelValues(method, outcome).Inc()
	return c.resp, c.reply, c.err
}

func (b *Engine) serveForward(ctx context.Context, k anyKind, bound revision.WriterTag, call ForwardCall) (proto.Message, ForwardReply, error) {
	p := &proposal{size: proto.Size(call.Req), origin: &bound, sent: call.Origin, authFP: call.AuthFP, checkFP: true, after: call.After}
	return k.serve(ctx, b, p, call)
}

func serveAs[T proto.Message](ctx context.Context, b *Engine, p *proposal, req any, eval func(*revision.Batch) (T, error)) (proto.Message, ForwardReply, error) {
	resp, out, err := proposeAs(ctx, b, p, gated(req, eval))
	reply := ForwardReply{LSN: out.lsn, Dup: out.dup, DupRev: out.dupRev}
	switch {
	case err == nil && out.dup:
		return nil, reply, nil
	case err == nil:
		return resp, reply, nil
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrAuthChanged):
		return nil, reply, err
	case out.final:
		return nil, reply, &FinalError{Err: err}
	}
	return nil, reply, err
}

// ReadIndex returns a log position read after the call (a quorum barrier,
// shared with the linearizable reads of this instance), for another
// instance's linearizable read: once its view applied the position, it
// holds every write acknowledged before the call. Errors as Linearize.
func (b *Engine) ReadIndex(ctx context.Context) (int64, error) {
	if err := b.servable(); err != nil {
		return 0, err
	}
	if lsn, ok, err := b.leaseIndex(ctx); ok || err != nil {
		return lsn, err
	}
	lsn, err := b.barrier.wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, b.stopped(err)
	}
	return lsn, nil
}

// ServeKeepAlive renews lease id for another instance's keepalive, here
// (never forwarded again), and returns its TTL (0: no such lease).
func (b *Engine) ServeKeepAlive(ctx context.Context, id int64) (int64, error) {
	if err := b.servable(); err != nil {
		return 0, err
	}
	return b.renewHere(ctx, id)
}

// readIndex returns a position to wait for before a linearizable read:
// the leader's answer to ReadIndex when forwarding, else (or when the
// leader does not answer within readIndexLimit) this instance's barrier.
func (b *Engine) readIndex(ctx context.Context) (int64, error) {
	if lsn, ok, err := b.leaseIndex(ctx); ok || err != nil {
		return lsn, err
	}
	if b.forwarding() {
		if peer, ok, _ := b.leaderPeer(); ok {
			rctx, cancel := context.WithTimeout(ctx, readIndexLimit)
			lsn, err := b.cfg.Forwarder.ReadIndex(rctx, peer)
			cancel()
			if err == nil {
				b.fwd.metrics.readIndex.WithLabelValues("leader").Inc()
				return lsn, nil
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			b.fwd.metrics.readIndex.WithLabelValues("fallback").Inc()
			b.log.WithError(err).WithField("leader", fmt.Sprintf("%x", peer.ID)).Debug("read index from the leader failed; own barrier")
		}
	}
	return b.barrier.wait(ctx)
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
	if leader, _, _ := b.election.State(); !leader || !b.cfg.ForwardWrites {
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

// leaderRead asks the leader for a lease read (ask) when forwarding and
// another instance leads, and returns its answer once this view applied
// the position the answer reflects (ok). ok is false, with a nil error,
// when the caller must answer locally: not forwarding, no leader endpoint
// known, or the leader did not answer within readIndexLimit (unreachable,
// no longer leading, or an older version without the request). The
// answer's header is reset for the caller's server to fill from this
// view. Errors: the instance's own (halted, stopped), ctx's, or
// ErrGRPCCorrupt for a view that cannot reach the position.
func leaderRead[T proto.Message](ctx context.Context, b *Engine, method string, ask func(context.Context, Peer) (T, int64, error), reset func(T)) (T, bool, error) {
	var zero T
	if !b.forwarding() {
		return zero, false, nil
	}
	if err := b.servable(); err != nil {
		return zero, false, err
	}
	peer, ok, _ := b.leaderPeer()
	if !ok {
		return zero, false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, readIndexLimit)
	resp, lsn, err := ask(rctx, peer)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return zero, false, ctx.Err()
		}
		b.fwd.metrics.requests.WithLabelValues(method, "local").Inc()
		b.log.WithError(err).WithFields(logrus.Fields{"method": method, "leader": fmt.Sprintf("%x", peer.ID)}).
			Debug("lease read at the leader failed; answering here")
		return zero, false, nil
	}
	if err := b.waitApplied(ctx, lsn); err != nil {
		return zero, false, err
	}
	reset(resp)
	b.fwd.metrics.requests.WithLabelValues(method, "ok").Inc()
	return resp, true, nil
}
