package diff

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// KVScenarios returns the differential scenarios for the etcd KV API:
// Range, Put, DeleteRange, Txn, Compact and RangeStream, plus the lease
// interactions of Put and Txn. Every call returns fresh values.
//
// The Expect assertions in the scenarios record etcd 3.7.3 behaviour as
// observed on the oracle; the differential comparison holds the target under
// test to exactly the same responses.
func KVScenarios() []Scenario {
	return slices.Concat(
		rangeScenarios(),
		sortScenarios(),
		putScenarios(),
		deleteScenarios(),
		txnScenarios(),
		compactScenarios(),
		streamScenarios(),
		kubeScenarios(),
		LeaseScenarios(),
		AlarmScenarios(),
	)
}

// abcde puts the keys used by many range scenarios: a, a/1, a/2, ab, b, c, d.
func abcde() []Step {
	return Puts("a", "va", "a/1", "va1", "a/2", "va2", "ab", "vab", "b", "vb", "c", "vc", "d", "vd")
}

func rangeScenarios() []Scenario {
	return []Scenario{
		{Name: "range/empty-store", Steps: Steps(
			Get("a").Expect(wantRange(0, false)).WantRevDelta(0),
			Get("", clientv3.WithPrefix()).Expect(wantRange(0, false)),
			Get("a", clientv3.WithFromKey()).Expect(wantRange(0, false)),
			Get("a", clientv3.WithCountOnly()).Expect(wantRange(0, false)),
		)},
		{Name: "range/single-key", Steps: Steps(
			abcde(),
			Get("a").Expect(wantRange(1, false, "a")).WantRevDelta(0),
			Get("ab").Expect(wantRange(1, false, "ab")),
			Get("d").Expect(wantRange(1, false, "d")),
			Get("a", clientv3.WithLimit(1)).Expect(wantRange(1, false, "a")),
		)},
		{Name: "range/missing-key", Steps: Steps(
			abcde(),
			Get("aa").Expect(wantRange(0, false)).WantRevDelta(0),
			Get("e").Expect(wantRange(0, false)),
			Get("\x00").Expect(wantRange(0, false)),
			Get("a/").Expect(wantRange(0, false)),
		)},
		{Name: "range/prefix", Steps: Steps(
			abcde(),
			Get("a", clientv3.WithPrefix()).Expect(wantRange(4, false, "a", "a/1", "a/2", "ab")),
			Get("a/", clientv3.WithPrefix()).Expect(wantRange(2, false, "a/1", "a/2")),
			Get("x", clientv3.WithPrefix()).Expect(wantRange(0, false)),
			Get("", clientv3.WithPrefix()).Expect(wantRange(7, false, "a", "a/1", "a/2", "ab", "b", "c", "d")),
		)},
		{Name: "range/interval", Steps: Steps(
			abcde(),
			Get("a", clientv3.WithRange("c")).Expect(wantRange(5, false, "a", "a/1", "a/2", "ab", "b")),
			Get("a/", clientv3.WithRange("a0")).Expect(wantKeys("a/1", "a/2")),
			Get("b", clientv3.WithRange("b\x00")).Expect(wantKeys("b")),
			Get("aa", clientv3.WithRange("bb")).Expect(wantKeys("ab", "b")),
			// range_end == key and range_end < key select nothing.
			Get("b", clientv3.WithRange("b")).Expect(wantRange(0, false)),
			Get("c", clientv3.WithRange("a")).Expect(wantRange(0, false)),
		)},
		{Name: "range/from-key", Steps: Steps(
			abcde(),
			Get("b", clientv3.WithFromKey()).Expect(wantRange(3, false, "b", "c", "d")),
			Get("ab", clientv3.WithFromKey()).Expect(wantKeys("ab", "b", "c", "d")),
			Get("e", clientv3.WithFromKey()).Expect(wantRange(0, false)),
			// WithFromKey on "" becomes key "\x00", range_end "\x00": everything.
			Get("", clientv3.WithFromKey()).Expect(wantRange(7, false, "a", "a/1", "a/2", "ab", "b", "c", "d")),
			Raw(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}).Expect(wantRange(7, false, "a", "a/1", "a/2", "ab", "b", "c", "d")),
			Raw(&pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte{0}}).Expect(wantKeys("c", "d")),
		)},
		{Name: "range/limit", Steps: Steps(
			abcde(),
			Get("", clientv3.WithPrefix(), clientv3.WithLimit(2)).Expect(wantRange(7, true, "a", "a/1")),
			Get("", clientv3.WithPrefix(), clientv3.WithLimit(7)).Expect(wantRange(7, false, "a", "a/1", "a/2", "ab", "b", "c", "d")),
			Get("", clientv3.WithPrefix(), clientv3.WithLimit(6)).Expect(wantRange(7, true, "a", "a/1", "a/2", "ab", "b", "c")),
			Get("", clientv3.WithPrefix(), clientv3.WithLimit(100)).Expect(wantRange(7, false, "a", "a/1", "a/2", "ab", "b", "c", "d")),
			Get("a/", clientv3.WithPrefix(), clientv3.WithLimit(1)).Expect(wantRange(2, true, "a/1")),
			Get("b", clientv3.WithFromKey(), clientv3.WithLimit(1)).Expect(wantRange(3, true, "b")),
			// A negative limit means no limit.
			Raw(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), Limit: -1}).Expect(wantRange(5, false, "a", "a/1", "a/2", "ab", "b")),
			// Kube-style pagination: continue after the last key at the first page's revision.
			Get("a", clientv3.WithRange("z"), clientv3.WithLimit(3)).As("page1").Expect(wantRange(7, true, "a", "a/1", "a/2")),
			Lazy(func(s *State) Step {
				return Get("a/2\x00", clientv3.WithRange("z"), clientv3.WithLimit(3), clientv3.WithRev(s.Rev("page1")))
			}).Expect(wantRange(4, true, "ab", "b", "c")),
		)},
		{Name: "range/revision", Steps: Steps(
			Put("k", "v1").As("v1"),
			Put("k", "v2").As("v2"),
			Put("other", "o").As("other"),
			Delete("k").As("del"),
			Put("k", "v3").As("v3"),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("v1"))) }).
				Expect(wantKV("v1", 1, "v1", "v1")).WantRevDelta(0), // header revision is the current one
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("v2"))) }).Expect(wantKV("v2", 2, "v1", "v2")),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("del"))) }).Expect(wantRange(0, false)),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("v3"))) }).Expect(wantKV("v3", 1, "v3", "v3")),
			Lazy(func(s *State) Step { return Get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("other"))) }).
				Expect(wantRange(2, false, "k", "other")),
			Lazy(func(s *State) Step { return Get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("del"))) }).
				Expect(wantRange(1, false, "other")),
			// Revision 1 is the empty store.
			Get("", clientv3.WithPrefix(), clientv3.WithRev(1)).Expect(wantRange(0, false)),
			// The current revision is fine, the next one is in the future.
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.LastRev())) }).WantOK(),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.LastRev()+1)) }).WantErr(rpctypes.ErrGRPCFutureRev),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.LastRev()+1000)) }).WantErr(rpctypes.ErrGRPCFutureRev),
			// A negative revision means the current revision.
			Raw(&pb.RangeRequest{Key: []byte("k"), Revision: -1}).Expect(wantKV("v3", 1, "v3", "v3")),
			Lazy(func(s *State) Step {
				return Get("k", clientv3.WithRev(s.Rev("v2")), clientv3.WithCountOnly())
			}).Expect(wantRange(1, false)),
			Lazy(func(s *State) Step {
				return Get("k", clientv3.WithRev(s.Rev("v2")), clientv3.WithKeysOnly(), clientv3.WithSerializable())
			}).Expect(wantKeys("k")),
		)},
		{Name: "range/count-only", Steps: Steps(
			abcde(),
			Get("a", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantRange(4, false)),
			Get("a", clientv3.WithCountOnly()).Expect(wantRange(1, false)),
			Get("zz", clientv3.WithCountOnly()).Expect(wantRange(0, false)),
			// count_only ignores limit: count is the total and more stays false.
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithLimit(2)).Expect(wantRange(7, false)),
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithKeysOnly()).Expect(wantRange(7, false)),
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend)).Expect(wantRange(7, false)),
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable()).Expect(wantRange(7, false)),
		)},
		{Name: "range/keys-only", Steps: Steps(
			abcde(),
			Get("a", clientv3.WithPrefix(), clientv3.WithKeysOnly()).Expect(wantValues("", "", "", "")),
			Get("b", clientv3.WithKeysOnly()).Expect(wantKeys("b")),
			Get("", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(3)).Expect(wantRange(7, true, "a", "a/1", "a/2")),
			// Sorting by value still works although values are not returned.
			Get("", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend)).
				Expect(wantKeys("d", "c", "b", "ab", "a/2", "a/1", "a")),
		)},
		{Name: "range/serializable", Steps: Steps(
			abcde(),
			Get("a", clientv3.WithSerializable()).Expect(wantKeys("a")),
			Get("a", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithLimit(2)).Expect(wantRange(4, true, "a", "a/1")),
		)},
		{Name: "range/binary-keys", Steps: Steps(
			Puts("\x00", "zero", "a\x00b", "nul-inside", "\xff", "ff", "\xff\xff", "ffff", "\xfe\xff", "feff"),
			Get("\x00").Expect(wantValues("zero")),
			Get("a\x00b").Expect(wantValues("nul-inside")),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("\x00", "a\x00b", "\xfe\xff", "\xff", "\xff\xff")),
			// The prefix end of "\xff" does not exist: clientv3 sends range_end "\x00".
			Get("\xff", clientv3.WithPrefix()).Expect(wantKeys("\xff", "\xff\xff")),
			Get("\xfe", clientv3.WithPrefix()).Expect(wantKeys("\xfe\xff")),
			Get("\xfe\xff", clientv3.WithPrefix()).Expect(wantKeys("\xfe\xff")),
			Get("\x00", clientv3.WithRange("\x01")).Expect(wantKeys("\x00")),
		)},
		{Name: "range/empty-value", Steps: Steps(
			Put("e", ""),
			Get("e").Expect(wantRange(1, false, "e")),
			Get("e", clientv3.WithKeysOnly()).Expect(wantRange(1, false, "e")),
		)},
		{Name: "range/errors", Steps: Steps(
			Put("a", "1"),
			Get("").WantErr(rpctypes.ErrGRPCEmptyKey),
			Raw(&pb.RangeRequest{}).WantErr(rpctypes.ErrGRPCEmptyKey),
			Raw(&pb.RangeRequest{RangeEnd: []byte("z")}).WantErr(rpctypes.ErrGRPCEmptyKey),
			Raw(&pb.RangeRequest{Key: []byte("a"), SortOrder: 3}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			Raw(&pb.RangeRequest{Key: []byte("a"), SortOrder: -1}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			Raw(&pb.RangeRequest{Key: []byte("a"), SortTarget: 5}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			// An invalid sort target is rejected even when the order is NONE.
			Raw(&pb.RangeRequest{Key: []byte("a"), SortTarget: 9, SortOrder: pb.RangeRequest_NONE}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			// Validation happens before the revision check.
			Raw(&pb.RangeRequest{Revision: 1000}).WantErr(rpctypes.ErrGRPCEmptyKey),
			Raw(&pb.RangeRequest{Key: []byte("a"), Revision: 1000, SortOrder: 7}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			Get("a").WantRevDelta(0),
		)},
		{Name: "range/revision-filters", Steps: Steps(
			sortData(),
			// Count is computed before filtering: it stays the total of the range.
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("a2")))
			}).Expect(wantRange(5, false, "a", "c", "e")),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMaxModRev(s.Rev("d1")))
			}).Expect(wantRange(5, false, "b", "d")),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinCreateRev(s.Rev("e1")))
			}).Expect(wantRange(5, false, "b", "d", "e")),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMaxCreateRev(s.Rev("a1")))
			}).Expect(wantRange(5, false, "a", "c")),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("d1")), clientv3.WithMaxModRev(s.Rev("c2")))
			}).Expect(wantRange(5, false, "c", "d")),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinCreateRev(s.Rev("a1")), clientv3.WithMaxCreateRev(s.Rev("b1")))
			}).Expect(wantRange(5, false, "a", "b", "e")),
			// Limit applies after filtering; more reports keys beyond the limit that passed the filter.
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("a2")), clientv3.WithLimit(1))
			}).Expect(wantRange(5, true, "a")),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("a2")), clientv3.WithLimit(3))
			}).Expect(wantRange(5, false, "a", "c", "e")),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("a2")), clientv3.WithLimit(2))
			}).Expect(wantRange(5, true, "a", "c")),
			// Filters combine with sorting.
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("a2")),
					clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(2))
			}).Expect(wantRange(5, true, "e", "a")),
			// count_only ignores the filters altogether.
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("a2")), clientv3.WithCountOnly())
			}).Expect(wantRange(5, false)),
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithMaxModRev(s.Rev("d1")), clientv3.WithKeysOnly())
			}).Expect(wantRange(5, false, "b", "d")),
			// A filter that matches nothing.
			Get("", clientv3.WithPrefix(), clientv3.WithMinModRev(1_000_000)).Expect(wantRange(5, false)),
			// Filters apply to the revision being read, not the current one.
			Lazy(func(s *State) Step {
				return Get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("d1")), clientv3.WithMinCreateRev(s.Rev("e1")))
			}).Expect(wantRange(5, false, "b", "d", "e")),
			// Filters on a single key.
			Lazy(func(s *State) Step { return Get("a", clientv3.WithMaxModRev(s.Rev("a1"))) }).Expect(wantRange(1, false)),
			// Negative filters are set but prune nothing (every revision is larger).
			Raw(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, MinModRevision: -5, Limit: 2}).Expect(wantRange(5, true, "a", "b")),
		)},
	}
}

