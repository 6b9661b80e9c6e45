package embed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// rawConn returns a plain gRPC connection to addr, closed at cleanup.
func rawConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// stillServes checks that a fresh client can write and read back within a
// generous deadline, and returns how long it took.
func stillServes(t testing.TB, addr, key string) time.Duration {
	t.Helper()
	c := embedtest.NewClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.Put(ctx, key, "alive"); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	resp, err := c.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "alive" {
		t.Fatalf("get %s: %v %v", key, resp, err)
	}
	return time.Since(start)
}

// TestThousandsOfWatchersOnOneStreamAreBounded opens 5000 watchers on one
// stream with --max-watchers-per-stream=1000: the first 1000 are created,
// the rest are canceled with a reason, and the stream and other clients
// keep working.
func TestThousandsOfWatchersOnOneStreamAreBounded(t *testing.T) {
	const limit, creates = 1000, 5000
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{
		Configure: func(c *embed.Config) { c.GRPC.MaxWatchersPerStream = limit },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, err := pb.NewWatchClient(rawConn(t, in.Endpoint())).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range creates {
			req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
				Key: fmt.Appendf(nil, "w/%05d", i),
			}}}
			if err := ws.Send(req); err != nil {
				return
			}
		}
	}()
	var created, refused int
	var firstID int64 = -1
	for created+refused < creates {
		resp, err := ws.Recv()
		if err != nil {
			t.Fatalf("after %d created and %d refused: %v", created, refused, err)
		}
		if !resp.Created {
			t.Fatalf("unexpected response %v", resp)
		}
		if resp.Canceled {
			if !strings.Contains(resp.CancelReason, "too many watchers") {
				t.Fatalf("refused with reason %q", resp.CancelReason)
			}
			refused++
			continue
		}
		if firstID < 0 {
			firstID = resp.WatchId
		}
		created++
	}
	if created != limit || refused != creates-limit {
		t.Fatalf("created %d, refused %d; want %d and %d", created, refused, limit, creates-limit)
	}
	t.Logf("%d watchers created, %d refused with a reason", created, refused)

	// Another client is served, and the stream still delivers events.
	stillServes(t, in.Endpoint(), "other-client")
	if _, err := in.Client(t).Put(ctx, "w/00000", "v"); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Events) > 0 {
			if resp.WatchId != firstID || string(resp.Events[0].Kv.Key) != "w/00000" {
				t.Fatalf("event %v", resp)
			}
			break
		}
	}
	// Canceling one watcher makes room for one more.
	if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: firstID}}}); err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("again")}}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Created {
			if resp.Canceled {
				t.Fatalf("create after a cancel refused: %q", resp.CancelReason)
			}
			break
		}
	}
}

// heapInUse returns the heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestManyWatchStreamsDoNotStarveOthersAndAreReleased opens 1000 watch
// streams over 500 connections; another client's Put and Get stay within a
// deadline, and after the connections close, the heap and the goroutine
// count return close to where they were.
func TestManyWatchStreamsDoNotStarveOthersAndAreReleased(t *testing.T) {
	const conns, streamsPerConn = 500, 2
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{})
	stillServes(t, in.Endpoint(), "warm-up")
	baseHeap, baseG := heapInUse(), runtime.NumGoroutine()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ccs := make([]*grpc.ClientConn, conns)
	var opened atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, conns)
	sem := make(chan struct{}, 64)
	start := time.Now()
	for i := range conns {
		cc, err := grpc.NewClient(in.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ccs[i] = cc
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			for j := range streamsPerConn {
				ws, err := pb.NewWatchClient(cc).Watch(ctx)
				if err == nil {
					err = ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
						Key: fmt.Appendf(nil, "s/%d/%d", i, j),
					}}})
				}
				var resp *pb.WatchResponse
				if err == nil {
					resp, err = ws.Recv()
				}
				if err == nil && (!resp.Created || resp.Canceled) {
					err = fmt.Errorf("create answered %v", resp)
				}
				if err != nil {
					errc <- err
					return
				}
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("opening streams: %v", err)
	}
	openTook := time.Since(start)
	took := stillServes(t, in.Endpoint(), "beside-many-streams")
	peakHeap, peakG := heapInUse(), runtime.NumGoroutine()

	cancel()
	for _, cc := range ccs {
		cc.Close()
	}
	var afterHeap uint64
	var afterG int
	testutil.Eventually(t, 15*time.Second, "heap and goroutines back near their baseline after closing the streams", func() bool {
		afterHeap, afterG = heapInUse(), runtime.NumGoroutine()
		grown := int64(afterHeap) - int64(baseHeap)
		return (grown < int64(peakHeap-baseHeap)/4 || grown < 8<<20) && afterG < baseG+50
	})
	t.Logf("%d streams on %d connections opened in %v; put+get beside them %v; heap in use %.1f MiB before, %.1f MiB open, %.1f MiB after; goroutines %d, %d, %d",
		opened.Load(), conns, openTook.Round(time.Millisecond), took.Round(time.Millisecond),
		float64(baseHeap)/(1<<20), float64(peakHeap)/(1<<20), float64(afterHeap)/(1<<20), baseG, peakG, afterG)
	stillServes(t, in.Endpoint(), "after-many-streams")
}

