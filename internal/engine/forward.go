package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Write forwarding (Config.ForwardWrites): only the leader instance
// commits. Any other instance sends its writes to the leader's internal
// endpoint (a Forwarder) tagged with its own nonce and a per-request
// sequence, and answers once its view applied the position the leader
// returns, so a client reads its writes on the instance it wrote through.
// The leader commits a forwarded request with an OpOrigin op carrying its
// tag, under its fence. A forward whose outcome is unknown (connection
// lost, leader gone) is re-sent with the same tag to whoever leads then;
// a leader evaluates a tagged request only on a view that holds every
// entry before its commit (the commit's compare-and-swap proves it), so a
// tag already in the log is answered as a duplicate, never committed twice.

// Errors of the forwarding protocol. None of them means anything was
// written.
var (
	// ErrNotLeader answers a request that needs the leadership (a
	// forwarded write, an auto-compaction, a corruption check) at an
	// instance that does not hold it: the engine's one "not leader".
	ErrNotLeader = errors.New("zketcd: this instance is not the leader")
	// ErrAuthChanged answers a forwarded write whose origin checked its
	// permissions on another auth state than the leader's.
	ErrAuthChanged = errors.New("zketcd: the auth state changed since the request was checked")
	// ErrNotSent is a Forwarder's answer when the request was not sent (no
	// connection to the peer could be made).
	ErrNotSent = errors.New("zketcd: the request was not sent to the leader")
	// ErrUnsupported is a Forwarder's answer when the peer does not know
	// the request (an older version): nothing ran there.
	ErrUnsupported = errors.New("zketcd: the peer does not serve this request")
)

// Peer is another instance's internal endpoint as its member znode
// advertises it.
type Peer struct {
	ID    uint64
	URL   string
	Token string
}

// ForwardCall is one forwarded write: Req is the etcd request (Put,
// DeleteRange, Txn, Compaction, LeaseGrant with its ID chosen, LeaseRevoke,
// an Alarm activation or deactivation, an auth change as prepared),
// Resp the empty response of its type, filled by a successful Forward.
type ForwardCall struct {
	Origin revision.WriterTag
	AuthFP uint64
	// Caller is the credential of the client the request came from: at
	// the origin auth.CallerFrom of its context (a Forwarder sends that
	// one), at the leader as the origin sent it, verified or not. With
	// Origin, the request's kind and its bytes it binds the tag
	// (boundTag); it authorizes nothing (the leader's Authorizer checks
	// the credential).
	Caller auth.Caller
	Req    proto.Message
	// Entropy is the random bytes an auth change was evaluated with at
	// its origin (nil for other requests).
	Entropy []byte
	Resp    proto.Message
	// Fresh is set on the first send: a Forwarder that cannot reach the
	// peer without sending anything answers ErrNotSent.
	Fresh bool
	// After, on a re-send, is the log position the origin had applied
	// before the first send: the request can only be in an entry after it,
	// and a leader whose tag index no longer holds all of those answers
	// etcd's "request timed out, possibly due to connection lost" rather
	// than evaluate it again (0 on the first send).
	After int64
}

// ForwardReply is the leader's answer beyond the response: the log
// position to wait for and, for a request found in the log already (its
// response lost with a leader), the revision it took.
type ForwardReply struct {
	LSN    int64
	Dup    bool
	DupRev int64
}

// Forwarder carries requests to another instance's internal endpoint
// (package forward implements it over gRPC). The credential of the client
// a request came from (auth.CallerFrom of its context) travels with it, for
// the peer to check it itself. Its methods are safe for concurrent use.
// Errors: ErrNotLeader, ErrAuthChanged and ErrNotSent as
// documented; a *FinalError for the peer's answer that the request failed
// (nothing written; retrying cannot change it); anything else leaves the
// outcome unknown.
type Forwarder interface {
	Forward(ctx context.Context, to Peer, call ForwardCall) (ForwardReply, error)
	// ReadIndex returns a log position the peer read after the call
	// arrived (a quorum barrier).
	ReadIndex(ctx context.Context, to Peer) (int64, error)
	// KeepAlive renews lease id at the peer and returns its TTL (0: no
	// such lease).
	KeepAlive(ctx context.Context, to Peer, id int64) (int64, error)
	// LeaseTimeToLive and Leases answer the lease reads at the peer
	// (ServeLeaseTimeToLive and ServeLeases there) and return the answer
	// with the log position the peer's view had applied when it answered.
	// A peer that does not know the request answers ErrUnsupported, one
	// that does not lead ErrNotLeader.
	LeaseTimeToLive(ctx context.Context, to Peer, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, int64, error)
	Leases(ctx context.Context, to Peer) (*pb.LeaseLeasesResponse, int64, error)
}

