package backend

import (
	"context"
	"crypto/rand"
	"encoding/binary"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/revision"
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
	resp, err := b.write(ctx, req, func(bt *revision.Batch) (any, error) {
		if bt.Lease(req.ID) == nil {
			return nil, rpctypes.ErrGRPCLeaseNotFound
		}
		keys, err := bt.LeaseKeys(req.ID)
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
		bt.RevokeLease(req.ID)
		return &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: rev}}, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.LeaseRevokeResponse), nil
}

// Leases lists every lease, after a barrier.
func (b *Backend) Leases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	if err := b.Linearize(ctx); err != nil {
		return nil, err
	}
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{}}
	for _, id := range b.view.LeaseIDs() {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	return resp, nil
}
