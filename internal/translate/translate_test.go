package translate

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/revision"
)

func opPut(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
}

func opDel(k, end string) *pb.RequestOp {
	d := &pb.DeleteRangeRequest{Key: []byte(k)}
	if end != "" {
		d.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
}

func opTxn(then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: then, Failure: els}}}
}

func TestCheckTxnDuplicateKeys(t *testing.T) {
	cases := []struct {
		name string
		ops  []*pb.RequestOp
		ok   bool
	}{
		{"distinct puts", []*pb.RequestOp{opPut("a"), opPut("b")}, true},
		{"same key twice", []*pb.RequestOp{opPut("a"), opPut("a")}, false},
		{"put inside deleted range", []*pb.RequestOp{opDel("a", "c"), opPut("b")}, false},
		{"put of a deleted key", []*pb.RequestOp{opPut("a"), opDel("a", "")}, false},
		{"put outside deleted range", []*pb.RequestOp{opDel("a", "c"), opPut("c")}, true},
		{"delete to \\x00 does not conflict (etcd)", []*pb.RequestOp{opDel("a", "\x00"), opPut("b")}, true},
		{"then and else may put the same key", []*pb.RequestOp{opTxn([]*pb.RequestOp{opPut("a")}, []*pb.RequestOp{opPut("a")})}, true},
		{"nested put conflicts with outer put", []*pb.RequestOp{opPut("a"), opTxn([]*pb.RequestOp{opPut("a")}, nil)}, false},
		{"nested put conflicts with outer delete", []*pb.RequestOp{opDel("a", "z"), opTxn(nil, []*pb.RequestOp{opPut("b")})}, false},
		{"two deletes of one key", []*pb.RequestOp{opDel("a", ""), opDel("a", "")}, true},
	}
	for _, c := range cases {
		err := CheckTxn(&pb.TxnRequest{Success: c.ops}, 128)
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, rpctypes.ErrGRPCDuplicateKey) {
			t.Errorf("%s: got %v, want duplicate key", c.name, err)
		}
	}
}

func TestCheckTxnLimits(t *testing.T) {
	var ops []*pb.RequestOp
	for i := 0; i < 129; i++ {
		ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}})
	}
	if err := CheckTxn(&pb.TxnRequest{Success: ops}, 128); !errors.Is(err, rpctypes.ErrGRPCTooManyOps) {
		t.Errorf("129 ops: %v", err)
	}
	if err := CheckTxn(&pb.TxnRequest{Success: []*pb.RequestOp{{}}}, 128); !errors.Is(err, rpctypes.ErrGRPCKeyNotFound) {
		t.Errorf("empty op: %v", err)
	}
	if err := CheckTxn(&pb.TxnRequest{Compare: []*pb.Compare{{}}}, 128); !errors.Is(err, rpctypes.ErrGRPCEmptyKey) {
		t.Errorf("empty compare key: %v", err)
	}
}

func newStore(t *testing.T) *revision.View {
	v := revision.NewView(1, 1)
	_, err := v.Apply(&revision.Entry{LSN: 2, Ops: []revision.Op{
		{Kind: revision.OpTxn, Rev: 2, Changes: []revision.Change{
			{Key: []byte("a"), Value: []byte("3")}, {Key: []byte("b"), Value: []byte("1")},
			{Key: []byte("c"), Value: []byte("2")},
		}},
		{Kind: revision.OpTxn, Rev: 3, Changes: []revision.Change{{Key: []byte("b"), Value: []byte("9")}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRangeCountIgnoresLimitAndFilters(t *testing.T) {
	v := newStore(t)
	_ = v.Read(func(r revision.Reader) error {
		resp, err := Range(r, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("\x00"), Limit: 1})
		if err != nil || len(resp.Kvs) != 1 || !resp.More || resp.Count != 3 || resp.Header.Revision != 3 {
			t.Errorf("limit 1: %v %v", resp, err)
		}
		resp, _ = Range(r, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("\x00"), MinModRevision: 3})
		if len(resp.Kvs) != 1 || resp.Count != 3 {
			t.Errorf("filter: %v", resp)
		}
		resp, _ = Range(r, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("\x00"),
			SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND, Limit: 2})
		if len(resp.Kvs) != 2 || string(resp.Kvs[0].Value) != "9" || string(resp.Kvs[1].Value) != "3" || !resp.More {
			t.Errorf("sort by value: %v", resp)
		}
		resp, _ = Range(r, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), KeysOnly: true})
		if len(resp.Kvs) != 2 || resp.Kvs[0].Value != nil {
			t.Errorf("keys only: %v", resp)
		}
		if _, err := Range(r, &pb.RangeRequest{Key: []byte("a"), Revision: 4}); !errors.Is(err, revision.ErrFutureRev) {
			t.Errorf("future: %v", err)
		}
		return nil
	})
}

func TestTxnHeadersAndNestedResponses(t *testing.T) {
	v := newStore(t)
	_ = v.Read(func(r revision.Reader) error {
		b := revision.NewBatch(r)
		b.Begin()
		req := &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
				TargetUnion: &pb.Compare_Value{Value: []byte("3")}}},
			Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}},
				opPut("z"),
				{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("z")}}},
				opTxn([]*pb.RequestOp{opDel("zz", "")}, nil),
			},
		}
		resp, err := Txn(b, req)
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Succeeded || resp.Header.Revision != 4 {
			t.Errorf("txn header %v", resp)
		}
		if got := resp.Responses[0].GetResponseRange().Header.Revision; got != 3 {
			t.Errorf("range before the write reports %d, want 3", got)
		}
		rr := resp.Responses[2].GetResponseRange()
		if rr.Header.Revision != 4 || len(rr.Kvs) != 1 || rr.Kvs[0].ModRevision != 4 {
			t.Errorf("range after the write: %v", rr)
		}
		nested := resp.Responses[3].GetResponseTxn()
		if !nested.Succeeded || nested.Header.Revision != 0 || nested.Responses[0].GetResponseDeleteRange().Header.Revision != 4 {
			t.Errorf("nested: %v", nested)
		}
		return nil
	})
}

// isEtcdError reports whether err is a gRPC status error (what etcd sends)
// or one of the view's read errors, which grpcsrv maps to etcd's.
func isEtcdError(err error) bool {
	if errors.Is(err, revision.ErrCompacted) || errors.Is(err, revision.ErrFutureRev) {
		return true
	}
	_, ok := status.FromError(err)
	return ok
}
