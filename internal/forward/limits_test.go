package forward

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/testutil"
)

// rawCodec sends a []byte as it is: the test's client allocates nothing
// per message, so the allocations measured are the server's.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = data
	return nil
}
func (rawCodec) Name() string { return "proto" }

// allocatedBy returns the bytes allocated (by the whole process) while fn
// ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestOversizedMessagesAreRefusedBeforeTheyAreRead: a 128 MiB message
// without the token is refused from its headers, one with the token from
// its length prefix (larger than the client API's limit allows): the
// server reads neither, so it allocates nothing near their size.
func TestOversizedMessagesAreRefusedBeforeTheyAreRead(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lg := testutil.Logger(logrus.WarnLevel)
	fl := &fakeLeader{answer: func(engine.ForwardCall) (proto.Message, engine.ForwardReply, error) {
		return &pb.PutResponse{}, engine.ForwardReply{LSN: 1}, nil
	}}
	srv := NewServer(fl, ServerConfig{Logger: lg, MaxMessageBytes: 2 << 20})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	const size = 128 << 20
	payload := make([]byte, size)
	for _, tc := range []struct {
		name, token string
		code        codes.Code
	}{
		{"no token", "", codes.PermissionDenied},
		{"a wrong token", "wrong", codes.PermissionDenied},
		{"the token, over the limit", "secret", codes.ResourceExhausted},
	} {
		var err error
		n := allocatedBy(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if tc.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, mdToken, tc.token)
			}
			var out []byte
			err = cc.Invoke(ctx, "/"+serviceName+"/Put", &payload, &out)
		})
		t.Logf("%s: %v; %d MiB allocated", tc.name, err, n>>20)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
		if n > size/4 {
			t.Errorf("%s: %d MiB allocated for a %d MiB message refused unread", tc.name, n>>20, size>>20)
		}
	}
	if len(fl.got) != 0 {
		t.Fatalf("the leader served %d of them", len(fl.got))
	}
	// The forwarding client reports the refusal as the request's final
	// failure, etcd's "request is too large": sending it again cannot help.
	c := NewClient()
	defer c.Close()
	_, err = c.Forward(context.Background(), engine.Peer{URL: "http://" + lis.Addr().String(), Token: "secret"},
		engine.ForwardCall{Fresh: true, Req: &pb.PutRequest{Key: []byte("k"), Value: make([]byte, 3<<20)}, Resp: &pb.PutResponse{}})
	var final *engine.FinalError
	if !errors.As(err, &final) || !errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		t.Fatalf("an oversized forward: %v, want the final %v", err, rpctypes.ErrGRPCRequestTooLarge)
	}
}
