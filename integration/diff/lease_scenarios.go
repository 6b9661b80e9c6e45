package diff

import (
	"bytes"
	"context"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// LeaseScenarios covers the Lease service's answers that do not depend on
// time passing: grants with explicit IDs, errors, attached keys, listing
// (soonest expiry first), time-to-live right after a grant, revocation
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
			timeToLive(a, true),
			timeToLive(0x4000, true),
			Put("k1", "v2"), // detaches k1 from a
			timeToLive(a, true),
			LeaseRevoke(a),
			Get("k", clientv3.WithPrefix()),
			LeaseRevoke(a), // gone
			timeToLive(a, false),
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

// timeToLive asks for a lease's time to live and normalizes what legitimately
// varies between two servers: the attached keys come in map order on etcd
// (sorted here), and the remaining TTL depends on when the request lands
// (a value within 5 s of the granted TTL is shown as the granted TTL - 1).
func timeToLive(id clientv3.LeaseID, keys bool) Step {
	req := &pb.LeaseTimeToLiveRequest{ID: int64(id), Keys: keys}
	return Step{kind: "LeaseTimeToLive (normalized)", exec: func(ctx context.Context, e *endpoint) Result {
		resp, err := e.lease.LeaseTimeToLive(ctx, req)
		res := Result{Request: req, Err: err}
		if err != nil {
			return res
		}
		sort.Slice(resp.Keys, func(i, j int) bool { return bytes.Compare(resp.Keys[i], resp.Keys[j]) < 0 })
		if resp.GrantedTTL > 0 && resp.TTL >= resp.GrantedTTL-5 && resp.TTL <= resp.GrantedTTL {
			resp.TTL = resp.GrantedTTL - 1
		}
		res.Responses = []proto.Message{resp}
		return res
	}}
}
