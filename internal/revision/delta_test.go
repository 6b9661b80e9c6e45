package revision

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// listed returns s as a snapshot that lists its keys (what decoding a
// stored base gives).
func listed(s *Snapshot) *Snapshot {
	out := &Snapshot{State: s.State, Leases: s.Leases, Auth: s.Auth, Alarms: s.Alarms}
	s.Each(func(kh KeyHistory) bool { out.Keys = append(out.Keys, kh); return true })
	return out
}

// dump prints every key's versions, for comparing two states.
func dump(s *Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%+v\n", s.State)
	s.Each(func(kh KeyHistory) bool {
		fmt.Fprintf(&b, "%s:", kh.Key)
		for _, kv := range kh.Versions {
			fmt.Fprintf(&b, " %d.%d/v%d/c%d=%s", kv.ModRevision, kv.Sub, kv.Version, kv.CreateRevision, kv.Value)
		}
		b.WriteString("\n")
		return true
	})
	return b.String()
}

// TestDeltaAppliedToTheEarlierStateGivesTheLaterOne: a view takes random
// puts, deletes, compactions and partial trims; at random points a chain
// of states is kept, each the previous one with the delta since it applied
// (as recovery loads a base and its deltas), and must equal the view's own
// snapshot, every key and version.
func TestDeltaAppliedToTheEarlierStateGivesTheLaterOne(t *testing.T) {
	removed := 0
	for seed := int64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewSource(seed))
		v := NewView(1, 1)
		lsn, rev := int64(1), int64(1)
		chain := listed(v.Snapshot())
		deltas := 0
		for step := 0; step < 300; step++ {
			cr := max(v.State().CompactRev, 0)
			switch r := rng.Intn(20); {
			case r < 2 && rev > cr:
				lsn++
				to := cr + 1 + rng.Int63n(rev-cr)
				mustApply(t, v, lsn, Op{Kind: OpCompact, Rev: to})
			case r < 4:
				v.TrimCompacted(1 + rng.Intn(4))
			default:
				lsn++
				rev++
				var cs []Change
				used := map[string]bool{}
				for n := 1 + rng.Intn(3); n > 0; n-- {
					k := fmt.Sprintf("k%02d", rng.Intn(30))
					if used[k] {
						continue
					}
					used[k] = true
					var live bool
					_ = v.Read(func(r Reader) error { live = get(t, r, k, 0) != nil; return nil })
					if live && rng.Intn(3) == 0 {
						cs = append(cs, del(k))
					} else {
						cs = append(cs, put(k, fmt.Sprint(rev)))
					}
				}
				mustApply(t, v, lsn, txn(rev, cs...))
			}
			if rng.Intn(15) != 0 {
				continue
			}
			snap := v.Snapshot()
			d, ok := snap.Since(chain.State.Rev)
			if !ok {
				t.Fatalf("seed %d step %d: no delta since %d", seed, step, chain.State.Rev)
			}
			next, err := d.Apply(chain)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if got, want := dump(next), dump(snap); got != want {
				t.Fatalf("seed %d step %d: delta since %d (%d keys, %d removed) applied:\n%s\nwant:\n%s", seed, step, d.Since, len(d.Changed.Keys), len(d.Removed), got, want)
			}
			if d.Total != snap.Len() {
				t.Fatalf("seed %d step %d: total %d, want %d", seed, step, d.Total, snap.Len())
			}
			chain = next
			deltas++
			removed += len(d.Removed)
			if rng.Intn(3) == 0 {
				v.PruneRemoved(chain.State.Rev)
			}
			if _, err := FromSnapshot(chain); err != nil {
				t.Fatalf("seed %d step %d: the merged state does not load: %v", seed, step, err)
			}
		}
		if deltas == 0 {
			t.Fatalf("seed %d: no delta taken", seed)
		}
	}
	if removed == 0 {
		t.Fatal("no delta removed a key")
	}
	t.Logf("%d keys removed by deltas", removed)
}

// TestDeltaIsRefusedWhereRemovalsMayBeMissing: a view built from a
// snapshot at revision R, or one that forgot its removals up to R, cannot
// tell what was removed before R.
func TestDeltaIsRefusedWhereRemovalsMayBeMissing(t *testing.T) {
	v := NewView(1, 1)
	mustApply(t, v, 2, txn(2, put("a", "1")), txn(3, put("b", "1")))
	w, err := FromSnapshot(v.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Snapshot().Since(2); ok {
		t.Fatal("a delta from before the view was built")
	}
	if _, ok := w.Snapshot().Since(3); !ok {
		t.Fatal("no delta from the view's own start")
	}
	mustApply(t, w, 3, txn(4, del("a")), txn(5, put("c", "1")))
	mustApply(t, w, 4, Op{Kind: OpCompact, Rev: 5})
	trimAll(t, w)
	d, ok := w.Snapshot().Since(3)
	if !ok || len(d.Removed) != 1 || string(d.Removed[0]) != "a" || len(d.Changed.Keys) != 1 {
		t.Fatalf("delta since 3: %v %+v", ok, d)
	}
	w.PruneRemoved(4)
	if _, ok := w.Snapshot().Since(3); ok {
		t.Fatal("a delta from before the removals were forgotten")
	}
	if _, err := d.Apply(listed(v.Snapshot())); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(listed(w.Snapshot())); err == nil {
		t.Fatal("a delta applied to a state at another revision")
	}
}
