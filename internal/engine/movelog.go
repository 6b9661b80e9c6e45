package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// movingLog is the Log an engine runs on: the log it was given until a
// move switches it to the destination's (move.go), then that one. Every
// call goes to the current log; SessionChanged fires at the current log's
// session changes and at the switch. Safe for concurrent use.
type movingLog struct {
	slot  atomic.Pointer[logSlot]
	relay *changeRelay
}

// logSlot is a log and the opener of fresh inspector sessions on it (nil:
// none).
type logSlot struct {
	log     Log
	inspect inspectFunc
}

var _ Log = (*movingLog)(nil)

func newMovingLog(st Log, inspect inspectFunc) *movingLog {
	m := &movingLog{}
	m.slot.Store(&logSlot{log: st, inspect: inspect})
	m.relay = newChangeRelay(func() <-chan struct{} { return m.cur().SessionChanged() })
	return m
}

func (m *movingLog) cur() Log { return m.slot.Load().log }

// current returns the log l runs on now: the current one of a movingLog,
// else l (for the optional interfaces a Log may have, such as
// formatKeeper).
func current(l Log) Log {
	if m, ok := l.(*movingLog); ok {
		return m.cur()
	}
	return l
}

// swap makes st (with its inspector) the current log and returns the one
// it replaces; the session's watchers wake.
func (m *movingLog) swap(st Log, inspect inspectFunc) Log {
	old := m.slot.Swap(&logSlot{log: st, inspect: inspect})
	m.relay.bump()
	return old.log
}

// inspector returns an inspectFunc opening fresh sessions on whichever log
// is current when it is called, or nil if the first log had no inspector.
func (m *movingLog) inspector() inspectFunc {
	if m.slot.Load().inspect == nil {
		return nil
	}
	return func(ctx context.Context) (Log, error) {
		in := m.slot.Load().inspect
		if in == nil {
			return nil, errors.New("no inspector for the log this instance moved to")
		}
		return in(ctx)
	}
}

func (m *movingLog) Meta() zkstore.Meta                         { return m.cur().Meta() }
func (m *movingLog) MaxEntryBytes() int                         { return m.cur().MaxEntryBytes() }
func (m *movingLog) Root() string                               { return m.cur().Root() }
func (m *movingLog) Session() (int64, bool)                     { return m.cur().Session() }
func (m *movingLog) SessionChanged() <-chan struct{}            { return m.relay.changed() }
func (m *movingLog) Grant() zkstore.Grant                       { return m.cur().Grant() }
func (m *movingLog) LeaseGuard(id int64, v int32) zkstore.Guard { return m.cur().LeaseGuard(id, v) }
func (m *movingLog) ReadLeaseAbsent() zkstore.Guard             { return m.cur().ReadLeaseAbsent() }
func (m *movingLog) ReleaseReadLease() error                    { return m.cur().ReleaseReadLease() }
func (m *movingLog) Head() (zkstore.Head, error)                { return m.cur().Head() }
func (m *movingLog) SyncHead() (zkstore.Head, error)            { return m.cur().SyncHead() }
func (m *movingLog) QuorumHead() (zkstore.Head, error)          { return m.cur().QuorumHead() }
func (m *movingLog) RegisterMember(mb zkstore.Member) error     { return m.cur().RegisterMember(mb) }
func (m *movingLog) Members() ([]zkstore.Member, error)         { return m.cur().Members() }
func (m *movingLog) Campaign(id uint64) zkstore.Leadership      { return m.cur().Campaign(id) }
func (m *movingLog) ReadBase() (zkstore.Base, error)            { return m.cur().ReadBase() }

// Close closes the current log and stops relaying its session changes.
func (m *movingLog) Close() {
	m.relay.stop()
	m.cur().Close()
}

func (m *movingLog) Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error) {
	return m.cur().Commit(ctx, req)
}

func (m *movingLog) TakeReadLease(memberID uint64) (int64, error) {
	return m.cur().TakeReadLease(memberID)
}

func (m *movingLog) WatchHead() (zkstore.Head, <-chan struct{}, error) { return m.cur().WatchHead() }

func (m *movingLog) ReadEntries(ctx context.Context, from, to int64, window int, fn func(e *revision.Entry, size int) error) error {
	return m.cur().ReadEntries(ctx, from, to, window, fn)
}

func (m *movingLog) ReadLeaseToken(id int64) (zkstore.LeaseToken, bool, error) {
	return m.cur().ReadLeaseToken(id)
}

func (m *movingLog) RenewLeases(ids []int64) (map[int64]bool, error) {
	return m.cur().RenewLeases(ids)
}

func (m *movingLog) LoadBase(ctx context.Context, b zkstore.Base) (*revision.Snapshot, error) {
	return m.cur().LoadBase(ctx, b)
}

