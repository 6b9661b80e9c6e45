package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
)

// The kinds of forwarded write, in one table (writeKinds): each entry is
// the request's method on the internal endpoint, its label in the
// forwarding metrics and logs, its request and response types, its
// evaluation in a commit batch (the same on the origin and, forwarded, on
// the leader), the leader's own checks of a forwarded one, what follows a
// commit, and how the answer of one found committed already is rebuilt.
// The origin's entry points (Put, Txn, AuthWrite, ...), the leader's
// ServeForward and package forward's client and server all read it:
// forwarding another write is one entry here.

// WriteKind is the wire face of one kind of forwarded write, for package
// forward: Method names it on the internal endpoint (part of the protocol:
// never renamed, so that instances of different builds interoperate),
// RPC is the etcd client API method of the same request (its full gRPC
// name, "/etcdserverpb.KV/Put"), whose permission check the leader applies
// again to a forwarded one, Label names it in the zketcd_forward_* metrics,
// and NewRequest and NewResponse return empty messages of its request and
// response types.
type WriteKind struct {
	Method      string
	RPC         string
	Label       string
	NewRequest  func() proto.Message
	NewResponse func() proto.Message
}

// WriteKinds returns every kind of forwarded write (a new slice: the
// caller may keep it).
func WriteKinds() []WriteKind {
	out := make([]WriteKind, len(writeKinds))
	for i, k := range writeKinds {
		out[i] = k.face()
	}
	return out
}

// WriteKindOf returns the kind of a forwarded write request, false if req
// is of no kind that is forwarded.
func WriteKindOf(req proto.Message) (WriteKind, bool) {
	k, ok := kindOf(req)
	if !ok {
		return WriteKind{}, false
	}
	return k.face(), true
}

// anyKind is a kind of the table whatever its types: what the leader's
// ServeForward and AuthWrite need of it.
type anyKind interface {
	// wireKind's label is face().Label and its rpc face().RPC, without
	// building the face.
	wireKind
	face() WriteKind
	// serve commits a forwarded request of this kind at the leader as p
	// describes (tag and fingerprint): as serveAs.
	serve(ctx context.Context, b *Engine, p *proposal, call ForwardCall) (proto.Message, ForwardReply, error)
	// writeAny is write for a request of this kind typed as proto.Message.
	writeAny(ctx context.Context, b *Engine, req proto.Message, entropy []byte) (proto.Message, error)
}

// kind is one kind of forwarded write: requests R answered with T.
type kind[R, T proto.Message] struct {
	// service is the etcd service whose method of the same name the
	// request is ("KV", "Lease", "Maintenance", "Auth").
	service, method, labelName string
	// leaderEntropy makes the leader draw the entropy of a forwarded
	// request itself, once per tag, never taking the caller's (an
	// AuthEnable's is the simple tokens' secret).
	leaderEntropy bool
	// headed: eval answers with a header (holding the revision: the KV and
	// Lease requests; an auth change's or alarm's answer has none, its
	// server adds it), so a leader's answer without one is malformed.
	headed bool
	// eval returns req's evaluation in a commit batch; entropy is the
	// random bytes an auth change was drawn with (ignored by the others).
	eval func(b *Engine, req R, entropy []byte) func(*revision.Batch) (T, error)
	// check, if set, is what the leader checks of a forwarded request
	// before it evaluates it (its origin checked it on its own path, with
	// its own limits): a *FinalError refuses it, any other error leaves it
	// unevaluated with that error.
	check func(ctx context.Context, b *Engine, req R) error
	// begin, if set, runs before req is committed, on the instance that
	// answers the client and on a leader that commits a forwarded one, and
	// returns what runs after, whatever the outcome: with the answer and
	// whether req was committed (false for a duplicate at the leader: its
	// answer is unknown there).
	begin func(b *Engine, req R) (end func(resp T, committed bool))
	// dup, if set, rebuilds the answer of req found committed already at
	// revision rev (its answer lost with a leader); without it the client
	// gets etcd's "request timed out, possibly due to connection lost".
	dup func(b *Engine, req R, rev int64) (T, error)
}

