package diff

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Scenario is a named sequence of steps run against a fresh, empty server.
type Scenario struct {
	// Name is the subtest name; use "/"-separated groups, e.g. "range/limit".
	Name string
	// Steps run in order. The revisions they produce are deterministic
	// because every scenario starts on an empty server at revision 1.
	Steps []Step
}

// Result is what one step observed on one target.
type Result struct {
	// Request is the request as sent on the wire, captured below clientv3.
	// It is nil when the client rejected the call before sending it.
	Request proto.Message
	// Responses holds one response for unary calls and every chunk, in
	// order, for streaming calls (a stream may also end with Err).
	Responses []proto.Message
	// Err is the call's error, if any.
	Err error
}

// Header returns the response header of the last response that has one.
func (r Result) Header() *pb.ResponseHeader {
	for i := len(r.Responses) - 1; i >= 0; i-- {
		if h := headerOf(r.Responses[i]); h != nil {
			return h
		}
	}
	return nil
}

// Rev returns the header revision of the result, or 0 if it has none.
func (r Result) Rev() int64 { return r.Header().GetRevision() }

// Step is one call in a scenario. Build steps with the constructors (Put,
// Get, Delete, Txn, Do, Compact, GetStream, Raw, RawStream, LeaseGrant,
// Custom, Lazy) and refine them with As and the Want/Expect methods.
type Step struct {
	kind   string
	label  string
	exec   func(ctx context.Context, e *endpoint) Result
	lazy   func(s *State) Step
	checks []func(s *State, r Result) error
}

// Kind describes the kind of call, e.g. "Get" or "Raw Txn".
func (st Step) Kind() string { return st.kind }

// As labels the step so that later steps can refer to its result through
// State.Rev(label) and State.Result(label).
func (st Step) As(label string) Step {
	st.label = label
	return st
}

// Expect adds an assertion about the reference target's (Runner.A) result
// of this step. Assertions document what a scenario is about and catch a
// scenario that silently stops testing what it claims to; the other target
// is held to the same behaviour by the differential comparison. s holds the
// results of the steps before this one.
func (st Step) Expect(check func(s *State, r Result) error) Step {
	st.checks = append(append([]func(*State, Result) error(nil), st.checks...), check)
	return st
}

// WantErr expects the call to fail with the gRPC code and message of want
// (typically an rpctypes.ErrGRPC* value).
func (st Step) WantErr(want error) Step {
	w := errorInfoOf(want)
	return st.Expect(func(_ *State, r Result) error {
		if r.Err == nil {
			return fmt.Errorf("succeeded, want error %v", w)
		}
		if got := errorInfoOf(r.Err); got != w {
			return fmt.Errorf("error %v, want %v", got, w)
		}
		return nil
	})
}

// WantCode expects the call to fail with the given gRPC code.
func (st Step) WantCode(code codes.Code) Step {
	return st.Expect(func(_ *State, r Result) error {
		if got := errorInfoOf(r.Err); r.Err == nil || got.Code != code {
			return fmt.Errorf("error %v, want code %v", r.Err, code)
		}
		return nil
	})
}

// WantOK expects the call to succeed.
func (st Step) WantOK() Step {
	return st.Expect(func(_ *State, r Result) error {
		if r.Err != nil {
			return fmt.Errorf("unexpected error %v", errorInfoOf(r.Err))
		}
		return nil
	})
}

// WantRevDelta expects the call to succeed with a header revision equal to
// State.LastRev() + delta: 1 for a write that creates a revision, 0 for a
// read or a write that changes nothing.
func (st Step) WantRevDelta(delta int64) Step {
	return st.Expect(func(s *State, r Result) error {
		if r.Err != nil {
			return fmt.Errorf("unexpected error %v", errorInfoOf(r.Err))
		}
		if want := s.LastRev() + delta; r.Rev() != want {
			return fmt.Errorf("header revision %d, want %d (last %d %+d)", r.Rev(), want, s.LastRev(), delta)
		}
		return nil
	})
}

// endpoint is a target as seen by steps.
type endpoint struct {
	client *clientv3.Client
	kv     pb.KVClient
	lease  pb.LeaseClient
	maint  pb.MaintenanceClient
	// watches are the raw watch streams opened by Watch steps, by name.
	watches map[string]*watchConn
}

