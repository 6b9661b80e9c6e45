package diff

import (
	"context"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// rawCall sends one generated request on conn (whose clientv3 client adds
// its token to every call) and records the response or error.
func rawCall(ctx context.Context, conn *grpc.ClientConn, req proto.Message) Result {
	var resp proto.Message
	var err error
	kv, lease, mt, cl := pb.NewKVClient(conn), pb.NewLeaseClient(conn), pb.NewMaintenanceClient(conn), pb.NewClusterClient(conn)
	switch r := req.(type) {
	case *pb.RangeRequest:
		resp, err = kv.Range(ctx, r)
	case *pb.PutRequest:
		resp, err = kv.Put(ctx, r)
	case *pb.DeleteRangeRequest:
		resp, err = kv.DeleteRange(ctx, r)
	case *pb.TxnRequest:
		resp, err = kv.Txn(ctx, r)
	case *pb.CompactionRequest:
		resp, err = kv.Compact(ctx, r)
	case *pb.LeaseGrantRequest:
		resp, err = lease.LeaseGrant(ctx, r)
	case *pb.LeaseRevokeRequest:
		resp, err = lease.LeaseRevoke(ctx, r)
	case *pb.LeaseTimeToLiveRequest:
		resp, err = lease.LeaseTimeToLive(ctx, r)
	case *pb.LeaseLeasesRequest:
		resp, err = lease.LeaseLeases(ctx, r)
	case *pb.StatusRequest:
		resp, err = mt.Status(ctx, r)
	case *pb.AlarmRequest:
		resp, err = mt.Alarm(ctx, r)
	case *pb.HashKVRequest:
		resp, err = mt.HashKV(ctx, r)
	case *pb.DefragmentRequest:
		resp, err = mt.Defragment(ctx, r)
	case *pb.MemberListRequest:
		resp, err = cl.MemberList(ctx, r)
	case *pb.MemberAddRequest:
		resp, err = cl.MemberAdd(ctx, r)
	case *pb.SnapshotRequest:
		var s pb.Maintenance_SnapshotClient
		if s, err = mt.Snapshot(ctx, r); err == nil {
			_, err = s.Recv()
			if err == io.EOF {
				err = nil
			}
		}
		return Result{Request: req, Err: err} // the data differs between servers
	case *pb.WatchCreateRequest:
		return watchCreateOnce(ctx, conn, r)
	default:
		return authCall(ctx, pb.NewAuthClient(conn), req)
	}
	res := Result{Request: req, Err: err}
	if err == nil {
		res.Responses = []proto.Message{resp}
	}
	return res
}

// watchCreateOnce opens a watch stream, sends one create request and
// records the first response.
func watchCreateOnce(ctx context.Context, conn *grpc.ClientConn, r *pb.WatchCreateRequest) Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := Result{Request: r}
	w, err := pb.NewWatchClient(conn).Watch(ctx)
	if err == nil {
		err = w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: r}})
	}
	var resp *pb.WatchResponse
	if err == nil {
		resp, err = w.Recv()
	}
	res.Err = err
	if err == nil {
		res.Responses = []proto.Message{resp}
	}
	return res
}

// RawAs sends req through a client logged in as user.
func RawAs(user, password string, req proto.Message) Step {
	st := AsUser(user, password, func(ctx context.Context, c *clientv3.Client) Result {
		return rawCall(ctx, c.ActiveConnection(), req)
	})
	st.kind = fmt.Sprintf("as %s: %s", user, req.ProtoReflect().Descriptor().Name())
	return st
}

// RangeStreamAs sends req through RangeStream as user and records every
// chunk.
func RangeStreamAs(user, password string, req *pb.RangeRequest) Step {
	st := AsUser(user, password, func(ctx context.Context, c *clientv3.Client) Result {
		res := Result{Request: req}
		s, err := pb.NewKVClient(c.ActiveConnection()).RangeStream(ctx, req)
		for err == nil {
			var resp *pb.RangeStreamResponse
			if resp, err = s.Recv(); err == nil {
				res.Responses = append(res.Responses, resp)
			}
		}
		if err != io.EOF {
			res.Err = err
		}
		return res
	})
	st.kind = "as " + user + ": RangeStream"
	return st
}

