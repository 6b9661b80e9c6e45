package diff

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PutN returns n Put steps writing key fmt.Sprintf(keyFormat, i) with value
// fmt.Sprintf(valueFormat, i) for i in [0, n). Each put is its own revision.
func PutN(n int, keyFormat, valueFormat string) []Step {
	steps := make([]Step, n)
	for i := range steps {
		steps[i] = Put(fmt.Sprintf(keyFormat, i), fmt.Sprintf(valueFormat, i))
	}
	return steps
}

// Puts returns one Put step per key/value pair: Puts("a", "1", "b", "2").
func Puts(kv ...string) []Step {
	if len(kv)%2 != 0 {
		panic("diff.Puts: odd number of arguments")
	}
	steps := make([]Step, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		steps = append(steps, Put(kv[i], kv[i+1]))
	}
	return steps
}

// Steps concatenates steps and step slices into one slice, so scenarios can
// mix single steps with generated ones: Steps(Puts("a", "1"), Get("a")).
func Steps(parts ...any) []Step {
	var out []Step
	for _, p := range parts {
		switch v := p.(type) {
		case Step:
			out = append(out, v)
		case []Step:
			out = append(out, v...)
		default:
			panic(fmt.Sprintf("diff.Steps: unsupported %T", p))
		}
	}
	return out
}

// The helpers below build Expect checks that scenarios use to document the
// behaviour they pin down.

// firstResponse returns the single response of r, or an error.
func firstResponse(r Result) (proto.Message, error) {
	if r.Err != nil {
		return nil, fmt.Errorf("unexpected error %v", errorInfoOf(r.Err))
	}
	if len(r.Responses) == 0 {
		return nil, fmt.Errorf("no response")
	}
	return r.Responses[len(r.Responses)-1], nil
}

// rangeOf returns the RangeResponse of a Range step, of a streamed range
// (chunks merged) or of the first response of a Txn.
func rangeOf(r Result) (*pb.RangeResponse, error) {
	if r.Err != nil {
		return nil, fmt.Errorf("unexpected error %v", errorInfoOf(r.Err))
	}
	if len(r.Responses) == 0 {
		return nil, fmt.Errorf("no response")
	}
	switch m := r.Responses[0].(type) {
	case *pb.RangeResponse, *pb.RangeStreamResponse:
		return mergeChunks(r.Responses)[0].(*pb.RangeResponse), nil
	case *pb.TxnResponse:
		if len(m.Responses) == 0 || m.Responses[0].GetResponseRange() == nil {
			return nil, fmt.Errorf("txn response has no leading range response")
		}
		return m.Responses[0].GetResponseRange(), nil
	}
	return nil, fmt.Errorf("not a range response: %T", r.Responses[0])
}

func keysOf(rr *pb.RangeResponse) []string {
	keys := make([]string, len(rr.Kvs))
	for i, kv := range rr.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}

// wantKeys expects a range result holding exactly these keys, in order.
func wantKeys(keys ...string) func(*State, Result) error {
	return func(_ *State, r Result) error {
		rr, err := rangeOf(r)
		if err != nil {
			return err
		}
		if got := keysOf(rr); !slices.Equal(got, keys) {
			return fmt.Errorf("keys %q, want %q", got, keys)
		}
		return nil
	}
}

// wantRange expects a range result with this count and more flag and, if
// any keys are given, exactly these keys in order.
func wantRange(count int64, more bool, keys ...string) func(*State, Result) error {
	return func(s *State, r Result) error {
		if len(keys) > 0 {
			if err := wantKeys(keys...)(s, r); err != nil {
				return err
			}
		}
		rr, err := rangeOf(r)
		if err != nil {
			return err
		}
		if rr.Count != count || rr.More != more {
			return fmt.Errorf("count=%d more=%v, want count=%d more=%v", rr.Count, rr.More, count, more)
		}
		return nil
	}
}

// wantValues expects a range result whose values are exactly these.
func wantValues(values ...string) func(*State, Result) error {
	return func(_ *State, r Result) error {
		rr, err := rangeOf(r)
		if err != nil {
			return err
		}
		got := make([]string, len(rr.Kvs))
		for i, kv := range rr.Kvs {
			got[i] = string(kv.Value)
		}
		if !slices.Equal(got, values) {
			return fmt.Errorf("values %q, want %q", got, values)
		}
		return nil
	}
}