// FinalError is a forwarded request's failure as the leader answered it.
type FinalError struct{ Err error }

func (e *FinalError) Error() string { return e.Err.Error() }
func (e *FinalError) Unwrap() error { return e.Err }

// forwarding is the Engine's forwarding state.
type forwarding struct {
	mu   sync.Mutex
	seq  uint64
	peer Peer // the leader's endpoint, cached by leader ID
	// peerAt is when peer was read; peerForeign that the leader's
	// endpoint was on another host's loopback (host.go), so not dialed.
	peerAt      time.Time
	peerForeign bool
	// calls are the forwarded requests this instance serves as leader, by
	// bound tag (boundTag: the tag, the request and its caller), and those
	// answered in the last callKeep (a re-send after a lost answer gets
	// the same answer).
	calls map[revision.WriterTag]*fwdCall
	done  []*fwdCall // answered, oldest first

	metrics *fwdMetrics
}

type fwdCall struct {
	tag   revision.WriterTag // bound
	ready chan struct{}
	resp  proto.Message
	reply ForwardReply
	err   error
	at    time.Time // answered
}

const (
	callKeep       = 10 * time.Second
	readIndexLimit = 2 * time.Second
	maxBackoff     = time.Second
)

type fwdMetrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	resends   prometheus.Counter
	served    *prometheus.CounterVec
	readIndex *prometheus.CounterVec
}

func newFwdMetrics(reg prometheus.Registerer) *fwdMetrics {
	m := &fwdMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "forward_requests_total",
			Help: "Requests this instance forwarded to the leader instance, by method and outcome (ok, duplicate, failed, error, timeout: of unknown outcome still when the re-sends' limit passed, answered \"request timed out\"; local: committed here because the leader could not be reached before sending; for keepalives and lease reads, answered here because the leader did not answer).",
		}, []string{"method", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "zketcd", Name: "forward_duration_seconds",
			Help:    "Time from forwarding a request to answering it (the view applied the leader's position), by method.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}, []string{"method"}),
		resends: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "forward_resends_total",
			Help: "Forwarded requests sent again with their tag after an unknown outcome or a leader change.",
		}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "forward_served_total",
			Help: "Forwarded requests this instance served as the leader, by method and outcome.",
		}, []string{"method", "outcome"}),
		readIndex: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zketcd", Name: "read_index_total",
			Help: "Linearizable reads that asked the leader for its position (leader), or fell back to their own barrier (fallback).",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.resends, m.served, m.readIndex)
	}
	return m
}

// forwarding reports whether writes go to the leader.
func (b *Engine) forwarding() bool { return b.cfg.ForwardWrites && b.cfg.Forwarder != nil }

// InternalToken is the secret callers of this instance's internal
// endpoint present (advertised in its member znode).
func (b *Engine) InternalToken() string { return b.internalToken }

