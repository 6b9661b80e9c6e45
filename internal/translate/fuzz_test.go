package translate

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/revision"
)

func fuzzView(t testing.TB) *revision.View {
	v := revision.NewView(1, 1)
	_, err := v.Apply(&revision.Entry{LSN: 2, Ops: []revision.Op{
		{Kind: revision.OpLeaseGrant, Lease: 5, TTL: 10},
		{Kind: revision.OpTxn, Rev: 2, Changes: []revision.Change{
			{Key: []byte("a"), Value: []byte("1"), Lease: 5}, {Key: []byte("b"), Value: []byte("2")},
		}},
		{Kind: revision.OpTxn, Rev: 3, Changes: []revision.Change{{Key: []byte("a"), Value: []byte("3")}, {Delete: true, Key: []byte("b")}}},
		{Kind: revision.OpCompact, Rev: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// FuzzTxn decodes arbitrary bytes as a TxnRequest, validates it, and
// evaluates whatever passes validation: no input may panic, and every
// error must be one of etcd's gRPC errors.
func FuzzTxn(f *testing.F) {
	seed := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_MOD, Result: pb.Compare_GREATER,
			TargetUnion: &pb.Compare_ModRevision{ModRevision: 1}, RangeEnd: []byte("\x00")}},
		Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("c"), Value: []byte("v"), PrevKv: true}}},
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"),
				Limit: 1, SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VALUE, Revision: 2}}},
			{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Failure: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("\x00"), PrevKv: true}}},
			}}}},
		},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), IgnoreValue: true, IgnoreLease: true}}}},
	}
	data, _ := proto.Marshal(seed)
	f.Add(data)
	f.Add([]byte{})
	v := fuzzView(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &pb.TxnRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		if err := CheckTxn(req, 128); err != nil {
			return
		}
		_ = v.Read(func(r revision.Reader) error {
			b := revision.NewBatch(r)
			b.Begin()
			_, err := Txn(b, req)
			if err != nil && !isEtcdError(err) && err != revision.ErrBatchBoundary {
				t.Fatalf("non-etcd error %v for %v", err, req)
			}
			return nil
		})
	})
}

// FuzzRange does the same for RangeRequest.
func FuzzRange(f *testing.F) {
	seed, _ := proto.Marshal(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("\x00"), Limit: 2, CountOnly: false,
		KeysOnly: true, MinModRevision: 2, SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_ASCEND})
	f.Add(seed)
	v := fuzzView(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &pb.RangeRequest{}
		if proto.Unmarshal(data, req) != nil || CheckRange(req) != nil {
			return
		}
		_ = v.Read(func(r revision.Reader) error {
			if _, err := Range(r, req); err != nil && !isEtcdError(err) {
				t.Fatalf("non-etcd error %v for %v", err, req)
			}
			return nil
		})
	})
}
