package revision

// OpKind identifies an operation in a log entry.
type OpKind uint8

const (
	// OpTxn is an etcd transaction that changes at least one key. It takes
	// the revision in Op.Rev.
	OpTxn OpKind = iota + 1
	// OpCompact sets the compacted revision to Op.Rev.
	OpCompact
	// OpLeaseGrant creates lease Op.Lease with TTL Op.TTL.
	OpLeaseGrant
	// OpLeaseRevoke removes lease Op.Lease. The deletion of its keys, if
	// any, is an OpTxn placed right before it in the same entry.
	OpLeaseRevoke
	// OpLeaseCheckpoint records Op.TTL as the remaining TTL of Op.Lease.
	OpLeaseCheckpoint
	// OpAuth replaces the auth store with Op.Auth, the encoded state of
	// package auth (opaque here). It changes no key and no revision: as in
	// etcd, the auth store has a revision of its own.
	OpAuth
	// OpAlarm raises (Op.Alarm.Activate) or clears an alarm of a member:
	// etcd's AlarmRequest ACTIVATE/DEACTIVATE. It changes no key and takes
	// no revision.
	OpAlarm
	// OpOrigin records that the request evaluated right before it in the
	// entry came from another instance, which tagged it Op.Origin (its own
	// nonce and a per-request sequence), and that it took revision Op.Rev
	// (0: it took none). It changes nothing in the view; it lets the
	// request's origin (and any later leader) tell whether a forwarded
	// request of unknown outcome was committed.
	OpOrigin
	// OpBumpRev moves the revision to Op.Rev (above the current one)
	// without changing any key: the revisions it skips took no change
	// here. Only `zketcd mirror` writes it, copying one prefix of a
	// shared etcd whose other clusters took the revisions between (a root
	// of format 4, "revision gaps"); the committer never does. A read at
	// a skipped revision answers the state before the gap, as the source
	// answers it for the prefix.
	OpBumpRev
)

// OpFence ends a root's log for a move (`zketcd move`, `zketcd tenant
// move`): no entry may follow it in the root it was committed to, whose
// cluster continues at Op.Move's destination, a copy of this log up to
// and including the fence's position. The destination's copy of the entry
// says Arrived: there it changes nothing, and the log continues. It changes
// no key and takes no revision. Its value leaves room for the op kinds
// other root formats take before it.
const OpFence OpKind = OpOrigin + 2

// Move is an OpFence's payload: where the fenced root's cluster continues.
type Move struct {
	// Servers is the destination's ZooKeeper connect string (empty: the
	// same ensemble as the fenced root), Root its root znode.
	Servers string
	Root    string
	// Arrived marks the copy of the fence in the destination's log.
	Arrived bool
}

// Fence returns the move e ends its root's log with (an OpFence that has
// not Arrived), or nil.
func (e *Entry) Fence() *Move {
	for i := range e.Ops {
		if op := &e.Ops[i]; op.Kind == OpFence && !op.Move.Arrived {
			return &op.Move
		}
	}
	return nil
}

// Alarm is one active alarm: etcd's AlarmMember (Type is an
// etcdserverpb.AlarmType value; this package does not interpret it).
type Alarm struct {
	Member uint64
	Type   int32
}

// AlarmChange is an OpAlarm's payload.
type AlarmChange struct {
	Alarm
	Activate bool
}

// Change is one key change of a transaction, in execution order.
type Change struct {
	Delete bool
	Key    []byte
	Value  []byte // puts only
	Lease  int64  // puts only
}

// Op is one operation of an entry.
type Op struct {
	Kind    OpKind
	Rev     int64       // OpTxn: its revision; OpCompact, OpBumpRev: the target
	Changes []Change    // OpTxn
	Lease   int64       // lease ops
	TTL     int64       // OpLeaseGrant: granted TTL; OpLeaseCheckpoint: remaining TTL
	Auth    []byte      // OpAuth: the new encoded auth state
	Alarm   AlarmChange // OpAlarm
	Origin  WriterTag   // OpOrigin: the forwarded request's tag
	Move    Move        // OpFence: where the cluster continues
}

// WriterTag identifies the batch that produced an entry: a random nonce
// chosen once per process and a per-process batch sequence number. It lets
// a writer recognise its own entry after an unknown-outcome commit.
type WriterTag struct {
	Nonce uint64
	Seq   uint64
}

// Entry is one committed batch: the ops, in order, that a committer packed
// into log position LSN. Zxid is the zxid of the ZooKeeper transaction that
// created it (filled in by whoever read or committed it).
type Entry struct {
	LSN    int64
	Zxid   int64
	Writer WriterTag
	Ops    []Op
}

// DataBytes returns the bytes of keys, values and auth state the entry
// carries: its size before encoding, as Snapshot.DataBytes counts a view's
// (what a log entry adds to the data a replay of the log holds).
func (e *Entry) DataBytes() int64 {
	var n int64
	for i := range e.Ops {
		op := &e.Ops[i]
		n += int64(len(op.Auth))
		for j := range op.Changes {
			n += int64(len(op.Changes[j].Key) + len(op.Changes[j].Value))
		}
	}
	return n
}

// LastRev returns the revision of the last OpTxn in the entry, or 0.
func (e *Entry) LastRev() int64 {
	for i := len(e.Ops) - 1; i >= 0; i-- {
		if e.Ops[i].Kind == OpTxn {
			return e.Ops[i].Rev
		}
	}
	return 0
}

// EndRev returns the revision the entry leaves the view at if it moves the
// revision (by its last OpTxn or OpBumpRev), or 0 if it takes none.
func (e *Entry) EndRev() int64 {
	for i := len(e.Ops) - 1; i >= 0; i-- {
		if k := e.Ops[i].Kind; k == OpTxn || k == OpBumpRev {
			return e.Ops[i].Rev
		}
	}
	return 0
}

// FirstRev returns the revision of the first OpTxn in the entry, or 0.
func (e *Entry) FirstRev() int64 {
	for _, op := range e.Ops {
		if op.Kind == OpTxn {
			return op.Rev
		}
	}
	return 0
}
