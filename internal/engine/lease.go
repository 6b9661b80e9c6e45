package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Lease limits: translate's (etcd's).
const (
	MinLeaseTTL = translate.MinLeaseTTL
	MaxLeaseTTL = translate.MaxLeaseTTL
)

// LeaseGrant commits a new lease. ID 0 asks the server to choose one.
// Errors: ErrGRPCLeaseExist, ErrGRPCLeaseTTLTooLarge.
func (b *Engine) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if err := translate.CheckLeaseGrant(req); err != nil {
		return nil, err
	}
	if err := b.checkQuota(req); err != nil {
		return nil, err
	}
	id := req.ID
	for id == 0 {
		var rb [8]byte
		if _, err := rand.Read(rb[:]); err != nil {
			return nil, err
		}
		id = int64(binary.BigEndian.Uint64(rb[:]) >> 1)
	}
	if req.ID != id {
		// The ID is chosen here, so that a grant found committed after a
		// lost answer can be answered.
		req = &pb.LeaseGrantRequest{TTL: req.TTL, ID: id}
	}
	return leaseGrantKind.write(ctx, b, req, nil)
}

// LeaseRevoke commits the removal of a lease and, in one revision, of every
// key attached to it. Errors: ErrGRPCLeaseNotFound.
func (b *Engine) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return leaseRevokeKind.write(ctx, b, req, nil)
}

// Leases lists every lease, linearizably, soonest expiry first as etcd
// orders them. When forwarding, a follower asks the leader (ServeLeases),
// whose deadlines hold the keepalives it renewed in memory, and answers the
// leader's list once its own view applied the position the list reflects
// (the header revision is this view's, filled by the server: at least the
// list's); if the leader is unknown or does not answer within
// readIndexLimit, it answers here as leasesHere does. Errors: Linearize's,
// the log's.
func (b *Engine) Leases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	resp, ok, err := leaderRead(ctx, b, "lease_leases",
		func(ctx context.Context, p Peer) (*pb.LeaseLeasesResponse, int64, error) {
			return b.cfg.Forwarder.Leases(ctx, p)
		},
		func(r *pb.LeaseLeasesResponse) { r.Header = &pb.ResponseHeader{} })
	if ok || err != nil {
		return resp, err
	}
	return b.leasesHere(ctx)
}

// leasesHere is Leases from this instance alone, after a barrier: each
// lease's expiry estimated from when its token was last written and, on the
// leader, from its own deadline.
func (b *Engine) leasesHere(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	if err := b.Linearize(ctx); err != nil {
		return nil, err
	}
	var items []translate.LeaseExpiry
	for id, ttl := range b.view.LeaseTTLs() {
		tok, ok, err := b.store.ReadLeaseToken(id)
		if err != nil {
			return nil, err
		}
		if ok {
			expiry := tok.Renewed.Add(b.firstTTL(id, ttl, tok))
			if d, ok := b.leases.deadline(id); ok {
				// The leader's own deadline: renewals in its memory, which
				// the token does not show. Monotonic time to wall time.
				expiry = later(expiry, time.Now().Add(d.Sub(b.now())))
			}
			items = append(items, translate.LeaseExpiry{ID: id, Expiry: expiry})
		}
	}
	return translate.LeaseLeases(items), nil
}

// LeaseTimeToLive reports, linearizably, a lease's granted TTL, an
// estimate of its remaining TTL and its keys if asked. A lease that does
// not exist has TTL -1, as etcd answers.
//
// When forwarding, a follower asks the leader (ServeLeaseTimeToLive): keepalives
// are renewed in the leader's memory, which the renewal tokens a follower
// could read do not show. The leader answers everything (remaining and
// granted TTL, keys), and the follower answers that once its own view
// applied the position the answer reflects, so the header revision (this
// view's, filled by the server) is at least the answer's and a read here
// after it sees every write the answer does. If the leader is unknown or
// does not answer within readIndexLimit (unreachable, deposed, or an older
// version without the request), the follower answers here as
// leaseTimeToLiveHere does, which can underestimate the remaining TTL of a
// lease kept alive at the leader. Errors: Linearize's, the log's.
func (b *Engine) LeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, ok, err := leaderRead(ctx, b, "lease_time_to_live",
		func(ctx context.Context, p Peer) (*pb.LeaseTimeToLiveResponse, int64, error) {
			return b.cfg.Forwarder.LeaseTimeToLive(ctx, p, req)
		},
		func(r *pb.LeaseTimeToLiveResponse) { r.Header = &pb.ResponseHeader{} })
	if ok || err != nil {
		return resp, err
	}
	return b.leaseTimeToLiveHere(ctx, req)
}

