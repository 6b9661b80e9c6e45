package diff

import (
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// compareTargetScenarios covers every compare target × result against a
// key "k" with value "m", version 2, lease 0x2001, on operands below, equal
// to and above the key's attribute.
func compareTargetScenarios() []Scenario {
	setup := Steps(
		LeaseGrant(0x2001, 600),
		Put("k", "first").As("create"),
		Put("other", "o"),
		Put("k", "m", clientv3.WithLease(0x2001)).As("mod"),
	)
	type target struct {
		name     string
		cmp      clientv3.Cmp
		operands func(s *State) [3]any // below, equal, above
	}
	targets := []target{
		{"value", clientv3.Value("k"), func(*State) [3]any { return [3]any{"a", "m", "z"} }},
		{"version", clientv3.Version("k"), func(*State) [3]any { return [3]any{1, 2, 3} }},
		{"create", clientv3.CreateRevision("k"), func(s *State) [3]any {
			c := s.Rev("create")
			return [3]any{c - 1, c, c + 1}
		}},
		{"mod", clientv3.ModRevision("k"), func(s *State) [3]any {
			m := s.Rev("mod")
			return [3]any{m - 1, m, m + 1}
		}},
		{"lease", clientv3.LeaseValue("k"), func(*State) [3]any {
			return [3]any{clientv3.LeaseID(0x2000), clientv3.LeaseID(0x2001), clientv3.LeaseID(0x2002)}
		}},
	}
	// want[result][operand]: does "key attribute <result> operand" hold?
	want := map[string][3]bool{
		"=":  {false, true, false},
		"!=": {true, false, true},
		">":  {true, false, false},
		"<":  {false, false, true},
	}
	var scenarios []Scenario
	for _, tg := range targets {
		steps := slices.Clone(setup)
		for _, result := range []string{"=", "!=", ">", "<"} {
			for i := range 3 {
				steps = append(steps, Lazy(func(s *State) Step {
					return Txn(cmps(cmp(tg.cmp, result, tg.operands(s)[i])),
						ops(clientv3.OpGet("k")), ops(clientv3.OpGet("other")))
				}).Expect(wantSucceeded(want[result][i])).WantRevDelta(0))
			}
		}
		// A write in the taken branch.
		steps = append(steps,
			Lazy(func(s *State) Step {
				return Txn(cmps(cmp(tg.cmp, "=", tg.operands(s)[1])),
					ops(clientv3.OpPut("k", "m", clientv3.WithIgnoreLease()), clientv3.OpGet("k")),
					ops(clientv3.OpPut("other", "changed")))
			}).Expect(wantSucceeded(true)).WantRevDelta(1),
			Get("", clientv3.WithPrefix()),
		)
		scenarios = append(scenarios, Scenario{Name: "txn/compare/" + tg.name, Steps: steps})
	}
	return scenarios
}

func txnScenarios() []Scenario {
	get := clientv3.OpGet
	put := clientv3.OpPut
	del := clientv3.OpDelete
	txn := clientv3.OpTxn
	return append(compareTargetScenarios(), []Scenario{
		{Name: "txn/compare/missing-key", Steps: Steps(
			Put("k", ""),
			// A value compare on a missing key always fails, whatever the result operator.
			Txn(cmps(cmp(clientv3.Value("missing"), "=", "")), nil, nil).Expect(wantSucceeded(false)).WantRevDelta(0),
			Txn(cmps(cmp(clientv3.Value("missing"), "!=", "x")), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Value("missing"), ">", "")), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Value("missing"), "<", "z")), nil, nil).Expect(wantSucceeded(false)),
			// ...while an existing key with an empty value equals "".
			Txn(cmps(cmp(clientv3.Value("k"), "=", "")), nil, nil).Expect(wantSucceeded(true)),
			// Other targets compare a missing key as all zeroes.
			Txn(cmps(cmp(clientv3.Version("missing"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Version("missing"), "!=", 0)), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Version("missing"), ">", 0)), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Version("missing"), "<", 1)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Version("missing"), ">", -1)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.CreateRevision("missing"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.ModRevision("missing"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.ModRevision("missing"), "<", 5)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.LeaseValue("missing"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.LeaseValue("missing"), "!=", 0)), nil, nil).Expect(wantSucceeded(false)),
			// A deleted key is missing too.
			Delete("k"),
			Txn(cmps(cmp(clientv3.Value("k"), "=", "")), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Version("k"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
		)},
		{Name: "txn/compare/range", Steps: Steps(
			Puts("r/1", "x", "r/2", "x", "r/2", "x", "r/3", "x", "s", "y"),
			// Every key in the range must satisfy the compare.
			Txn(cmps(cmp(clientv3.Value("r/").WithPrefix(), "=", "x")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("r/").WithRange("t"), "=", "x")), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Version("r/").WithPrefix(), "=", 1)), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Version("r/").WithPrefix(), ">", 0)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Version("r/").WithPrefix(), "<", 3)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Version("r/1").WithRange("r/2"), "=", 1)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.ModRevision("r/").WithPrefix(), ">", 0)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.CreateRevision("r/").WithPrefix(), "!=", 0)), nil, nil).Expect(wantSucceeded(true)),
			// An empty range compares like a missing key.
			Txn(cmps(cmp(clientv3.CreateRevision("q/").WithPrefix(), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Version("q/").WithPrefix(), ">", 0)), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Value("q/").WithPrefix(), "=", "")), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Value("q/").WithPrefix(), "!=", "x")), nil, nil).Expect(wantSucceeded(false)),
			// range_end "\x00" means every key >= key.
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("r/2"), RangeEnd: []byte{0}, Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
				TargetUnion: &pb.Compare_Value{Value: []byte("x")},
			}}}).Expect(wantSucceeded(false)),
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("r/2"), RangeEnd: []byte{0}, Target: pb.Compare_VERSION, Result: pb.Compare_GREATER,
				TargetUnion: &pb.Compare_Version{Version: 0},
			}}}).Expect(wantSucceeded(true)),
			// An inverted range is empty.
			Txn(cmps(cmp(clientv3.Version("r/3").WithRange("r/1"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
		)},
		{Name: "txn/compare/value-bytes", Steps: Steps(
			Puts("k", "abc", "hi", "\xff", "empty", ""),
			// Values compare as unsigned byte strings.
			Txn(cmps(cmp(clientv3.Value("k"), "<", "abd")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("k"), ">", "ab")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("k"), "<", "abc\x00")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("k"), ">", "")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("k"), "=", "ABC")), nil, nil).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Value("hi"), ">", "\x7f")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("hi"), ">", "\xfe\xff")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("hi"), "<", "\xff\x00")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("empty"), "<", "\x00")), nil, nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("empty"), "=", "")), nil, nil).Expect(wantSucceeded(true)),
			// A key without a lease has lease 0.
			Txn(cmps(cmp(clientv3.LeaseValue("k"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
		)},
		{Name: "txn/compare/multiple", Steps: Steps(
			Puts("a", "1", "b", "2"),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1"), cmp(clientv3.Value("b"), "=", "2")), ops(get("a")), ops(get("b"))).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1"), cmp(clientv3.Value("b"), "=", "x")), ops(get("a")), ops(get("b"))).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "x"), cmp(clientv3.Value("b"), "=", "2")), ops(get("a")), ops(get("b"))).Expect(wantSucceeded(false)),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1"), cmp(clientv3.Value("a"), "=", "1"), cmp(clientv3.Version("zz"), "=", 0)), nil, nil).Expect(wantSucceeded(true)),
			// No compares: the success branch runs.
			Txn(nil, ops(get("a")), ops(get("b"))).Expect(wantSucceeded(true)),
		)},
		{Name: "txn/compare/raw-quirks", Steps: Steps(
			Puts("a", "1"),
			// A target union that does not match the target compares against zero.
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("a"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 2},
			}}}).Expect(wantSucceeded(false)),
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("a"), Target: pb.Compare_MOD, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 100},
			}}}).Expect(wantSucceeded(true)),
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("a"), Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("x")},
			}}}).Expect(wantSucceeded(true)),
			// A VALUE compare without a value compares against "".
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_GREATER,
			}}}).Expect(wantSucceeded(true)),
			// An unknown result operator always holds.
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("a"), Target: pb.Compare_VERSION, Result: 9, TargetUnion: &pb.Compare_Version{Version: 100},
			}}}).Expect(wantSucceeded(true)),
			// An unknown target compares equal.
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("a"), Target: 9, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 100},
			}}}).Expect(wantSucceeded(true)),
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("a"), Target: 9, Result: pb.Compare_LESS,
			}}}).Expect(wantSucceeded(false)),
			// ...but on a missing key even an unknown target holds (zero KeyValue), unlike VALUE.
			Raw(&pb.TxnRequest{Compare: []*pb.Compare{{
				Key: []byte("missing"), Target: 9, Result: pb.Compare_EQUAL,
			}}}).Expect(wantSucceeded(true)),
		)},
		{Name: "txn/branches", Steps: Steps(
			Puts("a", "1", "b", "2"),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1")),
				ops(put("c", "3"), del("b"), get("", clientv3.WithPrefix())),
				ops(put("d", "4"))).Expect(wantSucceeded(true)).WantRevDelta(1),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "nope")),
				ops(put("c", "9")),
				ops(put("d", "4"), get("d"), put("e", "5", clientv3.WithPrevKV()))).Expect(wantSucceeded(false)).WantRevDelta(1),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a", "c", "d", "e")),
			// The two branches of one txn may write the same key.
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1")), ops(put("x", "then")), ops(put("x", "else"))).Expect(wantSucceeded(true)),
			Get("x").Expect(wantValues("then")),
			// A failed compare with an empty else branch.
			Txn(cmps(cmp(clientv3.Value("a"), "=", "nope")), ops(put("y", "1")), nil).Expect(wantSucceeded(false)).WantRevDelta(0),
		)},
		{Name: "txn/revisions", Steps: Steps(
			Puts("a", "1", "b", "2"),
			// Read-only txns do not create a revision.
			Txn(nil, ops(get("a"), get("", clientv3.WithPrefix())), nil).WantRevDelta(0),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "x")), ops(put("a", "2")), ops(get("b"))).WantRevDelta(0),
			// Neither do write txns that change nothing.
			Txn(nil, ops(del("missing")), nil).WantRevDelta(0),
			Txn(nil, ops(del("missing"), get("a"), del("m", clientv3.WithPrefix())), nil).WantRevDelta(0),
			Txn(nil, nil, nil).Expect(wantSucceeded(true)).WantRevDelta(0),
			Raw(&pb.TxnRequest{}).WantRevDelta(0),
			// Many writes share one revision.
			Txn(nil, ops(del("missing"), put("a", "2"), put("c", "3"), del("b")), nil).WantRevDelta(1),
			Get("", clientv3.WithPrefix()),
		)},
		{Name: "txn/read-your-writes", Steps: Steps(
			Puts("a", "1", "b", "2"),
			// Inside a write txn a range before the first change reports the
			// old revision, after it the new one, and sees the txn's writes.
			Txn(nil, ops(
				get("a"),
				del("missing"),
				get("a"),
				put("a", "2", clientv3.WithPrevKV()),
				get("a"),
				del("b", clientv3.WithPrevKV()),
				get("b"),
				del("missing"),
				get("", clientv3.WithPrefix(), clientv3.WithCountOnly()),
				put("c", "3", clientv3.WithPrevKV()),
				get("", clientv3.WithPrefix()),
			), nil).WantRevDelta(1),
			// A put after a delete of another key sees the delete.
			Txn(nil, ops(del("a"), put("d", "4"), get("", clientv3.WithPrefix())), nil).WantRevDelta(1),
		)},
		{Name: "txn/range-options", Steps: Steps(
			sortData(),
			Lazy(func(s *State) Step {
				return Txn(nil, ops(
					get("", clientv3.WithPrefix(), clientv3.WithLimit(2)),
					get("", clientv3.WithPrefix(), clientv3.WithCountOnly()),
					get("", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend)),
					get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("d1"))),
					get("", clientv3.WithPrefix(), clientv3.WithMinModRev(s.Rev("a2")), clientv3.WithLimit(1)),
					get("a", clientv3.WithSerializable()),
					get("zz"),
				), nil)
			}).WantRevDelta(0),
			// The same ranges after a write in the same txn.
			Lazy(func(s *State) Step {
				return Txn(nil, ops(
					put("f", "0"),
					get("", clientv3.WithPrefix(), clientv3.WithLimit(2), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend)),
					get("", clientv3.WithPrefix(), clientv3.WithRev(s.Rev("d1"))),
				), nil)
			}).WantRevDelta(1),
			// A range at a future revision fails the txn (only in the branch taken).
			Lazy(func(s *State) Step {
				return Txn(nil, ops(get("a", clientv3.WithRev(s.LastRev()+1))), nil)
			}).WantErr(rpctypes.ErrGRPCFutureRev),
			Lazy(func(s *State) Step {
				return Txn(nil, ops(put("g", "1"), get("a", clientv3.WithRev(s.LastRev()+1))), nil)
			}).WantErr(rpctypes.ErrGRPCFutureRev),
			Lazy(func(s *State) Step {
				return Txn(cmps(cmp(clientv3.Version("a"), "=", 0)), ops(get("a", clientv3.WithRev(s.LastRev()+1))), ops(get("a")))
			}).Expect(wantSucceeded(false)),
			Get("g").Expect(wantRange(0, false)),
		)},
		{Name: "txn/nested", Steps: Steps(
			Put("a", "1"),
			// Every compare, nested ones included, is evaluated against the
			// store before the txn: the inner compare does not see b.
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1")),
				ops(put("b", "1"), txn(cmps(cmp(clientv3.Version("b"), "=", 0)), ops(put("c", "inner-then"), get("b")), ops(put("c", "inner-else")))),
				ops(put("x", "outer-else"))).Expect(wantSucceeded(true)).WantRevDelta(1).Expect(wantEmptyNestedHeader),
			Get("c").Expect(wantValues("inner-then")),
			// Three levels, through the else branches.
			Txn(cmps(cmp(clientv3.Value("a"), "=", "nope")),
				ops(put("x", "1")),
				ops(
					get("a"),
					txn(cmps(cmp(clientv3.Version("a"), "=", 5)),
						ops(put("d", "level2-then")),
						ops(
							put("d", "level2-else"),
							txn(cmps(cmp(clientv3.Version("c"), "=", 1)),
								ops(put("e", "level3-then"), get("", clientv3.WithPrefix()), del("c", clientv3.WithPrevKV())),
								ops(put("e", "level3-else"))),
						)),
					get("e"),
				)).Expect(wantSucceeded(false)).WantRevDelta(1),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a", "b", "d", "e")),
			// A nested read-only txn, and a nested txn whose branch is empty.
			Txn(nil, ops(txn(nil, ops(get("a")), nil), txn(cmps(cmp(clientv3.Value("a"), "=", "x")), ops(get("b")), nil)), nil).WantRevDelta(0),
			// Sibling nested txns.
			Txn(nil, ops(
				txn(cmps(cmp(clientv3.Value("a"), "=", "1")), ops(put("s1", "t")), ops(put("s1", "e"))),
				txn(cmps(cmp(clientv3.Value("a"), "=", "2")), ops(put("s2", "t")), ops(put("s2", "e"))),
				get("s", clientv3.WithPrefix()),
			), nil).WantRevDelta(1),
			// A nested txn whose range goes to the future fails the whole txn.
			Lazy(func(s *State) Step {
				return Txn(nil, ops(put("z", "1"), txn(nil, ops(get("a", clientv3.WithRev(s.LastRev()+5))), nil)), nil)
			}).WantErr(rpctypes.ErrGRPCFutureRev),
			Get("z").Expect(wantRange(0, false)),
		)},
		{Name: "txn/duplicate-keys", Steps: Steps(
			Puts("a", "1", "b", "2", "c", "3"),
			Txn(nil, ops(put("a", "x"), put("a", "y")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, nil, ops(put("a", "x"), put("a", "y"))).WantErr(rpctypes.ErrGRPCDuplicateKey),
			// Checked statically in both branches, whatever the compare.
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1")), ops(put("a", "x")), ops(put("b", "x"), put("b", "y"))).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(del("a"), put("a", "x")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(put("a", "x"), del("a")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(del("a", clientv3.WithPrefix()), put("ab", "x")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(del("a", clientv3.WithRange("c")), put("b", "x")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(put("b", "x"), del("a", clientv3.WithRange("c"))), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			// Allowed: put outside the deleted interval, overlapping deletes, put + range.
			Txn(nil, ops(del("a", clientv3.WithRange("c")), put("c", "x")), nil).WantOK(),
			Txn(nil, ops(del("a"), del("a", clientv3.WithPrefix())), nil).WantOK(),
			Txn(nil, ops(put("a", "y"), get("a")), nil).WantOK(),
			Get("", clientv3.WithPrefix()),
			// Nested: same key in a nested txn and the outer level.
			Txn(nil, ops(put("a", "x"), txn(nil, ops(put("a", "y")), nil)), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, ops(put("a", "y")), nil), put("a", "x")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, nil, ops(put("a", "y"))), put("a", "x")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, ops(put("a", "y")), nil), txn(nil, ops(put("a", "z")), nil)), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, ops(put("a", "y")), nil), txn(nil, nil, ops(put("a", "z")))), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, ops(del("a")), nil), put("a", "x")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, ops(put("a", "x")), nil), del("a")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, ops(del("a")), nil), txn(nil, ops(put("a", "x")), nil)), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			Txn(nil, ops(txn(nil, ops(txn(nil, ops(put("a", "deep")), nil)), nil), put("a", "x")), nil).WantErr(rpctypes.ErrGRPCDuplicateKey),
			// Nested: the then and else branches of one nested txn may write the same key.
			Txn(nil, ops(txn(cmps(cmp(clientv3.Value("a"), "=", "y")), ops(put("a", "then")), ops(put("a", "else")))), nil).WantOK(),
			Get("a").Expect(wantValues("then")),
			Txn(nil, ops(txn(cmps(cmp(clientv3.Value("a"), "=", "y")), ops(put("a", "then")), ops(put("a", "else")))), nil).WantOK(),
			Get("a").Expect(wantValues("else")),
			Txn(nil, ops(txn(nil, ops(del("b")), ops(put("b", "else")))), nil).WantOK(),
		)},
		{Name: "txn/duplicate-keys/quirks", Steps: Steps(
			Puts("a", "1", "b", "2", "c", "3"),
			// A delete with range_end "\x00" (from key) is not recognised as an
			// interval by the overlap check, so a put inside it is accepted;
			// the ops then run in order.
			Txn(nil, ops(del("b", clientv3.WithFromKey()), put("c", "new")), nil).WantOK(),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a", "c")),
			Txn(nil, ops(put("b", "new"), del("b", clientv3.WithFromKey())), nil).WantOK(),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a")),
			// A put in an earlier nested txn and a delete of the same key in a
			// later sibling are accepted (only later puts are checked against
			// earlier deletes).
			Txn(nil, ops(txn(nil, ops(put("a", "x")), nil), txn(nil, ops(del("a")), nil)), nil).WantOK(),
			Get("a").Expect(wantRange(0, false)),
			// A nested delete in the then branch and a put in the else branch.
			Txn(nil, ops(txn(nil, ops(del("a")), ops(put("a", "else")))), nil).WantOK(),
		)},
		{Name: "txn/too-many-ops", Steps: Steps(
			Txn(nil, putOps("p/", 128), nil).WantRevDelta(1),
			Get("p/", clientv3.WithPrefix(), clientv3.WithCountOnly()).Expect(wantRange(128, false)),
			Txn(nil, putOps("q/", 129), nil).WantErr(rpctypes.ErrGRPCTooManyOps),
			Txn(nil, nil, putOps("q/", 129)).WantErr(rpctypes.ErrGRPCTooManyOps),
			Txn(nil, getOps(128), putOps("q/", 128)).WantOK(),
			Txn(versionCmps(128), nil, nil).Expect(wantSucceeded(true)),
			Txn(versionCmps(129), nil, nil).WantErr(rpctypes.ErrGRPCTooManyOps),
			// Nested txns get the budget left by their parent: 128 - max(#compares, #then, #else).
			Txn(nil, append(putOps("r/", 99), txn(nil, putOps("n/", 28), nil)), nil).WantOK(),
			Txn(nil, append(putOps("s/", 99), txn(nil, putOps("m/", 29), nil)), nil).WantErr(rpctypes.ErrGRPCTooManyOps),
			Txn(versionCmps(100), ops(txn(nil, putOps("t/", 29), nil)), nil).WantErr(rpctypes.ErrGRPCTooManyOps),
			Txn(versionCmps(100), ops(txn(nil, putOps("t/", 28), nil)), nil).WantOK(),
			Txn(nil, ops(txn(nil, ops(txn(nil, putOps("u/", 126), nil)), nil)), nil).WantOK(),
			Txn(nil, ops(txn(nil, ops(txn(nil, putOps("v/", 127), nil)), nil)), nil).WantErr(rpctypes.ErrGRPCTooManyOps),
			// The op count is checked before anything else.
			Txn(nil, append(putOps("w/", 128), put("", "empty-key")), nil).WantErr(rpctypes.ErrGRPCTooManyOps),
			Get("", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		)},
		{Name: "txn/errors", Steps: Steps(
			Puts("a", "1"),
			Txn(cmps(cmp(clientv3.Value(""), "=", "x")), nil, nil).WantErr(rpctypes.ErrGRPCEmptyKey),
			Txn(nil, ops(put("", "x")), nil).WantErr(rpctypes.ErrGRPCEmptyKey),
			Txn(nil, ops(get("")), nil).WantErr(rpctypes.ErrGRPCEmptyKey),
			Txn(nil, ops(del("")), nil).WantErr(rpctypes.ErrGRPCEmptyKey),
			Txn(nil, nil, ops(put("", "x"))).WantErr(rpctypes.ErrGRPCEmptyKey),
			Txn(nil, ops(txn(nil, nil, ops(get("")))), nil).WantErr(rpctypes.ErrGRPCEmptyKey),
			Txn(nil, ops(put("b", "x", clientv3.WithIgnoreValue())), nil).WantErr(rpctypes.ErrGRPCValueProvided),
			Txn(nil, ops(put("b", "", clientv3.WithIgnoreLease(), clientv3.WithLease(5))), nil).WantErr(rpctypes.ErrGRPCLeaseProvided),
			// An empty RequestOp is rejected with "key not found".
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{{}}}).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Raw(&pb.TxnRequest{Failure: []*pb.RequestOp{rawOp(&pb.RangeRequest{Key: []byte("a")}), {}}}).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{rawOp(&pb.TxnRequest{Success: []*pb.RequestOp{{}}})}}).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Raw(&pb.TxnRequest{Success: []*pb.RequestOp{rawOp(&pb.RangeRequest{Key: []byte("a"), SortOrder: 4})}}).WantErr(rpctypes.ErrGRPCInvalidSortOption),
			// Errors found while applying the branch taken fail the whole txn...
			Txn(nil, ops(put("b", "1"), put("c", "1", clientv3.WithLease(777))), nil).WantErr(rpctypes.ErrGRPCLeaseNotFound),
			Txn(nil, ops(put("b", "1"), put("missing", "", clientv3.WithIgnoreValue())), nil).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Txn(nil, ops(put("b", "1"), put("missing", "", clientv3.WithIgnoreLease())), nil).WantErr(rpctypes.ErrGRPCKeyNotFound),
			Txn(nil, ops(txn(nil, ops(put("missing", "", clientv3.WithIgnoreValue())), nil)), nil).WantErr(rpctypes.ErrGRPCKeyNotFound),
			// ...but not in the branch not taken.
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1")), ops(get("a")), ops(put("c", "1", clientv3.WithLease(777)))).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.Value("a"), "=", "1")), ops(get("a")), ops(put("missing", "", clientv3.WithIgnoreValue()))).Expect(wantSucceeded(true)),
			Txn(nil, ops(txn(cmps(cmp(clientv3.Value("a"), "=", "1")), nil, ops(put("missing", "", clientv3.WithIgnoreValue())))), nil).WantOK(),
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a")),
		)},
		{Name: "txn/lease", Steps: Steps(
			LeaseGrant(0x3001, 600),
			Txn(nil, ops(put("a", "1", clientv3.WithLease(0x3001)), put("b", "2")), nil),
			Txn(cmps(cmp(clientv3.LeaseValue("a"), "=", clientv3.LeaseID(0x3001))),
				ops(put("a", "", clientv3.WithIgnoreValue(), clientv3.WithPrevKV()), put("b", "3", clientv3.WithLease(0x3001))), nil).Expect(wantSucceeded(true)),
			Txn(cmps(cmp(clientv3.LeaseValue("b"), "=", clientv3.LeaseID(0x3001))),
				ops(put("b", "", clientv3.WithIgnoreLease(), clientv3.WithIgnoreValue())), nil).Expect(wantSucceeded(true)),
			Get("", clientv3.WithPrefix()),
			LeaseRevoke(0x3001).WantRevDelta(1),
			// ignore_value without ignore_lease detached "a" from the lease.
			Get("", clientv3.WithPrefix()).Expect(wantKeys("a")),
		)},
	}...)
}

