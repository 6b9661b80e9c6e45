package revision

import (
	"bytes"
	"errors"

	"github.com/google/btree"
)

// ErrBatchBoundary is returned by a Batch read that needs the history of a
// revision staged in the same batch (which the view does not hold yet). The
// committer aborts the request's transaction, commits the batch so far and
// evaluates the request again at the start of the next batch.
var ErrBatchBoundary = errors.New("revision: request must start a new batch")

// Batch stages the writes of several transactions on top of a Reader (the
// view at the batch's base revision), so that each transaction sees the
// effects of those evaluated before it. Its ops become one log entry.
//
// A Batch is used by one goroutine and only while its base Reader is valid.
// Transactions are bracketed by Begin and Commit or Abort.
type Batch struct {
	base      Reader
	baseRev   int64
	rev       int64
	compacted int64
	staged    *btree.BTreeG[*KeyValue] // newest staged version of each key
	leases    map[int64]*Lease         // staged grants; nil value: revoked
	ops       []Op
	auth      []byte // staged auth state, if authSet
	authSet   bool
	alarms    []Alarm // staged alarms, if alarmsSet
	alarmsSet bool

	inTxn     bool
	changes   []Change
	undo      []undoRec
	leaseUndo []leaseUndoRec
	authUndo  *authUndoRec
	alarmUndo *alarmUndoRec
}

type alarmUndoRec struct {
	alarms []Alarm
	set    bool
	ops    int
}

type authUndoRec struct {
	auth []byte
	set  bool
	ops  int
}

type undoRec struct {
	key  []byte
	prev *KeyValue // nil: the key was not staged
}

type leaseUndoRec struct {
	id      int64
	prev    *Lease
	present bool
}

// NewBatch returns an empty batch on top of base.
func NewBatch(base Reader) *Batch {
	return &Batch{
		base:      base,
		baseRev:   base.Rev(),
		rev:       base.Rev(),
		compacted: base.CompactRev(),
	}
}

// Chained reports whether the batch is stacked on another batch (one whose
// entry is still being committed) rather than on the view.
func (b *Batch) Chained() bool {
	_, ok := b.base.(*Batch)
	return ok
}

func kvLess(a, b *KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }

// Ops returns the staged operations, in order. The slice belongs to the batch.
func (b *Batch) Ops() []Op { return b.ops }

// Empty reports whether nothing has been staged.
func (b *Batch) Empty() bool { return len(b.ops) == 0 }

// Rev returns the revision of the last committed transaction of the batch
// (the base revision if none).
func (b *Batch) Rev() int64 { return b.rev }

// CompactRev returns the compacted revision including staged compactions.
func (b *Batch) CompactRev() int64 { return b.compacted }

// Lease returns the lease as staged, or as in the base.
func (b *Batch) Lease(id int64) *Lease {
	if l, ok := b.leases[id]; ok {
		return l
	}
	return b.base.Lease(id)
}

// Range implements Reader. Reads at revision 0 see every staged write,
// including those of the open transaction; reads at a revision staged in
// this batch return ErrBatchBoundary.
func (b *Batch) Range(key, end []byte, atRev int64, visit func(*KeyValue) bool) error {
	if atRev > 0 {
		switch {
		case atRev > b.rev:
			return ErrFutureRev
		case atRev < b.compacted:
			return ErrCompacted
		case atRev > b.baseRev:
			return ErrBatchBoundary
		}
		return b.base.Range(key, end, atRev, visit)
	}
	if b.staged == nil {
		return b.base.Range(key, end, 0, visit)
	}
	if isSingleKey(end) {
		if kv, ok := b.staged.Get(&KeyValue{Key: key}); ok {
			if kv.Version != 0 {
				visit(kv)
			}
			return nil
		}
		return b.base.Range(key, end, 0, visit)
	}
	var staged []*KeyValue
	collect := func(kv *KeyValue) bool { staged = append(staged, kv); return true }
	if len(end) == 0 {
		b.staged.AscendGreaterOrEqual(&KeyValue{Key: key}, collect)
	} else if bytes.Compare(key, end) < 0 {
		b.staged.AscendRange(&KeyValue{Key: key}, &KeyValue{Key: end}, collect)
	}
	if len(staged) == 0 {
		return b.base.Range(key, end, 0, visit)
	}
	stopped := false
	// emitStaged emits staged versions with keys below limit (all if nil).
	emitStaged := func(limit []byte) bool {
		for len(staged) > 0 && (limit == nil || bytes.Compare(staged[0].Key, limit) < 0) {
			kv := staged[0]
			staged = staged[1:]
			if kv.Version != 0 && !visit(kv) {
				return false
			}
		}
		return true
	}
	err := b.base.Range(key, end, 0, func(kv *KeyValue) bool {
		if !emitStaged(kv.Key) {
			stopped = true
			return false
		}
		if len(staged) > 0 && bytes.Equal(staged[0].Key, kv.Key) {
			return true // the staged version (or deletion) replaces it
		}
		if !visit(kv) {
			stopped = true
			return false
		}
		return true
	})
	if err != nil || stopped {
		return err
	}
	emitStaged(nil)
	return nil
}

