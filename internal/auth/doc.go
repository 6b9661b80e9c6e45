// Package auth is zketcd's implementation of etcd 3.7's authentication and
// role-based access control: users (bcrypt passwords, users without a
// password that only a client certificate can authenticate), roles with
// READ, WRITE and READWRITE permissions on keys and key ranges, the root
// user and role, AuthEnable/AuthDisable, the auth revision, and simple and
// JWT tokens.
//
// The package has four parts:
//
//   - State is the whole auth store (enabled flag, auth revision, users,
//     roles) as an immutable value with a compact binary encoding. Every
//     change is a pure function (State.Apply) from a state and an Auth
//     request to the next state and the response, with etcd's errors.
//     Where the encoded state lives is not this package's business: zketcd
//     keeps it in the revision log (see revision.OpAuth), so every instance
//     applies the same states in the same order.
//   - Perms answers permission checks for one state, merging each user's
//     permission intervals as etcd does.
//   - Store combines a source of the current state with a token provider
//     (simple or JWT, see NewTokenProvider: it reads the key and secret
//     files its options name) and answers Authenticate and the checks of
//     keys and roles. It is safe for concurrent use.
//   - Rules are etcd's permission checks per RPC on a Store (which method
//     needs root, which a user, which permissions on which keys, leases'
//     attached keys, the same checks again in a commit batch, and those of
//     requests another instance forwarded): grpcsrv's interceptor and
//     forward's server apply them.
//
// Every error returned to a client is one of etcd's rpctypes gRPC errors.
package auth
