// Package engine ties zketcd's layers into one etcd-semantics engine per
// instance: it recovers the view from the ZooKeeper log, tails the log, runs
// the group committer that evaluates writes (translate) against the view
// (revision) and appends them to the log (zkstore), and serves reads after a
// linearizability barrier.
//
// It runs on a Log (log.go): *zkstore.Store in production, memlog
// in its unit tests. The committer needs translate, revision and the log at
// once; giving it one package keeps zkstore free of etcd semantics and
// translate free of I/O. Files by concept: open.go (open, recovery,
// reload), tail.go, committer.go, barrier.go, expiry.go (lease expiry),
// lease.go, compact.go, health.go, kv.go, rollback.go (ZooKeeper's data
// going back: the history check, halting, the loss file), clock.go.
//
// A halted instance (rollback.go: ZooKeeper's data went back under it, or
// the log holds a newer format) serves nothing more: every request,
// serializable reads and Read included, fails with etcd's corrupt-cluster
// error, and Health says why.
//
// Guarantees: a write is acknowledged only after its entry is durable in
// ZooKeeper and applied to this instance's view; an entry is never written
// twice (see zkstore.Commit); a linearizable read reflects every write
// acknowledged, by any instance, before the read began; revisions never go
// backwards on one instance.
package engine
