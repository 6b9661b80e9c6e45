package watchbridge

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/zketcd/zketcd/internal/revision"
)

// Tunables, as in etcd's watchable store; tests may shrink them.
const (
	// ChanBufLen is the length of each stream's response channel.
	ChanBufLen = 128
	// maxWatchersPerSync bounds the watchers caught up in one round.
	maxWatchersPerSync = 512
	// resyncPeriod is how often unsynced watchers are caught up.
	resyncPeriod = 100 * time.Millisecond
	// batchMaxRevs bounds the revisions in one catch-up response.
	batchMaxRevs = 1000
)

// InvalidWatchID is the watch ID of progress responses sent on behalf of
// every watcher of a stream (clientv3's InvalidWatchID).
const InvalidWatchID = -1

// AutoWatchID asks Watch to choose the ID.
const AutoWatchID = 0

// Errors returned by Stream.Watch and Stream.Cancel, with etcd's texts.
var (
	ErrEmptyWatcherRange  = errors.New("mvcc: watcher range is empty")
	ErrWatcherDuplicateID = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
	ErrWatcherNotExist    = errors.New("mvcc: watcher does not exist")
	// ErrTooManyWatchers is zketcd's own: a stream reached its watcher limit.
	ErrTooManyWatchers = errors.New("zketcd: too many watchers on this stream")
	// ErrHubWatcherLimit refuses a watcher beyond the hub's bound
	// (SetMaxWatchers: a tenant's limit), in etcd's words for an overload.
	ErrHubWatcherLimit = errors.New("etcdserver: too many requests")
	// ErrStreamClosed is zketcd's own: the stream was closed (its gRPC
	// stream is ending); the create must not be answered as if refused.
	ErrStreamClosed = errors.New("zketcd: watch stream closed")
)

// Response is what a stream's channel carries: events for one watcher, a
// progress notification (no events), or a compaction cancel.
type Response struct {
	WatchID int64
	Events  []revision.Event
	// Revision is the header revision: the hub's revision when the events
	// were sent.
	Revision int64
	// CompactRevision is set when the watcher was canceled because its
	// start revision was compacted.
	CompactRevision int64
}

// Filter drops events a watcher does not want.
type Filter func(revision.Event) bool

// FilterNoPut drops puts; FilterNoDelete drops deletes.
var (
	FilterNoPut    Filter = func(e revision.Event) bool { return e.Type == revision.EventPut }
	FilterNoDelete Filter = func(e revision.Event) bool { return e.Type == revision.EventDelete }
)

type watcher struct {
	id       int64
	key, end []byte
	startRev int64
	minRev   int64 // the next revision to deliver
	filters  []Filter
	stream   *Stream
	victim   bool
	// compacted: canceled because its start revision was compacted. As in
	// etcd, it stays on its stream (its ID taken, the stream not "synced"
	// for progress requests) until the client cancels it.
	compacted bool
}

func (w *watcher) matches(key []byte) bool {
	if w.end == nil {
		return bytes.Equal(w.key, key)
	}
	if bytes.Compare(key, w.key) < 0 {
		return false
	}
	return len(w.end) == 0 || bytes.Compare(key, w.end) < 0
}

// send filters evs and queues them without blocking. It reports false when
// the channel is full. A response whose events were all filtered out is not
// sent (but counts as delivered).
func (w *watcher) send(r Response) bool {
	progress := len(r.Events) == 0
	if len(w.filters) > 0 && !progress {
		kept := make([]revision.Event, 0, len(r.Events))
		for _, ev := range r.Events {
			drop := false
			for _, f := range w.filters {
				if f(ev) {
					drop = true
					break
				}
			}
			if !drop {
				kept = append(kept, ev)
			}
		}
		if len(kept) == 0 {
			return true
		}
		r.Events = kept
	}
	select {
	case w.stream.ch <- r:
		return true
	default:
		return false
	}
}

type watcherSet map[*watcher]struct{}

// group indexes watchers by key (single-key watchers) and by interval
// (range watchers), so that the watchers of one key are found in
// O(log W + matches).
type group struct {
	keys   map[string]watcherSet
	ranges rangeIndex
	size   int
}

func newGroup() group { return group{keys: map[string]watcherSet{}, ranges: newRangeIndex()} }

