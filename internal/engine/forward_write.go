package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
)

// writeForwarded commits a write the leader may commit for this instance
// (req, of kind k): without forwarding, or while no leader endpoint is
// known before anything was sent, the request is committed here (the
// per-instance path); at the leader it is committed directly; elsewhere it
// is forwarded and answered once the view applied the leader's position.
// entropy is the random bytes an auth change was drawn with at its origin
// (nil for the others): it travels with the request, so the leader
// evaluates it as this instance would. dup builds the response of a
// request found committed already (nil: it cannot be rebuilt, the client
// gets etcd's "request timed out, possibly due to connection lost").
func writeForwarded[T proto.Message](ctx context.Context, f *forwarder, k wireKind, req proto.Message, entropy []byte, newResp func() T,
	eval func(*revision.Batch) (T, error), dup func(lsn, rev int64) (T, error)) (T, error) {
	var zero T
	if err := f.rb.servable(); err != nil {
		return zero, err
	}
	size := proto.Size(req)
	eval = gated(req, eval)
	if !f.enabled() {
		return propose(ctx, f.commit, size, eval, nil)
	}
	w := &fwdWrite[T]{f: f, ctx: ctx, kind: k, req: req, entropy: entropy, newResp: newResp, eval: eval, dup: dup,
		size: size, caller: auth.CallerFrom(ctx), backoff: 20 * time.Millisecond, lg: f.log.WithField("method", k.label())}
	return w.run()
}

// fwdWrite is one forwarded write on its way (writeForwarded). Until it is
// tagged it may be committed anywhere; once tagged (the request may have
// reached a leader) it is sent again under its tag, to whoever leads,
// until an answer settles it or resendLimit passes. Used by one goroutine.
type fwdWrite[T proto.Message] struct {
	f       *forwarder
	ctx     context.Context
	kind    wireKind
	req     proto.Message
	entropy []byte
	newResp func() T
	eval    func(*revision.Batch) (T, error)
	dup     func(lsn, rev int64) (T, error)
	size    int
	caller  auth.Caller
	lg      *logrus.Entry
	// authFP fingerprints the auth state the request's permissions were
	// checked on.
	authFP uint64
	// tag is set once the request may have reached a leader, and bound is
	// the tag bound to the request and its caller (boundTag). start is when
	// it was first sent, after the position the view had applied before
	// (the request can only land after it), deadline until when it is sent
	// again (resendLimit).
	tag             *revision.WriterTag
	bound           revision.WriterTag
	start, deadline time.Time
	after           int64
	backoff         time.Duration
}

// run sends the write until it is answered: each attempt goes where the
// leader is as the election tells it now.
func (w *fwdWrite[T]) run() (T, error) {
	for attempt := 0; ; attempt++ {
		if w.tag != nil && !time.Now().Before(w.deadline) {
			return w.timedOut()
		}
		peer, known, self := w.f.leaderPeer()
		var resp T
		var done bool
		var err error
		switch {
		case self:
			resp, done, err = w.asLeader()
		case !known && w.tag == nil:
			resp, done, err = w.here()
		case !known:
			err = w.wait()
			done = err != nil
		default:
			resp, done, err = w.toLeader(peer, attempt)
		}
		if done {
			return resp, err
		}
	}
}

// count counts an outcome of the write in the forwarding metrics.
func (w *fwdWrite[T]) count(outcome string) {
	w.f.metrics.requests.WithLabelValues(w.kind.label(), outcome).Inc()
}

// timedOut answers a tagged write sent again for as long as a leader
// change takes: its outcome stays unknown, as etcd's timed-out proposals.
func (w *fwdWrite[T]) timedOut() (T, error) {
	var zero T
	w.count("timeout")
	w.lg.WithFields(logrus.Fields{"seq": w.tag.Seq, "for": time.Since(w.start).Round(time.Millisecond)}).
		Warn("forwarded request of unknown outcome not resolved; answering that it timed out")
	return zero, rpctypes.ErrGRPCTimeoutDueToConnectionLost
}

