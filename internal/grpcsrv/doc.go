// Package grpcsrv is zketcd's gRPC layer: the etcd v3 services (KV with
// RangeStream, Watch, Lease, Maintenance, Cluster and Auth), the gRPC
// health service, the interceptors in front of them (RPC metrics, a
// tenant's admission, the concurrency limit, and etcd's permission checks
// by the auth store's rules), request validation and limits, response
// headers, and the one mapping of every error to etcd's rpctypes.
//
// It is thin on purpose, as etcd's v3rpc is: it validates and converts;
// etcd's rules live in translate and auth, and the engine behind the Engine
// interface it declares (one part per service), which embed fills with a
// *engine.Engine.
package grpcsrv
