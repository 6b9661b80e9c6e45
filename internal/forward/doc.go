// Package forward is zketcd's internal endpoint: the gRPC service through
// which an instance sends its writes, keepalives, ReadIndex requests and
// lease reads (LeaseTimeToLive, LeaseLeases) to the leader instance
// (NewServer, on the leader's engine), and the client side the engine uses
// for it (Client, an engine.Forwarder). Its methods are one per kind of
// forwarded write of the engine's table (engine.WriteKinds) and one per
// call beside them of the engine's other table (engine.CallKinds).
//
// The messages are etcd's own (PutRequest, TxnResponse, ...); what the
// forwarding protocol adds travels in gRPC metadata: the callee's token
// (the secret it advertises in its member znode), checked from the headers
// before the message is read; the credential of the client the request
// came from (auth.Caller), which the leader checks again against its own
// auth state (an Authorizer); the request's origin tag and auth
// fingerprint; the log position, and for a duplicate its revision, come
// back in the response header; the kind of a failure (not the leader, auth
// changed, refused before it ran, or the request's own final failure) in
// the trailer. A failure without that trailer leaves the outcome unknown,
// but for the refusals made before a message is read (a bad token:
// PermissionDenied; a message over the limit: ResourceExhausted) and a
// method the peer lacks (Unimplemented: an older build, reported as
// engine.ErrNotSent for a first send and engine.ErrUnsupported for a
// read). The protocol grows by adding methods. With ServerConfig.TLS and
// Client.TLS it runs over TLS (https:// URLs); only a peer whose client
// certificate the server verified may forward a certificate's common name
// as its client's identity.
package forward
