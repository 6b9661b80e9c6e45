// Package etcdformat is etcd 3.7's on-disk MVCC format, computed from a
// zketcd view: the records of etcd's `key` bucket (revision keys with the
// tombstone mark, marshaled mvccpb.KeyValue values), etcd's key-space hash
// (HashKV), and snapshot files — the bbolt database etcd's
// Maintenance.Snapshot streams, and its SHA-256 trailer — in both
// directions (writing one from a [revision.Snapshot], reading one saved by
// etcd back into a [revision.Snapshot]).
//
// Everything here works on a [revision.Snapshot] (a copy of a view's
// state, see [revision.View.Snapshot]), never on a live view, so callers
// take the snapshot under the view's lock and do the slow work outside it.
// Functions are safe for concurrent use; they share no state.
//
// Records and revisions follow etcd: a change at revision main, sub-revision
// sub (its position in the transaction) is stored under the 17-byte key
// main (8 bytes, big-endian) '_' sub (8 bytes, big-endian), with an 18th
// byte 't' for a deletion (tombstone), whose value is a KeyValue holding
// only the key.
package etcdformat
