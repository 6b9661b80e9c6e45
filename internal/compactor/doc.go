// Package compactor is zketcd's auto-compactor: etcd's
// --auto-compaction-mode and --auto-compaction-retention, with etcd 3.7's
// semantics.
//
//   - periodic: the revision is sampled every min(retention, 1h)/10; once
//     retention has passed since the compactor started, and from then on
//     every min(retention, 1h), it compacts to the oldest sample kept, the
//     revision that was current about retention ago;
//   - revision: every 5 minutes (Config.RevisionInterval) it compacts to the
//     current revision minus the retention.
//
// It owns when and to which revision to compact, and nothing else: the
// compaction itself goes through its Target, which in zketcd is the same
// path as the Compact RPC. Every instance on a root runs a compactor, so
// every instance keeps samples, but only the instance Target reports as the
// leader compacts, as an etcd member's compactor is paused while it is not
// the raft leader. A compaction to a revision already compacted counts as
// done, as in etcd.
//
// It never retries faster than its check interval and never compacts on an
// instance that is not the leader at the moment it decides to.
package compactor
