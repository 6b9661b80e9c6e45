package backend

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/sirupsen/logrus"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/revision"
	"github.com/zketcd/zketcd/zkstore"
)

// Lease limits, as etcd's (the minimum follows etcd's default election
// timeout: 1.5 s rounded up).
const (
	MinLeaseTTL = 2
	MaxLeaseTTL = 9000000000
)

// LeaseGrant commits a new lease. ID 0 asks the server to choose one.
// Errors: ErrGRPCLeaseExist, ErrGRPCLeaseTTLTooLarge.
func (b *Backend) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if req.TTL > MaxLeaseTTL {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	id := req.ID
	for id == 0 {
		var rb [8]byte
		if _, err := rand.Read(rb[:]); err != nil {
			return nil, err
		}
		id = int64(binary.BigEndian.Uint64(rb[:]) >> 1)
	}
	ttl := max(req.TTL, MinLeaseTTL)
	resp, err := b.write(ctx, req, func(bt *revision.Batch) (any, error) {
		if bt.Lease(id) != nil {
			return nil, rpctypes.ErrGRPCLeaseExist
		}
		bt.GrantLease(id, ttl)
		return &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: bt.Rev()}, ID: id, TTL: ttl}, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.LeaseGrantResponse), nil
}

// LeaseRevoke commits the removal of a lease and, in one revision, of every
// key attached to it. Errors: ErrGRPCLeaseNotFound.
func (b *Backend) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := b.write(ctx, req, func(bt *revision.Batch) (any, error) { return revokeLease(bt, req.ID) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.LeaseRevokeResponse), nil
}

// revokeLease stages the deletion of every key attached to lease id (one
// revision, if any) and the lease's removal, in bt's open transaction.
func revokeLease(bt *revision.Batch, id int64) (any, error) {
	if bt.Lease(id) == nil {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	keys, err := bt.LeaseKeys(id)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if _, err := bt.DeleteRange(k, nil); err != nil {
			return nil, err
		}
	}
	rev, _ := bt.Commit()
	bt.Begin()
	bt.RevokeLease(id)
	return &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: rev}}, nil
}

// Leases lists every lease, after a barrier, soonest expiry first as etcd
// orders them (estimated from when each lease's token was last written).
func (b *Backend) Leases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	if err := b.Linearize(ctx); err != nil {
		return nil, err
	}
	type item struct {
		id     int64
		expiry time.Time
	}
	var items []item
	for id, ttl := range b.view.LeaseTTLs() {
		tok, ok, err := b.store.ReadLeaseToken(id)
		if err != nil {
			return nil, err
		}
		if ok {
			items = append(items, item{id, tok.Renewed.Add(time.Duration(ttl) * time.Second)})
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if !items[i].expiry.Equal(items[j].expiry) {
			return items[i].expiry.Before(items[j].expiry)
		}
		return items[i].id < items[j].id
	})
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{}, Leases: make([]*pb.LeaseStatus, len(items))}
	for i, it := range items {
		resp.Leases[i] = &pb.LeaseStatus{ID: it.id}
	}
	return resp, nil
}

// LeaseTimeToLive reports a lease's granted TTL and an estimate of its
// remaining TTL (from when its renewal token was last written, by
// ZooKeeper's clock), and its keys if asked. A lease that does not exist
// has TTL -1, as etcd answers.
func (b *Backend) LeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
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
	// etcd truncates the remaining duration to whole seconds.
	remaining := int64((time.Duration(granted)*time.Second - time.Since(tok.Renewed)).Seconds())
	resp.TTL = min(max(remaining, 0), granted)
	resp.GrantedTTL = granted
	resp.Keys = keys
	return resp, nil
}

// LeaseRenew renews a lease for its TTL and returns the TTL, or 0 if the
// lease does not exist (etcd's keepalive answer). Renewals from concurrent
// keepalives share one ZooKeeper multi; the answer comes after it.
func (b *Backend) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	var ttl int64
	_ = b.view.Read(func(r revision.Reader) error {
		if l := r.Lease(id); l != nil {
			ttl = l.TTL
		}
		return nil
	})
	if ttl == 0 {
		return 0, nil
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
		return 0, toUnavailable(req.err)
	}
	if !req.renewed {
		return 0, nil
	}
	return ttl, nil
}

