// Package auth is zketcd's implementation of etcd 3.7's authentication and
// role-based access control: users (bcrypt passwords, users without a
// password that only a client certificate can authenticate), roles with
// READ, WRITE and READWRITE permissions on keys and key ranges, the root
// user and role, AuthEnable/AuthDisable, the auth revision, and simple and
// JWT tokens.
//
// The package has three parts:
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
//     (simple or JWT, see NewTokenProvider) and answers Authenticate and
//     the per-request checks. It is safe for concurrent use.
//
// Every error returned to a client is one of etcd's rpctypes gRPC errors.
package auth
