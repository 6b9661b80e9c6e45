package faults

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/zketcd/zketcd/integration/watchcheck"
)

// TestStoreRangesMatchAScan compares the checker's indexed store with a
// scan of a plain map over random puts, deletes and ranges.
func TestStoreRangesMatchAScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	s := newStore()
	plain := map[string]KV{}
	key := func() string { return fmt.Sprintf("/k/%03d", rng.Intn(300)) }
	for i := range 20000 {
		switch k := key(); rng.Intn(3) {
		case 0:
			s.del(k)
			delete(plain, k)
		default:
			kv := KV{Key: k, Value: fmt.Sprint(i), Mod: int64(i)}
			s.put(kv)
			plain[k] = kv
		}
		from, end := key(), key()
		if rng.Intn(4) == 0 {
			end = ""
		}
		var want []KV
		for k, kv := range plain {
			if (end == "" && k == from) || (end != "" && k >= from && k < end) {
				want = append(want, kv)
			}
		}
		sort.Slice(want, func(i, j int) bool { return want[i].Key < want[j].Key })
		if got := s.rangeOf(from, end); !sameKVs(got, want) {
			t.Fatalf("step %d: range [%q, %q) = %v, want %v", i, from, end, got, want)
		}
	}
}

// BenchmarkCheckLongHistory checks a soak-sized key space: every read
// costs the range it returns, not a scan of the store.
func BenchmarkCheckLongHistory(b *testing.B) {
	const keys, ops = 20000, 200000
	s := newSim()
	for i := range keys {
		s.put(0, fmt.Sprintf("%s%05d", KubePrefix, i), fmt.Sprintf("init%d", i), i, i)
	}
	for i := range ops {
		k := fmt.Sprintf("%s%05d", KubePrefix, i%keys)
		if i%2 == 0 {
			s.put(0, k, fmt.Sprintf("v%d", i), keys+i, keys+i)
		} else {
			s.read(1, k, keys+i, keys+i)
		}
	}
	s.h.Final, s.h.Elapsed = s.rev, time.Hour
	s.h.Watches = []*watchcheck.Watch{{Spec: watchcheck.Spec{Name: "archive", Key: Prefix, End: clientEnd(Prefix)},
		Segments: []*watchcheck.Segment{{Start: 2, Responses: s.resps}}}}
	b.ResetTimer()
	for range b.N {
		r := Check(s.h, CheckOptions{LeaseBound: 5 * time.Second, MaxLinearizabilityOps: 1})
		if len(r.Violations) > 0 {
			b.Fatal(r.Violations[0])
		}
	}
}