// leaderPeer returns the leader's endpoint (ok false: unknown, or the
// leader advertises none) and whether this instance leads.
func (b *Engine) leaderPeer() (p Peer, ok, self bool) {
	leader, _, id := b.election.State()
	if leader {
		return Peer{}, false, true
	}
	if id == 0 || id == b.memberID {
		// Unknown, or a previous process of this member whose session has
		// not expired yet: it commits nothing more, so there is no one to
		// forward to.
		return Peer{}, false, false
	}
	f := &b.fwd
	f.mu.Lock()
	p, at, wasForeign := f.peer, f.peerAt, f.peerForeign
	f.mu.Unlock()
	wasForeign = wasForeign && p.ID == id
	if p.ID == id && (p.URL != "" || time.Since(at) < peerRecheck) {
		// A leader with no endpoint to dial is read again now and then:
		// it may have restarted with one, under the same member ID.
		return p, p.URL != "", false
	}
	members, err := b.store.Members()
	if err != nil {
		return Peer{}, false, false
	}
	for _, m := range members {
		if m.ID == id {
			p = Peer{ID: id, URL: m.InternalURL, Token: m.InternalToken}
			foreign := b.foreignLoopback(m.InternalURL, m.Host)
			if foreign {
				// Not the leader's: never dialed (host.go).
				if !wasForeign {
					b.log.WithFields(logrus.Fields{"leader": fmt.Sprintf("%x", id), "leader_name": m.Name, "internal_url": m.InternalURL}).
						Warn("the leader instance advertises an internal endpoint on the loopback of another host: this instance does not dial it and commits its own writes; " +
							"give every instance an --internal-listen-url the others reach, over peer TLS (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file)")
				}
				p.URL, p.Token = "", ""
			}
			f.mu.Lock()
			f.peer, f.peerAt, f.peerForeign = p, time.Now(), foreign
			f.mu.Unlock()
			return p, p.URL != "", false
		}
	}
	return Peer{}, false, false
}

// peerRecheck is how often the member znode of a leader whose endpoint
// cannot be dialed (none, or another host's loopback) is read again.
const peerRecheck = 5 * time.Second

// forgetPeer drops the cached endpoint of leader id.
func (b *Engine) forgetPeer(id uint64) {
	b.fwd.mu.Lock()
	if b.fwd.peer.ID == id {
		b.fwd.peer = Peer{}
	}
	b.fwd.mu.Unlock()
}

