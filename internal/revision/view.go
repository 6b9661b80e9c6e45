package revision

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/google/btree"
)

// Reader reads a consistent state. Implementations are not safe for use
// outside the callback or batch that produced them.
type Reader interface {
	// Rev is the current revision.
	Rev() int64
	// CompactRev is the compacted revision: reads below it fail.
	CompactRev() int64
	// Range visits, in ascending key order, the keys live at atRev in
	// [key, end) (end nil: just key; end empty: no upper bound), until visit
	// returns false. atRev 0 means the current revision. It returns
	// ErrFutureRev or ErrCompacted for a revision out of bounds.
	Range(key, end []byte, atRev int64, visit func(*KeyValue) bool) error
	// Lease returns the lease with the given ID, or nil.
	Lease(id int64) *Lease
	// AuthState returns the encoded auth state (nil: never set; see OpAuth).
	AuthState() []byte
	// Alarms returns the active alarms, sorted by type then member (see
	// OpAlarm). The slice must not be modified.
	Alarms() []Alarm
}

// State is the position of a view: the last applied log entry and the
// revisions it produced.
type State struct {
	LSN        int64
	Rev        int64
	CompactRev int64
	// Zxid is the zxid of the last applied entry (0 if unknown).
	Zxid int64
}

// View is the MVCC view of one instance.
//
// Apply must be called by one goroutine at a time, in LSN order; every other
// method is safe for concurrent use. Lock order: View.mu is taken before
// anything a caller holds while applying (watcher groups are notified after
// Apply returns).
type View struct {
	mu      sync.RWMutex
	cloneMu sync.Mutex // serializes tree.Clone among holders of the read lock
	tree    *btree.BTreeG[*keyIndex]
	state   State
	leases  map[int64]*Lease
	history []Event       // every change with ModRevision >= the compacted revision, in order
	auth    []byte        // the encoded auth state of the last OpAuth (nil: none)
	alarms  []Alarm       // active alarms, sorted; replaced, never modified, by OpAlarm
	applied chan struct{} // closed and replaced after every Apply
	broken  error         // set when an entry could not be applied
	trim    *trimCursor   // compacted versions still to drop (nil: none)
	// removed lists the keys TrimCompacted dropped, appended to (never
	// modified in place: snapshots share it), since the view's state at
	// removedFrom (see Snapshot.Since).
	removed     []removal
	removedFrom int64
	// onCompact, if set, sees the state right before each compaction.
	onCompact func(before *Snapshot, rev int64)
}

// NewView returns an empty view positioned after log entry lsn, at revision
// rev (etcd's empty store is at revision 1, after the sentinel entry 1).
// Nothing is compacted yet: the compacted revision is -1, as in etcd, so
// compacting to 0 or 1 on a fresh store succeeds.
func NewView(lsn, rev int64) *View {
	return &View{
		tree:    newKeyTree(),
		state:   State{LSN: lsn, Rev: rev, CompactRev: -1},
		leases:  make(map[int64]*Lease),
		applied: make(chan struct{}),

		removedFrom: rev,
	}
}

// State returns the view's current position.
func (v *View) State() State {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.state
}

// Err returns the error that stopped the view (a corrupt or divergent entry),
// or nil.
func (v *View) Err() error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.broken
}

// Read calls fn with a Reader over the view at its current revision; no
// entry is applied while fn runs, so fn must be short. The Reader must not
// be used after fn returns.
func (v *View) Read(fn func(r Reader) error) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return fn(viewReader{v})
}

// ReadState is Read that also passes the view's position.
func (v *View) ReadState(fn func(r Reader, st State) error) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return fn(viewReader{v}, v.state)
}

