package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
)

// fakeLeader answers forwards with answer, recording what it was given.
type fakeLeader struct {
	answer func(call engine.ForwardCall) (proto.Message, engine.ForwardReply, error)
	got    []engine.ForwardCall
}

func (f *fakeLeader) ServeForward(_ context.Context, call engine.ForwardCall) (proto.Message, engine.ForwardReply, error) {
	f.got = append(f.got, call)
	return f.answer(call)
}
func (f *fakeLeader) ServeCall(_ context.Context, method string, req proto.Message) (proto.Message, int64, error) {
	switch req := req.(type) {
	case *emptypb.Empty:
		return wrapperspb.Int64(77), 0, nil
	case *pb.LeaseKeepAliveRequest:
		return &pb.LeaseKeepAliveResponse{ID: req.ID, TTL: req.ID * 10}, 0, nil
	case *pb.LeaseTimeToLiveRequest:
		if req.ID == 404 {
			return nil, 0, engine.ErrNotLeader
		}
		resp := &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{Revision: 5}, ID: req.ID, TTL: 8, GrantedTTL: 10}
		if req.Keys {
			resp.Keys = [][]byte{[]byte("a"), []byte("b")}
		}
		return resp, 21, nil
	case *pb.LeaseLeasesRequest:
		return &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{}, Leases: []*pb.LeaseStatus{{ID: 2}, {ID: 1}}}, 22, nil
	}
	return nil, 0, fmt.Errorf("no call %s", method)
}
func (f *fakeLeader) InternalToken() string { return "secret" }

// callOf returns the engine's call of the internal endpoint named method.
func callOf(method string) engine.CallKind {
	for _, k := range engine.CallKinds() {
		if k.Method == method {
			return k
		}
	}
	panic("no call " + method)
}

// The calls beside the forwarded writes, typed as the engine makes them.

func readIndex(ctx context.Context, f engine.Forwarder, to engine.Peer) (int64, error) {
	resp := &wrapperspb.Int64Value{}
	_, err := f.Call(ctx, to, callOf("ReadIndex"), &emptypb.Empty{}, resp)
	return resp.Value, err
}

func keepAlive(ctx context.Context, f engine.Forwarder, to engine.Peer, id int64) (int64, error) {
	resp := &pb.LeaseKeepAliveResponse{}
	_, err := f.Call(ctx, to, callOf("KeepAlive"), &pb.LeaseKeepAliveRequest{ID: id}, resp)
	return resp.TTL, err
}

func leaseTimeToLive(ctx context.Context, f engine.Forwarder, to engine.Peer, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, int64, error) {
	resp := &pb.LeaseTimeToLiveResponse{}
	lsn, err := f.Call(ctx, to, callOf("LeaseTimeToLive"), req, resp)
	return resp, lsn, err
}

func leases(ctx context.Context, f engine.Forwarder, to engine.Peer) (*pb.LeaseLeasesResponse, int64, error) {
	resp := &pb.LeaseLeasesResponse{}
	lsn, err := f.Call(ctx, to, callOf("LeaseLeases"), &pb.LeaseLeasesRequest{}, resp)
	return resp, lsn, err
}

func serve(t *testing.T, l Leader) engine.Peer {
	t.Helper()
	return serveWith(t, l, ServerConfig{Logger: testutil.Logger(logrus.WarnLevel)})
}

func serveWith(t *testing.T, l Leader, cfg ServerConfig) engine.Peer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(l, cfg)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return engine.Peer{ID: 1, URL: "http://" + lis.Addr().String(), Token: "secret"}
}

