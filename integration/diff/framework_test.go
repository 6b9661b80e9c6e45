package diff

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func hdr(rev int64, member uint64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: member * 7, MemberId: member, RaftTerm: member + 1, Revision: rev}
}

func TestNormalize(t *testing.T) {
	in := []proto.Message{
		&pb.PutResponse{Header: hdr(5, 42)},
		&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Header: hdr(6, 42)}},
		&pb.TxnResponse{Header: hdr(7, 42), Responses: []*pb.ResponseOp{{
			Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 7}}},
		}}},
	}
	out := Normalize(in)
	want := []proto.Message{
		&pb.PutResponse{Header: &pb.ResponseHeader{Revision: 5}},
		&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 6}}},
		&pb.TxnResponse{Header: &pb.ResponseHeader{Revision: 7}, Responses: []*pb.ResponseOp{{
			Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 7}}},
		}}},
	}
	if !equalMsgs(out, want) {
		t.Errorf("Normalize = %v, want %v", out, want)
	}
	if in[0].(*pb.PutResponse).Header.MemberId != 42 {
		t.Errorf("Normalize modified its input")
	}
}

func TestCompare(t *testing.T) {
	r := Runner{}
	ok := func(m proto.Message) Result { return Result{Responses: []proto.Message{m}} }
	tests := []struct {
		name     string
		a, b     Result
		wantDiff bool
	}{
		{"member fields ignored", ok(&pb.PutResponse{Header: hdr(2, 1)}), ok(&pb.PutResponse{Header: hdr(2, 9)}), false},
		{"revision differs", ok(&pb.PutResponse{Header: hdr(2, 1)}), ok(&pb.PutResponse{Header: hdr(3, 1)}), true},
		{"kv differs", ok(&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("a"), Version: 1}}}),
			ok(&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("a"), Version: 2}}}), true},
		{"same error", Result{Err: rpctypes.ErrGRPCCompacted}, Result{Err: status.Error(codes.OutOfRange, rpctypes.ErrorDesc(rpctypes.ErrGRPCCompacted))}, false},
		{"clientv3 error form", Result{Err: rpctypes.ErrCompacted}, Result{Err: rpctypes.ErrGRPCCompacted}, false},
		{"code differs", Result{Err: rpctypes.ErrGRPCCompacted}, Result{Err: status.Error(codes.Unknown, rpctypes.ErrorDesc(rpctypes.ErrGRPCCompacted))}, true},
		{"message differs", Result{Err: rpctypes.ErrGRPCCompacted}, Result{Err: rpctypes.ErrGRPCFutureRev}, true},
		{"error vs response", Result{Err: rpctypes.ErrGRPCCompacted}, ok(&pb.RangeResponse{}), true},
		{"chunk count differs", Result{Responses: []proto.Message{&pb.RangeResponse{}, &pb.RangeResponse{}}}, ok(&pb.RangeResponse{}), true},
		{"plain error", Result{Err: errors.New("boom")}, Result{Err: errors.New("boom")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := r.compare(tc.a, tc.b, "a", "b")
			if (d != "") != tc.wantDiff {
				t.Errorf("compare diff = %q, want diff: %v", d, tc.wantDiff)
			}
		})
	}
}

func TestMergeStreamChunks(t *testing.T) {
	kv := func(k string) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte(k)} }
	a := Result{Responses: []proto.Message{
		&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv("a"), kv("b")}},
		&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv("c")}, Header: hdr(4, 1), Count: 3},
	}}
	b := Result{Responses: []proto.Message{
		&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv("a")}},
		&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv("b"), kv("c")}, Header: hdr(4, 2), Count: 3},
	}}
	if d := (Runner{}).compare(a, b, "a", "b"); d == "" {
		t.Errorf("chunk-by-chunk comparison found no difference")
	}
	if d := (Runner{MergeStreamChunks: true}).compare(a, b, "a", "b"); d != "" {
		t.Errorf("merged comparison differs:\n%s", d)
	}
}

