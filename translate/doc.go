// Package translate holds etcd's request semantics as pure functions over a
// revision.Reader or a staging Store: request validation and limits
// (empty keys, sort options, too many operations, overlapping puts and
// deletes in a transaction), Range with every option, Put, DeleteRange and
// Txn with compares, branches and nested transactions.
//
// It never talks to ZooKeeper and never blocks. Every error it returns is
// either one of etcd's rpctypes gRPC errors, ready to send to a client, or
// revision.ErrBatchBoundary, which only the committer sees.
//
// The rules follow etcd v3.7 (server/etcdserver/txn and api/v3rpc/key.go),
// including its corner cases: count ignores limit and revision filters,
// keys_only ranges not sorted by value carry no lease, a delete range with
// range_end "\x00" does not conflict with puts in the same transaction, and
// sorting uses the same (unstable) algorithm so ties come out in the same
// order as etcd's.
package translate
