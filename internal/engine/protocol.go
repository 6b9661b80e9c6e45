package engine

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
)

// The forwarding protocol as the engine sees it: what one instance sends
// another's internal endpoint (package forward carries it over gRPC).

// Peer is another instance's internal endpoint as its member znode
// advertises it.
type Peer struct {
	ID    uint64
	URL   string
	Token string
}

// ForwardCall is one forwarded write: Req is the etcd request (Put,
// DeleteRange, Txn, Compaction, LeaseGrant with its ID chosen, LeaseRevoke,
// an Alarm activation or deactivation, an auth change as prepared),
// Resp the empty response of its type, filled by a successful Forward.
type ForwardCall struct {
	Origin revision.WriterTag
	AuthFP uint64
	// Caller is the credential of the client the request came from: at
	// the origin auth.CallerFrom of its context (a Forwarder sends that
	// one), at the leader as the origin sent it, verified or not. With
	// Origin, the request's kind and its bytes it binds the tag
	// (boundTag); it authorizes nothing (the leader's Authorizer checks
	// the credential).
	Caller auth.Caller
	Req    proto.Message
	// Entropy is the random bytes an auth change was evaluated with at
	// its origin (nil for other requests).
	Entropy []byte
	Resp    proto.Message
	// Fresh is set on the first send: a Forwarder that cannot reach the
	// peer without sending anything answers ErrNotSent.
	Fresh bool
	// After, on a re-send, is the log position the origin had applied
	// before the first send: the request can only be in an entry after it,
	// and a leader whose tag index no longer holds all of those answers
	// etcd's "request timed out, possibly due to connection lost" rather
	// than evaluate it again (0 on the first send).
	After int64
}

// ForwardReply is the leader's answer beyond the response: the log
// position to wait for and, for a request found in the log already (its
// response lost with a leader), the revision it took.
type ForwardReply struct {
	LSN    int64
	Dup    bool
	DupRev int64
}

// Forwarder carries requests to another instance's internal endpoint
// (package forward implements it over gRPC). The credential of the client
// a request came from (auth.CallerFrom of its context) travels with it, for
// the peer to check it itself. Its methods are safe for concurrent use.
type Forwarder interface {
	// Forward sends a write of the kinds' table (WriteKinds). Errors:
	// ErrNotLeader, ErrAuthChanged and ErrNotSent as documented; a
	// *FinalError for the peer's answer that the request failed (nothing
	// written; retrying cannot change it); anything else leaves the
	// outcome unknown.
	Forward(ctx context.Context, to Peer, call ForwardCall) (ForwardReply, error)
	// Call sends a call of the calls' table (CallKinds) of kind k with req
	// and fills resp with the answer; it returns the log position the
	// answer carries (a Positioned kind's; 0 for the others). A peer that
	// does not know the call answers ErrUnsupported, one that does not
	// lead ErrNotLeader; nothing a call does needs an answer to be safe
	// (the caller answers itself on any error).
	Call(ctx context.Context, to Peer, k CallKind, req, resp proto.Message) (int64, error)
}

// The calls of the internal endpoint beside the forwarded writes, in one
// table (callKinds): per call its method on the endpoint, the etcd client
// API method whose permission check the leader applies, its request and
// response types, and whether its answer carries a log position. The
// engine's forwarder (which makes them), the engine's ServeCall (which
// answers them at the leader) and package forward's client and server
// all read it: another call is one entry here and its answer in
// ServeCall.

// CallKind is the wire face of one call beside the forwarded writes, for
// package forward. Method names it on the internal endpoint (part of the
// protocol: never renamed, so that instances of different builds
// interoperate). RPC is the etcd client API method whose permission check
// the leader applies again to the call, for the client whose credential
// it carries; "" for a call made for no client (ReadIndex), which carries
// none and is not checked. NewRequest and NewResponse return empty
// messages of its types. Positioned says the answer's log position
// travels beside the response (the caller waits until its view applied
// it), and that a leader that no longer leads refuses the call
// (ErrNotLeader).
type CallKind struct {
	Method      string
	RPC         string
	NewRequest  func() proto.Message
	NewResponse func() proto.Message
	Positioned  bool
}

// callKind is one call of the table: requests R answered with T.
type callKind[R, T proto.Message] struct {
	method, rpc string
	positioned  bool
	// label names the call in the forwarding metrics.
	label string
}

func (k *callKind[R, T]) face() CallKind {
	return CallKind{Method: k.method, RPC: k.rpc, Positioned: k.positioned,
		NewRequest:  func() proto.Message { return newMessage[R]() },
		NewResponse: func() proto.Message { return newMessage[T]() }}
}

// The calls beside the forwarded writes.
var (
	// readIndexCall asks the leader for a log position it read after the
	// call arrived (a quorum barrier, or its read lease): the position, in
	// the response, that a linearizable read waits for.
	readIndexCall = &callKind[*emptypb.Empty, *wrapperspb.Int64Value]{method: "ReadIndex", label: "read_index"}
	// keepAliveCall renews a lease at the leader: the TTL, or 0 for no
	// such lease, in the response.
	keepAliveCall = &callKind[*pb.LeaseKeepAliveRequest, *pb.LeaseKeepAliveResponse]{method: "KeepAlive",
		rpc: "/etcdserverpb.Lease/LeaseKeepAlive", label: "keepalive"}
	// leaseTimeToLiveCall and leaseLeasesCall are the lease reads the
	// leader answers from its own deadlines.
	leaseTimeToLiveCall = &callKind[*pb.LeaseTimeToLiveRequest, *pb.LeaseTimeToLiveResponse]{method: "LeaseTimeToLive",
		rpc: "/etcdserverpb.Lease/LeaseTimeToLive", positioned: true, label: "lease_time_to_live"}
	leaseLeasesCall = &callKind[*pb.LeaseLeasesRequest, *pb.LeaseLeasesResponse]{method: "LeaseLeases",
		rpc: "/etcdserverpb.Lease/LeaseLeases", positioned: true, label: "lease_leases"}
)

// callKinds is the table: every call beside the forwarded writes.
// Read-only.
var callKinds = []interface{ face() CallKind }{readIndexCall, keepAliveCall, leaseTimeToLiveCall, leaseLeasesCall}

// CallKinds returns every call of the internal endpoint beside the
// forwarded writes (a new slice: the caller may keep it).
func CallKinds() []CallKind {
	out := make([]CallKind, len(callKinds))
	for i, k := range callKinds {
		out[i] = k.face()
	}
	return out
}

// newMessage returns a new empty message of M's type.
func newMessage[M proto.Message]() M {
	var zero M
	return zero.ProtoReflect().New().Interface().(M)
}
