package diff

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AlarmScenarios cover the Alarm RPC and what each alarm refuses. The
// alarms are raised by hand for a fixed member ID (etcd's alarm store
// takes any), so both servers hold the same ones; the quota itself is not
// reached here (etcd measures a bbolt file, zketcd its ZooKeeper root).
func AlarmScenarios() []Scenario {
	const member = 0x1234
	alarm := func(action pb.AlarmRequest_AlarmAction, t pb.AlarmType) Step {
		return Raw(&pb.AlarmRequest{Action: action, MemberID: member, Alarm: t})
	}
	list := Raw(&pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	putOp := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t"), Value: []byte("v")}}}
	getOp := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}
	delOp := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k2")}}}
	nested := &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp}}}}
	const l = clientv3.LeaseID(0x5000)
	return []Scenario{
		{Name: "alarm/nospace-refuses-what-grows", Steps: Steps(
			Put("k", "1"), Put("k2", "2"), LeaseGrant(l, 60),
			list,
			alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_NONE), // nothing
			alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_NOSPACE),
			alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_NOSPACE), // again: answered, not doubled
			list,
			Raw(&pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_CORRUPT}),
			Put("k", "3"),
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{putOp}}),
			Raw(&pb.TxnRequest{Failure: []*pb.RequestOp{putOp}}),
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{getOp, delOp}}),
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{nested}}), // a nested put counts too
			Raw(&pb.LeaseGrantRequest{ID: 0x6000, TTL: 60}),
			LeaseRevoke(l),
			Get("", clientv3.WithFromKey()),
			Raw(&pb.CompactionRequest{Revision: 3}),
			alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_CORRUPT), // not active
			alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_NOSPACE),
			list,
			Put("k", "4"),
		)},
		{Name: "alarm/corrupt-refuses-writes-not-reads", Steps: Steps(
			Put("k", "1"), Put("k2", "2"), LeaseGrant(l, 60),
			alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_CORRUPT),
			list,
			Put("k", "3"),
			Raw(&pb.DeleteRangeRequest{Key: []byte("k2")}),
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{delOp}}),
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{getOp}}),
			Raw(&pb.CompactionRequest{Revision: 2}),
			Raw(&pb.LeaseGrantRequest{ID: 0x6000, TTL: 60}),
			LeaseRevoke(l),
			Get("", clientv3.WithFromKey()),
			Get("k", clientv3.WithSerializable()),
			alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_NOSPACE),
			// etcd lists alarms of several types in map order: ask by type.
			Raw(&pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_NOSPACE}),
			Raw(&pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_CORRUPT}),
			alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_CORRUPT),
			Put("k", "4"), // NOSPACE still refuses
			alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_NOSPACE),
			Put("k", "5"),
			list,
		)},
	}
}
