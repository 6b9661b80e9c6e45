package diff

import (
	"fmt"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Both targets of WatchScenarios must run with these settings: etcd with
// etcdoracle.WithWatchProgressNotifyInterval(WatchProgressInterval) and
// etcdoracle.WithMaxRequestBytes(WatchMaxRequestBytes), the server under
// test with the same progress interval and --max-request-bytes.
const (
	// WatchProgressInterval is the period of progress notifications.
	WatchProgressInterval = 250 * time.Millisecond
	// WatchMaxRequestBytes is --max-request-bytes. Watch responses are
	// fragmented above it plus etcd's 512 KiB gRPC overhead allowance.
	WatchMaxRequestBytes = 64 * 1024
)

// quiet is how long a step waits to show that nothing (more) arrives.
const quiet = 400 * time.Millisecond

// WatchScenarios returns the differential scenarios for the Watch service,
// played on raw gRPC watch streams (see Watch). Every Await waits for a
// deterministic set of responses; where etcd leaves the interleaving of
// several watchers' responses open, the step groups them by watch ID
// (GroupByWatchID). Periodic progress notifications are timing dependent:
// the scenarios check that one arrives at the expected revision (Progress
// with a revision) and drop the others (DropProgress).
func WatchScenarios() []Scenario {
	return slices.Concat(
		watchHistoryScenarios(),
		watchRangeScenarios(),
		watchOptionScenarios(),
		watchControlScenarios(),
		watchProgressScenarios(),
		watchSizeScenarios(),
	)
}

// wcreate is a create request for [key, end) from start.
func wcreate(key, end string, start int64) *pb.WatchCreateRequest {
	cr := &pb.WatchCreateRequest{Key: []byte(key), StartRevision: start}
	if end != "" {
		cr.RangeEnd = []byte(end)
	}
	return cr
}

// with applies changes to a create request.
func with(cr *pb.WatchCreateRequest, f func(*pb.WatchCreateRequest)) *pb.WatchCreateRequest {
	f(cr)
	return cr
}

func prevKV(cr *pb.WatchCreateRequest) *pb.WatchCreateRequest {
	return with(cr, func(c *pb.WatchCreateRequest) { c.PrevKv = true })
}

func withID(cr *pb.WatchCreateRequest, id int64) *pb.WatchCreateRequest {
	return with(cr, func(c *pb.WatchCreateRequest) { c.WatchId = id })
}

// allKeys is a create request for every key: key "" becomes "\x00", and
// range_end "\x00" means no upper bound.
func allKeys(start int64) *pb.WatchCreateRequest { return wcreate("", "\x00", start) }

func watchHistoryScenarios() []Scenario {
	return []Scenario{
		{Name: "watch/history-replay", Steps: Steps(
			Puts("a", "1", "b", "1", "a", "2"),
			Delete("a"),
			Put("c", "1"),
			// Every event since revision 2, in one catch-up response whose
			// header is the current revision.
			Watch("w", Create(allKeys(2)), Await(Events(0, 5))).Expect(wantWatch(
				`created id=0 rev=6`,
				`id=0 rev=6: PUT "a"="1" c2 m2 v1, PUT "b"="1" c3 m3 v1, PUT "a"="2" c2 m4 v2, DELETE "a" m5, PUT "c"="1" c6 m6 v1`,
			)),
			Watch("w", Create(wcreate("a", "", 4)), Await(Events(1, 2))).Expect(wantWatch(
				`created id=1 rev=6`,
				`id=1 rev=6: PUT "a"="2" c2 m4 v2, DELETE "a" m5`,
			)),
			// Both are synced now: new events come one revision per response.
			Put("d", "1"),
			Watch("w", Await(Events(0, 1))).Expect(wantWatch(`id=0 rev=7: PUT "d"="1" c7 m7 v1`)),
			Put("a", "3"),
			Watch("w", Await(Responses(2)), GroupByWatchID()).Expect(wantWatch(
				`id=0 rev=8: PUT "a"="3" c8 m8 v1`,
				`id=1 rev=8: PUT "a"="3" c8 m8 v1`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/start-current", Steps: Steps(
			Puts("a", "1", "a", "2"),
			// start_revision 0: from the next revision.
			Watch("w", Create(wcreate("a", "", 0)), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=3`)),
			// start_revision = the current revision: its event is replayed.
			Watch("w", Create(wcreate("a", "", 3)), Await(Responses(2))).Expect(wantWatch(
				`created id=1 rev=3`,
				`id=1 rev=3: PUT "a"="2" c2 m3 v2`,
			)),
			Put("a", "3"),
			Watch("w", Await(Responses(2)), GroupByWatchID()).Expect(wantWatch(
				`id=0 rev=4: PUT "a"="3" c2 m4 v3`,
				`id=1 rev=4: PUT "a"="3" c2 m4 v3`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/future-revision", Steps: Steps(
			Put("a", "1"),
			Watch("w", Create(wcreate("a", "", 4)), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=2`)),
			// A watcher waiting for a future revision is not "synced" in
			// etcd's sense: a progress request gets no answer.
			Watch("w", RequestProgress(), Await(Quiet(quiet))).Expect(wantWatch()),
			Puts("a", "2", "a", "3", "a", "4"),
			Watch("w", Await(Events(0, 2))).Expect(wantWatch(
				`id=0 rev=4: PUT "a"="3" c2 m4 v3`,
				`id=0 rev=5: PUT "a"="4" c2 m5 v4`,
			)),
			Watch("w", RequestProgress(), Await(Responses(1))).Expect(wantWatch(`progress id=-1 rev=5`)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/many-revisions", Steps: Steps(
			// More than 1000 revisions to catch up: etcd sends the first
			// 1000 revisions, then the rest, both with the current revision
			// in the header.
			PutN(1100, "k%04d", "v%d"),
			Watch("w", Create(wcreate("k", "l", 2)), Await(Events(0, 1100))).Expect(wantShape(
				`created id=0 rev=1101`,
				`id=0 rev=1101: 1000 events, revisions 2..1001`,
				`id=0 rev=1101: 100 events, revisions 1002..1101`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/compacted", Steps: Steps(
			Puts("a", "1", "a", "2", "a", "3", "a", "4", "a", "5"),
			Compact(4).WantOK(),
			// Below the compacted revision: created, then canceled with the
			// compact revision (and, as etcd does, header revision 0).
			Watch("w", Create(wcreate("a", "", 2)), Await(Responses(2))).Expect(wantWatch(
				`created id=0 rev=6`,
				`compacted id=0 compact=4 rev=0`,
			)),
			Watch("w", Create(wcreate("", "\x00", 3)), Await(Responses(2))).Expect(wantWatch(
				`created id=1 rev=6`,
				`compacted id=1 compact=4 rev=0`,
			)),
			// At the compacted revision: allowed.
			Watch("w", Create(wcreate("a", "", 4)), Await(Responses(2))).Expect(wantWatch(
				`created id=2 rev=6`,
				`id=2 rev=6: PUT "a"="3" c2 m4 v3, PUT "a"="4" c2 m5 v4, PUT "a"="5" c2 m6 v5`,
			)),
			Put("a", "6"),
			Watch("w", Await(Responses(1))).Expect(wantWatch(`id=2 rev=7: PUT "a"="6" c2 m7 v6`)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/compacted-id-stays-taken", Steps: Steps(
			Puts("a", "1", "a", "2", "a", "3"),
			Compact(3).WantOK(),
			Watch("w", Create(withID(wcreate("a", "", 2), 3)), Await(Responses(2))).Expect(wantWatch(
				`created id=3 rev=4`,
				`compacted id=3 compact=3 rev=0`,
			)),
			// etcd keeps a watcher canceled by compaction on the stream until
			// the client cancels it: its ID stays taken, and the stream is not
			// "all synced", so a progress request gets no answer.
			Watch("w", Create(withID(wcreate("a", "", 0), 3)), Await(Responses(1))).Expect(wantWatch(
				`created id=-1 rev=4 canceled "mvcc: duplicate watch ID provided on the WatchStream"`,
			)),
			Watch("w", RequestProgress(), Await(Quiet(quiet))).Expect(wantWatch()),
			// clientv3 cancels it (it does so for every closed substream).
			Watch("w", CancelWatch(3), Await(Responses(1))).Expect(wantWatch(`canceled id=3 rev=4`)),
			Watch("w", Create(withID(wcreate("a", "", 0), 3)), Await(Responses(1))).Expect(wantWatch(`created id=3 rev=4`)),
			Watch("w", RequestProgress(), Await(Responses(1))).Expect(wantWatch(`progress id=-1 rev=4`)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
	}
}

func watchRangeScenarios() []Scenario {
	creates := []struct {
		key, end string
	}{
		{"a", "b"},     // 0: prefix "a"
		{"a/", "a0"},   // 1: prefix "a/"
		{"b", "d"},     // 2: [b, d)
		{"c", "\x00"},  // 3: from "c"
		{"", "\x00"},   // 4: every key
		{"ab", ""},     // 5: the key "ab"
		{"", ""},       // 6: the key "\x00"
		{"a/1", "a/1"}, // rejected: key >= range_end
	}
	var acts []WatchAction
	for i, c := range creates {
		acts = append(acts, Create(wcreate(c.key, c.end, 0)), Await(Responses(i+1)))
	}
	return []Scenario{
		{Name: "watch/ranges", Steps: Steps(
			Watch("w", acts...).Expect(wantWatch(
				`created id=0 rev=1`, `created id=1 rev=1`, `created id=2 rev=1`, `created id=3 rev=1`,
				`created id=4 rev=1`, `created id=5 rev=1`, `created id=6 rev=1`,
				`created id=-1 rev=1 canceled "mvcc: watcher range is empty"`,
			)),
			Puts("a", "v", "a/1", "v", "ab", "v", "b", "v", "c", "v", "d", "v", "e", "v", "\x00", "v", "ac", "v"),
			Watch("w", Await(Responses(21)), GroupByWatchID()).Expect(wantWatch(
				`id=0 rev=2: PUT "a"="v" c2 m2 v1`,
				`id=0 rev=3: PUT "a/1"="v" c3 m3 v1`,
				`id=0 rev=4: PUT "ab"="v" c4 m4 v1`,
				`id=0 rev=10: PUT "ac"="v" c10 m10 v1`,
				`id=1 rev=3: PUT "a/1"="v" c3 m3 v1`,
				`id=2 rev=5: PUT "b"="v" c5 m5 v1`,
				`id=2 rev=6: PUT "c"="v" c6 m6 v1`,
				`id=3 rev=6: PUT "c"="v" c6 m6 v1`,
				`id=3 rev=7: PUT "d"="v" c7 m7 v1`,
				`id=3 rev=8: PUT "e"="v" c8 m8 v1`,
				`id=4 rev=2: PUT "a"="v" c2 m2 v1`,
				`id=4 rev=3: PUT "a/1"="v" c3 m3 v1`,
				`id=4 rev=4: PUT "ab"="v" c4 m4 v1`,
				`id=4 rev=5: PUT "b"="v" c5 m5 v1`,
				`id=4 rev=6: PUT "c"="v" c6 m6 v1`,
				`id=4 rev=7: PUT "d"="v" c7 m7 v1`,
				`id=4 rev=8: PUT "e"="v" c8 m8 v1`,
				`id=4 rev=9: PUT "\x00"="v" c9 m9 v1`,
				`id=4 rev=10: PUT "ac"="v" c10 m10 v1`,
				`id=5 rev=4: PUT "ab"="v" c4 m4 v1`,
				`id=6 rev=9: PUT "\x00"="v" c9 m9 v1`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/ranges-history", Steps: Steps(
			Puts("a", "v", "a/1", "v", "ab", "v", "b", "v", "c", "v"),
			Delete("a", clientv3.WithPrefix()),
			// The same ranges replayed from history (one response each).
			Watch("w",
				Create(wcreate("a", "b", 2)), Await(Events(0, 6)),
				Create(wcreate("b", "\x00", 2)), Await(Events(1, 2)),
				Create(wcreate("ab", "", 1)), Await(Events(2, 2)),
			).Expect(wantWatch(
				`created id=0 rev=7`,
				`id=0 rev=7: PUT "a"="v" c2 m2 v1, PUT "a/1"="v" c3 m3 v1, PUT "ab"="v" c4 m4 v1, DELETE "a" m7, DELETE "a/1" m7, DELETE "ab" m7`,
				`created id=1 rev=7`,
				`id=1 rev=7: PUT "b"="v" c5 m5 v1, PUT "c"="v" c6 m6 v1`,
				`created id=2 rev=7`,
				`id=2 rev=7: PUT "ab"="v" c4 m4 v1, DELETE "ab" m7`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
	}
}

func watchOptionScenarios() []Scenario {
	return []Scenario{
		{Name: "watch/prev-kv", Steps: Steps(
			Put("k", "1"),
			Watch("w", Create(prevKV(wcreate("k", "", 0))), Await(Responses(1)),
				Create(wcreate("k", "", 0)), Await(Responses(2))).Expect(wantWatch(`created id=0 rev=2`, `created id=1 rev=2`)),
			Put("k", "2"),
			Delete("k"),
			Put("k", "3"),
			Put("k", "4"),
			Watch("w", Await(Responses(8)), GroupByWatchID()).Expect(wantWatch(
				`id=0 rev=3: PUT "k"="2" c2 m3 v2 prev("k"="1" c2 m2 v1)`,
				`id=0 rev=4: DELETE "k" m4 prev("k"="2" c2 m3 v2)`,
				// A create event has no prev_kv.
				`id=0 rev=5: PUT "k"="3" c5 m5 v1`,
				`id=0 rev=6: PUT "k"="4" c5 m6 v2 prev("k"="3" c5 m5 v1)`,
				`id=1 rev=3: PUT "k"="2" c2 m3 v2`,
				`id=1 rev=4: DELETE "k" m4`,
				`id=1 rev=5: PUT "k"="3" c5 m5 v1`,
				`id=1 rev=6: PUT "k"="4" c5 m6 v2`,
			)),
			// The same from history.
			Watch("h", Create(prevKV(wcreate("k", "", 2))), Await(Events(0, 5))).Expect(wantWatch(
				`created id=0 rev=6`,
				`id=0 rev=6: PUT "k"="1" c2 m2 v1, PUT "k"="2" c2 m3 v2 prev("k"="1" c2 m2 v1), DELETE "k" m4 prev("k"="2" c2 m3 v2), PUT "k"="3" c5 m5 v1, PUT "k"="4" c5 m6 v2 prev("k"="3" c5 m5 v1)`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
			Watch("h", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/prev-kv-compacted", Steps: Steps(
			Puts("k", "1", "k", "2", "k", "3", "j", "1"),
			Compact(3).WantOK(),
			// etcd reads prev_kv at mod_revision-1 when it sends the event:
			// below the compacted revision that read fails and the event goes
			// without prev_kv.
			Watch("w", Create(prevKV(wcreate("k", "", 3))), Await(Events(0, 2))).Expect(wantWatch(
				`created id=0 rev=5`,
				`id=0 rev=5: PUT "k"="2" c2 m3 v2, PUT "k"="3" c2 m4 v3 prev("k"="2" c2 m3 v2)`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/filters", Steps: Steps(
			Watch("w",
				Create(with(wcreate("k", "l", 0), func(c *pb.WatchCreateRequest) {
					c.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
				})), Await(Responses(1)),
				Create(with(wcreate("k", "l", 0), func(c *pb.WatchCreateRequest) {
					c.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}
				})), Await(Responses(2)),
				Create(with(wcreate("k", "l", 0), func(c *pb.WatchCreateRequest) {
					c.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT, pb.WatchCreateRequest_NODELETE}
				})), Await(Responses(3)),
			).Expect(wantWatch(`created id=0 rev=1`, `created id=1 rev=1`, `created id=2 rev=1`)),
			Puts("k1", "a", "k2", "a"),
			Delete("k1"),
			Txn(nil, ops(clientv3.OpPut("k3", "a"), clientv3.OpDelete("k2")), nil),
			Watch("w", Await(Responses(5)), GroupByWatchID()).Expect(wantWatch(
				`id=0 rev=4: DELETE "k1" m4`,
				`id=0 rev=5: DELETE "k2" m5`,
				`id=1 rev=2: PUT "k1"="a" c2 m2 v1`,
				`id=1 rev=3: PUT "k2"="a" c3 m3 v1`,
				`id=1 rev=5: PUT "k3"="a" c5 m5 v1`,
			)),
			// Filters apply to history too; a catch-up with nothing left is
			// not sent.
			Watch("h",
				Create(with(wcreate("k", "l", 2), func(c *pb.WatchCreateRequest) {
					c.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
				})), Await(Events(0, 2)),
				Create(with(wcreate("k", "l", 2), func(c *pb.WatchCreateRequest) {
					c.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT, pb.WatchCreateRequest_NODELETE}
				})), Await(Responses(3)),
			).Expect(wantWatch(
				`created id=0 rev=5`,
				`id=0 rev=5: DELETE "k1" m4, DELETE "k2" m5`,
				`created id=1 rev=5`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
			Watch("h", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/txn", Steps: Steps(
			Puts("c", "1", "e", "1"),
			Watch("w", Create(prevKV(allKeys(0))), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=3`)),
			// All events of one revision come in one response, in the order
			// the transaction made them.
			Txn(nil, ops(clientv3.OpPut("b", "1"), clientv3.OpPut("a", "1"), clientv3.OpDelete("c"), clientv3.OpPut("d", "1")), nil),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "x")), ops(clientv3.OpPut("x", "1")),
				ops(clientv3.OpPut("z", "1"), clientv3.OpDelete("e"), clientv3.OpPut("a", "2"))).Expect(wantSucceeded(false)),
			// A range delete: key order.
			Delete("a", clientv3.WithRange("e")),
			// Nested transactions flatten in execution order.
			Txn(nil, ops(clientv3.OpTxn(nil, ops(clientv3.OpPut("n2", "1"), clientv3.OpPut("n1", "1")), nil), clientv3.OpPut("n0", "1")), nil),
			// A transaction that changes nothing makes no event.
			Txn(cmps(cmp(clientv3.Value("a"), "=", "x")), ops(clientv3.OpPut("x", "1")), nil).WantRevDelta(0),
			Delete("nothing"),
			Watch("w", Await(Responses(4))).Expect(wantWatch(
				`id=0 rev=4: PUT "b"="1" c4 m4 v1, PUT "a"="1" c4 m4 v1, DELETE "c" m4 prev("c"="1" c2 m2 v1), PUT "d"="1" c4 m4 v1`,
				`id=0 rev=5: PUT "z"="1" c5 m5 v1, DELETE "e" m5 prev("e"="1" c3 m3 v1), PUT "a"="2" c4 m5 v2 prev("a"="1" c4 m4 v1)`,
				`id=0 rev=6: DELETE "a" m6 prev("a"="2" c4 m5 v2), DELETE "b" m6 prev("b"="1" c4 m4 v1), DELETE "d" m6 prev("d"="1" c4 m4 v1)`,
				`id=0 rev=7: PUT "n2"="1" c7 m7 v1, PUT "n1"="1" c7 m7 v1, PUT "n0"="1" c7 m7 v1`,
			)),
			// The same revisions from history, in one response.
			Watch("h", Create(allKeys(4)), Await(Events(0, 13))).Expect(wantWatch(
				`created id=0 rev=7`,
				`id=0 rev=7: PUT "b"="1" c4 m4 v1, PUT "a"="1" c4 m4 v1, DELETE "c" m4, PUT "d"="1" c4 m4 v1, `+
					`PUT "z"="1" c5 m5 v1, DELETE "e" m5, PUT "a"="2" c4 m5 v2, `+
					`DELETE "a" m6, DELETE "b" m6, DELETE "d" m6, `+
					`PUT "n2"="1" c7 m7 v1, PUT "n1"="1" c7 m7 v1, PUT "n0"="1" c7 m7 v1`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
			Watch("h", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/lease-revoke", Steps: Steps(
			LeaseGrant(0x5001, 600),
			Watch("w", Create(prevKV(allKeys(0))), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=1`)),
			Put("l/b", "1", clientv3.WithLease(0x5001)),
			Put("l/a", "1", clientv3.WithLease(0x5001)),
			Put("l/c", "1"),
			// The lease's keys are deleted in one revision, in key order.
			LeaseRevoke(0x5001),
			Watch("w", Await(Responses(4))).Expect(wantWatch(
				`id=0 rev=2: PUT "l/b"="1" c2 m2 v1 lease=5001`,
				`id=0 rev=3: PUT "l/a"="1" c3 m3 v1 lease=5001`,
				`id=0 rev=4: PUT "l/c"="1" c4 m4 v1`,
				`id=0 rev=5: DELETE "l/a" m5 prev("l/a"="1" c3 m3 v1 lease=5001), DELETE "l/b" m5 prev("l/b"="1" c2 m2 v1 lease=5001)`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
	}
}

func watchControlScenarios() []Scenario {
	a := func(id int64) *pb.WatchCreateRequest { return withID(wcreate("a", "", 0), id) }
	return []Scenario{
		{Name: "watch/ids", Steps: Steps(
			Watch("w",
				Create(a(5)), Await(Responses(1)),
				Create(a(7)), Await(Responses(2)),
				Create(a(0)), Await(Responses(3)), // 0 asks the server to choose
				Create(a(0)), Await(Responses(4)),
				Create(a(3)), Await(Responses(5)),
				Create(a(2)), Await(Responses(6)),
				Create(a(0)), Await(Responses(7)), // the lowest free ID counting on from the last
				Create(a(5)), Await(Responses(8)), // duplicate
				Create(a(-5)), Await(Responses(9)),
			).Expect(wantWatch(
				`created id=5 rev=1`, `created id=7 rev=1`, `created id=0 rev=1`, `created id=1 rev=1`,
				`created id=3 rev=1`, `created id=2 rev=1`, `created id=4 rev=1`,
				`created id=-1 rev=1 canceled "mvcc: duplicate watch ID provided on the WatchStream"`,
				`created id=-5 rev=1`,
			)),
			Put("a", "1"),
			Watch("w", Await(Responses(8)), GroupByWatchID()).Expect(wantWatch(
				`id=-5 rev=2: PUT "a"="1" c2 m2 v1`,
				`id=0 rev=2: PUT "a"="1" c2 m2 v1`,
				`id=1 rev=2: PUT "a"="1" c2 m2 v1`,
				`id=2 rev=2: PUT "a"="1" c2 m2 v1`,
				`id=3 rev=2: PUT "a"="1" c2 m2 v1`,
				`id=4 rev=2: PUT "a"="1" c2 m2 v1`,
				`id=5 rev=2: PUT "a"="1" c2 m2 v1`,
				`id=7 rev=2: PUT "a"="1" c2 m2 v1`,
			)),
			// IDs are per stream.
			Watch("other", Create(a(0)), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=2`)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
			Watch("other", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/cancel", Steps: Steps(
			Watch("w", Create(a(0)), Await(Responses(1)), Create(a(9)), Await(Responses(2))).
				Expect(wantWatch(`created id=0 rev=1`, `created id=9 rev=1`)),
			Put("a", "1"),
			Watch("w", Await(Responses(2)), GroupByWatchID()).Expect(wantWatch(
				`id=0 rev=2: PUT "a"="1" c2 m2 v1`, `id=9 rev=2: PUT "a"="1" c2 m2 v1`,
			)),
			Watch("w", CancelWatch(0), Await(Responses(1))).Expect(wantWatch(`canceled id=0 rev=2`)),
			Put("a", "2"),
			Watch("w", Await(Responses(1))).Expect(wantWatch(`id=9 rev=3: PUT "a"="2" c2 m3 v2`)),
			// Canceling an unknown or already canceled watcher is ignored.
			Watch("w", CancelWatch(0), CancelWatch(42), Await(Quiet(quiet))).Expect(wantWatch()),
			Watch("w", CancelWatch(9), Await(Responses(1))).Expect(wantWatch(`canceled id=9 rev=3`)),
			// An ID is free again once canceled; automatic IDs go on counting.
			Watch("w", Create(a(9)), Await(Responses(1)), Create(a(0)), Await(Responses(2))).
				Expect(wantWatch(`created id=9 rev=3`, `created id=1 rev=3`)),
			Put("a", "3"),
			Watch("w", Await(Responses(2)), GroupByWatchID()).Expect(wantWatch(
				`id=1 rev=4: PUT "a"="3" c2 m4 v3`, `id=9 rev=4: PUT "a"="3" c2 m4 v3`,
			)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
		{Name: "watch/invalid-requests", Steps: Steps(
			Watch("w", Create(wcreate("b", "a", 0)), Await(Responses(1))).
				Expect(wantWatch(`created id=-1 rev=1 canceled "mvcc: watcher range is empty"`)),
			Watch("w", Create(wcreate("b", "b", 0)), Await(Responses(1))).
				Expect(wantWatch(`created id=-1 rev=1 canceled "mvcc: watcher range is empty"`)),
			Watch("w", Create(wcreate("a", "", -1)), Await(Responses(1))).
				Expect(wantWatch(`created id=-1 rev=1 canceled "etcdserver: mvcc: required revision has been compacted"`)),
			// The stream goes on; no ID was used up.
			Watch("w", Create(wcreate("a", "", 0)), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=1`)),
			// A request without a request is ignored.
			Watch("w", Send(&pb.WatchRequest{}), Await(Quiet(quiet))).Expect(wantWatch()),
			Put("a", "1"),
			Watch("w", Await(Responses(1))).Expect(wantWatch(`id=0 rev=2: PUT "a"="1" c2 m2 v1`)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
	}
}

func watchProgressScenarios() []Scenario {
	progress := func(c *pb.WatchCreateRequest) { c.ProgressNotify = true }
	return []Scenario{
		{Name: "watch/progress-notify", Steps: Steps(
			Put("x", "1"),
			Watch("p", Create(with(wcreate("a", "", 0), progress)), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=2`)),
			Watch("q", Create(wcreate("a", "", 0)), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=2`)),
			Watch("f", Create(with(wcreate("a", "", 100), progress)), Await(Responses(1))).Expect(wantWatch(`created id=0 rev=2`)),
			// Periodic notifications carry the watcher's ID and the current
			// revision, also when nothing it watches changed.
			Watch("p", Await(ProgressAt(0, 2)), DropProgress()).Expect(wantWatch()),
			Put("x", "2"),
			Watch("p", Await(ProgressAt(0, 3)), DropProgress()).Expect(wantWatch()),
			Put("a", "1"),
			Watch("p", Await(Events(0, 1)), DropProgress()).Expect(wantWatch(`id=0 rev=4: PUT "a"="1" c4 m4 v1`)),
			Watch("p", Await(ProgressAt(0, 4)), DropProgress()).Expect(wantWatch()),
			// Only for watchers that asked, and only once synced (a watcher
			// waiting for a future revision is not).
			Watch("q", Await(Quiet(3*WatchProgressInterval))).Expect(wantWatch(`id=0 rev=4: PUT "a"="1" c4 m4 v1`)),
			Watch("f", Await(Quiet(quiet))).Expect(wantWatch()),
			Watch("p", CloseStream(quiet), DropProgress()).Expect(wantWatch()),
		)},
		{Name: "watch/request-progress", Steps: Steps(
			// A stream without watchers answers nothing.
			Watch("w", RequestProgress(), Await(Quiet(quiet))).Expect(wantWatch()),
			Put("a", "1"),
			Watch("w", Create(wcreate("a", "", 0)), Await(Responses(1)), Create(wcreate("b", "", 0)), Await(Responses(2))).
				Expect(wantWatch(`created id=0 rev=2`, `created id=1 rev=2`)),
			Watch("w", RequestProgress(), Await(Responses(1))).Expect(wantWatch(`progress id=-1 rev=2`)),
			Put("a", "2"),
			Watch("w", Await(Events(0, 1)), RequestProgress(), Await(Responses(2))).Expect(wantWatch(
				`id=0 rev=3: PUT "a"="2" c2 m3 v2`,
				`progress id=-1 rev=3`,
			)),
			Put("z", "1"),
			Watch("w", RequestProgress(), Await(Responses(1))).Expect(wantWatch(`progress id=-1 rev=4`)),
			// A watcher on a future revision: no answer until it is reached.
			Watch("w", Create(wcreate("a", "", 6)), Await(Responses(1)), RequestProgress(), Await(Quiet(quiet))).
				Expect(wantWatch(`created id=2 rev=4`)),
			Puts("z", "2", "z", "3"),
			Watch("w", RequestProgress(), Await(Responses(1))).Expect(wantWatch(`progress id=-1 rev=6`)),
			Watch("w", CloseStream(quiet)).Expect(wantWatch()),
		)},
	}
}

// ProgressAt holds once a progress notification for watch id with header
// revision rev arrived (earlier notifications at lower revisions are
// ignored: they may have been queued before the last write).
func ProgressAt(id, rev int64) Until {
	return Until{desc: fmt.Sprintf("progress notification for watch %d at revision %d", id, rev),
		done: func(rs []*pb.WatchResponse) bool {
			for _, r := range rs {
				if r.WatchId == id && IsProgress(r) && r.GetHeader().GetRevision() == rev {
					return true
				}
			}
			return false
		}}
}

func watchSizeScenarios() []Scenario {
	big := strings.Repeat("x", 60000)
	var puts []Step
	for i := 0; i < 10; i++ {
		puts = append(puts, Put(fmt.Sprintf("big/%d", i), big))
	}
	frag := func(c *pb.WatchCreateRequest) { c.Fragment = true }
	return []Scenario{
		{Name: "watch/fragment", Steps: Steps(
			puts,
			// 10 events of 60 kB: above --max-request-bytes (64 KiB) plus
			// 512 KiB, so the catch-up response is sent in fragments; an
			// event is never split.
			Watch("f", Create(with(wcreate("big/", "big0", 2), frag)), Await(Events(0, 10))).Expect(wantShape(
				`created id=0 rev=11`,
				`id=0 rev=11: 9 events, revisions 2..10 [fragment]`,
				`id=0 rev=11: 1 events, revisions 11..11`,
			)),
			// Without fragment, one response.
			Watch("n", Create(wcreate("big/", "big0", 2)), Await(Events(0, 10))).Expect(wantShape(
				`created id=0 rev=11`,
				`id=0 rev=11: 10 events, revisions 2..11`,
			)),
			// Small responses of a fragmenting watcher are not fragmented.
			Put("big/0", "small"),
			Watch("f", Await(Events(0, 1))).Expect(wantShape(`id=0 rev=12: 1 events, revisions 12..12`)),
			Watch("f", CloseStream(quiet)).Expect(wantWatch()),
			Watch("n", CloseStream(quiet)).Expect(wantShape(`id=0 rev=12: 1 events, revisions 12..12`)),
		)},
	}
}

// wantShape is wantWatch for large responses: event responses are
// summarized by their number of events and revision span.
func wantShape(want ...string) func(*State, Result) error {
	return func(_ *State, r Result) error {
		if r.Err != nil {
			return fmt.Errorf("unexpected error %v", errorInfoOf(r.Err))
		}
		var got []string
		for _, w := range WatchResponses(r) {
			if len(w.Events) == 0 {
				got = append(got, summarizeResponse(w))
				continue
			}
			s := fmt.Sprintf("id=%d rev=%d: %d events, revisions %d..%d", w.WatchId, w.GetHeader().GetRevision(),
				len(w.Events), w.Events[0].Kv.ModRevision, w.Events[len(w.Events)-1].Kv.ModRevision)
			if w.Fragment {
				s += " [fragment]"
			}
			got = append(got, s)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("watch responses\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		return nil
	}
}