// wait waits for the next attempt: a leader change, or the backoff
// (bounded by the deadline of a tagged write), which then doubles.
func (w *fwdWrite[T]) wait() error {
	changed := w.f.election.Changed()
	d := w.backoff
	if w.tag != nil {
		d = max(min(d, time.Until(w.deadline)), 0)
	}
	select {
	case <-changed:
	case <-time.After(d):
	case <-w.ctx.Done():
		return w.ctx.Err()
	case <-w.f.ctx.Done():
		return rpctypes.ErrGRPCStopped
	}
	w.backoff = min(2*w.backoff, maxBackoff)
	return nil
}

// asLeader commits the write at this instance, which leads. A request of
// ours is checked in the batch by its context's auth check, so no
// fingerprint. Sent before, it is found in the log under its tag bound as
// the leader it went to bound it. done is false when the write must be
// attempted again.
func (w *fwdWrite[T]) asLeader() (_ T, done bool, _ error) {
	var zero T
	actx, cancel := w.ctx, context.CancelFunc(func() {})
	if w.tag != nil {
		actx, cancel = context.WithDeadline(w.ctx, w.deadline)
	}
	p := &proposal{size: w.size, leaderOnly: w.tag == nil, after: w.after}
	if w.tag != nil {
		p.origin, p.sent = &w.bound, *w.tag
	}
	resp, out, err := proposeAs(actx, w.f.commit, p, w.eval)
	cancel()
	switch {
	case err != nil && w.tag != nil && w.ctx.Err() == nil && actx.Err() != nil:
		return zero, false, nil // the deadline passed: answered at the top
	case errors.Is(err, ErrNotLeader):
		if err := w.wait(); err != nil {
			return zero, true, err
		}
		return zero, false, nil
	case err != nil || !out.dup:
		if w.tag != nil {
			w.count(outcomeLabel(err))
		}
		return resp, true, err
	}
	w.count("duplicate")
	resp, err = answerDup(w.ctx, w.f, out.lsn, out.dupRev, w.dup)
	return resp, true, err
}

// here commits an untagged write at this instance, as without forwarding
// (the log's compare-and-swap keeps that correct), when no leader can be
// reached; done is false when a leader holds the read lease (it alone
// commits), after waiting until it can be reached or is gone.
func (w *fwdWrite[T]) here() (_ T, done bool, _ error) {
	var zero T
	w.count("local")
	resp, err := proposeHere(w.ctx, w.f.commit, w.size, w.eval, nil)
	if !errors.Is(err, errLeaseHeld) {
		return resp, true, err
	}
	if err := w.wait(); err != nil {
		return zero, true, err
	}
	return zero, false, nil
}

// checkAuth checks the write's permissions on the view's auth state (its
// context's check, if any) and fingerprints that state.
func (w *fwdWrite[T]) checkAuth() error {
	state := viewAuth(w.f.view)
	if check := auth.CheckFrom(w.ctx); check != nil {
		if err := check(state); err != nil {
			return err
		}
	}
	w.authFP = authFingerprint(state)
	return nil
}

// tagIt gives the write its tag before its first send, after checking its
// permissions: from then on it may reach a leader, so it is never
// committed under another tag.
func (w *fwdWrite[T]) tagIt() error {
	if err := w.checkAuth(); err != nil {
		return err
	}
	w.after = w.f.view.State().LSN
	sent := w.f.nextTag()
	bound, err := boundTag(sent, w.kind.rpc(), w.req, w.caller)
	if err != nil {
		return err
	}
	w.tag, w.bound = &sent, bound
	w.start = time.Now()
	w.deadline = w.start.Add(w.f.resendLimit())
	return nil
}

