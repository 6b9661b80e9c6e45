// Package lockelect serves etcd's v3lock (Lock, Unlock) and v3election
// (Campaign, Proclaim, Leader, Observe, Resign) gRPC services, as etcd
// registers them next to the core services, and their gateway paths
// (/v3/lock/*, /v3/election/*).
//
// Like etcd's own, they are clients of the server they run in: clientv3's
// concurrency recipes (sessions, mutexes, elections) over a connection to
// the same gRPC server (httpgw's in-process pipe), so their keys, leases
// and revisions are ordinary KV and lease operations that every other
// client sees, and their errors are those etcd's services give (the server's error
// messages, with gRPC code Unknown, as etcd's pass through clientv3). A request's auth token
// (gRPC metadata "token") is passed on to those inner calls.
//
// The servers are safe for concurrent use; they keep no state between
// requests (a lock or leadership is its key, held by its lease).
package lockelect
