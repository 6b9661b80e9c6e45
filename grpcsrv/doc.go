// Package grpcsrv is zketcd's gRPC layer: the etcd v3 services (KV with
// RangeStream, Watch, Lease, Maintenance, Cluster, and Auth answering
// Unimplemented), the gRPC health service, request validation and limits,
// response headers, and the mapping of every error to etcd's rpctypes.
//
// It is thin on purpose, as etcd's v3rpc is: it validates and converts; the
// semantics live in translate and backend.
package grpcsrv
