package revision

import (
	"bytes"
	"fmt"
	"slices"
)

// A Delta is what changed in a view after a revision: applied to the view's
// state at that revision (Apply), it gives the state of the snapshot it
// was taken from. Physical compaction stores one instead of a whole base
// generation when few keys changed since the last one, so that its cost
// follows what changed, not the whole data.
type Delta struct {
	// Since is the revision of the state the delta applies to.
	Since int64
	// Changed holds the snapshot's state, leases, auth state and alarms
	// whole, and in Keys every key with a change after Since, with all its
	// retained versions.
	Changed *Snapshot
	// Removed lists, ascending, the keys with a change after Since that
	// the snapshot no longer holds (deleted, then compacted away).
	Removed [][]byte
	// Total is the number of keys the snapshot holds.
	Total int
}

// removal records a key the view dropped (TrimCompacted) and the revision
// of the deletion that ended it.
type removal struct {
	key []byte
	rev int64
}

// Since returns the delta from the view's state at rev to s. ok is false if
// s cannot tell: s is not a view's snapshot, or the view was built (or
// forgot its removals, PruneRemoved) after rev, so a key removed since rev
// might be missed. It walks every key of s (O(keys), no lock held) and
// shares the versions with s.
func (s *Snapshot) Since(rev int64) (d *Delta, ok bool) {
	if s.tree == nil || rev < s.removedFrom || rev > s.State.Rev {
		return nil, false
	}
	d = &Delta{Since: rev, Changed: &Snapshot{State: s.State, Leases: s.Leases, Auth: s.Auth, Alarms: s.Alarms}}
	compactRev := s.State.CompactRev
	retained := func(ki *keyIndex) []*KeyValue {
		vs := ki.versions
		if compactRev > 0 {
			vs = vs[retainedFrom(vs, compactRev):]
		}
		return vs[:len(vs):len(vs)]
	}
	s.tree.Ascend(func(ki *keyIndex) bool {
		vs := retained(ki)
		if len(vs) > 0 {
			d.Total++
		}
		if n := len(ki.versions); n == 0 || ki.versions[n-1].ModRevision <= rev {
			return true
		}
		if len(vs) == 0 {
			// Deleted after rev and compacted, not yet trimmed.
			d.Removed = append(d.Removed, ki.key)
			return true
		}
		d.Changed.Keys = append(d.Changed.Keys, KeyHistory{Key: ki.key, Versions: vs})
		return true
	})
	for _, r := range s.removed {
		if r.rev <= rev {
			continue
		}
		if ki, found := s.tree.Get(&keyIndex{key: r.key}); found && len(retained(ki)) > 0 {
			continue // created again: in Keys
		}
		d.Removed = append(d.Removed, r.key)
	}
	slices.SortFunc(d.Removed, bytes.Compare)
	d.Removed = slices.CompactFunc(d.Removed, bytes.Equal)
	return d, true
}

// Apply returns the state d describes, given base, the state at d.Since
// (a snapshot listing its keys, as a decoded one does): d's keys replace
// base's, d's removed keys are dropped, and every other key keeps base's
// versions but those d's compacted revision made invisible (as the view
// would have trimmed them). base is not modified; versions are shared.
func (d *Delta) Apply(base *Snapshot) (*Snapshot, error) {
	if base.tree != nil {
		return nil, fmt.Errorf("delta: the base must list its keys")
	}
	if base.State.Rev != d.Since {
		return nil, fmt.Errorf("delta: applies to revision %d, the base is at %d", d.Since, base.State.Rev)
	}
	if d.Changed.State.LSN < base.State.LSN || d.Changed.State.Rev < base.State.Rev || d.Changed.State.CompactRev < base.State.CompactRev {
		return nil, fmt.Errorf("delta: at entry %d revision %d compacted %d, behind its base (entry %d revision %d compacted %d)",
			d.Changed.State.LSN, d.Changed.State.Rev, d.Changed.State.CompactRev, base.State.LSN, base.State.Rev, base.State.CompactRev)
	}
	out := &Snapshot{State: d.Changed.State, Leases: d.Changed.Leases, Auth: d.Changed.Auth, Alarms: d.Changed.Alarms}
	out.Keys = make([]KeyHistory, 0, len(base.Keys)+len(d.Changed.Keys))
	compactRev := d.Changed.State.CompactRev
	keep := func(kh KeyHistory) {
		vs := kh.Versions
		if compactRev > 0 {
			vs = vs[retainedFrom(vs, compactRev):]
		}
		if len(vs) > 0 {
			out.Keys = append(out.Keys, KeyHistory{Key: kh.Key, Versions: vs})
		}
	}
	bk, ck, rm := base.Keys, d.Changed.Keys, d.Removed
	for len(bk) > 0 || len(ck) > 0 {
		switch {
		case len(ck) == 0 || (len(bk) > 0 && bytes.Compare(bk[0].Key, ck[0].Key) < 0):
			for len(rm) > 0 && bytes.Compare(rm[0], bk[0].Key) < 0 {
				rm = rm[1:]
			}
			if len(rm) == 0 || !bytes.Equal(rm[0], bk[0].Key) {
				keep(bk[0])
			}
			bk = bk[1:]
		default:
			if len(bk) > 0 && bytes.Equal(bk[0].Key, ck[0].Key) {
				bk = bk[1:]
			}
			if len(out.Keys) > 0 && bytes.Compare(out.Keys[len(out.Keys)-1].Key, ck[0].Key) >= 0 {
				return nil, fmt.Errorf("delta: keys out of order at %q", ck[0].Key)
			}
			out.Keys = append(out.Keys, ck[0])
			ck = ck[1:]
		}
	}
	return out, nil
}

// PruneRemoved forgets the keys removed by deletions at or below rev: a
// base generation at rev holds their removal. Deltas since a revision
// below rev are not available afterwards (Snapshot.Since).
func (v *View) PruneRemoved(rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if rev <= v.removedFrom {
		return
	}
	v.removedFrom = rev
	n := 0
	for _, r := range v.removed {
		if r.rev > rev {
			n++
		}
	}
	if n == len(v.removed) {
		return
	}
	// A new slice: snapshots share the old one.
	kept := make([]removal, 0, n)
	for _, r := range v.removed {
		if r.rev > rev {
			kept = append(kept, r)
		}
	}
	v.removed = kept
}
