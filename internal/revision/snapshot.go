package revision

import (
	"bytes"
	"fmt"
	"sort"
)

// Snapshot is a view's complete state at one log position: every retained
// version of every key (history since the compacted revision, plus the
// newest version at or below it), and the leases. Loading it gives a view
// that answers every read and watch the original could.
type Snapshot struct {
	State  State
	Keys   []KeyHistory // ascending by key
	Leases []Lease      // ascending by ID; Lease.keys is not set (derived from the keys)
	Auth   []byte       // the encoded auth state (see OpAuth); nil if never set
	Alarms []Alarm      // the active alarms, sorted (see OpAlarm)
}

// KeyHistory is one key's retained versions, oldest first; a version with
// Version 0 is a deletion.
type KeyHistory struct {
	Key      []byte
	Versions []*KeyValue
}

// Snapshot copies the view's state. It holds the read lock while it copies
// one slice header per key (versions and values are shared, never copied),
// so it is O(keys) with one allocation for them. The shared versions must
// not be modified (appending to them is safe: it reallocates).
func (v *View) Snapshot() *Snapshot {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.snapshotLocked()
}

// snapshotLocked is Snapshot for a caller holding v.mu.
func (v *View) snapshotLocked() *Snapshot {
	s := &Snapshot{State: v.state, Keys: make([]KeyHistory, 0, v.tree.Len()), Auth: v.auth, Alarms: v.alarms}
	v.tree.Ascend(func(ki *keyIndex) bool {
		// The view only ever appends to a key's versions or replaces the
		// slice (compaction), so the snapshot can share the array; the
		// capacity is capped so that an append to the copy reallocates.
		n := len(ki.versions)
		s.Keys = append(s.Keys, KeyHistory{Key: ki.key, Versions: ki.versions[:n:n]})
		return true
	})
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
	v.auth = s.Auth
	for _, a := range s.Alarms {
		v.alarms = ApplyAlarm(v.alarms, AlarmChange{Alarm: a, Activate: true})
	}
	for _, l := range s.Leases {
		v.leases[l.ID] = &Lease{ID: l.ID, TTL: l.TTL, RemainingTTL: l.RemainingTTL, keys: map[string]struct{}{}}
	}
	var prevKey []byte
	for i, kh := range s.Keys {
		if i > 0 && bytes.Compare(prevKey, kh.Key) >= 0 {
			return nil, fmt.Errorf("snapshot: keys out of order at %q", kh.Key)
		}
		prevKey = kh.Key
		if len(kh.Versions) == 0 {
			return nil, fmt.Errorf("snapshot: key %q without versions", kh.Key)
		}
		ki := &keyIndex{key: kh.Key, versions: kh.Versions}
		var prev *KeyValue
		for _, kv := range kh.Versions {
			if prev != nil && kv.ModRevision <= prev.ModRevision {
				return nil, fmt.Errorf("snapshot: key %q versions out of order", kh.Key)
			}
			if kv.ModRevision > s.State.Rev {
				return nil, fmt.Errorf("snapshot: key %q has a version after the snapshot's revision", kh.Key)
			}
			kv.Key = ki.key
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
				return nil, fmt.Errorf("snapshot: key %q attached to missing lease %x", kh.Key, last.Lease)
			}
			l.keys[string(kh.Key)] = struct{}{}
		}
		v.tree.ReplaceOrInsert(ki)
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
	v.tree, v.state, v.leases, v.history, v.auth, v.alarms = other.tree, other.state, other.leases, other.history, other.auth, other.alarms
	close(v.applied)
	v.applied = make(chan struct{})
}
