// Package httpgw serves etcd's HTTP side of the client URLs next to gRPC on
// the same port, as etcd 3.7 does: the grpc-gateway JSON API under /v3/
// (the registrations etcd ships in go.etcd.io/etcd/api/v3), /health,
// /livez, /readyz, /version and /metrics.
//
// Every accepted connection is classified once, before any server sees it:
// a TLS handshake first (client URLs with https), then the first bytes. An
// HTTP/2 connection whose first request has content-type application/grpc
// goes to the grpc.Server's own Serve loop (native gRPC is never routed
// through ServeHTTP); an HTTP/2 connection carrying anything else is served
// by an HTTP/2 server with the HTTP handler; everything else is HTTP/1.x.
//
// The gateway reaches the gRPC services through an in-process connection
// (a pipe served by the same grpc.Server), so every gateway request passes
// through the same interceptors, limits and error mapping as native gRPC.
//
// A Server is safe for concurrent use; Serve may run on several listeners
// at once. Close stops everything it started.
package httpgw