// keepAliveAs sends one LeaseKeepAlive as user; only the error is
// compared (the TTL depends on timing).
func keepAliveAs(user, password string, id clientv3.LeaseID) Step {
	st := AsUser(user, password, func(ctx context.Context, c *clientv3.Client) Result {
		_, err := c.KeepAliveOnce(ctx, id)
		return Result{Err: err}
	})
	st.kind = "as " + user + ": LeaseKeepAlive"
	return st
}

// RawNoAuth sends req without credentials on the scenario's own client.
func RawNoAuth(req proto.Message) Step {
	return Step{kind: "no user: " + string(req.ProtoReflect().Descriptor().Name()), exec: func(ctx context.Context, e *endpoint) Result {
		return rawCall(ctx, e.client.ActiveConnection(), req)
	}}
}

// ErrOnly keeps only the error of a step whose response legitimately
// differs between servers (member lists, status, tokens).
func ErrOnly(st Step) Step {
	inner := st.exec
	st.exec = func(ctx context.Context, e *endpoint) Result {
		r := inner(ctx, e)
		r.Responses = nil
		return r
	}
	return st
}

func perm(typ authpb.Permission_Type, key, end string) *authpb.Permission {
	p := &authpb.Permission{PermType: typ, Key: []byte(key)}
	if end != "" {
		p.RangeEnd = []byte(end)
	}
	return p
}

// authSetup creates root (root role), alice (role reader: READ on prefix
// /foo/, READWRITE on /bar, WRITE on prefix /w/), bob (no role) and carol
// (READ on everything from "m" on), puts some keys and a lease with a key
// alice may not write, then enables authentication.
func authSetup() []Step {
	return Steps(
		Put("/foo/a", "1"), Put("/bar", "b"), Put("/zzz", "z"),
		LeaseGrant(0x1001, 600), Put("/foo/leased", "x", clientv3.WithLease(0x1001)),
		LeaseGrant(0x1002, 600), Put("/w/leased", "x", clientv3.WithLease(0x1002)),
		AuthRaw(&pb.AuthUserAddRequest{Name: "root", Password: "rootpw"}).WantOK(),
		AuthRaw(&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}).WantOK(),
		AuthRaw(&pb.AuthRoleAddRequest{Name: "root"}).WantOK(),
		AuthRaw(&pb.AuthRoleAddRequest{Name: "reader"}).WantOK(),
		AuthRaw(&pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: perm(authpb.Permission_READ, "/foo/", "/foo0")}).WantOK(),
		AuthRaw(&pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: perm(authpb.Permission_READWRITE, "/bar", "")}).WantOK(),
		AuthRaw(&pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: perm(authpb.Permission_WRITE, "/w/", "/w0")}).WantOK(),
		AuthRaw(&pb.AuthRoleAddRequest{Name: "fromm"}).WantOK(),
		AuthRaw(&pb.AuthRoleGrantPermissionRequest{Name: "fromm", Perm: perm(authpb.Permission_READ, "m", "\x00")}).WantOK(),
		AuthRaw(&pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"}).WantOK(),
		AuthRaw(&pb.AuthUserGrantRoleRequest{User: "alice", Role: "reader"}).WantOK(),
		AuthRaw(&pb.AuthUserAddRequest{Name: "bob", Password: "bobpw"}).WantOK(),
		AuthRaw(&pb.AuthUserAddRequest{Name: "carol", Password: "carolpw"}).WantOK(),
		AuthRaw(&pb.AuthUserGrantRoleRequest{User: "carol", Role: "fromm"}).WantOK(),
		AuthRaw(&pb.AuthRoleGetRequest{Role: "reader"}).WantOK(),
		AuthRaw(&pb.AuthUserListRequest{}).WantOK(),
		AuthRaw(&pb.AuthEnableRequest{}).WantOK(),
		AuthRaw(&pb.AuthStatusRequest{}).WantOK(),
	)
}

func txnReq(cmp []*pb.Compare, success, failure []*pb.RequestOp) *pb.TxnRequest {
	return &pb.TxnRequest{Compare: cmp, Success: success, Failure: failure}
}

func opGet(key, end string) *pb.RequestOp {
	r := &pb.RangeRequest{Key: []byte(key)}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
}

func opPut(key, val string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(val)}}}
}

func opDel(key string, prevKV bool) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), PrevKv: prevKV}}}
}

func opTxn(t *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
}

func cmpValue(key, val string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_Value{Value: []byte(val)}}
}

