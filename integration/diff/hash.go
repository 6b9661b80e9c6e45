package diff

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// HashKV sends a raw Maintenance.HashKV request at rev (0: current) to the
// target the client is connected to; the hash, compact_revision and
// hash_revision are compared like any other field.
func HashKV(rev int64) Step {
	req := &pb.HashKVRequest{Revision: rev}
	return Step{kind: "HashKV", exec: func(ctx context.Context, e *endpoint) Result {
		resp, err := pb.NewMaintenanceClient(e.client.ActiveConnection()).HashKV(ctx, req)
		res := Result{Request: req, Err: err}
		if err == nil {
			res.Responses = []proto.Message{resp}
		}
		return res
	}}
}

// HashKVScenarios compare etcd's key-space hash (HashKV) after the same
// write history: puts, overwrites, deletes, multi-op transactions, leases
// and their revocation, physical compactions (including one that leaves no
// key live), at several revisions, at 0 (current) and out of range, and at
// exactly a compaction's revision, which etcd answers from the hash it
// stored while compacting (compact_revision: the compaction before; also
// for a revision since compacted away).
func HashKVScenarios() []Scenario {
	const l1, l2 = clientv3.LeaseID(0x7001), clientv3.LeaseID(0x7002)
	return []Scenario{
		{Name: "hashkv/empty-store", Steps: Steps(
			HashKV(0).WantOK(),
			HashKV(1).WantOK(),
			HashKV(2).WantErr(rpctypes.ErrGRPCFutureRev),
			HashKV(-5).WantOK(),
		)},
		{Name: "hashkv/history-and-compaction", Steps: Steps(
			Put("a", "1").As("r1"),
			Put("b", "2"),
			Put("a", "1'").As("r3"),
			Put("c", "3"),
			Delete("b").As("r5"),
			Txn(nil, ops(clientv3.OpPut("d", "4"), clientv3.OpPut("e", "5"), clientv3.OpDelete("c")), nil).As("txn"),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1'")),
				ops(clientv3.OpPut("f", "6"), clientv3.OpDelete("d", clientv3.WithPrefix()), clientv3.OpPut("a", "1''")), nil),
			LeaseGrant(l1, 600),
			LeaseGrant(l2, 900),
			Put("l/x", "x", clientv3.WithLease(l1)),
			Put("l/y", "y", clientv3.WithLease(l1)),
			Put("l/z", "z", clientv3.WithLease(l2)).As("leased"),
			Put("b", "again"),
			Delete("", clientv3.WithFromKey()).As("wipe"),
			PutN(5, "k%d", "v%d"),
			Put("k1", "v1'"),
			LeaseRevoke(l1),
			HashKV(0),
			Lazy(func(s *State) Step { return HashKV(s.Rev("r1")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("r3")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("r5")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("txn")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("leased")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("wipe")) }),
			Lazy(func(s *State) Step { return Compact(s.Rev("txn"), clientv3.WithCompactPhysical()) }).WantOK(),
			HashKV(0),
			Lazy(func(s *State) Step { return HashKV(s.Rev("txn") - 1) }).WantErr(rpctypes.ErrGRPCCompacted),
			Lazy(func(s *State) Step { return HashKV(s.Rev("txn") + 1) }).WantOK(),
			Lazy(func(s *State) Step { return HashKV(s.Rev("leased")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("wipe")) }),
			Lazy(func(s *State) Step { return HashKV(s.LastRev() + 1) }).WantErr(rpctypes.ErrGRPCFutureRev),
			Lazy(func(s *State) Step { return HashKV(s.Rev("txn")) }), // the stored compaction hash
			// A compaction at a tombstone, then more history.
			Lazy(func(s *State) Step { return Compact(s.Rev("wipe"), clientv3.WithCompactPhysical()) }).WantOK(),
			HashKV(0),
			Lazy(func(s *State) Step { return HashKV(s.Rev("wipe") + 1) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("wipe")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("txn")) }), // compacted, but stored
			Put("k2", "v2'"),
			Delete("k3"),
			HashKV(0),
			LeaseRevoke(l2),
			HashKV(0),
		)},
		{Name: "hashkv/compacted-then-all-deleted", Steps: Steps(
			Put("a", "1"),
			Put("b", "2").As("b"),
			Lazy(func(s *State) Step { return Compact(s.Rev("b"), clientv3.WithCompactPhysical()) }).WantOK(),
			Delete("a").As("da"),
			Delete("b"),
			HashKV(0), // no key live: every record at or below the compaction counts
			Lazy(func(s *State) Step { return HashKV(s.Rev("b")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("da")) }),
			Put("c", "3"),
			HashKV(0),
			Compact(0).WantErr(rpctypes.ErrGRPCCompacted),
		)},
		{Name: "hashkv/same-key-many-versions", Steps: Steps(
			PutN(30, "k", "v%d"),
			Delete("k").As("del"),
			Put("k", "new"),
			Put("k", "newer"),
			Lazy(func(s *State) Step { return Compact(s.Rev("del")-3, clientv3.WithCompactPhysical()) }).WantOK(),
			HashKV(0),
			Lazy(func(s *State) Step { return HashKV(s.Rev("del") - 1) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("del")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("del") + 1) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("del") - 3) }),
		)},
		{Name: "hashkv/compaction-to-0-and-1", Steps: Steps(
			Compact(0).WantOK(),
			HashKV(0), // etcd: the hash stored by the compaction to 0
			Compact(1).WantOK(),
			HashKV(1),
			Put("a", "1"),
			HashKV(0),
			HashKV(1),
		)},
		{Name: "hashkv/compactions-of-deletions", Steps: Steps(
			Put("a", "1"),
			Put("b", "2"),
			Delete("a").As("da"),
			Lazy(func(s *State) Step { return Compact(s.Rev("da"), clientv3.WithCompactPhysical()) }).WantOK(),
			Lazy(func(s *State) Step { return HashKV(s.Rev("da")) }),
			Delete("b").As("db"),
			Lazy(func(s *State) Step { return Compact(s.Rev("db"), clientv3.WithCompactPhysical()) }).WantOK(),
			Lazy(func(s *State) Step { return HashKV(s.Rev("db")) }),
			Lazy(func(s *State) Step { return HashKV(s.Rev("da")) }),
			HashKV(0),
		)},
	}
}