func (m *movingLog) PrepareBase(ctx context.Context, snap *revision.Snapshot, prev zkstore.Base, nonce uint64) (zkstore.Base, error) {
	return m.cur().PrepareBase(ctx, snap, prev, nonce)
}

func (m *movingLog) PublishBase(fence zkstore.Fence, nb zkstore.Base) (zkstore.Base, error) {
	return m.cur().PublishBase(fence, nb)
}

func (m *movingLog) TruncateLog(ctx context.Context, fence zkstore.Fence, lsn int64) (int, error) {
	return m.cur().TruncateLog(ctx, fence, lsn)
}

func (m *movingLog) CollectBases(ctx context.Context, fence zkstore.Fence, cur zkstore.Base) (int, error) {
	return m.cur().CollectBases(ctx, fence, cur)
}

func (m *movingLog) CollectChunks(ctx context.Context, fence zkstore.Fence, graceMillis int64) (int, error) {
	return m.cur().CollectChunks(ctx, fence, graceMillis)
}

func (m *movingLog) FreeCompacted(ctx context.Context, cur zkstore.Base) (zkstore.Base, int, error) {
	return m.cur().FreeCompacted(ctx, cur)
}

// movingLeadership is the engine's candidacy: in the election of the log
// it runs on, replaced by a candidacy in the destination's at a move.
// Changed fires at the current candidacy's changes and at the switch.
type movingLeadership struct {
	cur   atomic.Pointer[leadershipSlot]
	relay *changeRelay
}

type leadershipSlot struct{ l zkstore.Leadership }

var _ zkstore.Leadership = (*movingLeadership)(nil)

// newMovingLeadership returns a candidacy that leads nothing until start.
func newMovingLeadership() *movingLeadership {
	m := &movingLeadership{}
	m.relay = newChangeRelay(func() <-chan struct{} {
		if s := m.cur.Load(); s != nil {
			return s.l.Changed()
		}
		return nil // until start bumps the relay
	})
	return m
}

// start makes l the candidacy.
func (m *movingLeadership) start(l zkstore.Leadership) {
	m.cur.Store(&leadershipSlot{l})
	m.relay.bump()
}

func (m *movingLeadership) State() (bool, zkstore.Fence, uint64) {
	if s := m.cur.Load(); s != nil {
		return s.l.State()
	}
	return false, zkstore.Fence{}, 0
}

func (m *movingLeadership) Changed() <-chan struct{} { return m.relay.changed() }

// Close withdraws the current candidacy.
func (m *movingLeadership) Close() {
	m.relay.stop()
	if s := m.cur.Load(); s != nil {
		s.l.Close()
	}
}

// Yield steps the current candidacy down if it can (a zkstore.Election;
// see Engine.YieldLeadership) and reports whether it did.
func (m *movingLeadership) Yield() bool {
	if s := m.cur.Load(); s != nil {
		if y, ok := s.l.(yielder); ok {
			return y.Yield()
		}
	}
	return false
}

// stopRelay stops relaying changes (an engine that failed to start).
func (m *movingLeadership) stopRelay() { m.relay.stop() }

// swap makes l the candidacy and returns the one it replaces (the caller
// closes it).
func (m *movingLeadership) swap(l zkstore.Leadership) zkstore.Leadership {
	old := m.cur.Swap(&leadershipSlot{l})
	m.relay.bump()
	return old.l
}

// noLeadership is the candidacy of an instance whose log was fenced: it
// leads nothing and knows no leader until it runs on the destination.
type noLeadership struct{}

func (noLeadership) State() (bool, zkstore.Fence, uint64) { return false, zkstore.Fence{}, 0 }
func (noLeadership) Changed() <-chan struct{}             { return nil }
func (noLeadership) Close()                               {}

// changeRelay turns "a channel closed at the next change" of whichever
// source is current into one channel of its own that also fires when the
// source is replaced (bump). One goroutine relays until stop.
type changeRelay struct {
	mu     sync.Mutex
	ch     chan struct{}
	bumped chan struct{}
	done   chan struct{}
	once   sync.Once
}

func newChangeRelay(src func() <-chan struct{}) *changeRelay {
	r := &changeRelay{ch: make(chan struct{}), bumped: make(chan struct{}, 1), done: make(chan struct{})}
	go r.run(src)
	return r
}

func (r *changeRelay) run(src func() <-chan struct{}) {
	for {
		// The source's channel is taken before the relay's fires, so a
		// change after a wake-up is never missed: its readers read the
		// state again after the close.
		ch := src()
		select {
		case <-ch:
		case <-r.bumped:
		case <-r.done:
			return
		}
		r.mu.Lock()
		close(r.ch)
		r.ch = make(chan struct{})
		r.mu.Unlock()
	}
}

func (r *changeRelay) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ch
}

func (r *changeRelay) bump() {
	select {
	case r.bumped <- struct{}{}:
	default:
	}
}

func (r *changeRelay) stop() { r.once.Do(func() { close(r.done) }) }