// sortData writes keys a..e so that every sort target yields a different
// order:
//
//	key  value  version  create  mod
//	a    5      3        a1      a3
//	b    4      1        b1      b1
//	c    3      2        c1      c2
//	d    2      1        d1      d1
//	e    1      2        e1      e2
//
// Versions tie (b,d) and (c,e).
func sortData() []Step {
	return Steps(
		Put("c", "3").As("c1"),
		Put("a", "5").As("a1"),
		Put("e", "1").As("e1"),
		Put("b", "4").As("b1"),
		Put("d", "2").As("d1"),
		Put("a", "5").As("a2"),
		Put("c", "3").As("c2"),
		Put("a", "5").As("a3"),
		Put("e", "1").As("e2"),
	)
}

func sortScenarios() []Scenario {
	targets := []pb.RangeRequest_SortTarget{pb.RangeRequest_KEY, pb.RangeRequest_VERSION, pb.RangeRequest_CREATE, pb.RangeRequest_MOD, pb.RangeRequest_VALUE}
	orders := []pb.RangeRequest_SortOrder{pb.RangeRequest_NONE, pb.RangeRequest_ASCEND, pb.RangeRequest_DESCEND}
	// Expected key orders; NONE on a target other than KEY sorts ascending.
	want := map[pb.RangeRequest_SortTarget][]string{
		pb.RangeRequest_KEY:     {"a", "b", "c", "d", "e"},
		pb.RangeRequest_VERSION: {"b", "d", "c", "e", "a"},
		pb.RangeRequest_CREATE:  {"c", "a", "e", "b", "d"},
		pb.RangeRequest_MOD:     {"b", "d", "c", "a", "e"},
		pb.RangeRequest_VALUE:   {"e", "d", "c", "b", "a"},
	}
	noneWithLimit2 := map[pb.RangeRequest_SortTarget][]string{
		pb.RangeRequest_VERSION: {"b", "c"}, // a3 b1 c2
		pb.RangeRequest_CREATE:  {"c", "a"}, // a3 b5 c2
		pb.RangeRequest_MOD:     {"b", "c"}, // a9 b5 c8
		pb.RangeRequest_VALUE:   {"c", "b"}, // a5 b4 c3
	}
	var steps []Step
	for _, tg := range targets {
		for _, o := range orders {
			keys := slices.Clone(want[tg])
			if o == pb.RangeRequest_DESCEND {
				keys = descend(tg)
			}
			for _, limit := range []int64{0, 2} {
				exp := keys
				more := false
				if limit > 0 {
					exp, more = keys[:limit], true
					if o == pb.RangeRequest_NONE && tg != pb.RangeRequest_KEY {
						// NONE counts as the default ordering, so the limit is pushed
						// down to the index: only the first limit+1 keys by key are
						// sorted (ascending), then cut to limit.
						exp = noneWithLimit2[tg]
					}
				}
				// Raw, so KEY+ASCEND is sent as is (clientv3 rewrites it to NONE).
				steps = append(steps, Raw(&pb.RangeRequest{
					Key: []byte{0}, RangeEnd: []byte{0}, SortTarget: tg, SortOrder: o, Limit: limit,
				}).Expect(wantRange(5, more, exp...)))
			}
		}
	}
	// The same through clientv3 WithSort, including the helpers kube-like
	// clients use.
	steps = append(steps,
		Get("", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)).Expect(wantKeys("a", "b", "c", "d", "e")),
		Get("", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1)).Expect(wantRange(5, true, "e")),
		Get("", clientv3.WithLastCreate()...).Expect(wantRange(5, true, "d")),
		Get("", clientv3.WithFirstCreate()...).Expect(wantRange(5, true, "c")),
		Get("", clientv3.WithLastRev()...).Expect(wantRange(5, true, "e")),
		Get("", clientv3.WithFirstRev()...).Expect(wantRange(5, true, "b")),
		Get("", clientv3.WithLastKey()...).Expect(wantRange(5, true, "e")),
		Get("", clientv3.WithFirstKey()...).Expect(wantRange(5, true, "a")),
		Get("a", clientv3.WithRange("d"), clientv3.WithSort(clientv3.SortByVersion, clientv3.SortDescend)).Expect(wantKeys("a", "c", "b")),
		Get("c", clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend)).Expect(wantKeys("c")),
		Lazy(func(s *State) Step {
			return Get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("d1")), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend))
		}).Expect(wantKeys("d", "b", "e", "a", "c")),
	)

	// Ties: sort.Sort is not stable, so the order of equal elements is
	// whatever etcd's sort produces on the key-ordered input. More than 12
	// elements leave insertion sort behind.
	var ties []Step
	for i := range 40 {
		ties = append(ties, Put(fmt.Sprintf("t/%02d", i), fmt.Sprintf("v%d", i%3)))
	}
	for i := 0; i < 40; i += 4 {
		ties = append(ties, Put(fmt.Sprintf("t/%02d", i), fmt.Sprintf("v%d", i%3)))
	}
	for i := 0; i < 40; i += 7 {
		ties = append(ties, Put(fmt.Sprintf("t/%02d", i), fmt.Sprintf("v%d", i%3)))
	}
	var tieReads []Step
	for _, tg := range targets {
		for _, o := range orders {
			for _, limit := range []int64{0, 5} {
				tieReads = append(tieReads, Raw(&pb.RangeRequest{
					Key: []byte("t/"), RangeEnd: []byte("t0"), SortTarget: tg, SortOrder: o, Limit: limit,
				}))
			}
		}
	}
	return []Scenario{
		{Name: "range/sort", Steps: Steps(sortData(), steps)},
		{Name: "range/sort-binary-values", Steps: Steps(
			// Values compare as unsigned bytes.
			Puts("k1", "\xff", "k2", "\x01", "k3", "a", "k4", "", "k5", "\x80", "k6", "a\x00", "k7", "\x7f"),
			Get("k", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend)).
				Expect(wantValues("", "\x01", "a", "a\x00", "\x7f", "\x80", "\xff")),
			Get("k", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend), clientv3.WithLimit(3)).
				Expect(wantValues("\xff", "\x80", "\x7f")),
		)},
		{Name: "range/sort-ties", Steps: Steps(ties, tieReads,
			Get("t/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend)),
			Lazy(func(s *State) Step {
				return Get("t/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByVersion, clientv3.SortAscend), clientv3.WithMinModRev(s.LastRev()-20))
			}),
		)},
	}
}

