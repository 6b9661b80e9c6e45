package faults

import (
	"sort"

	"github.com/google/btree"
)

// store is the checker's key space at one revision during the replay: a
// map for single keys and an ordered index for ranges, so a read costs
// O(log n + its result) instead of a scan of every key (a soak's history
// has millions of reads over tens of thousands of keys). Not safe for
// concurrent use.
type store struct {
	kvs  map[string]KV
	keys *btree.BTreeG[string]
}

func newStore() *store {
	return &store{kvs: map[string]KV{}, keys: btree.NewOrderedG[string](32)}
}

// get returns key's entry.
func (s *store) get(key string) (KV, bool) {
	kv, ok := s.kvs[key]
	return kv, ok
}

// put sets key's entry.
func (s *store) put(kv KV) {
	if _, ok := s.kvs[kv.Key]; !ok {
		s.keys.ReplaceOrInsert(kv.Key)
	}
	s.kvs[kv.Key] = kv
}

// del removes key.
func (s *store) del(key string) {
	if _, ok := s.kvs[key]; ok {
		delete(s.kvs, key)
		s.keys.Delete(key)
	}
}

// rangeOf returns the entries in [key, end) in key order (end "": key
// alone).
func (s *store) rangeOf(key, end string) []KV {
	if end == "" {
		if kv, ok := s.kvs[key]; ok {
			return []KV{kv}
		}
		return nil
	}
	var out []KV
	s.keys.AscendRange(key, end, func(k string) bool {
		out = append(out, s.kvs[k])
		return true
	})
	return out
}

// model returns the model state holding only keys (those present), for
// evaluating a transaction's compares and single-key reads.
func (s *store) model(keys ...string) *mstate {
	m := &mstate{}
	seen := map[string]bool{}
	for _, k := range keys {
		if kv, ok := s.kvs[k]; ok && !seen[k] {
			seen[k] = true
			m.kvs = append(m.kvs, kv)
		}
	}
	sort.Slice(m.kvs, func(i, j int) bool { return m.kvs[i].Key < m.kvs[j].Key })
	return m
}