var denied = rpctypes.ErrGRPCPermissionDenied

// AuthOnScenarios pin down etcd 3.7.3 with authentication enabled: every
// RPC as root, as a user permitted to make it and as one who is not (or
// without credentials), with etcd's errors.
func AuthOnScenarios() []Scenario {
	a, apw := "alice", "alicepw"
	return []Scenario{
		{Name: "auth-on/login", Steps: Steps(authSetup(),
			ErrOnly(AuthRaw(&pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})).WantOK(),
			AuthRaw(&pb.AuthenticateRequest{Name: "alice", Password: "wrong"}).WantErr(rpctypes.ErrGRPCAuthFailed),
			AuthRaw(&pb.AuthenticateRequest{Name: "nobody", Password: "x"}).WantErr(rpctypes.ErrGRPCAuthFailed),
			AuthRaw(&pb.AuthenticateRequest{}).WantErr(rpctypes.ErrGRPCAuthFailed),
			getAs(a, "wrong", "/foo/a"),
			RawNoAuth(&pb.RangeRequest{Key: []byte("/foo/a")}).WantErr(rpctypes.ErrGRPCUserEmpty),
			RawNoAuth(&pb.PutRequest{Key: []byte("/bar"), Value: []byte("v")}).WantErr(rpctypes.ErrGRPCUserEmpty),
			RawNoAuth(&pb.AuthStatusRequest{}).WantOK(),
			RawNoAuth(&pb.AuthUserListRequest{}).WantErr(rpctypes.ErrGRPCUserEmpty),
			ErrOnly(RawNoAuth(&pb.MemberListRequest{})).WantErr(rpctypes.ErrGRPCUserEmpty),
			ErrOnly(RawNoAuth(&pb.StatusRequest{})).WantErr(rpctypes.ErrGRPCUserEmpty),
			RawNoAuth(&pb.LeaseGrantRequest{ID: 0x2001, TTL: 60}).WantErr(rpctypes.ErrGRPCUserEmpty),
		)},
		{Name: "auth-on/kv", Steps: Steps(authSetup(),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/foo/a")}).WantOK(),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/foo/"), RangeEnd: []byte("/foo0")}).WantOK(),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/foo/a"), RangeEnd: []byte("/foo/b")}).WantOK(),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/"), RangeEnd: []byte("0")}).WantErr(denied),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/foo/"), RangeEnd: []byte("\x00")}).WantErr(denied),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/zzz")}).WantErr(denied),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/bar")}).WantOK(),
			RangeStreamAs(a, apw, &pb.RangeRequest{Key: []byte("/foo/"), RangeEnd: []byte("/foo0")}).WantOK(),
			RangeStreamAs(a, apw, &pb.RangeRequest{Key: []byte("/"), RangeEnd: []byte("0")}).WantErr(denied),
			RawAs(a, apw, &pb.PutRequest{Key: []byte("/bar"), Value: []byte("v"), PrevKv: true}).WantOK(),
			RawAs(a, apw, &pb.PutRequest{Key: []byte("/foo/a"), Value: []byte("v")}).WantErr(denied),
			RawAs(a, apw, &pb.PutRequest{Key: []byte("/w/x"), Value: []byte("v")}).WantOK(),
			RawAs(a, apw, &pb.PutRequest{Key: []byte("/w/x"), Value: []byte("v"), PrevKv: true}).WantErr(denied),
			RawAs(a, apw, &pb.DeleteRangeRequest{Key: []byte("/w/x")}).WantOK(),
			RawAs(a, apw, &pb.DeleteRangeRequest{Key: []byte("/w/"), RangeEnd: []byte("/w0"), PrevKv: true}).WantErr(denied),
			RawAs(a, apw, &pb.DeleteRangeRequest{Key: []byte("/foo/a")}).WantErr(denied),
			RawAs("carol", "carolpw", &pb.RangeRequest{Key: []byte("m"), RangeEnd: []byte("\x00")}).WantOK(),
			RawAs("carol", "carolpw", &pb.RangeRequest{Key: []byte("zz")}).WantOK(),
			RawAs("carol", "carolpw", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("\x00")}).WantErr(denied),
			RawAs("bob", "bobpw", &pb.RangeRequest{Key: []byte("/foo/a")}).WantErr(denied),
			RawAs("root", "rootpw", &pb.RangeRequest{Key: []byte("\x00"), RangeEnd: []byte("\x00")}).WantOK(),
			RawAs("root", "rootpw", &pb.PutRequest{Key: []byte("/zzz"), Value: []byte("r")}).WantOK(),
		)},
		{Name: "auth-on/txn", Steps: Steps(authSetup(),
			RawAs(a, apw, txnReq([]*pb.Compare{cmpValue("/foo/a", "1")}, []*pb.RequestOp{opPut("/bar", "t"), opGet("/foo/a", "")}, []*pb.RequestOp{opGet("/bar", "")})).WantOK(),
			RawAs(a, apw, txnReq([]*pb.Compare{cmpValue("/zzz", "z")}, []*pb.RequestOp{opPut("/bar", "t")}, nil)).WantErr(denied),
			// A forbidden op in the branch that would not run still fails.
			RawAs(a, apw, txnReq([]*pb.Compare{cmpValue("/foo/a", "1")}, []*pb.RequestOp{opPut("/bar", "t")}, []*pb.RequestOp{opPut("/foo/a", "x")})).WantErr(denied),
			RawAs(a, apw, txnReq(nil, []*pb.RequestOp{opTxn(txnReq(nil, []*pb.RequestOp{opDel("/zzz", false)}, nil))}, nil)).WantErr(denied),
			RawAs(a, apw, txnReq(nil, []*pb.RequestOp{opTxn(txnReq(nil, []*pb.RequestOp{opDel("/bar", true)}, nil))}, nil)).WantOK(),
			RawAs(a, apw, txnReq(nil, []*pb.RequestOp{opDel("/w/a", true)}, nil)).WantErr(denied),
			RawAs(a, apw, txnReq(nil, []*pb.RequestOp{opDel("/w/a", false)}, nil)).WantOK(),
			RawAs("root", "rootpw", txnReq(nil, []*pb.RequestOp{opPut("/zzz", "root"), opDel("/foo/a", true)}, nil)).WantOK(),
		)},
		{Name: "auth-on/watch", Steps: Steps(authSetup(),
			RawAs(a, apw, &pb.WatchCreateRequest{Key: []byte("/foo/"), RangeEnd: []byte("/foo0")}),
			RawAs(a, apw, &pb.WatchCreateRequest{Key: []byte("/zzz")}),
			RawAs(a, apw, &pb.WatchCreateRequest{Key: []byte("/w/"), RangeEnd: []byte("/w0")}),
			RawNoAuth(&pb.WatchCreateRequest{Key: []byte("/foo/a")}),
			RawAs("root", "rootpw", &pb.WatchCreateRequest{Key: []byte("\x00"), RangeEnd: []byte("\x00")}),
		)},
		{Name: "auth-on/lease", Steps: Steps(authSetup(),
			RawAs(a, apw, &pb.LeaseGrantRequest{ID: 0x3001, TTL: 60}).WantOK(),
			RawAs(a, apw, &pb.PutRequest{Key: []byte("/bar"), Value: []byte("l"), Lease: 0x3001}).WantOK(),
			// Attaching to a lease that holds a key one may not write.
			RawAs(a, apw, &pb.PutRequest{Key: []byte("/bar"), Value: []byte("l"), Lease: 0x1001}).WantErr(denied),
			// Remaining TTLs depend on timing: only errors are compared.
			ErrOnly(RawAs(a, apw, &pb.LeaseTimeToLiveRequest{ID: 0x1001, Keys: true})).WantOK(),
			ErrOnly(RawAs(a, apw, &pb.LeaseTimeToLiveRequest{ID: 0x1002, Keys: true})).WantErr(denied),
			ErrOnly(RawAs(a, apw, &pb.LeaseTimeToLiveRequest{ID: 0x1002})).WantOK(),
			ErrOnly(RawAs("bob", "bobpw", &pb.LeaseTimeToLiveRequest{ID: 0x3001, Keys: true})).WantErr(denied),
			ErrOnly(RawAs("bob", "bobpw", &pb.LeaseTimeToLiveRequest{ID: 0x9999, Keys: true})),
			RawNoAuth(&pb.LeaseTimeToLiveRequest{ID: 0x3001}).WantErr(rpctypes.ErrGRPCUserEmpty),
			RawNoAuth(&pb.LeaseRevokeRequest{ID: 0x3001}).WantErr(rpctypes.ErrGRPCUserEmpty),
			keepAliveAs(a, apw, 0x1001).WantErr(denied),
			keepAliveAs(a, apw, 0x3001).WantOK(),
			keepAliveAs("root", "rootpw", 0x1001).WantOK(),
			RawAs(a, apw, &pb.LeaseLeasesRequest{}).WantErr(denied),
			RawAs("root", "rootpw", &pb.LeaseLeasesRequest{}).WantOK(),
			RawAs(a, apw, &pb.LeaseRevokeRequest{ID: 0x1001}).WantErr(denied),
			RawAs(a, apw, &pb.LeaseRevokeRequest{ID: 0x1002}).WantOK(),
			RawAs(a, apw, &pb.LeaseRevokeRequest{ID: 0x3001}).WantOK(),
			RawAs("root", "rootpw", &pb.LeaseRevokeRequest{ID: 0x1001}).WantOK(),
		)},
		{Name: "auth-on/admin-only", Steps: Steps(authSetup(),
			RawAs(a, apw, &pb.CompactionRequest{Revision: 2}).WantErr(denied),
			RawAs("root", "rootpw", &pb.CompactionRequest{Revision: 2}).WantOK(),
			RawAs(a, apw, &pb.HashKVRequest{}).WantErr(denied),
			RawAs(a, apw, &pb.DefragmentRequest{}).WantErr(denied),
			RawAs(a, apw, &pb.SnapshotRequest{}).WantErr(denied),
			RawAs(a, apw, &pb.AlarmRequest{Action: pb.AlarmRequest_GET}).WantOK(),
			RawAs(a, apw, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, Alarm: pb.AlarmType_NOSPACE}).WantErr(denied),
			ErrOnly(RawAs(a, apw, &pb.StatusRequest{})).WantOK(),
			ErrOnly(RawAs(a, apw, &pb.MemberListRequest{})).WantOK(),
			RawAs(a, apw, &pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:1"}}).WantErr(denied),
		)},
		{Name: "auth-on/token-after-an-auth-change", Steps: Steps(authSetup(),
			// A token issued before a change of the auth store: a JWT
			// carries its auth revision and is now old; a simple token
			// takes the current one and stays valid.
			Step{kind: "stale token: Range", exec: func(ctx context.Context, e *endpoint) Result {
				tok, err := pb.NewAuthClient(e.client.ActiveConnection()).Authenticate(ctx, &pb.AuthenticateRequest{Name: a, Password: apw})
				if err != nil {
					return Result{Err: err}
				}
				if r := AsUser("root", "rootpw", func(ctx context.Context, c *clientv3.Client) Result {
					return rawCall(ctx, c.ActiveConnection(), &pb.AuthRoleAddRequest{Name: "later"})
				}).exec(ctx, e); r.Err != nil {
					return r
				}
				req := &pb.RangeRequest{Key: []byte("/foo/a")}
				resp, err := pb.NewKVClient(e.client.ActiveConnection()).Range(metadata.AppendToOutgoingContext(ctx, "token", tok.Token), req)
				res := Result{Request: req, Err: err}
				if err == nil {
					res.Responses = []proto.Message{resp}
				}
				return res
			}},
			// clientv3 renews an old token by itself.
			Step{kind: "long-lived client across an auth change", exec: func(ctx context.Context, e *endpoint) Result {
				return AsUser(a, apw, func(ctx context.Context, c *clientv3.Client) Result {
					if _, err := c.Get(ctx, "/foo/a"); err != nil {
						return Result{Err: err}
					}
					if r := AsUser("root", "rootpw", func(ctx context.Context, rc *clientv3.Client) Result {
						return rawCall(ctx, rc.ActiveConnection(), &pb.AuthRoleAddRequest{Name: "later2"})
					}).exec(ctx, e); r.Err != nil {
						return r
					}
					resp, err := c.Get(ctx, "/foo/a")
					if err != nil {
						return Result{Err: err}
					}
					return Result{Responses: []proto.Message{(*pb.RangeResponse)(resp)}}
				}).exec(ctx, e)
			}}.WantOK(),
			RawAs(a, apw, &pb.AuthStatusRequest{}).WantOK(),
		)},
		{Name: "auth-on/auth-admin", Steps: Steps(authSetup(),
			RawAs(a, apw, &pb.AuthUserListRequest{}).WantErr(denied),
			RawAs(a, apw, &pb.AuthRoleListRequest{}).WantErr(denied),
			RawAs(a, apw, &pb.AuthUserGetRequest{Name: "alice"}).WantOK(),
			RawAs(a, apw, &pb.AuthUserGetRequest{Name: "root"}).WantErr(denied),
			RawAs(a, apw, &pb.AuthRoleGetRequest{Role: "reader"}).WantOK(),
			RawAs(a, apw, &pb.AuthRoleGetRequest{Role: "root"}).WantErr(denied),
			RawAs(a, apw, &pb.AuthUserAddRequest{Name: "eve", Password: "x"}).WantErr(denied),
			RawAs(a, apw, &pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: perm(authpb.Permission_READWRITE, "/", "\x00")}).WantErr(denied),
			RawAs(a, apw, &pb.AuthDisableRequest{}).WantErr(denied),
			RawAs(a, apw, &pb.AuthStatusRequest{}).WantOK(),
			RawAs("root", "rootpw", &pb.AuthUserListRequest{}).WantOK(),
			RawAs("root", "rootpw", &pb.AuthRoleGetRequest{Role: "root"}).WantOK(),
			RawAs("root", "rootpw", &pb.AuthUserDeleteRequest{Name: "root"}).WantErr(rpctypes.ErrGRPCInvalidAuthMgmt),
			RawAs("root", "rootpw", &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"}).WantErr(rpctypes.ErrGRPCInvalidAuthMgmt),
			RawAs("root", "rootpw", &pb.AuthRoleDeleteRequest{Role: "root"}).WantErr(rpctypes.ErrGRPCInvalidAuthMgmt),
			RawAs("root", "rootpw", &pb.AuthEnableRequest{}).WantOK(),
			// Granting alice more lets her read what she could not.
			RawAs("root", "rootpw", &pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: perm(authpb.Permission_READ, "/zzz", "")}).WantOK(),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/zzz")}).WantOK(),
			RawAs("root", "rootpw", &pb.AuthRoleRevokePermissionRequest{Role: "reader", Key: []byte("/zzz")}).WantOK(),
			RawAs(a, apw, &pb.RangeRequest{Key: []byte("/zzz")}).WantErr(denied),
			RawAs("root", "rootpw", &pb.AuthUserChangePasswordRequest{Name: "alice", Password: "new"}).WantOK(),
			getAs(a, apw, "/foo/a"),
			RawAs(a, "new", &pb.RangeRequest{Key: []byte("/foo/a")}).WantOK(),
			RawAs("root", "rootpw", &pb.AuthUserDeleteRequest{Name: "alice"}).WantOK(),
			getAs(a, "new", "/foo/a"),
			RawAs("root", "rootpw", &pb.AuthStatusRequest{}).WantOK(),
			RawAs("root", "rootpw", &pb.AuthDisableRequest{}).WantOK(),
			RawNoAuth(&pb.RangeRequest{Key: []byte("/zzz")}).WantOK(),
			RawNoAuth(&pb.AuthStatusRequest{}).WantOK(),
		)},
	}
}

