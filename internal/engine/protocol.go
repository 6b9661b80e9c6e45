package engine

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

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
// Errors: ErrNotLeader, ErrAuthChanged and ErrNotSent as
// documented; a *FinalError for the peer's answer that the request failed
// (nothing written; retrying cannot change it); anything else leaves the
// outcome unknown.
type Forwarder interface {
	Forward(ctx context.Context, to Peer, call ForwardCall) (ForwardReply, error)
	// ReadIndex returns a log position the peer read after the call
	// arrived (a quorum barrier).
	ReadIndex(ctx context.Context, to Peer) (int64, error)
	// KeepAlive renews lease id at the peer and returns its TTL (0: no
	// such lease).
	KeepAlive(ctx context.Context, to Peer, id int64) (int64, error)
	// LeaseTimeToLive and Leases answer the lease reads at the peer
	// (ServeLeaseTimeToLive and ServeLeases there) and return the answer
	// with the log position the peer's view had applied when it answered.
	// A peer that does not know the request answers ErrUnsupported, one
	// that does not lead ErrNotLeader.
	LeaseTimeToLive(ctx context.Context, to Peer, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, int64, error)
	Leases(ctx context.Context, to Peer) (*pb.LeaseLeasesResponse, int64, error)
}
