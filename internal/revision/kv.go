package revision

import "errors"

// ErrCompacted is returned by reads at a revision below the compacted
// revision. It matches etcd's mvcc.ErrCompacted in meaning.
var ErrCompacted = errors.New("mvcc: required revision has been compacted")

// ErrFutureRev is returned by reads at a revision above the current one.
var ErrFutureRev = errors.New("mvcc: required revision is a future revision")

// KeyValue is one version of a key. Values are shared between the history,
// events and responses and must never be modified after the KeyValue was
// applied.
type KeyValue struct {
	Key            []byte
	Value          []byte
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          int64
	// CreateZxid and ModZxid are the zxids of the ZooKeeper transactions
	// that committed CreateRevision and ModRevision.
	CreateZxid int64
	ModZxid    int64
	// Sub is the change's position in its transaction (etcd's
	// sub-revision): the order of events within one revision.
	Sub int64
}

// EventType tells whether an Event is a put or a delete.
type EventType int

const (
	// EventPut is a key written (created or updated).
	EventPut EventType = iota
	// EventDelete is a key deleted; KV carries only the key and ModRevision.
	EventDelete
)

// Event is one key change produced by applying an entry. PrevKV is the
// version the change replaced (nil when the key did not exist).
type Event struct {
	Type   EventType
	KV     *KeyValue
	PrevKV *KeyValue
}

// Lease is a lease as the view knows it. TTL is the granted TTL in seconds;
// RemainingTTL is the last checkpointed remaining TTL (0 = none).
type Lease struct {
	ID           int64
	TTL          int64
	RemainingTTL int64
	// Keys attached to the lease, by key string.
	keys map[string]struct{}
}

// Keys returns the keys attached to the lease in ascending order.
// The caller must hold the view's read lock (call it inside [View.Read]).
func (l *Lease) Keys() [][]byte {
	return sortedKeys(l.keys)
}