func TestEndpointCarriesTagsPositionsAndOutcomes(t *testing.T) {
	fl := &fakeLeader{}
	peer := serve(t, fl)
	c := NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tag := revision.WriterTag{Nonce: 0xabc, Seq: 5}
	call := func(fresh bool) (engine.ForwardReply, *pb.PutResponse, error) {
		resp := &pb.PutResponse{}
		reply, err := c.Forward(ctx, peer, engine.ForwardCall{Origin: tag, AuthFP: 0x1234, Fresh: fresh,
			Req: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}, Resp: resp})
		return reply, resp, err
	}

	fl.answer = func(engine.ForwardCall) (proto.Message, engine.ForwardReply, error) {
		return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 9}}, engine.ForwardReply{LSN: 12}, nil
	}
	reply, resp, err := call(true)
	if err != nil || reply.LSN != 12 || reply.Dup || resp.Header.GetRevision() != 9 {
		t.Fatalf("ok: %+v %v %v", reply, resp, err)
	}
	if g := fl.got[0]; g.Origin != tag || g.AuthFP != 0x1234 || string(g.Req.(*pb.PutRequest).Key) != "k" {
		t.Fatalf("leader got %+v", g)
	}

	fl.answer = func(engine.ForwardCall) (proto.Message, engine.ForwardReply, error) {
		return nil, engine.ForwardReply{LSN: 13, Dup: true, DupRev: 8}, nil
	}
	if reply, _, err := call(false); err != nil || reply != (engine.ForwardReply{LSN: 13, Dup: true, DupRev: 8}) {
		t.Fatalf("duplicate: %+v %v", reply, err)
	}

	for _, tc := range []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"not leader", engine.ErrNotLeader, func(err error) bool { return errors.Is(err, engine.ErrNotLeader) }},
		{"auth changed", engine.ErrAuthChanged, func(err error) bool { return errors.Is(err, engine.ErrAuthChanged) }},
		{"final", &engine.FinalError{Err: rpctypes.ErrGRPCLeaseNotFound}, func(err error) bool {
			var f *engine.FinalError
			return errors.As(err, &f) && errors.Is(f.Err, rpctypes.ErrGRPCLeaseNotFound)
		}},
		{"unknown", rpctypes.ErrGRPCStopped, func(err error) bool {
			var f *engine.FinalError
			return err != nil && !errors.As(err, &f) && !errors.Is(err, engine.ErrNotLeader) && !errors.Is(err, engine.ErrNotSent)
		}},
	} {
		fl.answer = func(engine.ForwardCall) (proto.Message, engine.ForwardReply, error) {
			return nil, engine.ForwardReply{}, tc.err
		}
		if _, _, err := call(false); !tc.check(err) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}

	if lsn, err := readIndex(ctx, c, peer); err != nil || lsn != 77 {
		t.Fatalf("read index: %d %v", lsn, err)
	}
	if ttl, err := keepAlive(ctx, c, peer, 3); err != nil || ttl != 30 {
		t.Fatalf("keepalive: %d %v", ttl, err)
	}

	// A wrong token is refused before anything runs: a first send is
	// reported as not sent.
	n := len(fl.got)
	bad := peer
	bad.Token = "wrong"
	_, err = c.Forward(ctx, bad, engine.ForwardCall{Origin: tag, Fresh: true, Req: &pb.PutRequest{Key: []byte("k")}, Resp: &pb.PutResponse{}})
	if !errors.Is(err, engine.ErrNotSent) || len(fl.got) != n {
		t.Fatalf("bad token: %v (leader called %d times)", err, len(fl.got)-n)
	}
}

func TestFirstSendToAnUnreachablePeerIsNotSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String()
	lis.Close()
	c := NewClient()
	defer c.Close()
	start := time.Now()
	_, err = c.Forward(context.Background(), engine.Peer{URL: url, Token: "x"},
		engine.ForwardCall{Fresh: true, Req: &pb.PutRequest{Key: []byte("k")}, Resp: &pb.PutResponse{}})
	if !errors.Is(err, engine.ErrNotSent) {
		t.Fatalf("got %v, want ErrNotSent", err)
	}
	if d := time.Since(start); d > 2*DefaultConnectWait {
		t.Errorf("took %s to find the peer unreachable", d)
	}
}

