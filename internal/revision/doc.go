// Package revision is zketcd's in-memory MVCC view: every key's history
// (generations of versions, with tombstones), the current and compacted
// revisions, the lease table, and the log position (LSN) the view has
// applied.
//
// The view is built only by applying log entries in LSN order
// ([View.Apply]); it never talks to ZooKeeper. Readers see a revision either
// completely or not at all: an entry is applied under one write lock.
//
// The package also defines the log entry model ([Entry], [Op], [Change]) that
// zkstore encodes and decodes, and [Batch], the staging area in which the
// committer evaluates queued writes on top of the view before they are
// committed.
//
// Revisions follow etcd: an empty store is at revision 1, every transaction
// that changes at least one key takes the next revision, reads at revisions
// below the compacted revision fail with [ErrCompacted] and above the current
// one with [ErrFutureRev].
package revision