func newEndpoint(c *clientv3.Client) *endpoint {
	conn := c.ActiveConnection()
	return &endpoint{client: c, kv: pb.NewKVClient(conn), lease: pb.NewLeaseClient(conn), maint: pb.NewMaintenanceClient(conn)}
}

// recordingKV is a pb.KVClient that remembers the last request sent, so that
// clientv3 calls can be reported with their exact wire request.
type recordingKV struct {
	pb.KVClient
	req proto.Message
}

func (r *recordingKV) record(m proto.Message) { r.req = proto.Clone(m) }

func (r *recordingKV) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	r.record(in)
	return r.KVClient.Range(ctx, in, opts...)
}

func (r *recordingKV) RangeStream(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	r.record(in)
	return r.KVClient.RangeStream(ctx, in, opts...)
}

func (r *recordingKV) Put(ctx context.Context, in *pb.PutRequest, opts ...grpc.CallOption) (*pb.PutResponse, error) {
	r.record(in)
	return r.KVClient.Put(ctx, in, opts...)
}

func (r *recordingKV) DeleteRange(ctx context.Context, in *pb.DeleteRangeRequest, opts ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	r.record(in)
	return r.KVClient.DeleteRange(ctx, in, opts...)
}

func (r *recordingKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	r.record(in)
	return r.KVClient.Txn(ctx, in, opts...)
}

func (r *recordingKV) Compact(ctx context.Context, in *pb.CompactionRequest, opts ...grpc.CallOption) (*pb.CompactionResponse, error) {
	r.record(in)
	return r.KVClient.Compact(ctx, in, opts...)
}

// clientStep builds a step that goes through the clientv3 KV API. The KV is
// built on a recording gRPC client so the wire request is captured; it does
// not retry, which keeps every request applied exactly once.
func clientStep(kind string, call func(ctx context.Context, kv clientv3.KV) ([]proto.Message, error)) Step {
	return Step{kind: kind, exec: func(ctx context.Context, e *endpoint) Result {
		rec := &recordingKV{KVClient: e.kv}
		msgs, err := call(ctx, clientv3.NewKVFromKVClient(rec, e.client))
		return Result{Request: rec.req, Responses: msgs, Err: err}
	}}
}

// Do runs a clientv3 Op (OpGet, OpPut, OpDelete or OpTxn) through KV.Do.
func Do(op clientv3.Op) Step {
	kind := "Do"
	switch {
	case op.IsGet():
		kind = "Get"
	case op.IsPut():
		kind = "Put"
	case op.IsDelete():
		kind = "Delete"
	case op.IsTxn():
		kind = "Txn"
	}
	return clientStep(kind, func(ctx context.Context, kv clientv3.KV) ([]proto.Message, error) {
		resp, err := kv.Do(ctx, op)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.Get() != nil:
			return []proto.Message{(*pb.RangeResponse)(resp.Get())}, nil
		case resp.Put() != nil:
			return []proto.Message{(*pb.PutResponse)(resp.Put())}, nil
		case resp.Del() != nil:
			return []proto.Message{(*pb.DeleteRangeResponse)(resp.Del())}, nil
		case resp.Txn() != nil:
			return []proto.Message{(*pb.TxnResponse)(resp.Txn())}, nil
		}
		return nil, errors.New("diff: clientv3 returned an empty OpResponse")
	})
}

// Put is clientv3 KV.Put(key, val, opts...).
func Put(key, val string, opts ...clientv3.OpOption) Step {
	return Do(clientv3.OpPut(key, val, opts...))
}

// Get is clientv3 KV.Get(key, opts...).
func Get(key string, opts ...clientv3.OpOption) Step {
	return Do(clientv3.OpGet(key, opts...))
}

// Delete is clientv3 KV.Delete(key, opts...).
func Delete(key string, opts ...clientv3.OpOption) Step {
	return Do(clientv3.OpDelete(key, opts...))
}

// Txn is clientv3 KV.Txn().If(cmps...).Then(thenOps...).Else(elseOps...).
func Txn(cmps []clientv3.Cmp, thenOps, elseOps []clientv3.Op) Step {
	return Do(clientv3.OpTxn(cmps, thenOps, elseOps))
}