type renewal struct {
	id      int64
	renewed bool
	err     error
	done    chan struct{}
}

// renewLoop batches renewals: everything queued while one multi is in
// flight goes into the next.
func (b *Backend) renewLoop() {
	defer b.wg.Done()
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

// expiryTick is how often the leader looks for leases past their deadline.
const expiryTick = 250 * time.Millisecond

// leaseDeadline is the leader's view of one lease: when it expires unless
// its token moved past version.
type leaseDeadline struct {
	deadline time.Time // monotonic
	version  int32
	known    bool // version has been read
}

// expireLoop runs lease expiry while this instance is the leader. Deadlines
// use the monotonic clock from when the leader first read each lease's
// token; a lease expires only if its token did not move for a whole TTL
// since, so it never expires early, also across leader changes (a new
// leader starts every lease's clock anew, as etcd does on promotion).
func (b *Backend) expireLoop() {
	defer b.wg.Done()
	lg := b.log.WithField("component", "lease-expiry")
	var deadlines map[int64]*leaseDeadline
	t := time.NewTicker(expiryTick)
	defer t.Stop()
	for {
		changed := b.election.Changed()
		leader, fence, _ := b.election.State()
		if !leader {
			deadlines = nil
			select {
			case <-changed:
			case <-b.ctx.Done():
				return
			}
			continue
		}
		if deadlines == nil {
			deadlines = map[int64]*leaseDeadline{}
		}
		b.expireDue(lg, deadlines, fence)
		select {
		case <-t.C:
		case <-changed:
		case <-b.ctx.Done():
			return
		}
	}
}

func (b *Backend) expireDue(lg *logrus.Entry, deadlines map[int64]*leaseDeadline, fence zkstore.Fence) {
	ttls := b.view.LeaseTTLs()
	for id := range deadlines {
		if _, ok := ttls[id]; !ok {
			delete(deadlines, id)
		}
	}
	for id, ttl := range ttls {
		full := time.Duration(ttl) * time.Second
		d := deadlines[id]
		if d == nil || !d.known {
			// Baseline: the token as it is now. A renewal may have happened
			// up to the moment the read returned, so the clock starts then.
			tok, ok, err := b.store.ReadLeaseToken(id)
			if err != nil {
				lg.WithError(err).Debug("read lease token")
				return
			}
			if !ok {
				continue // revoked meanwhile; the view will catch up
			}
			deadlines[id] = &leaseDeadline{version: tok.Version, known: true, deadline: b.now().Add(full)}
			continue
		}
		if b.now().Before(d.deadline) {
			continue
		}
		tok, ok, err := b.store.ReadLeaseToken(id)
		if err != nil {
			lg.WithError(err).Debug("read lease token")
			return
		}
		if !ok {
			continue
		}
		if tok.Version != d.version {
			// Renewed since the baseline, at the latest just now.
			d.version, d.deadline = tok.Version, b.now().Add(full)
			continue
		}
		if err := b.expire(id, tok.Version, fence); err != nil {
			// Refused: renewed (or leadership lost) while expiring. Take a
			// new baseline, with a whole TTL from then.
			lg.WithError(err).WithField("lease", fmt.Sprintf("%x", id)).Debug("lease expiry not committed")
			d.known = false
			continue
		}
		lg.WithField("lease", fmt.Sprintf("%x", id)).Debug("lease expired")
		b.metrics.leasesExpired.Inc()
		delete(deadlines, id)
	}
}

// expire revokes lease id (deleting its keys in one revision), provided its
// token is still at version and this instance still holds the leadership.
func (b *Backend) expire(id int64, version int32, fence zkstore.Fence) error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	p := &proposal{
		ctx: ctx, size: 64, done: make(chan struct{}),
		eval: func(bt *revision.Batch) (any, error) { return revokeLease(bt, id) },
		guards: func() []zkstore.Guard {
			return []zkstore.Guard{b.store.LeaseGuard(id, version), fence.Guard()}
		},
	}
	_, err := b.submit(ctx, p)
	return err
}