func TestLeaseReadsCarryTheAnswerAndItsPosition(t *testing.T) {
	peer := serve(t, &fakeLeader{})
	c := NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ttl, lsn, err := leaseTimeToLive(ctx, c, peer, &pb.LeaseTimeToLiveRequest{ID: 3, Keys: true})
	if err != nil || lsn != 21 || ttl.ID != 3 || ttl.TTL != 8 || ttl.GrantedTTL != 10 || len(ttl.Keys) != 2 ||
		string(ttl.Keys[0]) != "a" || ttl.Header.GetRevision() != 5 {
		t.Fatalf("time to live with keys: %v at %d, %v", ttl, lsn, err)
	}
	if ttl, _, err := leaseTimeToLive(ctx, c, peer, &pb.LeaseTimeToLiveRequest{ID: 3}); err != nil || len(ttl.Keys) != 0 {
		t.Fatalf("time to live without keys: %v %v", ttl, err)
	}
	if _, _, err := leaseTimeToLive(ctx, c, peer, &pb.LeaseTimeToLiveRequest{ID: 404}); !errors.Is(err, engine.ErrNotLeader) {
		t.Fatalf("time to live at a follower: %v, want ErrNotLeader", err)
	}
	ls, lsn, err := leases(ctx, c, peer)
	if err != nil || lsn != 22 || len(ls.Leases) != 2 || ls.Leases[0].ID != 2 || ls.Leases[1].ID != 1 {
		t.Fatalf("leases: %v at %d, %v", ls, lsn, err)
	}
	bad := peer
	bad.Token = "wrong"
	if _, _, err := leases(ctx, c, bad); err == nil || errors.Is(err, engine.ErrUnsupported) {
		t.Fatalf("leases with a bad token: %v", err)
	}
}

// TestLeaseReadsAtAnOlderPeerAreUnsupported: a peer whose service lacks
// the lease reads (an older version) answers ErrUnsupported, for the
// caller to answer locally; its other methods still work.
func TestLeaseReadsAtAnOlderPeerAreUnsupported(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	s := &server{l: &fakeLeader{}, lg: logrus.NewEntry(lg)}
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: serviceName, HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{
		call(callOf("ReadIndex")),
		call(callOf("KeepAlive")),
	}}, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	peer := engine.Peer{ID: 1, URL: "http://" + lis.Addr().String(), Token: "secret"}
	c := NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := leaseTimeToLive(ctx, c, peer, &pb.LeaseTimeToLiveRequest{ID: 3}); !errors.Is(err, engine.ErrUnsupported) {
		t.Fatalf("time to live at an older peer: %v, want ErrUnsupported", err)
	}
	if _, _, err := leases(ctx, c, peer); !errors.Is(err, engine.ErrUnsupported) {
		t.Fatalf("leases at an older peer: %v, want ErrUnsupported", err)
	}
	if lsn, err := readIndex(ctx, c, peer); err != nil || lsn != 77 {
		t.Fatalf("read index at an older peer: %d %v", lsn, err)
	}
	// An auth or alarm change sent first to a leader that does not serve
	// it ran nothing there: the origin may commit it itself.
	for _, req := range []proto.Message{&pb.AuthRoleAddRequest{Name: "r"}, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE}} {
		k, _ := engine.WriteKindOf(req)
		_, err := c.Forward(ctx, peer, engine.ForwardCall{Req: req, Resp: k.NewResponse(), Entropy: []byte("e"), Fresh: true})
		if !errors.Is(err, engine.ErrNotSent) {
			t.Fatalf("%T at an older peer: %v, want ErrNotSent", req, err)
		}
	}
}

// TestEveryForwardedWriteKindIsServedWithItsTypes: the endpoint serves one
// method per kind of the engine's table, decoding the request as its type
// and answering with its response type.
func TestEveryForwardedWriteKindIsServedWithItsTypes(t *testing.T) {
	fl := &fakeLeader{}
	peer := serve(t, fl)
	c := NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range engine.WriteKinds() {
		fl.answer = func(call engine.ForwardCall) (proto.Message, engine.ForwardReply, error) {
			return k.NewResponse(), engine.ForwardReply{LSN: 1}, nil
		}
		fl.got = nil
		resp := k.NewResponse()
		if _, err := c.Forward(ctx, peer, engine.ForwardCall{Req: k.NewRequest(), Resp: resp, Fresh: true}); err != nil {
			t.Errorf("%s: %v", k.Method, err)
			continue
		}
		if len(fl.got) != 1 || proto.MessageName(fl.got[0].Req) != proto.MessageName(k.NewRequest()) {
			t.Errorf("%s: the leader got %v", k.Method, fl.got)
		}
	}
	if _, err := c.Forward(ctx, peer, engine.ForwardCall{Req: &pb.RangeRequest{}, Resp: &pb.RangeResponse{}, Fresh: true}); err == nil {
		t.Error("a Range was forwarded")
	}
}