// TestSlowlorisConnectionsAreClosed holds raw TCP connections that send
// nothing or a partial HTTP/2 preface: a normal client is served
// meanwhile, and the server closes each of them after the handshake
// timeout.
func TestSlowlorisConnectionsAreClosed(t *testing.T) {
	const handshakeTimeout, n = time.Second, 100
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{
		Configure: func(c *embed.Config) { c.GRPC.ConnectionTimeout = handshakeTimeout },
	})
	start := time.Now()
	closedAfter := make(chan time.Duration, n)
	for i := range n {
		c, err := net.Dial("tcp", in.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if i%2 == 1 {
			if _, err := io.WriteString(c, http2.ClientPreface[:10]); err != nil {
				t.Fatal(err)
			}
		}
		go func() {
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						closedAfter <- -1
					} else {
						closedAfter <- time.Since(start)
					}
					return
				}
			}
		}()
	}
	took := stillServes(t, in.Endpoint(), "beside-slowloris")
	var slowest time.Duration
	for range n {
		d := <-closedAfter
		if d < 0 {
			t.Fatal("a stalled connection was still open after 20 s")
		}
		slowest = max(slowest, d)
	}
	if slowest > handshakeTimeout+5*time.Second {
		t.Fatalf("stalled connections closed after up to %v (handshake timeout %v)", slowest, handshakeTimeout)
	}
	t.Logf("%d stalled connections closed by the server within %v (handshake timeout %v); a normal put+get meanwhile took %v",
		n, slowest.Round(time.Millisecond), handshakeTimeout, took.Round(time.Millisecond))
	stillServes(t, in.Endpoint(), "after-slowloris")
}

// rawCodec sends and receives message bodies as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestMalformedGRPCRequestsGetErrorStatuses sends well-framed gRPC
// requests whose bodies are not what the method expects, and a frame
// declaring a length above the receive limit: each gets an error status,
// and the server keeps serving.
func TestMalformedGRPCRequestsGetErrorStatuses(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{})
	cc := rawConn(t, in.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	nested := &pb.TxnRequest{}
	for range 2000 {
		nested = &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: nested}}}}
	}
	nestedBody, err := proto.Marshal(nested)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method string
		body         []byte
		want         codes.Code
	}{
		{"garbage", "/etcdserverpb.KV/Range", []byte("\xff\xfe this is not a protobuf \x00\x01"), codes.Internal},
		{"field longer than the message", "/etcdserverpb.KV/Range", []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x07, 'k'}, codes.Internal},
		{"wrong wire type", "/etcdserverpb.KV/Put", []byte{0x08, 0x01, 0x12, 0x01}, codes.Internal},
		{"empty range key", "/etcdserverpb.KV/Range", []byte{}, codes.InvalidArgument},
		{"txn nested 2000 deep", "/etcdserverpb.KV/Txn", nestedBody, codes.InvalidArgument},
		{"unknown method", "/etcdserverpb.KV/Nope", []byte{}, codes.Unimplemented},
	} {
		var reply []byte
		err := cc.Invoke(ctx, tc.method, tc.body, &reply, grpc.ForceCodec(rawCodec{}))
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v, want code %v", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}

	// A message declaring 2 GiB - 1 bytes, of which a few are sent: refused
	// from its length prefix alone.
	code, msg := rawGRPCCall(t, in.Endpoint(), "/etcdserverpb.KV/Range", []byte{0, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3})
	if code != codes.ResourceExhausted {
		t.Fatalf("oversized frame: code %v %q, want ResourceExhausted", code, msg)
	}
	t.Logf("oversized frame: %v %q", code, msg)
	stillServes(t, in.Endpoint(), "after-malformed")
}

