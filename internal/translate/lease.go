package translate

import (
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
)

// Lease limits, as etcd's (the minimum follows etcd's default election
// timeout: 1.5 s rounded up).
const (
	MinLeaseTTL = 2
	MaxLeaseTTL = 9000000000
)

// CheckLeaseGrant validates a LeaseGrant: etcd refuses a TTL above
// MaxLeaseTTL with ErrGRPCLeaseTTLTooLarge.
func CheckLeaseGrant(r *pb.LeaseGrantRequest) error {
	if r.TTL > MaxLeaseTTL {
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	return nil
}

// LeaseGrant stages lease id (chosen by the caller when the request asks
// for ID 0) in bt's open transaction, with the request's TTL raised to
// MinLeaseTTL, as etcd grants it. Errors: ErrGRPCLeaseExist.
func LeaseGrant(bt *revision.Batch, r *pb.LeaseGrantRequest, id int64) (*pb.LeaseGrantResponse, error) {
	if bt.Lease(id) != nil {
		return nil, rpctypes.ErrGRPCLeaseExist
	}
	ttl := max(r.TTL, MinLeaseTTL)
	bt.GrantLease(id, ttl)
	return &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: bt.Rev()}, ID: id, TTL: ttl}, nil
}

// LeaseRevoke stages, as etcd revokes a lease, the deletion of every key
// attached to lease id (one revision, if any) and then the lease's removal,
// in bt's open transaction. Lease expiry is the same. Errors:
// ErrGRPCLeaseNotFound.
func LeaseRevoke(bt *revision.Batch, id int64) (*pb.LeaseRevokeResponse, error) {
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

// RemainingTTL estimates a lease's remaining TTL at now from when it was
// last renewed: truncated to whole seconds, as etcd reports it, and within
// [0, granted].
func RemainingTTL(granted int64, renewed, now time.Time) int64 {
	remaining := int64((time.Duration(granted)*time.Second - now.Sub(renewed)).Seconds())
	return min(max(remaining, 0), granted)
}

// LeaseExpiry is one lease and its estimated expiry, for LeaseLeases.
type LeaseExpiry struct {
	ID     int64
	Expiry time.Time
}

// LeaseLeases answers LeaseLeases: the leases soonest expiry first, as etcd
// orders them, ties by ID. It sorts leases in place.
func LeaseLeases(leases []LeaseExpiry) *pb.LeaseLeasesResponse {
	sort.Slice(leases, func(i, j int) bool {
		if !leases[i].Expiry.Equal(leases[j].Expiry) {
			return leases[i].Expiry.Before(leases[j].Expiry)
		}
		return leases[i].ID < leases[j].ID
	})
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{}, Leases: make([]*pb.LeaseStatus, len(leases))}
	for i, l := range leases {
		resp.Leases[i] = &pb.LeaseStatus{ID: l.ID}
	}
	return resp
}