func (k *kind[R, T]) label() string { return k.labelName }

func (k *kind[R, T]) rpc() string { return "/etcdserverpb." + k.service + "/" + k.method }

// answered checks the leader's answer resp to a forwarded request of this
// kind before the origin passes it on: of its response type and, for a
// request whose answer carries the revision (headed), with a header. A
// leader of this build answers no other way; an answer that is not so (a
// leader gone wrong, or one answering with another request's response)
// must reach no client.
func (k *kind[R, T]) answered(resp proto.Message) error {
	t, ok := resp.(T)
	if !ok {
		return fmt.Errorf("zketcd: a %s answered with %T", k.method, resp)
	}
	if !k.headed {
		return nil
	}
	r := t.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("header")
	if fd == nil || !r.Has(fd) {
		return fmt.Errorf("zketcd: a %s answered without a header", k.method)
	}
	return nil
}

func (k *kind[R, T]) face() WriteKind {
	return WriteKind{Method: k.method, RPC: k.rpc(), Label: k.labelName,
		NewRequest:  func() proto.Message { return newMessage[R]() },
		NewResponse: func() proto.Message { return newMessage[T]() }}
}

// write commits req here or through the leader (writeForwarded), between
// begin and the end it returns.
func (k *kind[R, T]) write(ctx context.Context, b *Engine, req R, entropy []byte) (resp T, err error) {
	answered := b.metrics.writeStarted()
	defer func() { answered(err) }()
	var dup func(lsn, rev int64) (T, error)
	if k.dup != nil {
		dup = func(_, rev int64) (T, error) { return k.dup(b, req, rev) }
	}
	if k.begin != nil {
		end := k.begin(b, req)
		defer func() { end(resp, err == nil) }()
	}
	resp, err = writeForwarded(ctx, b.fwd, k, req, entropy, newMessage[T], k.eval(b, req, entropy), dup)
	return resp, err
}

