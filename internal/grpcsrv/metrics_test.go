package grpcsrv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/mem"
	gproto "google.golang.org/protobuf/proto"
)

// The codec counts the bytes of each message it decodes and encodes, as
// etcd's client traffic counters do, and still encodes protobuf.
func TestCodecCountsClientTrafficBytes(t *testing.T) {
	c := newCountingCodec(prometheus.NewRegistry())
	req := &pb.PutRequest{Key: []byte("key"), Value: []byte("a value")}
	want, err := gproto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got pb.PutRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &got); err != nil || string(got.Value) != "a value" {
		t.Fatalf("unmarshal: %v %v", &got, err)
	}
	out, err := c.Marshal(&pb.PutResponse{Header: &pb.ResponseHeader{Revision: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	if v := testutil.ToFloat64(c.received); v != float64(len(want)) {
		t.Errorf("received %v bytes, want %d", v, len(want))
	}
	if v := testutil.ToFloat64(c.sent); v != float64(out.Len()) || v == 0 {
		t.Errorf("sent %v bytes, want %d", v, out.Len())
	}
}