func TestAbbreviate(t *testing.T) {
	big := strings.Repeat("x", 10000)
	m := &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("k"), Value: []byte(big)}}}
	out := abbreviate([]proto.Message{m})[0].(*pb.RangeResponse)
	if got := string(out.Kvs[0].Value); !strings.HasPrefix(got, "<10000 bytes, sha256 ") {
		t.Errorf("abbreviated value = %q", got)
	}
	if string(out.Kvs[0].Key) != "k" || string(m.Kvs[0].Value) != big {
		t.Errorf("abbreviate changed short fields or its input")
	}
}

// TestPlayDetectsDifferences runs a scenario against two etcd servers, one
// of which got an extra write first, and checks that the framework reports
// the shifted revision, the failed expectation and the step.
func TestPlayDetectsDifferences(t *testing.T) {
	a := EtcdFactory()(t)
	b := EtcdFactory()(t)
	cb := b.Client(t)
	if _, err := cb.Put(context.Background(), "extra", "x"); err != nil {
		t.Fatal(err)
	}
	sc := Scenario{Name: "shifted", Steps: Steps(
		Put("k", "v").As("p"),
		Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("p"))) }),
		Get("k").Expect(wantValues("not-v")),
		Get("missing").WantErr(rpctypes.ErrGRPCEmptyKey),
	)}

	problems := Runner{}.play(sc, a, b, a.Client(t), cb)
	if len(problems) != 1 || !strings.Contains(problems[0], "step 0 Put (\"p\"): etcd and etcd differ") ||
		!strings.Contains(problems[0], "revision") {
		t.Fatalf("stop-at-first problems = %q", problems)
	}

	a2, b2 := EtcdFactory()(t), EtcdFactory()(t)
	cb2 := b2.Client(t)
	if _, err := cb2.Put(context.Background(), "extra", "x"); err != nil {
		t.Fatal(err)
	}
	problems = Runner{KeepGoing: true}.play(sc, a2, b2, a2.Client(t), cb2)
	var differ, expect int
	for _, p := range problems {
		if strings.Contains(p, "differ") {
			differ++
		}
		if strings.Contains(p, "expectation failed") {
			expect++
		}
	}
	// Every step differs (the revisions are shifted by one; step 1 reads k
	// at a revision where it does not exist on b); expectations fail at
	// steps 2 and 3.
	if differ != 4 || expect != 2 {
		t.Fatalf("keep-going found %d differences and %d failed expectations, want 4 and 2:\n%s",
			differ, expect, strings.Join(problems, "\n---\n"))
	}
}

func TestPlayIdentical(t *testing.T) {
	a, b := EtcdFactory()(t), EtcdFactory()(t)
	sc := Scenario{Name: "same", Steps: Steps(
		Puts("a", "1", "b", "2"),
		GetStream("", clientv3.WithPrefix()).Expect(wantRange(2, false, "a", "b")),
		Lazy(func(s *State) Step {
			if s.Len() != 3 || s.At(0).Rev() != 2 || s.LastRev() != 3 {
				panic("unexpected state")
			}
			return Compact(s.LastRev())
		}).As("compact").WantRevDelta(0),
		Custom("Status", func(ctx context.Context, c *clientv3.Client) Result {
			_, err := c.Status(ctx, c.Endpoints()[0])
			return Result{Err: err}
		}).WantOK(),
	)}
	if problems := (Runner{}).play(sc, a, b, a.Client(t), b.Client(t)); len(problems) > 0 {
		t.Fatalf("problems:\n%s", strings.Join(problems, "\n---\n"))
	}
}

func TestPlayBadLazyStep(t *testing.T) {
	a, b := EtcdFactory()(t), EtcdFactory()(t)
	sc := Scenario{Name: "bad", Steps: Steps(
		Lazy(func(s *State) Step { return Compact(s.Rev("nope")) }),
	)}
	problems := Runner{}.play(sc, a, b, a.Client(t), b.Client(t))
	if len(problems) != 1 || !strings.Contains(problems[0], `no step labelled "nope"`) {
		t.Fatalf("problems = %q", problems)
	}
}