// toLeader sends the write to the leader at peer, tagging it on its first
// send, and settles the answer.
func (w *fwdWrite[T]) toLeader(peer Peer, attempt int) (_ T, done bool, _ error) {
	var zero T
	fresh := w.tag == nil
	var resendAfter int64
	if fresh {
		if err := w.tagIt(); err != nil {
			return zero, true, err
		}
	} else {
		w.f.metrics.resends.Inc()
		resendAfter = w.after
	}
	actx, cancel := context.WithDeadline(w.ctx, w.deadline)
	resp := w.newResp()
	go w.f.cancelOnLeaderChange(actx, cancel, peer.ID)
	reply, err := w.f.cfg.Forwarder.Forward(actx, peer, ForwardCall{Origin: *w.tag, AuthFP: w.authFP, Caller: w.caller, Req: w.req,
		Entropy: w.entropy, Resp: resp, Fresh: fresh, After: resendAfter})
	cancel()
	if err == nil && !reply.Dup {
		if aerr := w.kind.answered(resp); aerr != nil {
			// Never passed on: the client would get another request's
			// answer, or one its server cannot complete. What the leader
			// did is unknown.
			w.count("error")
			w.lg.WithError(aerr).WithFields(logrus.Fields{"leader": fmt.Sprintf("%x", peer.ID), "seq": w.tag.Seq}).
				Error("the leader's answer to a forwarded request is malformed")
			return zero, true, rpctypes.ErrGRPCTimeoutDueToConnectionLost
		}
	}
	return w.settle(peer, attempt, fresh, resp, reply, err)
}

// settle handles the leader's answer to one send: done with the answer,
// or the write is attempted again (after waiting, unless it is to be
// sent again at once).
func (w *fwdWrite[T]) settle(peer Peer, attempt int, fresh bool, resp T, reply ForwardReply, err error) (_ T, done bool, _ error) {
	var zero T
	var final *FinalError
	switch {
	case err == nil:
		if werr := w.f.tail.waitApplied(w.ctx, reply.LSN); werr != nil {
			return zero, true, werr
		}
		w.f.metrics.duration.WithLabelValues(w.kind.label()).Observe(time.Since(w.start).Seconds())
		if reply.Dup {
			w.count("duplicate")
			resp, err := answerDup(w.ctx, w.f, reply.LSN, reply.DupRev, w.dup)
			return resp, true, err
		}
		w.count("ok")
		return resp, true, nil
	case errors.As(err, &final):
		w.count("failed")
		return zero, true, final.Err
	case errors.Is(err, ErrNotSent) && fresh:
		// Nothing left this instance: commit it here, as without
		// forwarding (the log's compare-and-swap keeps that correct).
		w.lg.WithError(err).WithField("leader", fmt.Sprintf("%x", peer.ID)).Debug("leader unreachable; committing here")
		w.f.forgetPeer(peer.ID)
		w.count("local")
		resp, err := proposeHere(w.ctx, w.f.commit, w.size, w.eval, nil)
		if !errors.Is(err, errLeaseHeld) {
			return resp, true, err
		}
		// The leader holds the read lease (so it is alive and leads):
		// nothing was written; send the request to it again.
		w.tag = nil
	case errors.Is(err, ErrAuthChanged):
		// This evaluation wrote nothing (the leader found no entry with
		// the tag), but an earlier send of it may still land: the request
		// keeps its tag. Check the permissions again on a newer auth
		// state, and send it under that one.
		if lerr := w.f.linearize(w.ctx); lerr != nil {
			return zero, true, lerr
		}
		if err := w.checkAuth(); err != nil {
			return zero, true, err
		}
		return zero, false, nil
	case errors.Is(err, ErrNotLeader):
		w.f.forgetPeer(peer.ID)
	default:
		if w.ctx.Err() != nil {
			w.count("error")
			return zero, true, w.ctx.Err()
		}
		w.f.forgetPeer(peer.ID)
		if attempt%10 == 0 {
			w.lg.WithError(err).WithFields(logrus.Fields{"leader": fmt.Sprintf("%x", peer.ID), "seq": w.tag.Seq}).
				Warn("forwarded request of unknown outcome; sending it again with its tag")
		}
	}
	if err := w.wait(); err != nil {
		w.count("error")
		return zero, true, err
	}
	return zero, false, nil
}
