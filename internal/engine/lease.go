package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
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
// orders them. When forwarding, a follower asks the leader (leaseLeasesCall),
// whose deadlines hold the keepalives it renewed in memory, and answers the
// leader's list once its own view applied the position the list reflects
// (the header revision is this view's, filled by the server: at least the
// list's); if the leader is unknown or does not answer within
// readIndexLimit, it answers here as leasesHere does. Errors: Linearize's,
// the log's.
func (b *Engine) Leases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	resp, ok, err := leaderRead(ctx, b.fwd, leaseLeasesCall, &pb.LeaseLeasesRequest{},
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
			expiry := tok.Renewed.Add(b.leases.firstTTL(id, ttl, tok))
			if d, ok := b.leases.clock.deadline(id); ok {
				// The leader's own deadline: renewals in its memory, which
				// the token does not show. Monotonic time to wall time.
				expiry = later(expiry, time.Now().Add(d.Sub(b.leases.now())))
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
// When forwarding, a follower asks the leader (leaseTimeToLiveCall): keepalives
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
	resp, ok, err := leaderRead(ctx, b.fwd, leaseTimeToLiveCall, req,
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
	left := tok.Renewed.Add(b.leases.firstTTL(req.ID, granted, tok))
	if d, ok := b.leases.clock.deadline(req.ID); ok {
		left = later(left, now.Add(d.Sub(b.leases.now())))
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
// leader (keepAliveCall: it renews with renewHere there), and renews here
// only if the leader does not answer. Safe for concurrent use; errors are ctx's,
// ErrGRPCStopped, or the log's (unavailable) on the token path.
//
// On the leader the renewal lives in memory: the deadline the expiry loop
// keeps (lessor.go) moves to now+TTL on the monotonic clock, and nothing is
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
	if ttl, ok, err := b.fwd.keepAlive(ctx, id); ok || err != nil {
		return ttl, err
	}
	return b.leases.renewHere(ctx, id)
}
