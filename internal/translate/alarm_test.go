package translate

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
)

func putOp(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func TestQuotaCostIsEtcds(t *testing.T) {
	nested := &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("n", "1")}}}}
	for _, c := range []struct {
		req  any
		want int64
	}{
		{&pb.PutRequest{Key: []byte("ab"), Value: []byte("xyz")}, 256 + 5},
		{&pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "1")}, Failure: []*pb.RequestOp{putOp("b", "22"), putOp("c", "")}}, 2*256 + 4},
		{&pb.TxnRequest{Success: []*pb.RequestOp{nested}}, 256 + 2}, // nested puts count, as in etcd 3.7
		{&pb.LeaseGrantRequest{TTL: 5}, 64},
		{&pb.DeleteRangeRequest{Key: []byte("a")}, 0},
	} {
		if got := QuotaCost(c.req); got != c.want {
			t.Errorf("QuotaCost(%v) = %d, want %d", c.req, got, c.want)
		}
	}
	if QuotaBytes(0) != 2<<30 || QuotaBytes(-1) != -1 || QuotaBytes(100) != 100 {
		t.Error("QuotaBytes")
	}
	if !QuotaAvailable(100, 1000, 0) || !QuotaAvailable(-1, 1000, 10) || QuotaAvailable(100, 90, 10) || !QuotaAvailable(100, 89, 10) {
		t.Error("QuotaAvailable")
	}
}

func TestAlarmGateFollowsEtcdsCappedAndCorruptAppliers(t *testing.T) {
	nospace := []revision.Alarm{{Member: 1, Type: int32(pb.AlarmType_NOSPACE)}}
	corrupt := []revision.Alarm{{Member: 1, Type: int32(pb.AlarmType_CORRUPT)}}
	reqs := map[string]any{
		"put":      &pb.PutRequest{Key: []byte("a")},
		"txn put":  &pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "1")}},
		"txn del":  &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}}}},
		"delete":   &pb.DeleteRangeRequest{Key: []byte("a")},
		"compact":  &pb.CompactionRequest{Revision: 2},
		"grant":    &pb.LeaseGrantRequest{TTL: 5},
		"revoke":   &pb.LeaseRevokeRequest{ID: 5},
		"alarm":    &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE},
		"user add": &pb.AuthUserAddRequest{Name: "u"},
	}
	want := map[string]map[string]error{
		"nospace": {"put": rpctypes.ErrGRPCNoSpace, "txn put": rpctypes.ErrGRPCNoSpace, "grant": rpctypes.ErrGRPCNoSpace},
		"corrupt": {"put": rpctypes.ErrGRPCCorrupt, "txn put": rpctypes.ErrGRPCCorrupt, "txn del": rpctypes.ErrGRPCCorrupt,
			"delete": rpctypes.ErrGRPCCorrupt, "compact": rpctypes.ErrGRPCCorrupt, "grant": rpctypes.ErrGRPCCorrupt, "revoke": rpctypes.ErrGRPCCorrupt},
		"both": {"put": rpctypes.ErrGRPCCorrupt, "txn put": rpctypes.ErrGRPCCorrupt, "txn del": rpctypes.ErrGRPCCorrupt,
			"delete": rpctypes.ErrGRPCCorrupt, "compact": rpctypes.ErrGRPCCorrupt, "grant": rpctypes.ErrGRPCCorrupt, "revoke": rpctypes.ErrGRPCCorrupt},
		"none": {},
	}
	sets := map[string][]revision.Alarm{"nospace": nospace, "corrupt": corrupt, "both": append(append([]revision.Alarm{}, nospace...), corrupt...), "none": nil}
	for set, alarms := range sets {
		for name, req := range reqs {
			if got := AlarmGate(alarms, req); !errors.Is(got, want[set][name]) || (got == nil) != (want[set][name] == nil) {
				t.Errorf("%s alarms, %s: %v, want %v", set, name, got, want[set][name])
			}
		}
	}
}

func TestAlarmResponseIsEtcds(t *testing.T) {
	active := []revision.Alarm{{Member: 1, Type: int32(pb.AlarmType_NOSPACE)}, {Member: 2, Type: int32(pb.AlarmType_CORRUPT)}}
	if got, ch := AlarmResponse(active, &pb.AlarmRequest{Action: pb.AlarmRequest_GET}); len(got) != 2 || ch != nil {
		t.Errorf("GET all: %v %v", got, ch)
	}
	if got, _ := AlarmResponse(active, &pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_CORRUPT}); len(got) != 1 || got[0].MemberID != 2 {
		t.Errorf("GET CORRUPT: %v", got)
	}
	if got, ch := AlarmResponse(active, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 1, Alarm: pb.AlarmType_NONE}); got != nil || ch != nil {
		t.Errorf("ACTIVATE NONE: %v %v", got, ch)
	}
	if got, ch := AlarmResponse(active, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 1, Alarm: pb.AlarmType_NOSPACE}); len(got) != 1 || ch == nil || !ch.Activate {
		t.Errorf("ACTIVATE an active alarm answers it: %v %v", got, ch)
	}
	if got, ch := AlarmResponse(active, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 3, Alarm: pb.AlarmType_NOSPACE}); got != nil || ch != nil {
		t.Errorf("DEACTIVATE of nothing: %v %v", got, ch)
	}
	if got, ch := AlarmResponse(active, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 2, Alarm: pb.AlarmType_CORRUPT}); len(got) != 1 || ch == nil || ch.Activate {
		t.Errorf("DEACTIVATE: %v %v", got, ch)
	}
}
