// Package diff is a differential test framework for etcd v3 API servers.
//
// A Scenario is a named list of Steps. Run plays every scenario against two
// targets — normally embedded etcd 3.7.3 (the oracle, see EtcdFactory) and
// the server under test — each started fresh and empty (revision 1) for that
// scenario, and compares every step's protobuf responses (or gRPC error)
// field by field. Only the header fields that legitimately differ between
// two servers (cluster_id, member_id and raft_term of each response's
// top-level header) are zeroed first; everything else, absolute revisions
// included, must match exactly. Errors compare by gRPC code and message.
//
// # Writing scenarios
//
// Steps are built with constructors. Put, Get, Delete, Txn, Do, Compact and
// GetStream go through the clientv3 KV API; Raw and RawStream send a
// generated request message unchanged, for fields and values clientv3 does
// not produce; LeaseGrant and LeaseRevoke use explicit lease IDs so both
// targets agree; Custom runs arbitrary client code. Every step records the
// request exactly as it went on the wire.
//
// Watch steps drive raw gRPC watch streams, kept open across steps by name:
// each sends requests (Create, CancelWatch, RequestProgress, Send) and
// collects responses until a condition (Await with Responses, Events,
// Progress, ProgressAt or Quiet); the collected responses are the step's
// result. Writes are ordinary steps in between:
//
//	Watch("w", Create(&pb.WatchCreateRequest{Key: []byte("k")}), Await(Responses(1))),
//	Put("k", "v"),
//	Watch("w", Await(Events(0, 1))),
//	Watch("w", CloseStream(400*time.Millisecond)), // nothing more arrives
//
// Responses of different watchers on one stream may interleave in any order
// (GroupByWatchID orders them), and periodic progress notifications depend
// on timing (DropProgress); WatchScenarios documents what its scenarios
// compare.
//
// Lazy builds a step from the results of earlier ones, so scenarios never
// hard-code revisions:
//
//	Put("k", "v1").As("first"),
//	Put("k", "v2"),
//	Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("first"))) }),
//	Lazy(func(s *State) Step { return Compact(s.Rev("first")) }).WantOK(),
//
// Expect, WantErr, WantCode, WantOK and WantRevDelta assert how the
// reference target (Runner.A) must behave. They document the behaviour a
// scenario pins down and catch scenarios that stop testing what they claim;
// the other target is held to the same responses by the comparison.
//
// # Adding a target
//
// A Target has a Name and hands out clientv3 clients; a Factory starts a
// fresh, empty one per scenario and stops it through t.Cleanup. For a server
// reachable at host:port, EndpointFactory is enough:
//
//	zk := diff.EndpointFactory("zketcd", func(t testing.TB) string {
//		srv := startZketcd(t) // fresh ZooKeeper namespace, t.Cleanup(srv.Stop)
//		return srv.Addr()
//	})
//	diff.Run(t, diff.KVScenarios(), diff.EtcdFactory(), zk)
//
// On a mismatch the report names the scenario and step, prints the wire
// request, both responses, a field diff and the steps that led there.
package diff