// descend returns the DESCEND key order of sortData for a target. Ties are
// listed as etcd returns them for five elements (insertion sort on the
// key-ordered input, compared through sort.Reverse).
func descend(tg pb.RangeRequest_SortTarget) []string {
	switch tg {
	case pb.RangeRequest_KEY:
		return []string{"e", "d", "c", "b", "a"}
	case pb.RangeRequest_VERSION:
		return []string{"a", "c", "e", "b", "d"}
	case pb.RangeRequest_CREATE:
		return []string{"d", "b", "e", "a", "c"}
	case pb.RangeRequest_MOD:
		return []string{"e", "a", "c", "d", "b"}
	default:
		return []string{"a", "b", "c", "d", "e"}
	}
}

func putScenarios() []Scenario {
	return []Scenario{
		{Name: "put/new-key", Steps: Steps(
			Put("k", "v").As("p").WantRevDelta(1),
			Get("k").Expect(wantKV("v", 1, "p", "p")).WantRevDelta(0),
		)},
		{Name: "put/overwrite", Steps: Steps(
			Put("k", "v1").As("p1"),
			Put("k", "v2").As("p2").WantRevDelta(1),
			Get("k").Expect(wantKV("v2", 2, "p1", "p2")),
			Put("k", "v3").As("p3"),
			Get("k").Expect(wantKV("v3", 3, "p1", "p3")),
		)},
		{Name: "put/same-value", Steps: Steps(
			Put("k", "v").As("p1"),
			Put("k", "v").As("p2").WantRevDelta(1),
			Get("k").Expect(wantKV("v", 2, "p1", "p2")),
		)},
		{Name: "put/prev-kv", Steps: Steps(
			Put("k", "v1", clientv3.WithPrevKV()).Expect(wantPrevKV(nil)),
			Put("k", "v2", clientv3.WithPrevKV()).Expect(wantPrevKV(ptr("v1"))),
			Put("k", "v3").Expect(wantPrevKV(nil)),
			Put("k", "v4", clientv3.WithPrevKV()).Expect(wantPrevKV(ptr("v3"))),
			Delete("k"),
			Put("k", "v5", clientv3.WithPrevKV()).Expect(wantPrevKV(nil)),
			Put("k", "", clientv3.WithPrevKV()).Expect(wantPrevKV(ptr("v5"))),
			Put("k", "v6", clientv3.WithPrevKV()).Expect(wantPrevKV(ptr(""))),
		)},
		{Name: "put/after-delete", Steps: Steps(
			Put("k", "v1").As("c1"),
			Put("k", "v2"),
			Delete("k"),
			Put("k", "v3").As("c2"),
			Get("k").Expect(wantKV("v3", 1, "c2", "c2")),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("c1"))) }).Expect(wantKV("v1", 1, "c1", "c1")),
		)},
		{Name: "put/empty-value", Steps: Steps(
			Put("k", "").WantRevDelta(1),
			Get("k").Expect(wantValues("")),
			Put("k", "x"),
			Put("k", ""),
			Get("k").Expect(wantValues("")),
		)},
		{Name: "put/binary", Steps: Steps(
			Put("k\x00\xff", "\x00\x01\x02\xff"),
			Get("k\x00\xff").Expect(wantValues("\x00\x01\x02\xff")),
			Put(strings.Repeat("k", 3000), strings.Repeat("v", 100_000)),
			Get(strings.Repeat("k", 3000), clientv3.WithKeysOnly()),
		)},
		{Name: "put/errors", Steps: Steps(
			Put("", "v").WantErr(rpctypes.ErrGRPCEmptyKey),
			Raw(&pb.PutRequest{Value: []byte("v")}).WantErr(rpctypes.ErrGRPCEmptyKey),
			// Request validation runs before the lease lookup.
			Raw(&pb.PutRequest{Lease: 12345}).WantErr(rpctypes.ErrGRPCEmptyKey),
			Put("k", "v", clientv3.WithLease(12345)).WantErr(rpctypes.ErrGRPCLeaseNotFound),
			Raw(&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 12345}).WantErr(rpctypes.ErrGRPCLeaseNotFound),
			Raw(&pb.PutRequest{Key: []byte("k"), Lease: -1}).WantErr(rpctypes.ErrGRPCLeaseNotFound),
			Get("k").Expect(wantRange(0, false)).WantRevDelta(0),
		)},
		{Name: "put/ignore-value", Steps: Steps(
			Put("k", "v1").As("p1"),
			Put("k", "", clientv3.WithIgnoreValue()).As("p2").WantRevDelta(1),
			Get("k").Expect(wantKV("v1", 2, "p1", "p2")),
			Put("k", "", clientv3.WithIgnoreValue(), clientv3.WithPrevKV()).Expect(wantPrevKV(ptr("v1"))),
			Put("missing", "", clientv3.WithIgnoreValue()).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Put("k", "x", clientv3.WithIgnoreValue()).WantErr(rpctypes.ErrGRPCValueProvided),
			// The value check happens before the key lookup.
			Put("missing", "x", clientv3.WithIgnoreValue()).WantErr(rpctypes.ErrGRPCValueProvided),
			Delete("k"),
			Put("k", "", clientv3.WithIgnoreValue()).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Get("k").Expect(wantRange(0, false)),
		)},
		{Name: "put/lease", Steps: Steps(
			LeaseGrant(0x1001, 600).WantRevDelta(0),
			LeaseGrant(0x1002, 600),
			LeaseGrant(0x1001, 600).WantErr(rpctypes.ErrGRPCLeaseExist),
			Put("k", "v1", clientv3.WithLease(0x1001)).As("p1"),
			Get("k"),
			Put("k", "v2", clientv3.WithIgnoreLease()).As("p2"),
			Get("k"),
			Put("k", "", clientv3.WithIgnoreValue(), clientv3.WithLease(0x1002)),
			Get("k").Expect(wantValues("v2")),
			Put("k", "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease(), clientv3.WithPrevKV()).Expect(wantPrevKV(ptr("v2"))),
			Get("k"),
			// A put without a lease detaches the key from its lease.
			Put("k", "v3"),
			Get("k"),
			Put("k", "v4", clientv3.WithIgnoreLease(), clientv3.WithLease(0x1001)).WantErr(rpctypes.ErrGRPCLeaseProvided),
			Put("missing", "v", clientv3.WithIgnoreLease()).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Put("k2", "x", clientv3.WithLease(0x1001)),
			Put("k3", "y", clientv3.WithLease(0x1001)),
			Put("k4", "z", clientv3.WithLease(0x1002)),
			Get("k", clientv3.WithPrefix()),
			// Revoking deletes the attached keys in a single revision.
			LeaseRevoke(0x1001).WantRevDelta(1),
			Get("k", clientv3.WithPrefix()).Expect(wantKeys("k", "k4")),
			LeaseRevoke(0x1001).WantErr(rpctypes.ErrGRPCLeaseNotFound),
			Put("k5", "v", clientv3.WithLease(0x1001)).WantErr(rpctypes.ErrGRPCLeaseNotFound),
			// Revoking a lease without keys does not create a revision.
			LeaseGrant(0x1003, 600),
			LeaseRevoke(0x1003).WantRevDelta(0),
		)},
		{Name: "put/large-value", Steps: Steps(
			Put("big", strings.Repeat("x", 1<<20)).WantRevDelta(1),
			Get("big", clientv3.WithKeysOnly()),
			Get("big"),
			// Larger than --max-request-bytes (1.5 MiB) but below the gRPC limit.
			Put("big2", strings.Repeat("y", 1600*1024)).WantErr(rpctypes.ErrGRPCRequestTooLarge),
			Get("big2").Expect(wantRange(0, false)),
			// The limit applies to the whole txn.
			Txn(nil, ops(clientv3.OpPut("t1", strings.Repeat("a", 900*1024)), clientv3.OpPut("t2", strings.Repeat("b", 900*1024))), nil).
				WantErr(rpctypes.ErrGRPCRequestTooLarge),
			Get("t", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantRange(0, false)),
		)},
	}
}

