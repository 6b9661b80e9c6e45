// Package grpcsrv is zketcd's gRPC layer: the etcd v3 services (KV with
// RangeStream, Watch, Lease, Maintenance, Cluster, and Auth answering
// Unimplemented), the gRPC health service, request validation and limits,
// response headers, and the mapping of every error to etcd's rpctypes.
//
// It is thin on purpose, as etcd's v3rpc is: it validates and converts; the
// rules live in translate, the engine behind the Engine interface it
// declares (one part per service file), which embed fills with a
// *engine.Engine. toGRPCError (errors.go) is zketcd's only mapping of
// errors to gRPC statuses.
package grpcsrv
