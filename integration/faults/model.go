package faults

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The linearizability model is the whole store of model keys (KubePrefix
// and EtcdPrefix) with etcd's revisions: each write that changes something
// makes the next revision, reads see the state at their header revision.
// Revisions made by requests outside the model (lease-attached keys: their
// puts, revokes and expiries) are known from the watches as "external": a
// write may skip them, a read may return a header revision among them.

// mstate is the model's state. It is never modified once built.
type mstate struct {
	rev int64 // revision of the last model write
	kvs []KV  // sorted by key
}

// mout is an operation's output for the model.
type mout struct {
	// resolved: the client never got an answer; the watches saw the
	// write applied at rev. Only the revision is known.
	resolved bool
	rev      int64
}

// external is the sorted set of revisions made outside the model.
type external []int64

// all tells whether every revision in [from, to] is external (true for an
// empty interval).
func (e external) all(from, to int64) bool {
	if from > to {
		return true
	}
	lo := sort.Search(len(e), func(i int) bool { return e[i] >= from })
	hi := sort.Search(len(e), func(i int) bool { return e[i] > to })
	return int64(hi-lo) == to-from+1
}

func (s *mstate) find(key string) (int, bool) {
	i := sort.Search(len(s.kvs), func(i int) bool { return s.kvs[i].Key >= key })
	return i, i < len(s.kvs) && s.kvs[i].Key == key
}

func (s *mstate) get(key string) (KV, bool) {
	i, ok := s.find(key)
	if !ok {
		return KV{}, false
	}
	return s.kvs[i], true
}

// rangeOf returns the model keys in [key, end) (end "": key alone).
func (s *mstate) rangeOf(key, end string) []KV {
	if end == "" {
		if kv, ok := s.get(key); ok {
			return []KV{kv}
		}
		return nil
	}
	i, _ := s.find(key)
	var out []KV
	for ; i < len(s.kvs) && s.kvs[i].Key < end; i++ {
		out = append(out, s.kvs[i])
	}
	return out
}

// outsidePrefixes are the key spaces outside the model: lease-attached
// keys, and the probes' key (checked on its own, see checker.realTime).
var outsidePrefixes = []string{LeasePrefix, ProbePrefix}

// isModelKey tells whether key is in the model (not lease-attached, not a
// probe's).
func isModelKey(key string) bool {
	for _, p := range outsidePrefixes {
		if strings.HasPrefix(key, p) {
			return false
		}
	}
	return true
}

// overlapsOutside tells whether [key, end) includes keys outside the model.
func overlapsOutside(key, end string) bool {
	if end == "" {
		return !isModelKey(key)
	}
	for _, p := range outsidePrefixes {
		if key < clientEnd(p) && end > p {
			return true
		}
	}
	return false
}

// clientEnd is clientv3.GetPrefixRangeEnd for the prefixes used here.
func clientEnd(prefix string) string {
	b := []byte(prefix)
	b[len(b)-1]++
	return string(b)
}

func modelKVs(kvs []KV) []KV {
	var out []KV
	for _, kv := range kvs {
		if isModelKey(kv.Key) {
			out = append(out, kv)
		}
	}
	return out
}

func sameKVs(a, b []KV) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Key != y.Key || x.Value != y.Value || x.Mod != y.Mod || x.Create != y.Create || x.Ver != y.Ver {
			return false
		}
	}
	return true
}

// cmpHolds evaluates a compare on s.
func (s *mstate) cmpHolds(c Cmp) bool {
	kv, _ := s.get(c.Key)
	v := kv.Mod
	if c.Target == "version" {
		v = kv.Ver
	}
	switch c.Op {
	case "=":
		return v == c.Value
	case ">":
		return v > c.Value
	}
	return false
}

// writes tells whether branch changes something on s.
func (s *mstate) writes(branch []Sub) bool {
	for _, b := range branch {
		switch b.Kind {
		case "put":
			return true
		case "del":
			if _, ok := s.get(b.Key); ok {
				return true
			}
		}
	}
	return false
}