func (k *kind[R, T]) writeAny(ctx context.Context, b *Engine, req proto.Message, entropy []byte) (proto.Message, error) {
	r, ok := req.(R)
	if !ok {
		return nil, fmt.Errorf("zketcd: %T is not a %s request", req, k.method)
	}
	resp, err := k.write(ctx, b, r, entropy)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (k *kind[R, T]) serve(ctx context.Context, b *Engine, p *proposal, call ForwardCall) (resp proto.Message, reply ForwardReply, err error) {
	req, ok := call.Req.(R)
	if !ok {
		return nil, ForwardReply{}, &FinalError{Err: fmt.Errorf("zketcd: %T is not a %s request", call.Req, k.method)}
	}
	if k.check != nil {
		if err := k.check(ctx, b, req); err != nil {
			return nil, ForwardReply{}, err
		}
	}
	entropy := call.Entropy
	if k.leaderEntropy {
		entropy = make([]byte, authEntropyBytes)
		if _, err := rand.Read(entropy); err != nil {
			return nil, ForwardReply{}, &FinalError{Err: fmt.Errorf("zketcd: auth entropy: %w", err)}
		}
	}
	if k.begin != nil {
		end := k.begin(b, req)
		defer func() {
			t, ok := resp.(T)
			end(t, ok && err == nil)
		}()
	}
	resp, reply, err = serveAs(ctx, b.commit, p, req, k.eval(b, req, entropy))
	return resp, reply, err
}

// The kinds whose entry points are typed (Put, LeaseGrant, ...).
var (
	putKind = &kind[*pb.PutRequest, *pb.PutResponse]{service: "KV", method: "Put", labelName: "put", headed: true,
		eval: func(_ *Engine, req *pb.PutRequest, _ []byte) func(*revision.Batch) (*pb.PutResponse, error) {
			return func(bt *revision.Batch) (*pb.PutResponse, error) { return translate.Put(bt, req) }
		},
		dup: func(b *Engine, req *pb.PutRequest, rev int64) (*pb.PutResponse, error) { return b.rebuildPut(req, rev) },
	}
	deleteRangeKind = &kind[*pb.DeleteRangeRequest, *pb.DeleteRangeResponse]{service: "KV", method: "DeleteRange", labelName: "delete_range", headed: true,
		eval: func(_ *Engine, req *pb.DeleteRangeRequest, _ []byte) func(*revision.Batch) (*pb.DeleteRangeResponse, error) {
			return func(bt *revision.Batch) (*pb.DeleteRangeResponse, error) { return translate.DeleteRange(bt, req) }
		},
	}
	txnKind = &kind[*pb.TxnRequest, *pb.TxnResponse]{service: "KV", method: "Txn", labelName: "txn", headed: true,
		eval: func(_ *Engine, req *pb.TxnRequest, _ []byte) func(*revision.Batch) (*pb.TxnResponse, error) {
			return func(bt *revision.Batch) (*pb.TxnResponse, error) { return translate.Txn(bt, req) }
		},
	}
	compactKind = &kind[*pb.CompactionRequest, *pb.CompactionResponse]{service: "KV", method: "Compact", labelName: "compaction", headed: true,
		eval: func(_ *Engine, req *pb.CompactionRequest, _ []byte) func(*revision.Batch) (*pb.CompactionResponse, error) {
			return func(bt *revision.Batch) (*pb.CompactionResponse, error) { return translate.Compact(bt, req) }
		},
		check: func(ctx context.Context, b *Engine, req *pb.CompactionRequest) error {
			return b.compactBarrier(ctx, req)
		},
		dup: func(b *Engine, _ *pb.CompactionRequest, _ int64) (*pb.CompactionResponse, error) {
			return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: b.view.State().Rev}}, nil
		},
	}
	// A lease grant is forwarded with its ID chosen (LeaseGrant), so that
	// one found committed after a lost answer can be answered.
	leaseGrantKind = &kind[*pb.LeaseGrantRequest, *pb.LeaseGrantResponse]{service: "Lease", method: "LeaseGrant", labelName: "lease_grant", headed: true,
		eval: func(_ *Engine, req *pb.LeaseGrantRequest, _ []byte) func(*revision.Batch) (*pb.LeaseGrantResponse, error) {
			return func(bt *revision.Batch) (*pb.LeaseGrantResponse, error) { return translate.LeaseGrant(bt, req, req.ID) }
		},
		check: func(_ context.Context, _ *Engine, req *pb.LeaseGrantRequest) error {
			if err := translate.CheckLeaseGrant(req); err != nil {
				return &FinalError{Err: err}
			}
			if req.ID == 0 {
				return &FinalError{Err: rpctypes.ErrGRPCLeaseNotFound}
			}
			return nil
		},
		// The leader starts the lease's clock at its grant, and its expiry
		// loop reads no token of a grant in flight (leaseClock.startGrant).
		begin: func(b *Engine, req *pb.LeaseGrantRequest) func(*pb.LeaseGrantResponse, bool) {
			b.leases.clock.startGrant(req.ID)
			return func(resp *pb.LeaseGrantResponse, committed bool) { b.leases.endGrant(req.ID, resp.GetTTL(), committed) }
		},
		dup: func(b *Engine, req *pb.LeaseGrantRequest, _ int64) (*pb.LeaseGrantResponse, error) {
			return &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: b.view.State().Rev}, ID: req.ID, TTL: max(req.TTL, MinLeaseTTL)}, nil
		},
	}
	leaseRevokeKind = &kind[*pb.LeaseRevokeRequest, *pb.LeaseRevokeResponse]{service: "Lease", method: "LeaseRevoke", labelName: "lease_revoke", headed: true,
		eval: func(_ *Engine, req *pb.LeaseRevokeRequest, _ []byte) func(*revision.Batch) (*pb.LeaseRevokeResponse, error) {
			return func(bt *revision.Batch) (*pb.LeaseRevokeResponse, error) { return translate.LeaseRevoke(bt, req.ID) }
		},
		dup: func(b *Engine, _ *pb.LeaseRevokeRequest, rev int64) (*pb.LeaseRevokeResponse, error) {
			if rev == 0 {
				rev = b.view.State().Rev
			}
			return &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: rev}}, nil
		},
	}
	// An alarm activation or deactivation; a GET is a read, never
	// forwarded.
	alarmKind = &kind[*pb.AlarmRequest, *pb.AlarmResponse]{service: "Maintenance", method: "Alarm", labelName: "alarm",
		eval: func(b *Engine, req *pb.AlarmRequest, _ []byte) func(*revision.Batch) (*pb.AlarmResponse, error) {
			return b.alarmEval(req)
		},
		check: func(_ context.Context, _ *Engine, req *pb.AlarmRequest) error {
			if req.Action == pb.AlarmRequest_GET {
				return &FinalError{Err: fmt.Errorf("zketcd: an alarm GET is a read, not forwarded")}
			}
			return nil
		},
	}
)