// wantKV expects a single-key range result with this value, version and
// create/mod revisions given relative to labelled steps ("" means: the
// revision of the step being checked is irrelevant and not checked).
func wantKV(value string, version int64, createLabel, modLabel string) func(*State, Result) error {
	return func(s *State, r Result) error {
		rr, err := rangeOf(r)
		if err != nil {
			return err
		}
		if len(rr.Kvs) != 1 {
			return fmt.Errorf("%d kvs, want 1", len(rr.Kvs))
		}
		kv := rr.Kvs[0]
		var errs []string
		if string(kv.Value) != value {
			errs = append(errs, fmt.Sprintf("value %q, want %q", kv.Value, value))
		}
		if kv.Version != version {
			errs = append(errs, fmt.Sprintf("version %d, want %d", kv.Version, version))
		}
		if createLabel != "" && kv.CreateRevision != s.Rev(createLabel) {
			errs = append(errs, fmt.Sprintf("create_revision %d, want %d", kv.CreateRevision, s.Rev(createLabel)))
		}
		if modLabel != "" && kv.ModRevision != s.Rev(modLabel) {
			errs = append(errs, fmt.Sprintf("mod_revision %d, want %d", kv.ModRevision, s.Rev(modLabel)))
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
}

// wantSucceeded expects a Txn response with this succeeded flag.
func wantSucceeded(want bool) func(*State, Result) error {
	return func(_ *State, r Result) error {
		m, err := firstResponse(r)
		if err != nil {
			return err
		}
		tr, ok := m.(*pb.TxnResponse)
		if !ok {
			return fmt.Errorf("not a txn response: %T", m)
		}
		if tr.Succeeded != want {
			return fmt.Errorf("succeeded=%v, want %v", tr.Succeeded, want)
		}
		return nil
	}
}

// wantDeleted expects a DeleteRange response with this deleted count.
func wantDeleted(n int64) func(*State, Result) error {
	return func(_ *State, r Result) error {
		m, err := firstResponse(r)
		if err != nil {
			return err
		}
		dr, ok := m.(*pb.DeleteRangeResponse)
		if !ok {
			return fmt.Errorf("not a delete response: %T", m)
		}
		if dr.Deleted != n {
			return fmt.Errorf("deleted=%d, want %d", dr.Deleted, n)
		}
		return nil
	}
}

// wantPrevKV expects a Put response whose prev_kv holds this value, or no
// prev_kv when value is nil.
func wantPrevKV(value *string) func(*State, Result) error {
	return func(_ *State, r Result) error {
		m, err := firstResponse(r)
		if err != nil {
			return err
		}
		pr, ok := m.(*pb.PutResponse)
		if !ok {
			return fmt.Errorf("not a put response: %T", m)
		}
		switch {
		case value == nil && pr.PrevKv != nil:
			return fmt.Errorf("prev_kv %v, want none", pr.PrevKv)
		case value != nil && pr.PrevKv == nil:
			return fmt.Errorf("no prev_kv, want value %q", *value)
		case value != nil && string(pr.PrevKv.Value) != *value:
			return fmt.Errorf("prev_kv value %q, want %q", pr.PrevKv.Value, *value)
		}
		return nil
	}
}

// wantChunks expects a streamed range made of chunks with these key counts.
func wantChunks(sizes ...int) func(*State, Result) error {
	return func(_ *State, r Result) error {
		if r.Err != nil {
			return fmt.Errorf("unexpected error %v", errorInfoOf(r.Err))
		}
		got := make([]int, len(r.Responses))
		for i, m := range r.Responses {
			switch c := m.(type) {
			case *pb.RangeResponse:
				got[i] = len(c.Kvs)
			case *pb.RangeStreamResponse:
				got[i] = len(c.GetRangeResponse().GetKvs())
			}
		}
		if !slices.Equal(got, sizes) {
			return fmt.Errorf("chunk sizes %v, want %v", got, sizes)
		}
		return nil
	}
}

func ptr(s string) *string { return &s }

// cmp is shorthand for clientv3.Compare.
func cmp(c clientv3.Cmp, result string, v any) clientv3.Cmp { return clientv3.Compare(c, result, v) }

// ops is shorthand for a list of clientv3 ops.
func ops(o ...clientv3.Op) []clientv3.Op { return o }

// cmps is shorthand for a list of clientv3 compares.
func cmps(c ...clientv3.Cmp) []clientv3.Cmp { return c }

// rawOp wraps a request into a pb.RequestOp for raw Txn requests.
func rawOp(req proto.Message) *pb.RequestOp {
	switch r := req.(type) {
	case *pb.RangeRequest:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
	case *pb.PutRequest:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r}}
	case *pb.DeleteRangeRequest:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}
	case *pb.TxnRequest:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: r}}
	}
	panic(fmt.Sprintf("rawOp: unsupported %T", req))
}