// writeFwd is write for a request the leader may commit for us (a kind
// of the table, labelled label): without forwarding, or while no leader
// endpoint is known before anything was sent, the request is committed
// here (the per-instance path); at the leader it is committed directly;
// elsewhere it is forwarded and answered once the view applied the
// leader's position. entropy is the random bytes an auth change was drawn
// with at its origin (nil for the others): it travels with the request, so
// the leader evaluates it as this instance would. dup builds the response
// of a request found committed already (nil: it cannot be rebuilt, the
// client gets etcd's "request timed out, possibly due to connection
// lost").
func writeFwd[T proto.Message](ctx context.Context, b *Engine, label string, req proto.Message, entropy []byte, newResp func() T,
	eval func(*revision.Batch) (T, error), dup func(lsn, rev int64) (T, error)) (T, error) {
	var zero T
	if err := b.servable(); err != nil {
		return zero, err
	}
	size := proto.Size(req)
	eval = gated(req, eval)
	if !b.forwarding() {
		return propose(ctx, b, size, eval, nil)
	}
	method := label
	m := b.fwd.metrics
	var tag *revision.WriterTag  // set once the request may have reached a leader
	var bound revision.WriterTag // tag bound to the request and its caller (boundTag)
	caller := auth.CallerFrom(ctx)
	var authFP uint64
	// Once tagged: when it was first sent, the position the view had
	// applied before (the request can only land after it), and until when
	// it is sent again (resendLimit).
	var start, deadline time.Time
	var after int64
	backoff := 20 * time.Millisecond
	wait := func() error {
		changed := b.election.Changed()
		d := backoff
		if tag != nil {
			d = max(min(d, time.Until(deadline)), 0)
		}
		select {
		case <-changed:
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return rpctypes.ErrGRPCStopped
		}
		backoff = min(2*backoff, maxBackoff)
		return nil
	}
	lg := b.log.WithField("method", method)
	for attempt := 0; ; attempt++ {
		if tag != nil && !time.Now().Before(deadline) {
			// Sent again for as long as a leader change takes; its
			// outcome stays unknown, as etcd's timed-out proposals.
			m.requests.WithLabelValues(method, "timeout").Inc()
			lg.WithFields(logrus.Fields{"seq": tag.Seq, "for": time.Since(start).Round(time.Millisecond)}).
				Warn("forwarded request of unknown outcome not resolved; answering that it timed out")
			return zero, rpctypes.ErrGRPCTimeoutDueToConnectionLost
		}
		// actx bounds an attempt of a tagged request by its deadline.
		actx, acancel := ctx, context.CancelFunc(func() {})
		if tag != nil {
			actx, acancel = context.WithDeadline(ctx, deadline)
		}
		peer, known, self := b.leaderPeer()
		switch {
		case self:
			// A request of ours is checked in the batch by its context's
			// auth check, so no fingerprint. Sent before, it is found in the
			// log under its tag bound as the leader it went to bound it.
			p := &proposal{size: size, leaderOnly: tag == nil, after: after}
			if tag != nil {
				p.origin, p.sent = &bound, *tag
			}
			resp, out, err := proposeAs(actx, b, p, eval)
			acancel()
			if err != nil && tag != nil && ctx.Err() == nil && actx.Err() != nil {
				continue // the deadline passed: answered at the top
			}
			if errors.Is(err, ErrNotLeader) {
				if err := wait(); err != nil {
					return zero, err
				}
				continue
			}
			if err != nil || !out.dup {
				if tag != nil {
					m.requests.WithLabelValues(method, outcomeLabel(err)).Inc()
				}
				return resp, err
			}
			m.requests.WithLabelValues(method, "duplicate").Inc()
			return answerDup(ctx, b, out.lsn, out.dupRev, dup)
		case !known && tag == nil:
			acancel()
			m.requests.WithLabelValues(method, "local").Inc()
			resp, err := proposeHere(ctx, b, size, eval, nil)
			if !errors.Is(err, errLeaseHeld) {
				return resp, err
			}
			// A leader holds the read lease: it alone commits. Wait until
			// it can be reached (or is gone).
			if err := wait(); err != nil {
				return zero, err
			}
			continue
		case !known:
			acancel()
			if err := wait(); err != nil {
				return zero, err
			}
			continue
		}
		fresh := tag == nil
		var resendAfter int64
		if fresh {
			state := b.viewAuth()
			if check := auth.CheckFrom(ctx); check != nil {
				if err := check(state); err != nil {
					acancel()
					return zero, err
				}
			}
			authFP = authFingerprint(state)
			after = b.view.State().LSN
			b.fwd.mu.Lock()
			b.fwd.seq++
			sent := revision.WriterTag{Nonce: b.nonce, Seq: b.fwd.seq}
			b.fwd.mu.Unlock()
			k, ok := kindOf(req)
			if !ok {
				acancel()
				return zero, fmt.Errorf("zketcd: %T cannot be forwarded", req)
			}
			var err error
			if bound, err = boundTag(sent, k, req, caller); err != nil {
				acancel()
				return zero, err
			}
			tag = &sent
			start = time.Now()
			deadline = start.Add(b.resendLimit())
			acancel()
			actx, acancel = context.WithDeadline(ctx, deadline)
		} else {
			m.resends.Inc()
			resendAfter = after
		}
		resp := newResp()
		go b.cancelOnLeaderChange(actx, acancel, peer.ID)
		reply, err := b.cfg.Forwarder.Forward(actx, peer, ForwardCall{Origin: *tag, AuthFP: authFP, Caller: caller, Req: req, Entropy: entropy,
			Resp: resp, Fresh: fresh, After: resendAfter})
		acancel()
		if err == nil && !reply.Dup {
			if aerr := answerOf(req, resp); aerr != nil {
				// Never passed on: the client would get another request's
				// answer, or one its server cannot complete. What the leader
				// did is unknown.
				m.requests.WithLabelValues(method, "error").Inc()
				lg.WithError(aerr).WithFields(logrus.Fields{"leader": fmt.Sprintf("%x", peer.ID), "seq": tag.Seq}).
					Error("the leader's answer to a forwarded request is malformed")
				return zero, rpctypes.ErrGRPCTimeoutDueToConnectionLost
			}
		}
		var final *FinalError
		switch {
		case err == nil:
			if werr := b.waitApplied(ctx, reply.LSN); werr != nil {
				return zero, werr
			}
			m.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
			if reply.Dup {
				m.requests.WithLabelValues(method, "duplicate").Inc()
				return answerDup(ctx, b, reply.LSN, reply.DupRev, dup)
			}
			m.requests.WithLabelValues(method, "ok").Inc()
			return resp, nil
		case errors.As(err, &final):
			m.requests.WithLabelValues(method, "failed").Inc()
			return zero, final.Err
		case errors.Is(err, ErrNotSent) && fresh:
			// Nothing left this instance: commit it here, as without
			// forwarding (the log's compare-and-swap keeps that correct).
			lg.WithError(err).WithField("leader", fmt.Sprintf("%x", peer.ID)).Debug("leader unreachable; committing here")
			b.forgetPeer(peer.ID)
			m.requests.WithLabelValues(method, "local").Inc()
			resp, err := proposeHere(ctx, b, size, eval, nil)
			if !errors.Is(err, errLeaseHeld) {
				return resp, err
			}
			// The leader holds the read lease (so it is alive and leads):
			// nothing was written; send the request to it again.
			tag = nil
		case errors.Is(err, ErrAuthChanged):
			// This evaluation wrote nothing (the leader found no entry
			// with the tag), but an earlier send of it may still land: the
			// request keeps its tag. Check the permissions again on a newer
			// auth state, and send it under that one.
			if lerr := b.Linearize(ctx); lerr != nil {
				return zero, lerr
			}
			state := b.viewAuth()
			if check := auth.CheckFrom(ctx); check != nil {
				if err := check(state); err != nil {
					return zero, err
				}
			}
			authFP = authFingerprint(state)
			continue
		case errors.Is(err, ErrNotLeader):
			b.forgetPeer(peer.ID)
		default:
			if ctx.Err() != nil {
				m.requests.WithLabelValues(method, "error").Inc()
				return zero, ctx.Err()
			}
			b.forgetPeer(peer.ID)
			if attempt%10 == 0 {
				lg.WithError(err).WithFields(logrus.Fields{"leader": fmt.Sprintf("%x", peer.ID), "seq": tag.Seq}).
					Warn("forwarded request of unknown outcome; sending it again with its tag")
			}
		}
		if err := wait(); err != nil {
			m.requests.WithLabelValues(method, "error").Inc()
			return zero, err
		}
	}
}