func deleteScenarios() []Scenario {
	return []Scenario{
		{Name: "delete/single", Steps: Steps(
			abcde(),
			Delete("b").Expect(wantDeleted(1)).WantRevDelta(1),
			Get("b").Expect(wantRange(0, false)),
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantRange(6, false)),
		)},
		{Name: "delete/missing", Steps: Steps(
			abcde(),
			// Deleting nothing does not create a revision.
			Delete("zz").Expect(wantDeleted(0)).WantRevDelta(0),
			Delete("zz", clientv3.WithPrefix()).Expect(wantDeleted(0)).WantRevDelta(0),
			Delete("b").Expect(wantDeleted(1)).WantRevDelta(1),
			Delete("b").Expect(wantDeleted(0)).WantRevDelta(0),
			Delete("b", clientv3.WithPrevKV()).Expect(wantDeleted(0)).WantRevDelta(0),
			Put("x", "1").WantRevDelta(1),
		)},
		{Name: "delete/range", Steps: Steps(
			abcde(),
			Delete("a/", clientv3.WithRange("b")).Expect(wantDeleted(3)).WantRevDelta(1),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a", "b", "c", "d")),
			// Inverted and empty ranges delete nothing.
			Delete("d", clientv3.WithRange("a")).Expect(wantDeleted(0)).WantRevDelta(0),
			Delete("b", clientv3.WithRange("b")).Expect(wantDeleted(0)).WantRevDelta(0),
		)},
		{Name: "delete/prefix", Steps: Steps(
			abcde(),
			Delete("a", clientv3.WithPrefix(), clientv3.WithPrevKV()).Expect(wantDeleted(4)),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("b", "c", "d")),
		)},
		{Name: "delete/from-key", Steps: Steps(
			abcde(),
			Delete("b", clientv3.WithFromKey()).Expect(wantDeleted(3)),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a", "a/1", "a/2", "ab")),
			Raw(&pb.DeleteRangeRequest{Key: []byte("a/"), RangeEnd: []byte{0}, PrevKv: true}).Expect(wantDeleted(3)),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a")),
		)},
		{Name: "delete/everything", Steps: Steps(
			abcde(),
			Delete("", clientv3.WithPrefix()).Expect(wantDeleted(7)).WantRevDelta(1),
			Get("", clientv3.WithPrefix()).Expect(wantRange(0, false)),
			Delete("", clientv3.WithFromKey()).Expect(wantDeleted(0)).WantRevDelta(0),
			Put("a", "again"),
			Get("a"),
		)},
		{Name: "delete/prev-kv", Steps: Steps(
			abcde(),
			Put("b", "vb2"),
			Delete("b", clientv3.WithPrevKV()).Expect(wantDeleted(1)),
			Delete("a", clientv3.WithRange("c"), clientv3.WithPrevKV()).Expect(wantDeleted(4)),
			Delete("zz", clientv3.WithPrevKV()).Expect(wantDeleted(0)),
		)},
		{Name: "delete/history", Steps: Steps(
			Put("k", "v1").As("p1"),
			Put("k", "v2").As("p2"),
			Delete("k").As("d"),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("p2"))) }).Expect(wantKV("v2", 2, "p1", "p2")),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("d"))) }).Expect(wantRange(0, false)),
		)},
		{Name: "delete/errors", Steps: Steps(
			Put("a", "1"),
			Delete("").WantErr(rpctypes.ErrGRPCEmptyKey),
			Raw(&pb.DeleteRangeRequest{RangeEnd: []byte("z")}).WantErr(rpctypes.ErrGRPCEmptyKey),
			Get("a").Expect(wantRange(1, false, "a")).WantRevDelta(0),
		)},
	}
}