// Compact is clientv3 KV.Compact(rev, opts...).
func Compact(rev int64, opts ...clientv3.CompactOption) Step {
	return clientStep("Compact", func(ctx context.Context, kv clientv3.KV) ([]proto.Message, error) {
		resp, err := kv.Compact(ctx, rev, opts...)
		if err != nil {
			return nil, err
		}
		return []proto.Message{(*pb.CompactionResponse)(resp)}, nil
	})
}

// GetStream is clientv3 KV.GetStream(key, opts...) (etcd 3.7 RangeStream);
// the result holds every chunk received.
func GetStream(key string, opts ...clientv3.OpOption) Step {
	return clientStep("GetStream", func(ctx context.Context, kv clientv3.KV) ([]proto.Message, error) {
		ch, err := kv.GetStream(ctx, key, opts...)
		if err != nil {
			return nil, err
		}
		var msgs []proto.Message
		for r := range ch {
			if err = r.Err(); err != nil {
				continue // the terminal error; the channel closes next
			}
			msgs = append(msgs, r.RangeResponse)
		}
		return msgs, err
	})
}

// Raw sends req unchanged through the generated gRPC client, bypassing
// clientv3's validation and option handling. req must be one of
// *pb.RangeRequest, *pb.PutRequest, *pb.DeleteRangeRequest, *pb.TxnRequest,
// *pb.CompactionRequest, *pb.LeaseGrantRequest, *pb.LeaseRevokeRequest,
// *pb.LeaseTimeToLiveRequest or *pb.LeaseLeasesRequest.
func Raw(req proto.Message) Step {
	var call func(ctx context.Context, e *endpoint) (proto.Message, error)
	switch r := req.(type) {
	case *pb.RangeRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.kv.Range(ctx, r) }
	case *pb.PutRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.kv.Put(ctx, r) }
	case *pb.DeleteRangeRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.kv.DeleteRange(ctx, r) }
	case *pb.TxnRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.kv.Txn(ctx, r) }
	case *pb.CompactionRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.kv.Compact(ctx, r) }
	case *pb.LeaseGrantRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.lease.LeaseGrant(ctx, r) }
	case *pb.LeaseRevokeRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.lease.LeaseRevoke(ctx, r) }
	case *pb.LeaseTimeToLiveRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.lease.LeaseTimeToLive(ctx, r) }
	case *pb.LeaseLeasesRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.lease.LeaseLeases(ctx, r) }
	case *pb.AlarmRequest:
		call = func(ctx context.Context, e *endpoint) (proto.Message, error) { return e.maint.Alarm(ctx, r) }
	default:
		panic(fmt.Sprintf("diff.Raw: unsupported request type %T", req))
	}
	kind := "Raw " + string(req.ProtoReflect().Descriptor().Name())
	return Step{kind: kind, exec: func(ctx context.Context, e *endpoint) Result {
		resp, err := call(ctx, e)
		res := Result{Request: req, Err: err}
		if err == nil {
			res.Responses = []proto.Message{resp}
		}
		return res
	}}
}

// RawStream sends req through the generated KV.RangeStream client and
// records every chunk.
func RawStream(req *pb.RangeRequest) Step {
	return Step{kind: "Raw RangeStream", exec: func(ctx context.Context, e *endpoint) Result {
		res := Result{Request: req}
		stream, err := e.kv.RangeStream(ctx, req)
		if err != nil {
			res.Err = err
			return res
		}
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return res
			}
			if err != nil {
				res.Err = err
				return res
			}
			res.Responses = append(res.Responses, resp)
		}
	}}
}

// LeaseGrant grants a lease with an explicit ID (so that both targets use
// the same ID) through the raw gRPC lease client.
func LeaseGrant(id clientv3.LeaseID, ttl int64) Step {
	return Raw(&pb.LeaseGrantRequest{ID: int64(id), TTL: ttl})
}

// LeaseRevoke revokes a lease through the raw gRPC lease client; the keys
// attached to it are deleted in one revision.
func LeaseRevoke(id clientv3.LeaseID) Step {
	return Raw(&pb.LeaseRevokeRequest{ID: int64(id)})
}