func (g *group) add(w *watcher) {
	if w.end == nil {
		s := g.keys[string(w.key)]
		if s == nil {
			s = watcherSet{}
			g.keys[string(w.key)] = s
		}
		s[w] = struct{}{}
	} else {
		g.ranges.add(w)
	}
	g.size++
}

func (g *group) remove(w *watcher) bool {
	if w.end == nil {
		s := g.keys[string(w.key)]
		if _, ok := s[w]; !ok {
			return false
		}
		delete(s, w)
		if len(s) == 0 {
			delete(g.keys, string(w.key))
		}
	} else if !g.ranges.remove(w) {
		return false
	}
	g.size--
	return true
}

func (g *group) has(w *watcher) bool {
	if w.end == nil {
		_, ok := g.keys[string(w.key)][w]
		return ok
	}
	return g.ranges.has(w)
}

func (g *group) each(fn func(*watcher)) {
	for _, s := range g.keys {
		for w := range s {
			fn(w)
		}
	}
	g.ranges.each(fn)
}

// Hub fans applied events out to watchers. Its methods are safe for
// concurrent use.
type Hub struct {
	view *revision.View

	mu       sync.Mutex
	rev      int64 // last revision notified: every event <= rev was offered to synced watchers
	synced   group
	unsynced group
	victims  map[*watcher]Response
	streams  int // open streams (NewStream, not yet closed)

	// maxWatchers bounds the watchers of all streams (0: no bound).
	maxWatchers int

	wake   chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

// SetMaxWatchers bounds the watchers of all the hub's streams together (0
// or negative: no bound): Watch refuses one beyond it with
// ErrHubWatcherLimit. Watchers already there stay.
func (h *Hub) SetMaxWatchers(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxWatchers = max(n, 0)
}

// watchers counts the hub's watchers (h.mu held).
func (h *Hub) watchers() int { return h.synced.size + h.unsynced.size + len(h.victims) }

// NewHub returns a hub over view, starting at the view's current revision,
// and starts its catch-up loops. Call Notify for every entry applied after.
func NewHub(view *revision.View) *Hub {
	h := &Hub{
		view:     view,
		rev:      view.State().Rev,
		synced:   newGroup(),
		unsynced: newGroup(),
		victims:  map[*watcher]Response{},
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	h.wg.Add(1)
	go h.loop()
	return h
}

// Close stops the hub's loops. Streams must be closed by their owners.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	close(h.stop)
	h.wg.Wait()
}

// Rev returns the hub's revision: every event at or below it has been
// offered to the synced watchers.
func (h *Hub) Rev() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// Notify offers the events of an applied entry to the synced watchers, one
// response per revision. It never blocks: a watcher whose stream is full
// becomes a victim. Call it in LSN order, after the view applied e.
func (h *Hub) Notify(e *revision.Entry, events []revision.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(events) > 0 {
		rev := events[0].KV.ModRevision
		n := 1
		for n < len(events) && events[n].KV.ModRevision == rev {
			n++
		}
		h.notifyRev(rev, events[:n])
		events = events[n:]
	}
	if last := e.LastRev(); last > h.rev {
		h.rev = last
	}
}

func (h *Hub) notifyRev(rev int64, events []revision.Event) {
	batches := map[*watcher][]revision.Event{}
	for _, ev := range events {
		k := ev.KV.Key
		for w := range h.synced.keys[string(k)] {
			if rev >= w.minRev {
				batches[w] = append(batches[w], ev)
			}
		}
		h.synced.ranges.stab(k, func(w *watcher) {
			if rev >= w.minRev {
				batches[w] = append(batches[w], ev)
			}
		})
	}
	for w, evs := range batches {
		r := Response{WatchID: w.id, Events: evs, Revision: rev}
		w.minRev = rev + 1
		if !w.send(r) {
			w.victim = true
			h.synced.remove(w)
			h.victims[w] = r
		}
	}
	if rev > h.rev {
		h.rev = rev
	}
	if len(h.victims) > 0 {
		h.kick()
	}
}

func (h *Hub) kick() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// loop retries victims and catches up unsynced watchers.
func (h *Hub) loop() {
	defer h.wg.Done()
	t := time.NewTicker(resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		case <-h.wake:
		}
		h.retryVictims()
		for h.syncWatchers() > 0 {
			select {
			case <-h.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			h.retryVictims()
		}
	}
}

// retryVictims re-sends pending responses; a delivered victim continues as
// unsynced (or synced if nothing happened since).
func (h *Hub) retryVictims() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w, r := range h.victims {
		if !w.send(r) {
			continue
		}
		delete(h.victims, w)
		w.victim = false
		if w.minRev <= h.rev {
			h.unsynced.add(w)
		} else {
			h.synced.add(w)
		}
	}
}

