package revision

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/google/btree"
)

// Snapshot is a view's complete state at one log position: every retained
// version of every key (history since the compacted revision, plus the
// newest version at or below it), and the leases. Loading it gives a view
// that answers every read and watch the original could.
//
// A snapshot either lists its keys in Keys (one decoded or built by a
// caller) or, when View.Snapshot made it, holds a copy-on-write clone of
// the view's key index and leaves Keys nil; Each and Len read both kinds.
type Snapshot struct {
	State  State
	Keys   []KeyHistory // ascending by key; nil in a view's snapshot (use Each)
	Leases []Lease      // ascending by ID; Lease.keys is not set (derived from the keys)
	Auth   []byte       // the encoded auth state (see OpAuth); nil if never set
	Alarms []Alarm      // the active alarms, sorted (see OpAlarm)

	tree *btree.BTreeG[*keyIndex] // a view's snapshot: its clone of the key index
	// A view's snapshot: the keys the view dropped since its state at
	// removedFrom (see Since).
	removed     []removal
	removedFrom int64
}

// KeyHistory is one key's retained versions, oldest first; a version with
// Version 0 is a deletion.
type KeyHistory struct {
	Key      []byte
	Versions []*KeyValue
}

// Each calls fn with every key's retained versions in ascending key order
// until fn returns false. The versions are shared with the view and must
// not be modified. It may run concurrently with the view's applies.
func (s *Snapshot) Each(fn func(KeyHistory) bool) {
	if s.tree == nil {
		for _, kh := range s.Keys {
			if !fn(kh) {
				return
			}
		}
		return
	}
	rev := s.State.CompactRev
	s.tree.Ascend(func(ki *keyIndex) bool {
		// The view drops compacted versions in the background
		// (TrimCompacted): skip those it has not dropped yet.
		vs := ki.versions
		if rev > 0 {
			vs = vs[retainedFrom(vs, rev):]
		}
		if len(vs) == 0 {
			return true
		}
		return fn(KeyHistory{Key: ki.key, Versions: vs[:len(vs):len(vs)]})
	})
}

// DataBytes returns the bytes of the keys and values of every version Each
// visits (a key counted once per version, as the log carries it) and of the
// auth state: what a base generation of the snapshot holds before encoding.
// O(versions); it may run concurrently with the view's applies.
func (s *Snapshot) DataBytes() int64 {
	n := int64(len(s.Auth))
	s.Each(func(kh KeyHistory) bool {
		for _, kv := range kh.Versions {
			n += int64(len(kv.Key) + len(kv.Value))
		}
		return true
	})
	return n
}

// Len returns the number of keys Each visits (O(keys) for a view's
// snapshot, which counts them).
func (s *Snapshot) Len() int {
	if s.tree == nil {
		return len(s.Keys)
	}
	n := 0
	s.Each(func(KeyHistory) bool { n++; return true })
	return n
}

// Snapshot returns the view's state. It holds the read lock only to clone
// the key index (copy-on-write: O(1)) and copy the leases, so it does not
// stall applies for O(keys); versions and values are shared, never copied.
func (v *View) Snapshot() *Snapshot {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.snapshotLocked()
}

// snapshotLocked is Snapshot for a caller holding v.mu (read or write).
// Cloning needs exclusive use of the tree: a read lock is shared with other
// readers, so the clone is made under cloneMu as well.
func (v *View) snapshotLocked() *Snapshot {
	v.cloneMu.Lock()
	tree := v.tree.Clone()
	v.cloneMu.Unlock()
	s := &Snapshot{State: v.state, tree: tree, Auth: v.auth, Alarms: v.alarms,
		removed: v.removed[:len(v.removed):len(v.removed)], removedFrom: v.removedFrom}
	for _, l := range v.leases {
		s.Leases = append(s.Leases, Lease{ID: l.ID, TTL: l.TTL, RemainingTTL: l.RemainingTTL})
	}
	sort.Slice(s.Leases, func(i, j int) bool { return s.Leases[i].ID < s.Leases[j].ID })
	return s
}

// FromSnapshot builds a view from s. It checks what it can (keys in order,
// versions in revision order, leases of live keys existing) and reports the
// first inconsistency.
func FromSnapshot(s *Snapshot) (*View, error) {
	v := NewView(s.State.LSN, s.State.Rev)
	v.state = s.State
	v.removedFrom = s.State.Rev
	v.auth = s.Auth
	for _, a := range s.Alarms {
		v.alarms = ApplyAlarm(v.alarms, AlarmChange{Alarm: a, Activate: true})
	}
	for _, l := range s.Leases {
		v.leases[l.ID] = &Lease{ID: l.ID, TTL: l.TTL, RemainingTTL: l.RemainingTTL, keys: map[string]struct{}{}}
	}
	var prevKey []byte
	var err error
	first := true
	s.Each(func(kh KeyHistory) bool {
		if !first && bytes.Compare(prevKey, kh.Key) >= 0 {
			err = fmt.Errorf("snapshot: keys out of order at %q", kh.Key)
			return false
		}
		first, prevKey = false, kh.Key
		if len(kh.Versions) == 0 {
			err = fmt.Errorf("snapshot: key %q without versions", kh.Key)
			return false
		}
		ki := &keyIndex{key: kh.Key, versions: kh.Versions}
		var prev *KeyValue
		for _, kv := range kh.Versions {
			if prev != nil && kv.ModRevision <= prev.ModRevision {
				err = fmt.Errorf("snapshot: key %q versions out of order", kh.Key)
				return false
			}
			if kv.ModRevision > s.State.Rev {
				err = fmt.Errorf("snapshot: key %q has a version after the snapshot's revision", kh.Key)
				return false
			}
			if len(kv.Key) == 0 || &kv.Key[0] != &ki.key[0] {
				// One key's bytes for all its versions. (A view's
				// snapshot shares them already: never written then.)
				kv.Key = ki.key
			}
			if kv.ModRevision >= s.State.CompactRev {
				ev := Event{Type: EventPut, KV: kv, PrevKV: prev}
				if kv.Version == 0 {
					ev.Type = EventDelete
				}
				if prev != nil && prev.Version == 0 {
					ev.PrevKV = nil
				}
				v.history = append(v.history, ev)
			}
			prev = kv
		}
		if last := ki.latest(); last != nil && last.Lease != 0 {
			l := v.leases[last.Lease]
			if l == nil {
				err = fmt.Errorf("snapshot: key %q attached to missing lease %x", kh.Key, last.Lease)
				return false
			}
			l.keys[string(kh.Key)] = struct{}{}
		}
		v.tree.ReplaceOrInsert(ki)
		return true
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(v.history, func(i, j int) bool {
		a, b := v.history[i].KV, v.history[j].KV
		if a.ModRevision != b.ModRevision {
			return a.ModRevision < b.ModRevision
		}
		return a.Sub < b.Sub
	})
	return v, nil
}

// Reset replaces the view's whole state with other's (which must not be
// used afterwards), for an instance that fell behind a compaction of the
// log and reloaded. Waiters wake up; a broken view stays broken.
func (v *View) Reset(other *View) {
	v.mu.Lock()
	defer v.mu.Unlock()
	other.mu.Lock()
	defer other.mu.Unlock()
	v.tree, v.state, v.leases, v.history, v.auth, v.alarms, v.trim = other.tree, other.state, other.leases, other.history, other.auth, other.alarms, other.trim
	v.removed, v.removedFrom = other.removed, other.removedFrom
	close(v.applied)
	v.applied = make(chan struct{})
}
