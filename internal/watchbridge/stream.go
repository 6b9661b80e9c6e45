package watchbridge

import "bytes"

// Stream is a set of watchers sharing one response channel, as one gRPC
// watch stream. Its methods are safe for concurrent use; Chan is read by
// one goroutine.
type Stream struct {
	hub      *Hub
	ch       chan Response
	nextID   int64
	watchers map[int64]*watcher // guarded by hub.mu
	// maxWatchers bounds len(watchers); 0 means no bound.
	maxWatchers int
	closed      bool
}

// NewStream opens a stream on the hub that holds at most maxWatchers
// watchers (0: no bound).
func (h *Hub) NewStream(maxWatchers int) *Stream {
	h.mu.Lock()
	h.streams++
	h.mu.Unlock()
	return &Stream{hub: h, ch: make(chan Response, ChanBufLen), watchers: map[int64]*watcher{}, maxWatchers: maxWatchers}
}

// Chan returns the channel the stream's responses arrive on. It is closed
// by Close.
func (s *Stream) Chan() <-chan Response { return s.ch }

// Rev returns the hub's revision.
func (s *Stream) Rev() int64 { return s.hub.Rev() }

// Watch adds a watcher on [key, end) (end nil: key only; empty: no upper
// bound) from startRev (0: the next revision) and returns its ID: id if not
// AutoWatchID, else the lowest free one from a per-stream counter. Errors:
// ErrEmptyWatcherRange for key >= end, ErrWatcherDuplicateID,
// ErrTooManyWatchers, ErrHubWatcherLimit, ErrStreamClosed once Close was
// called.
func (s *Stream) Watch(id int64, key, end []byte, startRev int64, filters ...Filter) (int64, error) {
	if len(end) != 0 && bytes.Compare(key, end) >= 0 {
		return -1, ErrEmptyWatcherRange
	}
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return -1, ErrStreamClosed
	}
	if s.maxWatchers > 0 && len(s.watchers) >= s.maxWatchers {
		return -1, ErrTooManyWatchers
	}
	if h.maxWatchers > 0 && h.watchers() >= h.maxWatchers {
		return -1, ErrHubWatcherLimit
	}
	if id == AutoWatchID {
		for s.watchers[s.nextID] != nil {
			s.nextID++
		}
		id = s.nextID
		s.nextID++
	} else if s.watchers[id] != nil {
		return -1, ErrWatcherDuplicateID
	}
	w := &watcher{id: id, key: key, end: end, startRev: startRev, filters: filters, stream: s}
	if startRev == 0 || startRev > h.rev {
		w.minRev = max(h.rev+1, startRev)
		h.synced.add(w)
	} else {
		w.minRev = startRev
		h.unsynced.add(w)
		h.kick()
	}
	s.watchers[id] = w
	return id, nil
}

// Cancel removes a watcher. Errors: ErrWatcherNotExist.
func (s *Stream) Cancel(id int64) error {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	w := s.watchers[id]
	if w == nil || s.closed {
		return ErrWatcherNotExist
	}
	h.remove(w)
	delete(s.watchers, id)
	return nil
}

func (h *Hub) remove(w *watcher) {
	if !h.synced.remove(w) && !h.unsynced.remove(w) {
		delete(h.victims, w)
	}
}

// RequestProgressAll sends a progress response (WatchID -1) at the hub's
// revision if every watcher of the stream is synced, and reports whether
// it did.
func (s *Stream) RequestProgressAll() bool {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	return s.progressLocked(nil, InvalidWatchID)
}

// RequestProgress sends a progress response for watcher id if it is synced.
func (s *Stream) RequestProgress(id int64) {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := s.watchers[id]; w != nil {
		s.progressLocked(w, id)
	}
}

func (s *Stream) progressLocked(only *watcher, respID int64) bool {
	h := s.hub
	var first *watcher
	for _, w := range s.watchers {
		if only != nil && w != only {
			continue
		}
		if !h.synced.has(w) || h.rev < w.startRev {
			return false
		}
		if first == nil {
			first = w
		}
	}
	if first == nil {
		return true
	}
	first.send(Response{WatchID: respID, Revision: h.rev})
	return true
}

// Close cancels every watcher and closes the channel.
func (s *Stream) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	for _, w := range s.watchers {
		h.remove(w)
	}
	s.watchers = nil
	s.closed = true
	h.streams--
	close(s.ch)
}
