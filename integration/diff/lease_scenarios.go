package diff

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaseScenarios covers the Lease service's answers that do not depend on
// time passing: grants with explicit IDs, errors, attached keys, listing
// (soonest expiry first), time-to-live right after a grant (etcd truncates
// the remaining time, so a fresh 60 s lease reports 59), revocation
// deleting the keys in one revision.
func LeaseScenarios() []Scenario {
	const a, b = clientv3.LeaseID(0x1000), clientv3.LeaseID(0x2000)
	return []Scenario{
		{Name: "lease/grant-attach-list-revoke", Steps: Steps(
			LeaseGrant(a, 60),
			LeaseGrant(b, 3600),
			LeaseGrant(a, 60), // exists
			Raw(&pb.LeaseGrantRequest{ID: 0x3000, TTL: 9000000001}), // too large
			Put("k1", "v", clientv3.WithLease(a)),
			Put("k2", "v", clientv3.WithLease(a)),
			Put("k3", "v", clientv3.WithLease(b)),
			Raw(&pb.PutRequest{Key: []byte("k4"), Value: []byte("v"), Lease: 0x4000}), // no such lease
			Raw(&pb.LeaseLeasesRequest{}),
			Raw(&pb.LeaseTimeToLiveRequest{ID: int64(a), Keys: true}),
			Raw(&pb.LeaseTimeToLiveRequest{ID: 0x4000, Keys: true}),
			Put("k1", "v2"), // detaches k1 from a
			Raw(&pb.LeaseTimeToLiveRequest{ID: int64(a), Keys: true}),
			LeaseRevoke(a),
			Get("k", clientv3.WithPrefix()),
			LeaseRevoke(a), // gone
			Raw(&pb.LeaseTimeToLiveRequest{ID: int64(a)}),
			Put("k5", "v", clientv3.WithLease(a)),
			Raw(&pb.LeaseLeasesRequest{}),
			LeaseRevoke(b),
			Get("k", clientv3.WithPrefix()),
		)},
		{Name: "lease/revoke-without-keys-takes-no-revision", Steps: Steps(
			Put("x", "1"),
			LeaseGrant(a, 60),
			LeaseRevoke(a),
			Get("x"),
		)},
	}
}
