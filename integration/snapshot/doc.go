// Package snapshot tests moving data between etcd 3.7.3 and zketcd with
// etcd's snapshot files: `etcdctl snapshot save` against zketcd, `etcdutl
// snapshot status` and `snapshot restore` of that file, an etcd started on
// the restored data directory, and `zketcd snapshot restore` of a snapshot
// saved by etcd. Each direction compares the listing of every retained
// revision (keys, values, create/mod revisions, versions, leases), the
// leases and their TTLs, the compacted revision and HashKV.
//
// etcdctl and etcdutl v3.7.3 come from $ETCDCTL and $ETCDUTL, else from
// integration/bench/build-peers.sh's cache; without them the tests that
// need them are skipped.
package snapshot