// apply returns the state after branch at revision rev, checking the
// results the client got when known is set.
func (s *mstate) apply(branch []Sub, rev int64, results []SubResult, known bool) (bool, *mstate) {
	ns := &mstate{rev: rev, kvs: append([]KV(nil), s.kvs...)}
	for i, b := range branch {
		switch b.Kind {
		case "put":
			j, ok := ns.find(b.Key)
			if ok {
				kv := ns.kvs[j]
				ns.kvs[j] = KV{Key: b.Key, Value: b.Value, Create: kv.Create, Mod: rev, Ver: kv.Ver + 1}
			} else {
				ns.kvs = append(ns.kvs, KV{})
				copy(ns.kvs[j+1:], ns.kvs[j:])
				ns.kvs[j] = KV{Key: b.Key, Value: b.Value, Create: rev, Mod: rev, Ver: 1}
			}
		case "del":
			j, ok := ns.find(b.Key)
			var n int64
			if ok {
				ns.kvs = append(ns.kvs[:j], ns.kvs[j+1:]...)
				n = 1
			}
			if known && results[i].Deleted != n {
				return false, nil
			}
		case "get":
			if known && !sameKVs(modelKVs(results[i].KVs), ns.rangeOf(b.Key, "")) {
				return false, nil
			}
		}
	}
	return true, ns
}

// step is the model's transition for op (the recorded request) with out.
func step(ext external, s *mstate, op *Op, out mout) (bool, *mstate) {
	// readAt checks a read's header revision: at or after the last model
	// write, with only external revisions in between.
	readAt := func(h int64) bool { return h >= s.rev && ext.all(s.rev+1, h) }
	switch op.Kind {
	case KindRange:
		if !readAt(op.Header) {
			return false, nil
		}
		want := s.rangeOf(op.Key, op.End)
		got := op.KVs
		if overlapsOutside(op.Key, op.End) {
			got = modelKVs(got)
		} else if op.Limit > 0 {
			if int64(len(want)) != op.Count || (int64(len(want)) > op.Limit) != op.More {
				return false, nil
			}
			if int64(len(want)) > op.Limit {
				want = want[:op.Limit]
			}
		} else if int64(len(want)) != op.Count {
			return false, nil
		}
		return sameKVs(got, want), s
	case KindPinned:
		// The content is checked against the replayed history; here only
		// that its header revision is current.
		return readAt(op.Header) && op.Rev <= op.Header, s
	case KindPut, KindTxn:
		succeeded := true
		for _, c := range op.Cmps {
			succeeded = succeeded && s.cmpHolds(c)
		}
		if !out.resolved && op.Kind == KindTxn && succeeded != op.Succeeded {
			return false, nil
		}
		branch := op.Then
		if !succeeded {
			branch = op.Else
		}
		if op.Kind == KindPut {
			branch = []Sub{{Kind: "put", Key: op.Key, Value: op.Value}}
		}
		if !s.writes(branch) {
			if out.resolved {
				return false, nil // the watches saw it write
			}
			if !readAt(out.rev) {
				return false, nil
			}
			ok, _ := s.apply(branch, s.rev, op.Results, true)
			return ok, s
		}
		if out.rev <= s.rev || !ext.all(s.rev+1, out.rev-1) {
			return false, nil
		}
		return s.apply(branch, out.rev, op.Results, !out.resolved && op.Kind == KindTxn)
	}
	return false, nil
}

// newModel returns the porcupine model over the external revisions ext,
// from a store at revision first (empty under Prefix).
func newModel(ext external, first int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return &mstate{rev: first} },
		Step: func(state, input, output any) (bool, any) {
			ok, ns := step(ext, state.(*mstate), input.(*Op), output.(mout))
			if !ok {
				return false, nil
			}
			return true, ns
		},
		Equal: func(a, b any) bool {
			x, y := a.(*mstate), b.(*mstate)
			return x == y || (x.rev == y.rev && sameKVs(x.kvs, y.kvs))
		},
		Hash: func(state any) uint64 {
			s := state.(*mstate)
			return uint64(s.rev)*1000003 + uint64(len(s.kvs))
		},
		DescribeOperation: func(input, output any) string {
			op, out := input.(*Op), output.(mout)
			if out.resolved {
				return fmt.Sprintf("%s (no answer; watched at rev %d)", op, out.rev)
			}
			return op.String()
		},
		DescribeState: func(state any) string {
			s := state.(*mstate)
			parts := make([]string, len(s.kvs))
			for i, kv := range s.kvs {
				parts[i] = kv.String()
			}
			return fmt.Sprintf("rev %d: %s", s.rev, strings.Join(parts, " "))
		},
	}
}