func compactScenarios() []Scenario {
	return []Scenario{
		{Name: "compact/basic", Steps: Steps(
			Put("k", "v1").As("p1"),
			Put("k", "v2").As("p2"),
			Put("j", "x").As("p3"),
			Put("k", "v3").As("p4"),
			Lazy(func(s *State) Step { return Compact(s.Rev("p3")) }).WantRevDelta(0), // header: current revision
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("p3")-1)) }).WantErr(rpctypes.ErrGRPCCompacted),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("p1"))) }).WantErr(rpctypes.ErrGRPCCompacted),
			Get("k", clientv3.WithRev(1)).WantErr(rpctypes.ErrGRPCCompacted),
			// Reading at exactly the compacted revision is allowed.
			Lazy(func(s *State) Step { return Get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("p3"))) }).Expect(wantKeys("j", "k")),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("p3"))) }).Expect(wantKV("v2", 2, "p1", "p2")),
			Get("k").Expect(wantKV("v3", 3, "p1", "p4")),
			// Revision 0 (current) still works.
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantRange(2, false)),
			// Compacting at or below the compacted revision fails.
			Lazy(func(s *State) Step { return Compact(s.Rev("p3")) }).WantErr(rpctypes.ErrGRPCCompacted),
			Lazy(func(s *State) Step { return Compact(s.Rev("p2")) }).WantErr(rpctypes.ErrGRPCCompacted),
			Lazy(func(s *State) Step { return Compact(s.LastRev() + 1) }).WantErr(rpctypes.ErrGRPCFutureRev),
			// Compacting at the current revision is allowed.
			Lazy(func(s *State) Step { return Compact(s.Rev("p4")) }).WantOK(),
			Get("k").Expect(wantKV("v3", 3, "p1", "p4")),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithRev(s.Rev("p3"))) }).WantErr(rpctypes.ErrGRPCCompacted),
			Put("k", "v4").WantRevDelta(1),
			Get("k").Expect(wantKV("v4", 4, "p1", "")),
		)},
		{Name: "compact/physical", Steps: Steps(
			PutN(20, "k%02d", "v%d"),
			Put("k00", "again").As("p"),
			Delete("k01"),
			Lazy(func(s *State) Step { return Compact(s.Rev("p"), clientv3.WithCompactPhysical()) }).WantOK(),
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantRange(19, false)),
			Lazy(func(s *State) Step {
				return Get("k", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("p")), clientv3.WithLimit(3))
			}).
				Expect(wantRange(20, true, "k00", "k01", "k02")),
			Lazy(func(s *State) Step { return Get("k", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("p")-1)) }).WantErr(rpctypes.ErrGRPCCompacted),
			Lazy(func(s *State) Step { return Compact(s.Rev("p"), clientv3.WithCompactPhysical()) }).WantErr(rpctypes.ErrGRPCCompacted),
		)},
		{Name: "compact/edge-revisions", Steps: Steps(
			// On a store that was never compacted, revision 0 and 1 can be compacted.
			Compact(0).WantOK(),
			Compact(0).WantErr(rpctypes.ErrGRPCCompacted),
			Compact(-1).WantErr(rpctypes.ErrGRPCCompacted),
			Compact(1).WantOK(),
			Compact(1).WantErr(rpctypes.ErrGRPCCompacted),
			Compact(2).WantErr(rpctypes.ErrGRPCFutureRev),
			Get("k", clientv3.WithRev(1)).WantOK(),
			Put("k", "v"),
			Compact(2).WantOK(),
			Get("k", clientv3.WithRev(1)).WantErr(rpctypes.ErrGRPCCompacted),
			Get("k", clientv3.WithRev(2)).Expect(wantValues("v")),
		)},
		{Name: "compact/negative", Steps: Steps(
			Put("k", "v"),
			Compact(-1).WantErr(rpctypes.ErrGRPCCompacted),
			Compact(-100).WantErr(rpctypes.ErrGRPCCompacted),
			Compact(1000).WantErr(rpctypes.ErrGRPCFutureRev),
			Get("k", clientv3.WithRev(1)).WantOK(),
		)},
		{Name: "compact/deleted-keys", Steps: Steps(
			Put("a", "1"),
			Put("b", "2").As("b"),
			Delete("a").As("del"),
			Put("c", "3"),
			Lazy(func(s *State) Step { return Compact(s.Rev("del")) }),
			Lazy(func(s *State) Step { return Get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("del"))) }).Expect(wantKeys("b")),
			Lazy(func(s *State) Step { return Get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("b"))) }).WantErr(rpctypes.ErrGRPCCompacted),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("b", "c")),
			Put("a", "again"),
			Get("a").Expect(wantKV("again", 1, "", "")),
		)},
		{Name: "compact/txn", Steps: Steps(
			Put("k", "v1").As("p1"),
			Put("k", "v2").As("p2"),
			Put("k", "v3"),
			Lazy(func(s *State) Step { return Compact(s.Rev("p2")) }),
			// A range at a compacted revision fails the whole txn, but only in the branch taken.
			Lazy(func(s *State) Step {
				return Txn(nil, ops(clientv3.OpPut("x", "1"), clientv3.OpGet("k", clientv3.WithRev(s.Rev("p1")))), nil)
			}).WantErr(rpctypes.ErrGRPCCompacted),
			Lazy(func(s *State) Step {
				return Txn(cmps(cmp(clientv3.Value("k"), "=", "nope")),
					ops(clientv3.OpGet("k", clientv3.WithRev(s.Rev("p1")))),
					ops(clientv3.OpGet("k", clientv3.WithRev(s.Rev("p2")))))
			}).Expect(wantSucceeded(false)),
			Get("x").Expect(wantRange(0, false)),
		)},
	}
}

