// Package forward is zketcd's internal endpoint: the gRPC service through
// which an instance sends its writes, keepalives, ReadIndex requests and
// lease reads (LeaseTimeToLive, LeaseLeases) to the leader instance (Server, on the leader's engine), and the client
// side the engine uses for it (Client, an engine.Forwarder).
//
// The messages are etcd's own (PutRequest, TxnResponse, ...); what the
// forwarding protocol adds travels in gRPC metadata: the caller's token
// (the secret the callee advertises in its member znode), the request's
// origin tag and auth fingerprint; the log position, and for a duplicate
// its revision, come back in the response header; the kind of a failure
// (not the leader, auth changed, or the request's own final failure) in the
// trailer. A failure without that trailer leaves the outcome unknown.
// The protocol grows by adding methods; a method an older peer lacks is
// answered Unimplemented, reported as engine.ErrUnsupported.
package forward
