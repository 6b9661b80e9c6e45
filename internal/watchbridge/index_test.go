package watchbridge

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// TestRangeIndexFindsExactlyTheMatchingWatchers: under random adds and
// removes of ranges (bounded, unbounded, nested, equal starts), stab finds
// exactly the watchers whose range holds the key, as a scan would.
func TestRangeIndexFindsExactlyTheMatchingWatchers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte { return []byte(fmt.Sprintf("k%02d", rng.IntN(40))) }
	x := newRangeIndex()
	live := map[*watcher]bool{}
	for step := 0; step < 4000; step++ {
		if len(live) > 0 && rng.IntN(3) == 0 {
			for w := range live {
				if !x.remove(w) {
					t.Fatalf("step %d: remove of a member failed", step)
				}
				delete(live, w)
				break
			}
		} else {
			w := &watcher{id: int64(step), key: key(), end: []byte{}}
			if rng.IntN(4) != 0 {
				w.end = append(append([]byte{}, w.key...), byte('0'+rng.IntN(10)))
				if rng.IntN(2) == 0 {
					w.end = key()
				}
				if string(w.end) <= string(w.key) {
					w.end = append(append([]byte{}, w.key...), 0)
				}
			}
			x.add(w)
			live[w] = true
		}
		if x.len() != len(live) {
			t.Fatalf("step %d: %d watchers indexed, want %d", step, x.len(), len(live))
		}
		k := key()
		if rng.IntN(2) == 0 {
			k = append(k, 'x')
		}
		var got, want []int64
		x.stab(k, func(w *watcher) { got = append(got, w.id) })
		for w := range live {
			if w.matches(k) {
				want = append(want, w.id)
			}
		}
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: key %q: index found %v, want %v", step, k, got, want)
		}
	}
	if x.remove(&watcher{key: []byte("k00"), end: []byte{}}) {
		t.Fatal("removed a watcher never added")
	}
}
