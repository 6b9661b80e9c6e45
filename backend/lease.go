package backend

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/revision"
	"github.com/zketcd/zketcd/translate"
)

// Lease limits: translate's (etcd's).
const (
	MinLeaseTTL = translate.MinLeaseTTL
	MaxLeaseTTL = translate.MaxLeaseTTL
)

// LeaseGrant commits a new lease. ID 0 asks the server to choose one.
// Errors: ErrGRPCLeaseExist, ErrGRPCLeaseTTLTooLarge.
func (b *Backend) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
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
	return write(ctx, b, req, func(bt *revision.Batch) (*pb.LeaseGrantResponse, error) { return translate.LeaseGrant(bt, req, id) })
}

// LeaseRevoke commits the removal of a lease and, in one revision, of every
// key attached to it. Errors: ErrGRPCLeaseNotFound.
func (b *Backend) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return write(ctx, b, req, func(bt *revision.Batch) (*pb.LeaseRevokeResponse, error) { return translate.LeaseRevoke(bt, req.ID) })
}

// Leases lists every lease, after a barrier, soonest expiry first as etcd
// orders them (estimated from when each lease's token was last written).
func (b *Backend) Leases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
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
			items = append(items, translate.LeaseExpiry{ID: id, Expiry: tok.Renewed.Add(time.Duration(ttl) * time.Second)})
		}
	}
	return translate.LeaseLeases(items), nil
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
	resp.TTL = translate.RemainingTTL(granted, tok.Renewed, time.Now())
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
		return 0, b.stopped(req.err)
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