// authLabel labels every auth change in the metrics.
const authLabel = "auth"

// authEntropyBytes is how much entropy a leader draws for a forwarded auth
// change (the client API's server draws as much for its own).
const authEntropyBytes = 32

// authKind is the kind of an auth change of request type R answered with
// T (auth.State.Apply's answer), evaluated with the entropy drawn once for
// it (auth.Change). Every auth change shares the metrics label authLabel.
func authKind[R, T proto.Message](method string) *kind[R, T] {
	return &kind[R, T]{service: "Auth", method: method, labelName: authLabel, leaderEntropy: true,
		eval: func(_ *Engine, req R, entropy []byte) func(*revision.Batch) (T, error) {
			eval := authEval(req, entropy)
			return func(bt *revision.Batch) (T, error) {
				var zero T
				resp, err := eval(bt)
				if err != nil {
					return zero, err
				}
				t, ok := resp.(T)
				if !ok {
					return zero, fmt.Errorf("zketcd: auth change %T answered %T, want %T", req, resp, zero)
				}
				return t, nil
			}
		},
	}
}

// writeKinds is the table: every kind of forwarded write. Read-only.
var writeKinds = []anyKind{
	putKind,
	deleteRangeKind,
	txnKind,
	compactKind,
	leaseGrantKind,
	leaseRevokeKind,
	alarmKind,
	authKind[*pb.AuthEnableRequest, *pb.AuthEnableResponse]("AuthEnable"),
	authKind[*pb.AuthDisableRequest, *pb.AuthDisableResponse]("AuthDisable"),
	authKind[*pb.AuthUserAddRequest, *pb.AuthUserAddResponse]("UserAdd"),
	authKind[*pb.AuthUserDeleteRequest, *pb.AuthUserDeleteResponse]("UserDelete"),
	authKind[*pb.AuthUserChangePasswordRequest, *pb.AuthUserChangePasswordResponse]("UserChangePassword"),
	authKind[*pb.AuthUserGrantRoleRequest, *pb.AuthUserGrantRoleResponse]("UserGrantRole"),
	authKind[*pb.AuthUserRevokeRoleRequest, *pb.AuthUserRevokeRoleResponse]("UserRevokeRole"),
	authKind[*pb.AuthRoleAddRequest, *pb.AuthRoleAddResponse]("RoleAdd"),
	authKind[*pb.AuthRoleDeleteRequest, *pb.AuthRoleDeleteResponse]("RoleDelete"),
	authKind[*pb.AuthRoleGrantPermissionRequest, *pb.AuthRoleGrantPermissionResponse]("RoleGrantPermission"),
	authKind[*pb.AuthRoleRevokePermissionRequest, *pb.AuthRoleRevokePermissionResponse]("RoleRevokePermission"),
}