// get returns the newest live version of key, staged or in the base.
func (b *Batch) get(key []byte) *KeyValue {
	var out *KeyValue
	_ = b.Range(key, nil, 0, func(kv *KeyValue) bool { out = kv; return false })
	return out
}

// Begin opens a transaction.
func (b *Batch) Begin() {
	b.inTxn = true
	b.changes, b.undo, b.leaseUndo, b.authUndo = nil, nil, nil, nil
}

// InTxn reports whether a transaction is open.
func (b *Batch) InTxn() bool { return b.inTxn }

// HasChanges reports whether the open transaction changed a key.
func (b *Batch) HasChanges() bool { return len(b.changes) > 0 }

// TxnRev returns the revision the open transaction writes at.
func (b *Batch) TxnRev() int64 { return b.rev + 1 }

func (b *Batch) stage(kv *KeyValue) {
	if b.staged == nil {
		b.staged = btree.NewG[*KeyValue](16, kvLess)
	}
	prev, _ := b.staged.ReplaceOrInsert(kv)
	b.undo = append(b.undo, undoRec{key: kv.Key, prev: prev})
}

// Put writes key in the open transaction and returns the new version.
// The caller has checked that lease (if not 0) exists.
func (b *Batch) Put(key, value []byte, lease int64) *KeyValue {
	rev := b.rev + 1
	kv := &KeyValue{Key: key, Value: value, ModRevision: rev, Lease: lease, Version: 1, CreateRevision: rev}
	if prev := b.get(key); prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
	}
	b.stage(kv)
	b.changes = append(b.changes, Change{Key: key, Value: value, Lease: lease})
	return kv
}

// DeleteRange deletes the keys live in [key, end) in the open transaction
// and returns the versions it deleted, in key order.
func (b *Batch) DeleteRange(key, end []byte) ([]*KeyValue, error) {
	var prev []*KeyValue
	if err := b.Range(key, end, 0, func(kv *KeyValue) bool { prev = append(prev, kv); return true }); err != nil {
		return nil, err
	}
	rev := b.rev + 1
	for _, kv := range prev {
		b.stage(&KeyValue{Key: kv.Key, ModRevision: rev})
		b.changes = append(b.changes, Change{Delete: true, Key: kv.Key})
	}
	return prev, nil
}

// Commit closes the open transaction. If it changed any key it takes the
// next revision, which Commit returns with changed = true.
func (b *Batch) Commit() (rev int64, changed bool) {
	b.inTxn = false
	if len(b.changes) == 0 {
		b.undo, b.leaseUndo, b.authUndo, b.alarmUndo = nil, nil, nil, nil
		return b.rev, false
	}
	b.rev++
	b.ops = append(b.ops, Op{Kind: OpTxn, Rev: b.rev, Changes: b.changes})
	b.changes, b.undo, b.leaseUndo, b.authUndo, b.alarmUndo = nil, nil, nil, nil, nil
	return b.rev, true
}

// Abort discards the open transaction's writes.
func (b *Batch) Abort() {
	for i := len(b.undo) - 1; i >= 0; i-- {
		u := b.undo[i]
		if u.prev != nil {
			b.staged.ReplaceOrInsert(u.prev)
		} else {
			b.staged.Delete(&KeyValue{Key: u.key})
		}
	}
	for i := len(b.leaseUndo) - 1; i >= 0; i-- {
		u := b.leaseUndo[i]
		if u.present {
			b.leases[u.id] = u.prev
		} else {
			delete(b.leases, u.id)
		}
	}
	if u := b.authUndo; u != nil {
		b.auth, b.authSet, b.ops = u.auth, u.set, b.ops[:u.ops]
	}
	if u := b.alarmUndo; u != nil {
		b.alarms, b.alarmsSet, b.ops = u.alarms, u.set, b.ops[:u.ops]
	}
	b.inTxn = false
	b.changes, b.undo, b.leaseUndo, b.authUndo, b.alarmUndo = nil, nil, nil, nil, nil
}

