// Package engine ties zketcd's layers into one etcd-semantics engine per
// instance: it recovers the view from the ZooKeeper log, tails the log, runs
// the group committer that evaluates writes (translate) against the view
// (revision) and appends them to the log (zkstore), forwards writes to the
// leader instance, keeps and expires leases, compacts, and serves reads
// after a linearizability barrier.
//
// It runs on a Log: *zkstore.Store in production, memlog in its unit
// tests. The committer needs translate, revision and the log at once;
// giving it one package keeps zkstore free of etcd semantics and translate
// free of I/O. Inside, each concern of an instance (the tailer, the
// committer, the forwarder, the lessor, the read lease, compaction, the
// rollback guard, ...) is a type of its own on a shared core, and the
// Engine's etcd API sits above them: a file uses only what the files below
// it define.
//
// A halted instance (ZooKeeper's data went back under it, or the log holds
// a newer format) serves nothing more: every request, serializable reads
// and Read included, fails with etcd's corrupt-cluster error, and Health
// says why.
//
// Guarantees: a write is acknowledged only after its entry is durable in
// ZooKeeper and applied to this instance's view; an entry is never written
// twice (see zkstore.Commit); a linearizable read reflects every write
// acknowledged, by any instance, before the read began; revisions never go
// backwards on one instance.
package engine