// resendLimit is how long after its first send a forwarded request of
// unknown outcome is sent again (Config.ForwardResendLimit): as long as
// ZooKeeper may leave a request unanswered, which covers a leader change
// (a session timeout and an election).
func (b *Engine) resendLimit() time.Duration {
	if b.cfg.ForwardResendLimit > 0 {
		return b.cfg.ForwardResendLimit
	}
	st := b.cfg.Store.SessionTimeout
	if st <= 0 {
		st = zkstore.DefaultSessionTimeout
	}
	return max(2*st, 10*time.Second)
}

// cancelOnLeaderChange cancels an attempt sent to leader id as soon as
// the election names another leader (a paused or partitioned leader may
// never answer): the request is then re-sent with its tag to the new one.
// It returns when ctx ends.
func (b *Engine) cancelOnLeaderChange(ctx context.Context, cancel context.CancelFunc, id uint64) {
	for {
		changed := b.election.Changed()
		if _, _, now := b.election.State(); now != id {
			cancel()
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func outcomeLabel(err error) string {
	if err != nil {
		return "failed"
	}
	return "ok"
}

func (b *Engine) viewAuth() []byte {
	state, _ := b.view.AuthState()
	return state
}

// waitApplied waits until the view applied lsn (kicking the tailer): nil,
// ctx's error, or ErrGRPCCorrupt for a view that cannot get there.
func (b *Engine) waitApplied(ctx context.Context, lsn int64) error {
	if b.view.State().LSN >= lsn {
		return nil
	}
	b.kickTailer()
	if err := b.view.WaitApplied(ctx, lsn); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rpctypes.ErrGRPCCorrupt
	}
	return nil
}

// answerDup answers a request found committed at lsn (revision rev): its
// response is rebuilt by dup once the view applied lsn.
func answerDup[T any](ctx context.Context, b *Engine, lsn, rev int64, dup func(lsn, rev int64) (T, error)) (T, error) {
	var zero T
	if err := b.waitApplied(ctx, lsn); err != nil {
		return zero, err
	}
	if dup == nil {
		return zero, rpctypes.ErrGRPCTimeoutDueToConnectionLost
	}
	return dup(lsn, rev)
}
