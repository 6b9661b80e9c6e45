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
	"google.golang.org/protobuf/types/known/emptypb"

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

// forwarder is the forwarding of one instance: at a follower, the leader's
// endpoint as its member znode advertises it and the sequence of the tags
// this instance sends (forward_write.go sends a write); at the leader, the
// forwarded calls it serves and the answers it keeps (serveOnce). Safe for
// concurrent use.
type forwarder struct {
	*core
	commit *committer
	tail   *tailer
	rb     *rollbackGuard
	// linearize is the engine's Linearize: a write refused for a changed
	// auth state is checked again on a view at least as new as the
	// leader's.
	linearize func(ctx context.Context) error
	metrics   *fwdMetrics

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

// wireKind is what forwarding needs of a kind of write (kinds.go): its
// label in the metrics, its etcd method (rpc: part of its bound tag) and
// the check of a leader's answer to it.
type wireKind interface {
	label() string
	rpc() string
	// answered checks a leader's answer to a forwarded request of this
	// kind before the origin passes it on.
	answered(resp proto.Message) error
}

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

// enabled reports whether writes go to the leader.
func (f *forwarder) enabled() bool { return f.cfg.ForwardWrites && f.cfg.Forwarder != nil }

// leaderPeer returns the leader's endpoint (ok false: unknown, or the
// leader advertises none) and whether this instance leads.
func (f *forwarder) leaderPeer() (p Peer, ok, self bool) {
	leader, _, id := f.election.State()
	if leader {
		return Peer{}, false, true
	}
	if id == 0 || id == f.memberID {
		// Unknown, or a previous process of this member whose session has
		// not expired yet: it commits nothing more, so there is no one to
		// forward to.
		return Peer{}, false, false
	}
	f.mu.Lock()
	p, at, wasForeign := f.peer, f.peerAt, f.peerForeign
	f.mu.Unlock()
	wasForeign = wasForeign && p.ID == id
	if p.ID == id && (p.URL != "" || time.Since(at) < peerRecheck) {
		// A leader with no endpoint to dial is read again now and then:
		// it may have restarted with one, under the same member ID.
		return p, p.URL != "", false
	}
	members, err := f.store.Members()
	if err != nil {
		return Peer{}, false, false
	}
	for _, m := range members {
		if m.ID == id {
			p = Peer{ID: id, URL: m.InternalURL, Token: m.InternalToken}
			foreign := foreignLoopback(f.host, m.InternalURL, m.Host)
			if foreign {
				// Not the leader's: never dialed (host.go).
				if !wasForeign {
					f.log.WithFields(logrus.Fields{"leader": fmt.Sprintf("%x", id), "leader_name": m.Name, "internal_url": m.InternalURL}).
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
func (f *forwarder) forgetPeer(id uint64) {
	f.mu.Lock()
	if f.peer.ID == id {
		f.peer = Peer{}
	}
	f.mu.Unlock()
}

// nextTag returns the tag of the next request this instance forwards.
func (f *forwarder) nextTag() revision.WriterTag {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return revision.WriterTag{Nonce: f.nonce, Seq: f.seq}
}

// resendLimit is how long after its first send a forwarded request of
// unknown outcome is sent again (Config.ForwardResendLimit): as long as
// ZooKeeper may leave a request unanswered, which covers a leader change
// (a session timeout and an election).
func (f *forwarder) resendLimit() time.Duration {
	if f.cfg.ForwardResendLimit > 0 {
		return f.cfg.ForwardResendLimit
	}
	st := f.cfg.Store.SessionTimeout
	if st <= 0 {
		st = zkstore.DefaultSessionTimeout
	}
	return max(2*st, 10*time.Second)
}

// cancelOnLeaderChange cancels an attempt sent to leader id as soon as
// the election names another leader (a paused or partitioned leader may
// never answer): the request is then re-sent with its tag to the new one.
// It returns when ctx ends.
func (f *forwarder) cancelOnLeaderChange(ctx context.Context, cancel context.CancelFunc, id uint64) {
	for {
		changed := f.election.Changed()
		if _, _, now := f.election.State(); now != id {
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

// viewAuth returns the encoded auth state of the view.
func viewAuth(view *revision.View) []byte {
	state, _ := view.AuthState()
	return state
}

// answerDup answers a request found committed at lsn (revision rev): its
// response is rebuilt by dup once the view applied lsn.
func answerDup[T any](ctx context.Context, f *forwarder, lsn, rev int64, dup func(lsn, rev int64) (T, error)) (T, error) {
	var zero T
	if err := f.tail.waitApplied(ctx, lsn); err != nil {
		return zero, err
	}
	if dup == nil {
		return zero, rpctypes.ErrGRPCTimeoutDueToConnectionLost
	}
	return dup(lsn, rev)
}

// serveOnce serves a forwarded call, bound to tag (boundTag), at the
// leader: a call with the same bound tag in flight is joined, one
// answered in the last callKeep gets the same answer again, and otherwise
// serve runs, with ctx's values but not its cancellation — the request is
// answered when the committer answers it, even if the caller went away
// meanwhile: until then a re-send of the same tag joins it, never
// evaluates it a second time. method labels the metrics.
func (f *forwarder) serveOnce(ctx context.Context, method string, bound revision.WriterTag,
	serve func(context.Context) (proto.Message, ForwardReply, error)) (proto.Message, ForwardReply, error) {
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

	c.resp, c.reply, c.err = serve(context.WithoutCancel(ctx))
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

// readIndex asks the leader for the position a linearizable read must
// wait for, when forwarding and another instance leads (ok); ok is false,
// with a nil error, when the read must take this instance's own barrier:
// not forwarding, no leader endpoint known, or the leader did not answer
// within readIndexLimit. Errors: ctx's.
func (f *forwarder) readIndex(ctx context.Context) (int64, bool, error) {
	if !f.enabled() {
		return 0, false, nil
	}
	peer, ok, _ := f.leaderPeer()
	if !ok {
		return 0, false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, readIndexLimit)
	resp, _, err := call(rctx, f, readIndexCall, peer, &emptypb.Empty{})
	cancel()
	if err == nil {
		f.metrics.readIndex.WithLabelValues("leader").Inc()
		return resp.GetValue(), true, nil
	}
	if ctx.Err() != nil {
		return 0, false, ctx.Err()
	}
	f.metrics.readIndex.WithLabelValues("fallback").Inc()
	f.log.WithError(err).WithField("leader", fmt.Sprintf("%x", peer.ID)).Debug("read index from the leader failed; own barrier")
	return 0, false, nil
}

// keepAlive renews lease id at the leader when forwarding and another
// instance leads, and returns its TTL (ok); ok is false, with a nil
// error, when the keepalive must be renewed here: not forwarding, no
// leader endpoint known, or the leader did not answer within
// readIndexLimit. Errors: ctx's.
func (f *forwarder) keepAlive(ctx context.Context, id int64) (int64, bool, error) {
	if !f.enabled() {
		return 0, false, nil
	}
	peer, ok, _ := f.leaderPeer()
	if !ok {
		return 0, false, nil
	}
	kctx, cancel := context.WithTimeout(ctx, readIndexLimit)
	resp, _, err := call(kctx, f, keepAliveCall, peer, &pb.LeaseKeepAliveRequest{ID: id})
	cancel()
	if err == nil {
		f.metrics.requests.WithLabelValues(keepAliveCall.label, "ok").Inc()
		return resp.GetTTL(), true, nil
	}
	if ctx.Err() != nil {
		return 0, false, ctx.Err()
	}
	f.metrics.requests.WithLabelValues(keepAliveCall.label, "local").Inc()
	return 0, false, nil
}

// leaderRead asks the leader for a lease read (k, with req) when
// forwarding and another instance leads, and returns its answer once this
// view applied the position the answer reflects (ok). ok is false, with a
// nil error, when the caller must answer locally: not forwarding, no
// leader endpoint known, or the leader did not answer within
// readIndexLimit (unreachable, no longer leading, or an older version
// without the request). The answer's header is reset for the caller's
// server to fill from this view. Errors: the instance's own (halted,
// stopped), ctx's, or ErrGRPCCorrupt for a view that cannot reach the
// position.
func leaderRead[R, T proto.Message](ctx context.Context, f *forwarder, k *callKind[R, T], req R, reset func(T)) (T, bool, error) {
	var zero T
	if !f.enabled() {
		return zero, false, nil
	}
	if err := f.rb.servable(); err != nil {
		return zero, false, err
	}
	peer, ok, _ := f.leaderPeer()
	if !ok {
		return zero, false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, readIndexLimit)
	resp, lsn, err := call(rctx, f, k, peer, req)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return zero, false, ctx.Err()
		}
		f.metrics.requests.WithLabelValues(k.label, "local").Inc()
		f.log.WithError(err).WithFields(logrus.Fields{"method": k.label, "leader": fmt.Sprintf("%x", peer.ID)}).
			Debug("lease read at the leader failed; answering here")
		return zero, false, nil
	}
	if err := f.tail.waitApplied(ctx, lsn); err != nil {
		return zero, false, err
	}
	reset(resp)
	f.metrics.requests.WithLabelValues(k.label, "ok").Inc()
	return resp, true, nil
}

// call makes a call of kind k with req at the leader at peer, and returns
// its answer and the log position the answer carries (see
// Forwarder.Call).
func call[R, T proto.Message](ctx context.Context, f *forwarder, k *callKind[R, T], peer Peer, req R) (T, int64, error) {
	resp := newMessage[T]()
	lsn, err := f.cfg.Forwarder.Call(ctx, peer, k.face(), req, resp)
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return resp, lsn, nil
}