// Alarms returns the active alarms as staged, or as in the base.
func (b *Batch) Alarms() []Alarm {
	if b.alarmsSet {
		return b.alarms
	}
	return b.base.Alarms()
}

// ChangeAlarm stages an OpAlarm and reports whether it changes the set of
// active alarms (an activation of an active alarm, or a deactivation of
// one that is not, stages nothing). It takes no revision.
func (b *Batch) ChangeAlarm(change AlarmChange) bool {
	cur := b.Alarms()
	next := ApplyAlarm(cur, change)
	if len(next) == len(cur) {
		return false
	}
	if b.inTxn && b.alarmUndo == nil {
		b.alarmUndo = &alarmUndoRec{alarms: b.alarms, set: b.alarmsSet, ops: len(b.ops)}
	}
	b.alarms, b.alarmsSet = next, true
	b.ops = append(b.ops, Op{Kind: OpAlarm, Alarm: change})
	return true
}

// AuthState returns the auth state as staged, or as in the base.
func (b *Batch) AuthState() []byte {
	if b.authSet {
		return b.auth
	}
	return b.base.AuthState()
}

// SetAuthState stages an OpAuth replacing the auth state with state (which
// the batch keeps: the caller must not modify it). It takes no revision.
func (b *Batch) SetAuthState(state []byte) {
	if b.inTxn && b.authUndo == nil {
		b.authUndo = &authUndoRec{auth: b.auth, set: b.authSet, ops: len(b.ops)}
	}
	b.auth, b.authSet = state, true
	b.ops = append(b.ops, Op{Kind: OpAuth, Auth: state})
}

// Origin records that the request evaluated last (its transaction
// closed) came from another instance with tag, and took revision rev (0:
// none). It stages no change.
func (b *Batch) Origin(tag WriterTag, rev int64) {
	b.ops = append(b.ops, Op{Kind: OpOrigin, Origin: tag, Rev: rev})
}

// Compact stages a compaction to rev. The caller has checked
// CompactRev() < rev <= Rev().
func (b *Batch) Compact(rev int64) {
	b.compacted = rev
	b.ops = append(b.ops, Op{Kind: OpCompact, Rev: rev})
}

func (b *Batch) stageLease(id int64, l *Lease) {
	if b.leases == nil {
		b.leases = map[int64]*Lease{}
	}
	prev, present := b.leases[id]
	b.leaseUndo = append(b.leaseUndo, leaseUndoRec{id: id, prev: prev, present: present})
	b.leases[id] = l
}

// GrantLease stages a lease grant. The caller has checked that id is free.
func (b *Batch) GrantLease(id, ttl int64) {
	b.stageLease(id, &Lease{ID: id, TTL: ttl})
	b.ops = append(b.ops, Op{Kind: OpLeaseGrant, Lease: id, TTL: ttl})
}

// RevokeLease stages the removal of a lease (its keys must have been deleted
// by a transaction staged before). The caller has checked that it exists.
func (b *Batch) RevokeLease(id int64) {
	b.stageLease(id, nil)
	b.ops = append(b.ops, Op{Kind: OpLeaseRevoke, Lease: id})
}

// LeaseKeys returns the keys attached to lease id, in key order. It returns
// ErrBatchBoundary when the batch already staged ops (their attachments are
// not tracked), so lease revocations are evaluated at the start of a batch.
//
// A batch stacked on another batch (see Chained) also returns
// ErrBatchBoundary: the attachments staged below are not tracked either.
func (b *Batch) LeaseKeys(id int64) ([][]byte, error) {
	if len(b.ops) > 0 || len(b.changes) > 0 || len(b.leases) > 0 || b.Chained() {
		return nil, ErrBatchBoundary
	}
	l := b.base.Lease(id)
	if l == nil {
		return nil, nil
	}
	return l.Keys(), nil
}