// rawGRPCCall writes one gRPC request over a bare HTTP/2 connection, with
// data exactly as given (length prefix included, END_STREAM not set), and
// returns the grpc-status and grpc-message the server answers with.
func rawGRPCCall(t *testing.T, addr, method string, data []byte) (codes.Code, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, data); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.MetaHeadersFrame:
			if v := f.PseudoValue("status"); v != "" && v != "200" {
				t.Fatalf("HTTP status %s", v)
			}
			fields := map[string]string{}
			for _, hf := range f.RegularFields() {
				fields[hf.Name] = hf.Value
			}
			if s, ok := fields["grpc-status"]; ok {
				var code codes.Code
				if err := code.UnmarshalJSON([]byte(s)); err != nil {
					t.Fatalf("grpc-status %q: %v", s, err)
				}
				return code, fields["grpc-message"]
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("connection closed: %v", f.ErrCode)
		}
	}
}

// TestHugeUnboundedRangeIsAnswered writes 50,000 keys in five
// transactions and reads them all with one Range without a limit: the
// count and the keys are right and the server stays responsive.
func TestHugeUnboundedRangeIsAnswered(t *testing.T) {
	const keys, perTxn = 50000, 10000
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{MaxTxnOps: perTxn})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	for base := 0; base < keys; base += perTxn {
		ops := make([]clientv3.Op, perTxn)
		for i := range ops {
			ops[i] = clientv3.OpPut(fmt.Sprintf("huge/%06d", base+i), "value-"+fmt.Sprint(base+i))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatalf("txn at %d: %v", base, err)
		}
	}
	wrote := time.Since(start)
	start = time.Now()
	resp, err := c.Get(ctx, "huge/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	if resp.Count != keys || len(resp.Kvs) != keys || resp.More {
		t.Fatalf("range: count %d, %d kvs, more %v; want %d", resp.Count, len(resp.Kvs), resp.More, keys)
	}
	for i, kv := range resp.Kvs {
		if want := fmt.Sprintf("huge/%06d", i); string(kv.Key) != want || string(kv.Value) != "value-"+fmt.Sprint(i) {
			t.Fatalf("kv %d: %s=%s, want %s", i, kv.Key, kv.Value, want)
		}
	}
	size := proto.Size((*pb.RangeResponse)(resp))
	took := stillServes(t, in.Endpoint(), "after-huge-range")
	t.Logf("%d keys written in %v; unbounded range of %.1f MiB in %v; put+get after it %v",
		keys, wrote.Round(time.Millisecond), float64(size)/(1<<20), read.Round(time.Millisecond), took.Round(time.Millisecond))
}

// TestConcurrentRequestLimitFailsFastAndKeepsHealth floods an instance
// limited to 2 requests in flight: the excess fails with etcd's "too many
// requests", everything else succeeds, and health checks are answered
// throughout.
func TestConcurrentRequestLimitFailsFastAndKeepsHealth(t *testing.T) {
	const flood = 300
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{
		Configure: func(c *embed.Config) { c.GRPC.MaxConcurrentRequests = 2 },
	})
	c := in.Client(t)
	health := healthpb.NewHealthClient(rawConn(t, in.Endpoint()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, flood)
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Put(ctx, fmt.Sprintf("flood/%d", i), "v")
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, rpctypes.ErrTooManyRequests):
				refused.Add(1)
			default:
				errc <- err
			}
		}()
	}
	checks := 0
	for done := false; !done; checks++ {
		hr, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check during the flood: %v %v", hr, err)
		}
		done = ok.Load()+refused.Load()+int64(len(errc)) == flood
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("put: %v (want success or %v)", err, rpctypes.ErrTooManyRequests)
	}
	if refused.Load() == 0 || ok.Load() == 0 {
		t.Fatalf("%d puts succeeded, %d refused: want both", ok.Load(), refused.Load())
	}
	t.Logf("%d puts succeeded, %d refused with %q; %d health checks answered meanwhile", ok.Load(), refused.Load(), rpctypes.ErrTooManyRequests, checks)
	stillServes(t, in.Endpoint(), "after-flood")
}