// AuthTokenTTLScenarios need servers whose simple tokens live 1 s after
// their last use (etcd's --auth-token-ttl=1): a token used within its TTL
// lives on, one left idle longer is refused.
func AuthTokenTTLScenarios() []Scenario {
	useAfter := func(waits ...time.Duration) Step {
		return Step{kind: "token used after idle periods", exec: func(ctx context.Context, e *endpoint) Result {
			tok, err := pb.NewAuthClient(e.client.ActiveConnection()).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
			if err != nil {
				return Result{Err: err}
			}
			req := &pb.RangeRequest{Key: []byte("/foo/a")}
			var res Result
			for _, w := range waits {
				time.Sleep(w)
				resp, err := pb.NewKVClient(e.client.ActiveConnection()).Range(metadata.AppendToOutgoingContext(ctx, "token", tok.Token), req)
				res = Result{Request: req, Err: err}
				if err != nil {
					return res
				}
				res.Responses = []proto.Message{resp}
			}
			return res
		}}
	}
	return []Scenario{
		{Name: "auth-ttl/idle-token-expires", Steps: Steps(authSetup(),
			useAfter(300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond).WantOK(),
			useAfter(3*time.Second).WantErr(rpctypes.ErrGRPCInvalidAuthToken),
		)},
	}
}