// leaseTimeToLiveHere is LeaseTimeToLive from this instance alone, after a
// barrier: the remaining TTL from when the lease's renewal token was last
// written, by ZooKeeper's clock, or a remaining TTL checkpointed since; on
// the leader, also from its own deadline, which renewals in memory move.
func (b *Engine) leaseTimeToLiveHere(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := b.Linearize(ctx); err != nil {
		return nil, err
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{}, ID: req.ID, TTL: -1}
	var granted int64
	var keys [][]byte
	_ = b.view.Read(func(r revision.Reader) error {
		if l := r.Lease(req.ID); l != nil {
			granted = l.TTL
			if req.Keys {
				keys = l.Keys()
			}
		}
		return nil
	})
	if granted == 0 {
		return resp, nil
	}
	tok, ok, err := b.store.ReadLeaseToken(req.ID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return resp, nil
	}
	now := time.Now()
	left := tok.Renewed.Add(b.firstTTL(req.ID, granted, tok))
	if d, ok := b.leases.deadline(req.ID); ok {
		left = later(left, now.Add(d.Sub(b.now())))
	}
	resp.TTL = translate.RemainingTTL(granted, left.Add(-time.Duration(granted)*time.Second), now)
	resp.GrantedTTL = granted
	resp.Keys = keys
	return resp, nil
}

// LeaseRenew renews lease id for its TTL and returns the TTL, or 0 if the
// lease does not exist (etcd's keepalive answer). It is the one way to
// renew a lease: the gRPC keepalive handler calls it on the instance the
// client reached; when forwarding writes, a follower sends it to the
// leader (ServeKeepAlive there renews with renewHere), and renews here
// only if the leader does not answer. Safe for concurrent use; errors are ctx's,
// ErrGRPCStopped, or the log's (unavailable) on the token path.
//
// On the leader the renewal lives in memory: the deadline the expiry loop
// keeps (expiry.go) moves to now+TTL on the monotonic clock, and nothing is
// written to ZooKeeper. It is answered only once the leader knows its
// session — the owner of its election znode — cannot have ended before the
// renewal, so no new leader's clock (which starts after that znode is gone)
// can have started before it:
//
//   - either a ZooKeeper transaction of the session (a commit or a quorum
//     barrier) that was sent within the proof window on the session's
//     current connection landed: the window is half of how long the
//     session can outlive that send, derived from the granted timeout and
//     ZooKeeper's tick (proofwindow.go);
//   - or, failing that, after a barrier round (or a commit) that started
//     after the renewal landed: the session was alive after the renewal.
//     This needs no clock; it costs one shared round trip, which refreshes
//     the proof for the keepalives after it.
//
// If leadership changes (or the proof cannot be had) the keepalive takes
// the follower's path: its token is written, which a leader's expiry reads.
// So does a lease with a checkpointed remaining TTL until the leader saw its
// token move: that move is what voids the checkpoint (see firstTTL).
// With RelaxedReads (sync is no proof) every keepalive takes that path.
// Followers batch renewals: concurrent keepalives share one ZooKeeper
// multi, and the answer comes after it.
func (b *Engine) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	if b.forwarding() {
		if peer, ok, _ := b.leaderPeer(); ok {
			kctx, cancel := context.WithTimeout(ctx, readIndexLimit)
			ttl, err := b.cfg.Forwarder.KeepAlive(kctx, peer, id)
			cancel()
			if err == nil {
				b.fwd.metrics.requests.WithLabelValues("keepalive", "ok").Inc()
				return ttl, nil
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			b.fwd.metrics.requests.WithLabelValues("keepalive", "local").Inc()
		}
	}
	return b.renewHere(ctx, id)
}