// kindsByType indexes writeKinds by request type. Read-only.
var kindsByType = func() map[reflect.Type]anyKind {
	m := make(map[reflect.Type]anyKind, len(writeKinds))
	for _, k := range writeKinds {
		m[reflect.TypeOf(k.face().NewRequest())] = k
	}
	return m
}()

// kindOf returns the kind of req, false if it is of none.
func kindOf(req proto.Message) (anyKind, bool) {
	k, ok := kindsByType[reflect.TypeOf(req)]
	return k, ok
}

// kindLabel is req's metrics label ("unknown" for a request of no kind).
func kindLabel(req proto.Message) string {
	if k, ok := kindOf(req); ok {
		return k.label()
	}
	return "unknown"
}

// serveAs commits a forwarded request at the leader as p describes (its
// bound tag and fingerprint) and returns its answer as ServeForward does.
func serveAs[T proto.Message](ctx context.Context, c *committer, p *proposal, req any, eval func(*revision.Batch) (T, error)) (proto.Message, ForwardReply, error) {
	resp, out, err := proposeAs(ctx, c, p, gated(req, eval))
	reply := ForwardReply{LSN: out.lsn, Dup: out.dup, DupRev: out.dupRev}
	switch {
	case err == nil && out.dup:
		return nil, reply, nil
	case err == nil:
		return resp, reply, nil
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrAuthChanged):
		return nil, reply, err
	case out.final:
		return nil, reply, &FinalError{Err: err}
	}
	return nil, reply, err
}

// rebuildPut answers a forwarded Put found committed at rev after its
// answer was lost: the header's revision, and the previous value (as of
// rev-1) if asked. A previous value compacted away meanwhile cannot be
// given: etcd's "request timed out, possibly due to connection lost".
func (b *Engine) rebuildPut(req *pb.PutRequest, rev int64) (*pb.PutResponse, error) {
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: rev}}
	if !req.PrevKv {
		return resp, nil
	}
	err := b.view.Read(func(r revision.Reader) error {
		prev, err := translate.Range(r, &pb.RangeRequest{Key: req.Key, Revision: rev - 1})
		if err != nil {
			return err
		}
		if len(prev.Kvs) > 0 {
			resp.PrevKv = prev.Kvs[0]
		}
		return nil
	})
	if err != nil {
		return nil, rpctypes.ErrGRPCTimeoutDueToConnectionLost
	}
	return resp, nil
}

// alarmEval is the batch evaluation of an alarm activation or
// deactivation (on the origin, or on the leader for a forwarded one).
func (b *Engine) alarmEval(req *pb.AlarmRequest) func(*revision.Batch) (*pb.AlarmResponse, error) {
	return func(bt *revision.Batch) (*pb.AlarmResponse, error) {
		resp, change := translate.AlarmResponse(bt.Alarms(), req)
		if change != nil && bt.ChangeAlarm(*change) {
			b.log.WithFields(logrus.Fields{
				"alarm": req.Alarm.String(), "member": memberHex(req.MemberID), "activate": change.Activate,
			}).Warn("alarm change staged")
		}
		return &pb.AlarmResponse{Alarms: resp}, nil
	}
}

// authEval is the batch evaluation of an auth change (on the origin, or
// on the leader for a forwarded one).
func authEval(req proto.Message, entropy []byte) func(*revision.Batch) (proto.Message, error) {
	eval := auth.Change(req, entropy)
	return func(bt *revision.Batch) (proto.Message, error) {
		next, resp, err := eval(bt.AuthState())
		if err != nil {
			return nil, err
		}
		if next != nil {
			bt.SetAuthState(next)
		}
		return resp.(proto.Message), nil
	}
}
