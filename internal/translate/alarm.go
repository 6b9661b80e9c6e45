package translate

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
)

// etcd's space quota: the estimated cost of storing a request, checked
// against --quota-backend-bytes before the request is accepted.
const (
	// DefaultQuotaBytes is etcd's default quota (a --quota-backend-bytes of
	// 0): 2 GiB.
	DefaultQuotaBytes = int64(2 << 30)
	// MaxQuotaBytes is the largest quota etcd suggests (it warns above it).
	MaxQuotaBytes = int64(8 << 30)

	leaseCostBytes = 64  // etcd's estimate for storing a lease
	kvCostBytes    = 256 // etcd's estimate for a key's metadata
)

// QuotaBytes resolves etcd's --quota-backend-bytes: 0 is the default, a
// negative value disables the quota (QuotaBytes returns it unchanged; see
// QuotaAvailable).
func QuotaBytes(flag int64) int64 {
	if flag == 0 {
		return DefaultQuotaBytes
	}
	return flag
}

// QuotaCost is etcd 3.7's cost of a request against the quota: a Put's key
// and value plus 256 bytes, a Txn's more expensive branch (the puts of
// nested transactions count), 64 bytes for a LeaseGrant, 0 for anything
// else.
func QuotaCost(req any) int64 {
	switch r := req.(type) {
	case *pb.PutRequest:
		return putCost(r)
	case *pb.TxnRequest:
		return txnCost(r)
	case *pb.LeaseGrantRequest:
		return leaseCostBytes
	}
	return 0
}

func putCost(r *pb.PutRequest) int64 { return kvCostBytes + int64(len(r.Key)+len(r.Value)) }

func txnCost(r *pb.TxnRequest) int64 { return max(branchCost(r.Success), branchCost(r.Failure)) }

func branchCost(ops []*pb.RequestOp) int64 {
	var n int64
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			n += putCost(p)
		} else if t := op.GetRequestTxn(); t != nil {
			n += txnCost(t)
		}
	}
	return n
}

// QuotaAvailable reports whether a request of cost fits in quota (as
// resolved by QuotaBytes) with size bytes already used, as etcd decides
// it: a request that costs nothing always fits, a negative quota never
// refuses, otherwise size + cost must stay below the quota.
func QuotaAvailable(quota, size, cost int64) bool {
	return cost == 0 || quota < 0 || size+cost < quota
}

// AlarmGate is etcd's rule for writes while alarms are active, applied when
// a request is evaluated in the log's order, so every instance refuses the
// same ones. With a CORRUPT alarm, Put, DeleteRange, Txn, Compaction,
// LeaseGrant and LeaseRevoke fail with ErrGRPCCorrupt (read-only
// transactions never reach it: they are reads). With a NOSPACE alarm, Put,
// LeaseGrant and a Txn with a top-level put in either branch fail with
// ErrGRPCNoSpace; deletes, compactions, lease revocations, auth changes
// and alarm changes pass.
func AlarmGate(alarms []revision.Alarm, req any) error {
	if len(alarms) == 0 {
		return nil
	}
	if revision.HasAlarm(alarms, int32(pb.AlarmType_CORRUPT)) {
		switch req.(type) {
		case *pb.PutRequest, *pb.DeleteRangeRequest, *pb.TxnRequest, *pb.CompactionRequest,
			*pb.LeaseGrantRequest, *pb.LeaseRevokeRequest:
			return rpctypes.ErrGRPCCorrupt
		}
	}
	if revision.HasAlarm(alarms, int32(pb.AlarmType_NOSPACE)) {
		switch r := req.(type) {
		case *pb.PutRequest, *pb.LeaseGrantRequest:
			return rpctypes.ErrGRPCNoSpace
		case *pb.TxnRequest:
			if QuotaCost(r) > 0 {
				return rpctypes.ErrGRPCNoSpace
			}
		}
	}
	return nil
}

// AlarmResponse evaluates etcd's AlarmRequest on the active alarms and
// returns the response's alarms and the change to stage (nil: none). GET
// lists the alarms of req.Alarm's type (NONE: all); ACTIVATE of NONE does
// nothing; ACTIVATE answers the alarm (already active or not); DEACTIVATE
// answers the alarm it clears, or nothing if it was not active.
func AlarmResponse(alarms []revision.Alarm, req *pb.AlarmRequest) ([]*pb.AlarmMember, *revision.AlarmChange) {
	a := revision.Alarm{Member: req.MemberID, Type: int32(req.Alarm)}
	member := &pb.AlarmMember{MemberID: req.MemberID, Alarm: req.Alarm}
	switch req.Action {
	case pb.AlarmRequest_GET:
		var out []*pb.AlarmMember
		for _, x := range alarms {
			if req.Alarm == pb.AlarmType_NONE || x.Type == a.Type {
				out = append(out, &pb.AlarmMember{MemberID: x.Member, Alarm: pb.AlarmType(x.Type)})
			}
		}
		return out, nil
	case pb.AlarmRequest_ACTIVATE:
		if req.Alarm == pb.AlarmType_NONE {
			return nil, nil
		}
		return []*pb.AlarmMember{member}, &revision.AlarmChange{Alarm: a, Activate: true}
	case pb.AlarmRequest_DEACTIVATE:
		for _, x := range alarms {
			if x == a {
				return []*pb.AlarmMember{member}, &revision.AlarmChange{Alarm: a}
			}
		}
	}
	return nil, nil
}