// renewHere is LeaseRenew on this instance (in memory on the leader,
// through the token on a follower; see LeaseRenew).
func (b *Engine) renewHere(ctx context.Context, id int64) (int64, error) {
	var ttl int64
	checkpointed := false
	_ = b.view.Read(func(r revision.Reader) error {
		if l := r.Lease(id); l != nil {
			ttl, checkpointed = l.TTL, l.RemainingTTL > 0
		}
		return nil
	})
	if ttl == 0 {
		return 0, nil
	}
	renewed, err := b.renewInMemory(ctx, id, time.Duration(ttl)*time.Second, checkpointed)
	if err != nil {
		return 0, err
	}
	if renewed {
		b.metrics.renewalsInMemory.Inc()
		return ttl, nil
	}
	req := &renewal{id: id, done: make(chan struct{})}
	select {
	case b.renewals <- req:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-b.ctx.Done():
		return 0, rpctypes.ErrGRPCStopped
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if req.err != nil {
		return 0, b.stopped(req.err)
	}
	if !req.renewed {
		return 0, nil
	}
	return ttl, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// liveProof is when a ZooKeeper transaction of session, since landed, was
// sent.
//
// lsn is a log position ZooKeeper's log had reached when it landed (the
// commit's entry, or the head a barrier round read after it): every
// commit that landed before the transaction was sent is at or below it.
type liveProof struct {
	session int64
	sent    time.Time
	lsn     int64
}

// proveLive records that a transaction sent at sent landed on the current
// session, with the log at lsn or beyond. The session reported now is the
// one it landed on or one created after it was sent; either outlives sent
// by what its grant allows (proofwindow.go; freshProof also asks that sent
// come after the current connection's start).
func (b *Engine) proveLive(sent time.Time, lsn int64) {
	sid, ok := b.store.Session()
	if !ok {
		return
	}
	p := &liveProof{session: sid, sent: sent, lsn: lsn}
	for {
		old := b.proof.Load()
		if old != nil && old.session == sid && !old.sent.Before(sent) {
			return
		}
		if old != nil && old.session == sid && old.lsn > p.lsn {
			p.lsn = old.lsn // ZooKeeper answers a session in order: never less
		}
		if b.proof.CompareAndSwap(old, p) {
			return
		}
	}
}

// renewInMemory renews lease id in the leader's memory (see LeaseRenew). It
// reports false when this instance is not the leader or cannot prove it
// still was after the renewal: the caller renews through the token then.
func (b *Engine) renewInMemory(ctx context.Context, id int64, ttl time.Duration, checkpointed bool) (bool, error) {
	if b.cfg.RelaxedReads {
		return false, nil
	}
	leader, fence, _ := b.election.State()
	sid, connected := b.store.Session()
	if !leader || !connected || !b.leases.renew(fence.Path(), id, ttl, b.now(), checkpointed) {
		return false, nil
	}
	if b.freshProof(sid, time.Now()) != nil {
		return b.stillLeads(fence, sid), nil
	}
	if _, err := b.barrier.wait(ctx); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil // no proof: the token path decides
	}
	return b.stillLeads(fence, sid), nil
}

// stillLeads reports whether this instance leads with fence on session sid.
func (b *Engine) stillLeads(fence zkstore.Fence, sid int64) bool {
	leader, now, _ := b.election.State()
	cur, connected := b.store.Session()
	return leader && connected && now.Path() == fence.Path() && cur == sid
}

type renewal struct {
	id      int64
	renewed bool
	err     error
	done    chan struct{}
}

// renewLoop batches renewals: everything queued while one multi is in
// flight goes into the next.
func (b *Engine) renewLoop() {
	for {
		var batch []*renewal
		select {
		case r := <-b.renewals:
			batch = append(batch, r)
		case <-b.ctx.Done():
			return
		}
	drain:
		for len(batch) < 1024 {
			select {
			case r := <-b.renewals:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		seen := map[int64]bool{}
		var ids []int64
		for _, r := range batch {
			if !seen[r.id] {
				seen[r.id] = true
				ids = append(ids, r.id)
			}
		}
		renewed, err := b.store.RenewLeases(ids)
		if err == nil {
			b.metrics.renewals.Add(float64(len(batch)))
			b.metrics.renewalMultis.Inc()
			b.metrics.renewalTokens.Add(float64(len(ids)))
		}
		for _, r := range batch {
			r.renewed, r.err = renewed[r.id], err
			close(r.done)
		}
	}
}

// endGrant ends the leases.startGrant of lease id's grant, with the TTL it
// was granted and whether it committed, in the term this instance leads
// now (if any).
func (b *Engine) endGrant(id, ttl int64, ok bool) {
	fence := ""
	if leader, f, _ := b.election.State(); leader {
		fence = f.Path()
	}
	b.leases.endGrant(fence, id, time.Duration(ttl)*time.Second, b.now(), ok)
}