// TestEveryCallIsServedWithItsTypes: the endpoint serves one method per
// call of the engine's table beside the writes, decoding the request as
// its type and answering with its response type (and a Positioned call's
// position).
func TestEveryCallIsServedWithItsTypes(t *testing.T) {
	peer := serve(t, &fakeLeader{})
	c := NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range engine.CallKinds() {
		lsn, err := c.Call(ctx, peer, k, k.NewRequest(), k.NewResponse())
		if err != nil {
			t.Errorf("%s: %v", k.Method, err)
			continue
		}
		if k.Positioned != (lsn != 0) {
			t.Errorf("%s (positioned %v): position %d", k.Method, k.Positioned, lsn)
		}
	}
}

// refusingAuthorizer is auth on at a leader: it takes any credential and
// refuses a request without one, counting the requests it sees.
type refusingAuthorizer struct{ seen atomic.Int64 }

func (a *refusingAuthorizer) Authorize(ctx context.Context, _ string, _ proto.Message, caller auth.Caller) (context.Context, error) {
	a.seen.Add(1)
	if caller.Empty() {
		return nil, rpctypes.ErrGRPCUserEmpty
	}
	return ctx, nil
}

// TestACertificateNamedCallerIsNotSentToALeaderThatRefusedOne sends the
// writes of a client known by its certificate's common name alone over a
// plaintext link, which cannot carry that name: a leader with auth on
// refuses the first (ErrNotSent: its origin commits it itself), and the
// next are not sent to it at all. Sent, such a request cut in flight — a
// leader change, a move's fence — could only be sent again and refused
// until its resend limit, and was answered as timed out. A caller with a
// token is sent; with auth off the leader takes every request.
func TestACertificateNamedCallerIsNotSentToALeaderThatRefusedOne(t *testing.T) {
	answer := func(engine.ForwardCall) (proto.Message, engine.ForwardReply, error) {
		return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 9}}, engine.ForwardReply{LSN: 12}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cn, token := auth.Caller{CertCN: "kube-apiserver"}, auth.Caller{Token: "tok"}
	type send struct {
		caller auth.Caller
		seen   bool // the leader saw it
		sent   bool // and served it
	}
	for _, tc := range []struct {
		name  string
		authz bool
		sends []send
	}{
		{"auth on", true, []send{{cn, true, false}, {cn, false, false}, {token, true, true}, {cn, false, false}}},
		{"auth off", false, []send{{cn, true, true}, {cn, true, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := &fakeLeader{answer: answer}
			az := &refusingAuthorizer{}
			cfg := ServerConfig{Logger: testutil.Logger(logrus.WarnLevel)}
			if tc.authz {
				cfg.Authorizer = az
			}
			peer := serveWith(t, fl, cfg)
			c := NewClient()
			defer c.Close()
			for i, sd := range tc.sends {
				seen, served := az.seen.Load(), len(fl.got)
				_, err := c.Forward(auth.WithCaller(ctx, sd.caller), peer, engine.ForwardCall{Origin: revision.WriterTag{Nonce: 1, Seq: uint64(i + 1)},
					Fresh: true, Caller: sd.caller, Req: &pb.PutRequest{Key: []byte("k")}, Resp: &pb.PutResponse{}})
				gotSeen := az.seen.Load() > seen || len(fl.got) > served
				gotSent := len(fl.got) > served
				if gotSeen != sd.seen || gotSent != sd.sent || (sd.sent && err != nil) || (!sd.sent && !errors.Is(err, engine.ErrNotSent)) {
					t.Fatalf("send %d (%+v): seen by the leader %v, served %v, err %v; want seen %v, served %v", i, sd.caller, gotSeen, gotSent, err, sd.seen, sd.sent)
				}
			}
		})
	}
}