func streamScenarios() []Scenario {
	bulk := PutN(300, "s/%03d", "value-%03d")
	bulk[149] = bulk[149].As("half")
	return []Scenario{
		{Name: "stream/empty", Steps: Steps(
			GetStream("", clientv3.WithPrefix()).Expect(wantChunks(0)),
			GetStream("a").Expect(wantChunks(0)),
			GetStream("a", clientv3.WithCountOnly()).Expect(wantChunks(0)),
		)},
		{Name: "stream/small", Steps: Steps(
			abcde(),
			GetStream("", clientv3.WithPrefix()).Expect(wantChunks(7)).Expect(wantRange(7, false, "a", "a/1", "a/2", "ab", "b", "c", "d")),
			GetStream("a").Expect(wantRange(1, false, "a")),
			GetStream("zz").Expect(wantRange(0, false)),
			GetStream("a", clientv3.WithPrefix()).Expect(wantRange(4, false, "a", "a/1", "a/2", "ab")),
			GetStream("b", clientv3.WithFromKey()).Expect(wantRange(3, false, "b", "c", "d")),
			GetStream("a", clientv3.WithRange("c"), clientv3.WithLimit(2)).Expect(wantRange(5, true, "a", "a/1")),
			GetStream("", clientv3.WithPrefix(), clientv3.WithKeysOnly()).Expect(wantValues("", "", "", "", "", "", "")),
			GetStream("", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantRange(7, false)),
			GetStream("", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithLimit(7)).Expect(wantRange(7, false, "a", "a/1", "a/2", "ab", "b", "c", "d")),
			RawStream(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}),
			// The default orderings are accepted: KEY/ASCEND, and any target with order NONE...
			RawStream(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, SortTarget: pb.RangeRequest_KEY, SortOrder: pb.RangeRequest_ASCEND}).Expect(wantKeys("a", "a/1", "a/2", "ab", "b", "c", "d")),
			// ...and then each chunk is sorted by the target, like unary Range does.
			Put("0", "z"),
			GetStream("", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortNone)).Expect(wantKeys("a", "a/1", "a/2", "ab", "b", "c", "d", "0")),
			Get("", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortNone)).Expect(wantKeys("a", "a/1", "a/2", "ab", "b", "c", "d", "0")),
		)},
		{Name: "stream/300-keys", Steps: Steps(
			bulk,
			GetStream("s/", clientv3.WithPrefix()).Expect(wantChunks(10, 20, 40, 80, 150)).Expect(wantRange(300, false)),
			RawStream(&pb.RangeRequest{Key: []byte("s/"), RangeEnd: []byte("s0")}).Expect(wantChunks(10, 20, 40, 80, 150)),
			GetStream("", clientv3.WithFromKey()).Expect(wantChunks(10, 20, 40, 80, 150)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithLimit(1)).Expect(wantChunks(1)).Expect(wantRange(300, true, "s/000")),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithLimit(10)).Expect(wantChunks(10)).Expect(wantRange(300, true)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithLimit(11)).Expect(wantChunks(10, 1)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithLimit(25)).Expect(wantChunks(10, 15)).Expect(wantRange(300, true)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithLimit(299)).Expect(wantChunks(10, 20, 40, 80, 149)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithLimit(300)).Expect(wantChunks(10, 20, 40, 80, 150)).Expect(wantRange(300, false)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithLimit(1000)).Expect(wantChunks(10, 20, 40, 80, 150)).Expect(wantRange(300, false)),
			GetStream("s/100", clientv3.WithRange("s/200")).Expect(wantChunks(10, 20, 40, 30)),
			GetStream("s/100", clientv3.WithRange("s/200"), clientv3.WithLimit(50)).Expect(wantChunks(10, 20, 20)).Expect(wantRange(100, true)),
			GetStream("s/290", clientv3.WithFromKey()).Expect(wantChunks(10)),
			GetStream("s/289", clientv3.WithFromKey()).Expect(wantChunks(10, 1)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithKeysOnly()).Expect(wantChunks(10, 20, 40, 80, 150)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithLimit(70)).Expect(wantChunks(10, 20, 40)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantChunks(0)).Expect(wantRange(300, false)),
			GetStream("s/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithLimit(5)).Expect(wantChunks(0)).Expect(wantRange(300, false)),
			// A negative limit is "unlimited" for the chunk reads too: one chunk.
			RawStream(&pb.RangeRequest{Key: []byte("s/"), RangeEnd: []byte("s0"), Limit: -1}).Expect(wantChunks(300)).Expect(wantRange(300, false)),
			// A pinned revision sees the store as it was.
			// The header revision is the current one, not the pinned one.
			Lazy(func(s *State) Step { return GetStream("s/", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("half"))) }).
				Expect(wantChunks(10, 20, 40, 80)).Expect(wantRange(150, false)).WantRevDelta(0),
			Lazy(func(s *State) Step {
				return GetStream("s/", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("half")), clientv3.WithLimit(100))
			}).Expect(wantChunks(10, 20, 40, 30)).Expect(wantRange(150, true)),
			Lazy(func(s *State) Step {
				return GetStream("s/", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("half")), clientv3.WithCountOnly())
			}).Expect(wantRange(150, false)),
			// The stream reads one consistent revision even when writes interleave with later reads.
			Delete("s/0", clientv3.WithPrefix()),
			GetStream("s/", clientv3.WithPrefix()).Expect(wantChunks(10, 20, 40, 80, 50)),
			Lazy(func(s *State) Step { return GetStream("s/", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("half"))) }).
				Expect(wantChunks(10, 20, 40, 80)),
			Get("s/", clientv3.WithPrefix(), clientv3.WithLimit(3)).Expect(wantRange(200, true, "s/100", "s/101", "s/102")),
		)},
		{Name: "stream/big-values", Steps: Steps(
			PutN(60, "big/%02d", strings.Repeat("x", 40*1024)+"%d"),
			// 10 keys ≈ 400 KiB < max-request-bytes/2: double; 20 keys ≈ 800 KiB: keep.
			GetStream("big/", clientv3.WithPrefix()).Expect(wantChunks(10, 20, 20, 10)),
			// Keys-only chunks are small, so the limit keeps doubling.
			GetStream("big/", clientv3.WithPrefix(), clientv3.WithKeysOnly()).Expect(wantChunks(10, 20, 30)),
		)},
		{Name: "stream/errors", Steps: Steps(
			abcde(),
			Put("a", "2").As("a2"),
			Put("a", "3"),
			GetStream("", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)).WantCode(codes.Unimplemented),
			GetStream("", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend)).WantCode(codes.Unimplemented),
			GetStream("", clientv3.WithPrefix(), clientv3.WithMinModRev(2)).WantCode(codes.Unimplemented),
			GetStream("", clientv3.WithPrefix(), clientv3.WithMaxCreateRev(2)).WantCode(codes.Unimplemented),
			GetStream("").WantErr(rpctypes.ErrGRPCEmptyKey),
			RawStream(&pb.RangeRequest{Key: []byte("a"), SortOrder: 5}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			RawStream(&pb.RangeRequest{Key: []byte("a"), SortTarget: 7}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			Lazy(func(s *State) Step { return GetStream("a", clientv3.WithRev(s.LastRev()+1)) }).WantErr(rpctypes.ErrGRPCFutureRev),
			Lazy(func(s *State) Step { return Compact(s.Rev("a2")) }),
			Lazy(func(s *State) Step { return GetStream("a", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("a2")-1)) }).WantErr(rpctypes.ErrGRPCCompacted),
			Lazy(func(s *State) Step { return GetStream("a", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("a2"))) }).WantOK(),
			Lazy(func(s *State) Step {
				return GetStream("a", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("a2")-1), clientv3.WithCountOnly())
			}).WantErr(rpctypes.ErrGRPCCompacted),
		)},
	}
}