// Custom is an escape hatch: f performs arbitrary calls with the client and
// returns what it observed. Its Result is compared like any other.
func Custom(kind string, f func(ctx context.Context, c *clientv3.Client) Result) Step {
	return Step{kind: kind, exec: func(ctx context.Context, e *endpoint) Result { return f(ctx, e.client) }}
}

// Lazy defers building a step until it runs, so that it can use the results
// of earlier steps, e.g.
//
//	Lazy(func(s *State) Step { return Compact(s.Rev("second put")) })
//
// The builder sees the reference target's (Runner.A) results and the step it
// returns is sent unchanged to both targets. A label or expectations set on
// the Lazy step itself apply to the built step.
func Lazy(build func(s *State) Step) Step {
	return Step{kind: "Lazy", lazy: build}
}

// resolve returns the concrete step for st.
func (st Step) resolve(s *State) Step {
	if st.lazy == nil {
		return st
	}
	inner := st.lazy(s).resolve(s)
	if st.label != "" {
		inner.label = st.label
	}
	inner.checks = append(append([]func(*State, Result) error(nil), st.checks...), inner.checks...)
	return inner
}

// State is the history of a running scenario on the reference target
// (Runner.A): the results of the steps that have already run.
type State struct {
	results []Result
	labels  map[string]int
}

func (s *State) add(label string, r Result) {
	if label != "" {
		if s.labels == nil {
			s.labels = make(map[string]int)
		}
		s.labels[label] = len(s.results)
	}
	s.results = append(s.results, r)
}

// Len returns the number of steps that have run.
func (s *State) Len() int { return len(s.results) }

// At returns the result of step i (0-based).
func (s *State) At(i int) Result {
	if i < 0 || i >= len(s.results) {
		panic(fmt.Sprintf("diff: no step %d (have %d)", i, len(s.results)))
	}
	return s.results[i]
}

// Result returns the result of the step labelled label.
func (s *State) Result(label string) Result {
	i, ok := s.labels[label]
	if !ok {
		panic(fmt.Sprintf("diff: no step labelled %q", label))
	}
	return s.results[i]
}

// Rev returns the header revision of the step labelled label. It panics
// (failing the scenario) if that step has no response header.
func (s *State) Rev(label string) int64 {
	r := s.Result(label)
	if r.Header() == nil {
		panic(fmt.Sprintf("diff: step %q has no response header (error: %v)", label, r.Err))
	}
	return r.Rev()
}

// LastRev returns the header revision of the most recent step that returned
// one, or 1 (the revision of an empty store) if none did.
func (s *State) LastRev() int64 {
	for i := len(s.results) - 1; i >= 0; i-- {
		if h := s.results[i].Header(); h != nil && h.Revision != 0 {
			return h.Revision
		}
	}
	return 1
}

// ErrorInfo is the comparable form of an error: its gRPC status code and
// message.
type ErrorInfo struct {
	Code    codes.Code
	Message string
}

func (e ErrorInfo) String() string { return fmt.Sprintf("code=%v desc=%q", e.Code, e.Message) }

// errorInfoOf extracts the gRPC code and message of err. Errors that clientv3
// produces itself (rpctypes.EtcdError) and plain errors are handled too.
func errorInfoOf(err error) ErrorInfo {
	if err == nil {
		return ErrorInfo{Code: codes.OK}
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ErrorInfo{Code: ee.Code(), Message: ee.Error()}
	}
	if s, ok := status.FromError(err); ok {
		return ErrorInfo{Code: s.Code(), Message: s.Message()}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrorInfo{Code: codes.DeadlineExceeded, Message: err.Error()}
	}
	if errors.Is(err, context.Canceled) {
		return ErrorInfo{Code: codes.Canceled, Message: err.Error()}
	}
	return ErrorInfo{Code: codes.Unknown, Message: err.Error()}
}

// headerOf returns the response header of m, looking inside a
// RangeStreamResponse, or nil.
func headerOf(m proto.Message) *pb.ResponseHeader {
	switch r := m.(type) {
	case *pb.RangeStreamResponse:
		return r.GetRangeResponse().GetHeader()
	case interface{ GetHeader() *pb.ResponseHeader }:
		return r.GetHeader()
	}
	return nil
}