// putOps returns n puts of distinct keys prefix%03d.
func putOps(prefix string, n int) []clientv3.Op {
	o := make([]clientv3.Op, n)
	for i := range o {
		o[i] = clientv3.OpPut(fmt.Sprintf("%s%03d", prefix, i), "v")
	}
	return o
}

// getOps returns n gets of distinct keys.
func getOps(n int) []clientv3.Op {
	o := make([]clientv3.Op, n)
	for i := range o {
		o[i] = clientv3.OpGet(fmt.Sprintf("g/%03d", i))
	}
	return o
}

// versionCmps returns n compares that hold on any store: version(key) < 1000.
func versionCmps(n int) []clientv3.Cmp {
	c := make([]clientv3.Cmp, n)
	for i := range c {
		c[i] = clientv3.Compare(clientv3.Version(fmt.Sprintf("c/%03d", i)), "<", 1000)
	}
	return c
}

// kubeScenarios replays the request shapes kube-apiserver's etcd3 storage
// sends.
func kubeScenarios() []Scenario {
	const key = "/registry/pods/default/p"
	const compactKey = "compact_rev_key"
	notFound := func(k string) clientv3.Cmp { return clientv3.Compare(clientv3.ModRevision(k), "=", 0) }
	create := func(k, v string, opts ...clientv3.OpOption) Step {
		return Txn(cmps(notFound(k)), ops(clientv3.OpPut(k, v, opts...)), nil)
	}
	update := func(label, k, v string) Step {
		return Lazy(func(s *State) Step {
			return Txn(cmps(clientv3.Compare(clientv3.ModRevision(k), "=", s.Rev(label))),
				ops(clientv3.OpPut(k, v)), ops(clientv3.OpGet(k)))
		})
	}
	remove := func(label, k string, opts ...clientv3.OpOption) Step {
		return Lazy(func(s *State) Step {
			return Txn(cmps(clientv3.Compare(clientv3.ModRevision(k), "=", s.Rev(label))),
				ops(clientv3.OpDelete(k, opts...)), ops(clientv3.OpGet(k)))
		})
	}
	// compact is one round of kube's compactor: t is the version of the
	// compact key it last saw, revLabel the step whose header revision it
	// wants to compact at ("" on bootstrap).
	compact := func(t int64, revLabel string) Step {
		return Lazy(func(s *State) Step {
			rev := int64(0)
			if revLabel != "" {
				rev = s.Rev(revLabel)
			}
			return Txn(cmps(clientv3.Compare(clientv3.Version(compactKey), "=", t)),
				ops(clientv3.OpPut(compactKey, strconv.FormatInt(rev, 10))),
				ops(clientv3.OpGet(compactKey)))
		})
	}
	return []Scenario{
		{Name: "kube/create", Steps: Steps(
			create(key, "v1").Expect(wantSucceeded(true)).WantRevDelta(1),
			create(key, "v2").Expect(wantSucceeded(false)).WantRevDelta(0),
			LeaseGrant(0x4001, 600),
			create("/registry/events/default/e", "ev", clientv3.WithLease(0x4001)).Expect(wantSucceeded(true)),
			Get("/registry/", clientv3.WithPrefix()),
		)},
		{Name: "kube/update", Steps: Steps(
			create(key, "v1").As("c"),
			update("c", key, "v2").As("u").Expect(wantSucceeded(true)).WantRevDelta(1),
			// Stale resourceVersion: the else branch returns the current object.
			update("c", key, "v3").Expect(wantSucceeded(false)).WantRevDelta(0),
			update("u", key, "v3").Expect(wantSucceeded(true)),
			// Update of a deleted object.
			Delete(key).As("d"),
			update("d", key, "v4").Expect(wantSucceeded(false)),
		)},
		{Name: "kube/delete", Steps: Steps(
			create(key, "v1").As("c"),
			Put(key, "v2").As("p"),
			remove("c", key).Expect(wantSucceeded(false)).WantRevDelta(0),
			remove("p", key, clientv3.WithPrevKV()).Expect(wantSucceeded(true)).WantRevDelta(1),
			remove("p", key).Expect(wantSucceeded(false)),
			create(key, "v3").As("c2"),
			remove("c2", key).Expect(wantSucceeded(true)),
		)},
		{Name: "kube/compaction", Steps: Steps(
			Put(key, "v1"),
			compact(0, "").As("round1").Expect(wantSucceeded(true)),
			Put(key, "v2"),
			Put(key, "v3"),
			compact(1, "round1").As("round2").Expect(wantSucceeded(true)),
			Lazy(func(s *State) Step { return Compact(s.Rev("round1")) }).WantOK(),
			// Another apiserver with a stale view loses the race and reads the key.
			compact(1, "round1").Expect(wantSucceeded(false)),
			Put(key, "v4"),
			compact(2, "round2").As("round3").Expect(wantSucceeded(true)),
			Lazy(func(s *State) Step { return Compact(s.Rev("round2")) }).WantOK(),
			Get(compactKey),
			Lazy(func(s *State) Step { return Get(key, clientv3.WithRev(s.Rev("round2"))) }).WantOK(),
			Lazy(func(s *State) Step { return Get(key, clientv3.WithRev(s.Rev("round2")-1)) }).WantErr(rpctypes.ErrGRPCCompacted),
		)},
		{Name: "kube/list", Steps: Steps(
			PutN(7, "/registry/pods/ns/p%d", "pod-%d"),
			Puts("/registry/pods0", "not-a-pod", "/registry/services/ns/s", "svc"),
			Get("/registry/pods/", clientv3.WithRange("/registry/pods0"), clientv3.WithCountOnly()).Expect(wantRange(7, false)),
			Get("/registry/pods/", clientv3.WithRange("/registry/pods0"), clientv3.WithLimit(3)).As("page1").Expect(wantRange(7, true, "/registry/pods/ns/p0", "/registry/pods/ns/p1", "/registry/pods/ns/p2")),
			Put("/registry/pods/ns/p9", "new"),
			Lazy(func(s *State) Step {
				return Get("/registry/pods/ns/p2\x00", clientv3.WithRange("/registry/pods0"), clientv3.WithLimit(3), clientv3.WithRev(s.Rev("page1")))
			}).Expect(wantRange(4, true, "/registry/pods/ns/p3", "/registry/pods/ns/p4", "/registry/pods/ns/p5")),
			Lazy(func(s *State) Step {
				return Get("/registry/pods/ns/p5\x00", clientv3.WithRange("/registry/pods0"), clientv3.WithLimit(3), clientv3.WithRev(s.Rev("page1")))
			}).Expect(wantRange(1, false, "/registry/pods/ns/p6")),
			Get("/registry/pods/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			Get("/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable()),
			Get("/registry/pods/ns/p1", clientv3.WithSerializable()),
		)},
	}
}

// wantEmptyNestedHeader checks that the response of the nested txn at
// Responses[1] carries a header that is present but empty: etcd fills the
// revision of nested put, delete and range responses, never of nested txns.
func wantEmptyNestedHeader(_ *State, r Result) error {
	m, err := firstResponse(r)
	if err != nil {
		return err
	}
	tr, ok := m.(*pb.TxnResponse)
	if !ok || len(tr.Responses) < 2 || tr.Responses[1].GetResponseTxn() == nil {
		return fmt.Errorf("no nested txn response at index 1")
	}
	h := tr.Responses[1].GetResponseTxn().Header
	if h == nil || proto.Size(h) != 0 {
		return fmt.Errorf("nested txn header %v, want present and empty", h)
	}
	return nil
}