// syncWatchers catches up to maxWatchersPerSync unsynced watchers from the
// view's history and returns how many remain unsynced.
func (h *Hub) syncWatchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unsynced.size == 0 {
		return 0
	}
	compacted := h.view.State().CompactRev
	var chosen []*watcher
	minRev := h.rev + 1
	h.unsynced.each(func(w *watcher) {
		if len(chosen) >= maxWatchersPerSync {
			return
		}
		if w.minRev < compacted {
			if w.send(Response{WatchID: w.id, CompactRevision: compacted}) {
				h.unsynced.remove(w)
				w.compacted = true
			}
			return
		}
		chosen = append(chosen, w)
		minRev = min(minRev, w.minRev)
	})
	if len(chosen) == 0 {
		return h.unsynced.size
	}
	batches := make(map[*watcher][]revision.Event, len(chosen))
	more := map[*watcher]int64{} // first revision left for a later response
	revs := map[*watcher]int{}
	last := map[*watcher]int64{}
	_, err := h.view.Changes(minRev, func(ev revision.Event) bool {
		rev := ev.KV.ModRevision
		if rev > h.rev {
			return false // not notified yet: Notify will deliver it
		}
		for _, w := range chosen {
			if rev < w.minRev || more[w] != 0 || !w.matches(ev.KV.Key) {
				continue
			}
			if last[w] != rev {
				if revs[w] == batchMaxRevs {
					more[w] = rev
					continue
				}
				revs[w]++
				last[w] = rev
			}
			batches[w] = append(batches[w], ev)
		}
		return true
	})
	if err != nil {
		// Compacted meanwhile: the next round cancels those watchers.
		return h.unsynced.size
	}
	for _, w := range chosen {
		next := h.rev + 1
		if m := more[w]; m != 0 {
			next = m
		}
		evs, ok := batches[w]
		// max: a watcher on a future revision keeps it (etcd does the same).
		if !ok {
			w.minRev = max(next, w.minRev)
			h.unsynced.remove(w)
			h.synced.add(w)
			continue
		}
		r := Response{WatchID: w.id, Events: evs, Revision: h.rev}
		w.minRev = max(next, w.minRev)
		h.unsynced.remove(w)
		if !w.send(r) {
			w.victim = true
			h.victims[w] = r
			continue
		}
		if more[w] != 0 {
			h.unsynced.add(w)
		} else {
			h.synced.add(w)
		}
	}
	return h.unsynced.size
}

// Resync is for a view that was reset (reloaded from a base generation
// after falling behind a compaction): every synced watcher becomes unsynced
// so it catches up from the view's history (or is canceled as compacted),
// and the hub's revision becomes the view's.
func (h *Hub) Resync() {
	h.mu.Lock()
	defer h.mu.Unlock()
	var moved []*watcher
	h.synced.each(func(w *watcher) { moved = append(moved, w) })
	for _, w := range moved {
		h.synced.remove(w)
		if w.minRev <= h.rev {
			// It had seen everything up to h.rev: continue from there.
			w.minRev = h.rev + 1
		}
		h.unsynced.add(w)
	}
	h.rev = h.view.State().Rev
	h.kick()
}

// Stats is a snapshot of the hub's watchers.
type Stats struct {
	// Streams counts the open streams (with or without watchers).
	Streams int
	// Synced, Unsynced and Victims count watchers by state.
	Synced, Unsynced, Victims int
	// Queued is the number of responses waiting in the channels of the
	// streams those watchers belong to: with the victims' one pending
	// response each, all the hub holds for slow consumers.
	Queued int
}

// Stats returns a snapshot of the hub's watchers.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := Stats{Streams: h.streams, Synced: h.synced.size, Unsynced: h.unsynced.size, Victims: len(h.victims)}
	streams := map[*Stream]bool{}
	count := func(w *watcher) {
		if !streams[w.stream] {
			streams[w.stream] = true
			st.Queued += len(w.stream.ch)
		}
	}
	h.synced.each(count)
	h.unsynced.each(count)
	for w := range h.victims {
		count(w)
	}
	return st
}
