// Package translate owns every etcd rule, as pure functions over a
// revision.Reader or a staging Store: request validation and limits
// (empty keys, sort options, too many operations, request size, overlapping
// puts and deletes in a transaction), Range with every option, RangeStream
// paging, Put, DeleteRange and Txn with compares, branches and nested
// transactions, the lease rules (TTL bounds, grant, revoke = delete the keys
// in one revision then the lease, remaining TTL, LeaseLeases order) and the
// compaction rules.
//
// It never talks to ZooKeeper and never blocks (RangeStream blocks only in
// the callbacks it is given). Every error it returns is one of etcd's
// rpctypes gRPC errors, ready to send to a client; the view's read errors
// (revision.ErrCompacted, revision.ErrFutureRev), which grpcsrv's one error
// mapper turns into etcd's; or revision.ErrBatchBoundary, which only the
// committer sees.
//
// The rules follow etcd v3.7 (server/etcdserver/txn and api/v3rpc/key.go),
// including its corner cases: count ignores limit and revision filters,
// keys_only ranges not sorted by value carry no lease, a delete range with
// range_end "\x00" does not conflict with puts in the same transaction, and
// sorting uses the same (unstable) algorithm so ties come out in the same
// order as etcd's.
package translate