// WaitApplied blocks until the view has applied log entry lsn, the view
// broke, or ctx ends.
func (v *View) WaitApplied(ctx context.Context, lsn int64) error {
	for {
		v.mu.RLock()
		cur, ch, broken := v.state.LSN, v.applied, v.broken
		v.mu.RUnlock()
		if broken != nil {
			return broken
		}
		if cur >= lsn {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Changed returns a channel closed at the next Apply.
func (v *View) Changed() <-chan struct{} {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.applied
}

// KeyCount returns the number of keys live at the current revision.
func (v *View) KeyCount() int {
	n := 0
	_ = v.Read(func(r Reader) error {
		return r.Range([]byte{0}, []byte{}, 0, func(*KeyValue) bool { n++; return true })
	})
	return n
}

// IndexLen returns the number of keys the index holds: the live keys and
// the deleted ones whose history a compaction has not dropped yet (etcd's
// keys_total counts its key index the same way). O(1).
func (v *View) IndexLen() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.tree.Len()
}

// Apply applies log entry e and returns the key changes it made, in order.
// An entry at or below the applied LSN is ignored (nil, nil), so the tailer
// and the committer may both offer the same entry. An entry that does not
// follow the applied one, or does not apply cleanly, is an error and stops
// the view for good: every later WaitApplied returns it.
func (v *View) Apply(e *Entry) ([]Event, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.broken != nil {
		return nil, v.broken
	}
	if e.LSN <= v.state.LSN {
		return nil, nil
	}
	if err := v.validate(e); err != nil {
		v.broken = fmt.Errorf("log entry %d: %w", e.LSN, err)
		close(v.applied)
		v.applied = make(chan struct{})
		return nil, v.broken
	}
	var events []Event
	for i := range e.Ops {
		op := &e.Ops[i]
		switch op.Kind {
		case OpTxn:
			events = v.applyTxn(op, e.Zxid, events)
		case OpCompact:
			v.compact(op.Rev)
		case OpLeaseGrant:
			v.leases[op.Lease] = &Lease{ID: op.Lease, TTL: op.TTL, keys: map[string]struct{}{}}
		case OpLeaseRevoke:
			delete(v.leases, op.Lease)
		case OpLeaseCheckpoint:
			if l := v.leases[op.Lease]; l != nil {
				l.RemainingTTL = op.TTL
			}
		case OpAuth:
			v.auth = op.Auth
		case OpAlarm:
			v.alarms = ApplyAlarm(v.alarms, op.Alarm)
		}
	}
	v.state.LSN = e.LSN
	v.state.Zxid = e.Zxid
	close(v.applied)
	v.applied = make(chan struct{})
	return events, nil
}

// validate checks, without changing anything, that e applies cleanly.
func (v *View) validate(e *Entry) error {
	if e.LSN != v.state.LSN+1 {
		return fmt.Errorf("gap: view is at entry %d", v.state.LSN)
	}
	rev, compacted := v.state.Rev, v.state.CompactRev
	live := map[string]bool{}
	leases := map[int64]bool{}
	exists := func(k []byte) bool {
		if b, ok := live[string(k)]; ok {
			return b
		}
		ki, ok := v.tree.Get(&keyIndex{key: k})
		return ok && ki.latest() != nil
	}
	leaseExists := func(id int64) bool {
		if b, ok := leases[id]; ok {
			return b
		}
		return v.leases[id] != nil
	}
	for i, op := range e.Ops {
		switch op.Kind {
		case OpTxn:
			if op.Rev != rev+1 {
				return fmt.Errorf("op %d: revision %d does not follow %d", i, op.Rev, rev)
			}
			if len(op.Changes) == 0 {
				return fmt.Errorf("op %d: transaction without changes", i)
			}
			rev++
			for _, c := range op.Changes {
				if len(c.Key) == 0 {
					return fmt.Errorf("op %d: empty key", i)
				}
				if c.Delete {
					if !exists(c.Key) {
						return fmt.Errorf("op %d: delete of missing key %q", i, c.Key)
					}
					live[string(c.Key)] = false
					continue
				}
				if c.Lease != 0 && !leaseExists(c.Lease) {
					return fmt.Errorf("op %d: put with missing lease %x", i, c.Lease)
				}
				live[string(c.Key)] = true
			}
		case OpCompact:
			if op.Rev <= compacted || op.Rev > rev {
				return fmt.Errorf("op %d: compaction to %d outside (%d, %d]", i, op.Rev, compacted, rev)
			}
			compacted = op.Rev
		case OpLeaseGrant:
			if leaseExists(op.Lease) {
				return fmt.Errorf("op %d: lease %x granted twice", i, op.Lease)
			}
			leases[op.Lease] = true
		case OpLeaseRevoke:
			if !leaseExists(op.Lease) {
				return fmt.Errorf("op %d: revoke of missing lease %x", i, op.Lease)
			}
			leases[op.Lease] = false
		case OpLeaseCheckpoint, OpAuth, OpAlarm, OpOrigin:
		default:
			return fmt.Errorf("op %d: unknown kind %d", i, op.Kind)
		}
	}
	return nil
}

func (v *View) applyTxn(op *Op, zxid int64, events []Event) []Event {
	rev := op.Rev
	for sub, c := range op.Changes {
		ki, ok := v.tree.Get(&keyIndex{key: c.Key})
		if !ok {
			ki = &keyIndex{key: c.Key}
		}
		prev := ki.latest()
		if prev != nil && prev.Lease != 0 {
			if l := v.leases[prev.Lease]; l != nil {
				delete(l.keys, string(c.Key))
			}
		}
		var kv *KeyValue
		ev := Event{PrevKV: prev}
		if c.Delete {
			kv = &KeyValue{Key: ki.key, ModRevision: rev, ModZxid: zxid, Sub: int64(sub)}
			ev.Type = EventDelete
		} else {
			kv = &KeyValue{Key: ki.key, Value: c.Value, ModRevision: rev, Lease: c.Lease, ModZxid: zxid, Sub: int64(sub)}
			if prev != nil {
				kv.CreateRevision, kv.CreateZxid, kv.Version = prev.CreateRevision, prev.CreateZxid, prev.Version+1
			} else {
				kv.CreateRevision, kv.CreateZxid, kv.Version = rev, zxid, 1
			}
			if c.Lease != 0 {
				v.leases[c.Lease].keys[string(c.Key)] = struct{}{}
			}
			ev.Type = EventPut
		}
		// Replace, never modify, the key's index: snapshots share the
		// old one (see keyIndex).
		v.tree.ReplaceOrInsert(ki.with(kv))
		ev.KV = kv
		events = append(events, ev)
		v.history = append(v.history, ev)
	}
	v.state.Rev = rev
	return events
}

// OnCompact sets f (nil: none) to be called by Apply right before it
// applies a compaction to rev, with a copy of the state at that moment
// (before.State.CompactRev is the previous compacted revision): etcd hashes
// the history a compaction removes (see etcdformat.CompactionHash). f runs
// under the view's write lock: it must return quickly and not call the view.
// A view built by FromSnapshot or replaced by Reset keeps the f set on it.
func (v *View) OnCompact(f func(before *Snapshot, rev int64)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.onCompact = f
}

// compact applies a compaction to rev: from now on reads below rev fail,
// and the change history before rev is dropped. The versions of the key
// index that no read at rev or later can see are dropped afterwards, a
// batch of keys at a time, by TrimCompacted: walking every key here would
// hold the write lock (and so every read and apply) for O(keys).
func (v *View) compact(rev int64) {
	if v.onCompact != nil {
		v.onCompact(v.snapshotLocked(), rev)
	}
	i := sort.Search(len(v.history), func(i int) bool { return v.history[i].KV.ModRevision >= rev })
	kept := make([]Event, 0, len(v.history)-i)
	for _, ev := range v.history[i:] {
		if ev.KV.ModRevision == rev {
			// As in etcd, events at the compacted revision have no previous
			// value any more (a read at rev-1 is compacted).
			ev.PrevKV = nil
		}
		kept = append(kept, ev)
	}
	v.history = kept
	v.state.CompactRev = rev
	v.trim = &trimCursor{rev: rev}
}

// trimCursor is the progress of dropping compacted versions: every key
// below next has been trimmed to rev.
type trimCursor struct {
	rev  int64
	next []byte // nil: from the first key
}

// TrimCompacted drops, for up to batch keys, the versions that the last
// compaction made invisible (see compact), under the write lock, and
// reports whether keys remain to be trimmed. Call it until it returns
// false; between calls reads and applies go on. Safe for concurrent use
// with every other method (it is the one caller that may run beside Apply).
func (v *View) TrimCompacted(batch int) (more bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := v.trim
	if t == nil {
		return false
	}
	var changed []*keyIndex
	var gone []*keyIndex
	var last []byte
	n := 0
	visit := func(ki *keyIndex) bool {
		if n == batch {
			last = ki.key
			return false
		}
		n++
		switch c := ki.compacted(t.rev); {
		case c == nil:
			gone = append(gone, ki)
		case c != ki:
			changed = append(changed, c)
		}
		return true
	}
	if t.next == nil {
		v.tree.Ascend(visit)
	} else {
		v.tree.AscendGreaterOrEqual(&keyIndex{key: t.next}, visit)
	}
	for _, ki := range changed {
		v.tree.ReplaceOrInsert(ki)
	}
	for _, ki := range gone {
		v.tree.Delete(ki)
		v.removed = append(v.removed, removal{key: ki.key, rev: ki.versions[len(ki.versions)-1].ModRevision})
	}
	if last == nil {
		v.trim = nil
		return false
	}
	t.next = last
	return true
}

// Changes calls visit with every change of revision fromRev or later, in
// revision order (and, within a revision, in the order the transaction made
// them), until visit returns false. It returns the revision the view was at.
// Errors: ErrCompacted if fromRev is below the compacted revision. Apply
// waits while Changes runs, so visit must be quick.
func (v *View) Changes(fromRev int64, visit func(Event) bool) (int64, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if fromRev < v.state.CompactRev {
		return v.state.Rev, ErrCompacted
	}
	i := sort.Search(len(v.history), func(i int) bool { return v.history[i].KV.ModRevision >= fromRev })
	for _, ev := range v.history[i:] {
		if !visit(ev) {
			break
		}
	}
	return v.state.Rev, nil
}

// viewReader reads the view; the caller holds v.mu.
type viewReader struct{ v *View }

func (r viewReader) Rev() int64        { return r.v.state.Rev }
func (r viewReader) CompactRev() int64 { return r.v.state.CompactRev }
func (r viewReader) Lease(id int64) *Lease {
	return r.v.leases[id]
}

func (r viewReader) AuthState() []byte { return r.v.auth }

func (r viewReader) Alarms() []Alarm { return r.v.alarms }

// Alarms returns the active alarms, sorted by type then member. The slice
// is never modified (an OpAlarm replaces it). Safe for concurrent use.
func (v *View) Alarms() []Alarm {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.alarms
}

// AuthState returns the encoded auth state and the log position it was read
// at (see OpAuth). The slice is never modified: a new OpAuth replaces it.
// Safe for concurrent use.
func (v *View) AuthState() ([]byte, int64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.auth, v.state.LSN
}

func (r viewReader) Range(key, end []byte, atRev int64, visit func(*KeyValue) bool) error {
	rev, err := checkRev(atRev, r.v.state.Rev, r.v.state.CompactRev)
	if err != nil {
		return err
	}
	return rangeTree(r.v.tree, key, end, rev, visit)
}

// checkRev resolves atRev (0: current) against the bounds of a state.
func checkRev(atRev, cur, compacted int64) (int64, error) {
	switch {
	case atRev <= 0:
		return cur, nil
	case atRev > cur:
		return 0, ErrFutureRev
	case atRev < compacted:
		return 0, ErrCompacted
	}
	return atRev, nil
}

func rangeTree(t *btree.BTreeG[*keyIndex], key, end []byte, rev int64, visit func(*KeyValue) bool) error {
	if isSingleKey(end) {
		if ki, ok := t.Get(&keyIndex{key: key}); ok {
			if kv := ki.at(rev); kv != nil {
				visit(kv)
			}
		}
		return nil
	}
	if len(end) > 0 && bytes.Compare(key, end) >= 0 {
		return nil
	}
	iter := func(ki *keyIndex) bool {
		if kv := ki.at(rev); kv != nil {
			return visit(kv)
		}
		return true
	}
	if len(end) == 0 {
		t.AscendGreaterOrEqual(&keyIndex{key: key}, iter)
	} else {
		t.AscendRange(&keyIndex{key: key}, &keyIndex{key: end}, iter)
	}
	return nil
}

// LeaseTTLs returns every lease's granted TTL, by ID. Safe for concurrent use.
func (v *View) LeaseTTLs() map[int64]int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make(map[int64]int64, len(v.leases))
	for id, l := range v.leases {
		out[id] = l.TTL
	}
	return out
}

// LeaseIDs returns the IDs of every lease, ascending. Safe for concurrent use.
func (v *View) LeaseIDs() []int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	ids := make([]int64, 0, len(v.leases))
	for id := range v.leases {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// LeaseCount returns how many leases exist. Safe for concurrent use.
func (v *View) LeaseCount() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.leases)
}
