package watchbridge

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
)

// fixture is a hub over a real view, fed entries the way the engine does
// (apply, then notify, under one lock).
type fixture struct {
	t   *testing.T
	mu  sync.Mutex
	v   *revision.View
	h   *Hub
	lsn int64
	rev int64
}

func newFixture(t *testing.T) *fixture {
	v := revision.NewView(1, 1)
	f := &fixture{t: t, v: v, h: NewHub(v), lsn: 1, rev: 1}
	t.Cleanup(f.h.Close)
	return f
}

func (f *fixture) apply(ops ...revision.Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lsn++
	e := &revision.Entry{LSN: f.lsn, Ops: ops}
	evs, err := f.v.Apply(e)
	if err != nil {
		f.t.Errorf("apply: %v", err) // not Fatal: called from goroutines
		return
	}
	f.h.Notify(e, evs)
}

// put writes keys in one transaction (one revision) and returns it.
func (f *fixture) put(keys ...string) int64 {
	f.mu.Lock()
	f.rev++
	rev := f.rev
	f.mu.Unlock()
	op := revision.Op{Kind: revision.OpTxn, Rev: rev}
	for _, k := range keys {
		op.Changes = append(op.Changes, revision.Change{Key: []byte(k), Value: []byte(fmt.Sprint(rev))})
	}
	f.apply(op)
	return rev
}

// collect reads a stream's responses until stop returns true or d passes.
func collect(t *testing.T, s *Stream, d time.Duration, stop func([]Response) bool) []Response {
	t.Helper()
	out, err := collectErr(s, d, stop)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func collectErr(s *Stream, d time.Duration, stop func([]Response) bool) ([]Response, error) {
	var out []Response
	timeout := time.After(d)
	for !stop(out) {
		select {
		case r, ok := <-s.Chan():
			if !ok {
				return out, errors.New("stream closed")
			}
			out = append(out, r)
		case <-timeout:
			return out, fmt.Errorf("timed out after %d responses (up to revision %d)", len(out), lastRev(out))
		}
	}
	return out, nil
}

// lastRev is the highest event revision in rs.
func lastRev(rs []Response) int64 {
	var last int64
	for _, r := range rs {
		for _, ev := range r.Events {
			last = max(last, ev.KV.ModRevision)
		}
	}
	return last
}

func upTo(rev int64) func([]Response) bool {
	return func(rs []Response) bool { return lastRev(rs) >= rev }
}

// checkExactlyOnce verifies that rs hold, for watcher id, revisions from..to
// each exactly once, in order, none split across responses, and that a
// progress notification never precedes an event at or below its revision.
func checkExactlyOnce(t *testing.T, rs []Response, id, from, to int64, perRev int) {
	t.Helper()
	next := from
	var bookmark int64
	for i, r := range rs {
		if len(r.Events) == 0 {
			if r.CompactRevision == 0 {
				bookmark = max(bookmark, r.Revision)
			}
			continue
		}
		if r.WatchID != id {
			continue
		}
		seen := map[int64]int{}
		for _, ev := range r.Events {
			seen[ev.KV.ModRevision]++
		}
		for _, ev := range r.Events {
			rev := ev.KV.ModRevision
			if rev <= bookmark {
				t.Fatalf("response %d: revision %d after a progress notification at %d", i, rev, bookmark)
			}
			if seen[rev] != perRev {
				t.Fatalf("response %d: revision %d has %d events in it, want %d (split?)", i, rev, seen[rev], perRev)
			}
			switch {
			case rev == next:
				next++
			case rev == next-1:
				// The rest of the same revision.
			default:
				t.Fatalf("response %d: revision %d, want %d", i, rev, next)
			}
		}
	}
	if next != to+1 {
		t.Fatalf("delivered up to %d, want %d", next-1, to)
	}
}

// TestSlowStreamIsBounded: a stream nobody reads fills its channel and its
// watcher becomes a victim holding one pending response; Notify never
// blocks, another stream gets everything at once, and the slow stream gets
// every event in order once it is read.
func TestSlowStreamIsBounded(t *testing.T) {
	f := newFixture(t)
	slow, fast := f.h.NewStream(0), f.h.NewStream(0)
	defer slow.Close()
	defer fast.Close()
	for _, s := range []*Stream{slow, fast} {
		if _, err := s.Watch(AutoWatchID, []byte("k"), []byte("l"), 0); err != nil {
			t.Fatal(err)
		}
	}
	const n = 3000
	var fastGot []Response
	var fastErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		fastGot, fastErr = collectErr(fast, 30*time.Second, upTo(n+1))
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		f.put(fmt.Sprintf("k%d", i%50), fmt.Sprintf("k%d-b", i%50))
	}
	notifyTook := time.Since(start)
	<-done
	if fastErr != nil {
		t.Fatal(fastErr)
	}
	checkExactlyOnce(t, fastGot, 0, 2, n+1, 2)
	st := f.h.Stats()
	t.Logf("%d revisions notified in %v; hub: %+v", n, notifyTook, st)
	if st.Victims != 1 || len(slow.ch) != ChanBufLen {
		t.Fatalf("slow stream: %d victims, %d queued; want 1 victim and a full channel (%d)", st.Victims, len(slow.ch), ChanBufLen)
	}
	for w, r := range f.h.victims {
		if len(r.Events) != 2 {
			t.Errorf("victim %d holds %d events, want one revision's 2", w.id, len(r.Events))
		}
	}
	got := collect(t, slow, 30*time.Second, upTo(n+1))
	checkExactlyOnce(t, got, 0, 2, n+1, 2)
	if st := f.h.Stats(); st.Victims != 0 || st.Unsynced != 0 || st.Synced != 2 {
		t.Fatalf("after catching up: %+v", st)
	}
}

// TestCatchUpWhileNotifying: watchers from past revisions catch up from the
// view's history while entries keep being applied, and end up synced,
// having seen each revision once; more than 1000 revisions of history come
// in several responses.
func TestCatchUpWhileNotifying(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 1500; i++ {
		f.put(fmt.Sprintf("a%d", i%7))
	}
	stop := make(chan struct{})
	writes := make(chan int64, 1)
	go func() {
		var last int64
		defer func() { writes <- last }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			last = f.put(fmt.Sprintf("a%d", i%7))
			if i%100 == 0 {
				time.Sleep(time.Millisecond) // the writer's pace, not a wait
			}
		}
	}()
	var streams []*Stream
	for _, from := range []int64{2, 700, 1501} {
		s := f.h.NewStream(0)
		defer s.Close()
		if _, err := s.Watch(AutoWatchID, []byte("a"), []byte("b"), from); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	// The watchers catch up while a thousand more revisions are applied.
	f.mu.Lock()
	opened := f.rev
	f.mu.Unlock()
	testutil.Eventually(t, 30*time.Second, "a thousand revisions applied while the watchers catch up", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.rev >= opened+1000
	})
	close(stop)
	last := <-writes
	for i, s := range streams {
		from := []int64{2, 700, 1501}[i]
		rs := collect(t, s, 30*time.Second, upTo(last))
		checkExactlyOnce(t, rs, 0, from, last, 1)
		if from == 2 && len(rs) < 2 {
			t.Errorf("%d revisions of history came in %d responses", last, len(rs))
		}
	}
}

// TestProgressNeverAheadOfEvents: progress requests racing with
// notifications never announce a revision whose events come later.
func TestProgressNeverAheadOfEvents(t *testing.T) {
	f := newFixture(t)
	s := f.h.NewStream(0)
	defer s.Close()
	if _, err := s.Watch(AutoWatchID, []byte("p"), []byte("q"), 0); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	go func() {
		for i := 0; i < n; i++ {
			f.put(fmt.Sprintf("p%d", i%3))
		}
	}()
	go func() {
		for i := 0; i < 5*n; i++ {
			s.RequestProgressAll()
			s.RequestProgress(0)
		}
	}()
	rs := collect(t, s, 30*time.Second, upTo(n+1))
	progress := 0
	for _, r := range rs {
		if len(r.Events) == 0 {
			progress++
		}
	}
	t.Logf("%d responses, %d progress notifications", len(rs), progress)
	checkExactlyOnce(t, rs, 0, 2, n+1, 1)
}

// TestFutureStartRevision: a watcher on a future revision gets nothing
// before it, also after the hub resynchronised its watchers.
func TestFutureStartRevision(t *testing.T) {
	f := newFixture(t)
	f.put("x")
	s := f.h.NewStream(0)
	defer s.Close()
	if _, err := s.Watch(AutoWatchID, []byte("x"), nil, 10); err != nil {
		t.Fatal(err)
	}
	if s.RequestProgressAll(); len(s.ch) != 0 {
		t.Fatalf("progress for a watcher waiting for revision 10 at %d", f.h.Rev())
	}
	f.h.Resync()
	// A negative (resyncs do not move a watcher waiting for a future
	// revision), so a bounded wait: three resync periods.
	time.Sleep(3 * resyncPeriod)
	for f.rev < 12 {
		f.put("x")
	}
	rs := collect(t, s, 10*time.Second, upTo(12))
	checkExactlyOnce(t, rs, 0, 10, 12, 1)
}

// TestCompactedWatcherKeepsItsID: as in etcd, a watcher canceled because its
// start revision was compacted stays on its stream until canceled: its ID
// is taken and the stream gets no progress notification.
func TestCompactedWatcherKeepsItsID(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 5; i++ {
		f.put("c")
	}
	f.apply(revision.Op{Kind: revision.OpCompact, Rev: 4})
	s := f.h.NewStream(0)
	defer s.Close()
	if _, err := s.Watch(7, []byte("c"), nil, 2); err != nil {
		t.Fatal(err)
	}
	rs := collect(t, s, 5*time.Second, func(rs []Response) bool { return len(rs) == 1 })
	if rs[0].WatchID != 7 || rs[0].CompactRevision != 4 || len(rs[0].Events) != 0 {
		t.Fatalf("got %+v, want a compaction cancel of watcher 7 at 4", rs[0])
	}
	if _, err := s.Watch(7, []byte("c"), nil, 0); !errors.Is(err, ErrWatcherDuplicateID) {
		t.Fatalf("reusing the ID: %v, want %v", err, ErrWatcherDuplicateID)
	}
	if s.RequestProgressAll() || len(s.ch) != 0 {
		t.Fatal("progress sent with a compacted watcher on the stream")
	}
	if err := s.Cancel(7); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if _, err := s.Watch(7, []byte("c"), nil, 0); err != nil {
		t.Fatalf("ID not free after cancel: %v", err)
	}
	if !s.RequestProgressAll() {
		t.Fatal("no progress once the compacted watcher is gone")
	}
	if st := f.h.Stats(); st.Synced != 1 || st.Unsynced != 0 || st.Victims != 0 {
		t.Fatalf("hub %+v", st)
	}
}

func TestStreamWatcherLimit(t *testing.T) {
	f := newFixture(t)
	s := f.h.NewStream(3)
	defer s.Close()
	for i := 0; i < 3; i++ {
		if _, err := s.Watch(AutoWatchID, []byte("k"), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Watch(AutoWatchID, []byte("k"), nil, 0); !errors.Is(err, ErrTooManyWatchers) {
		t.Fatalf("fourth watcher: %v", err)
	}
	if err := s.Cancel(0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch(AutoWatchID, []byte("k"), nil, 0); err != nil {
		t.Fatalf("after a cancel: %v", err)
	}
}

// A create that races the stream's close gets ErrStreamClosed, not one of
// etcd's refusals (which would tell the client its watch was invalid).
func TestWatchOnAClosedStreamIsNotARefusal(t *testing.T) {
	f := newFixture(t)
	s := f.h.NewStream(0)
	s.Close()
	if _, err := s.Watch(AutoWatchID, []byte("a"), []byte("b"), 0); !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("watch on a closed stream: %v, want %v", err, ErrStreamClosed)
	}
}

// The hub's bound (a tenant's watcher limit) counts the watchers of every
// stream together; a closed stream's watchers free their places.
func TestHubWatcherLimitSpansStreams(t *testing.T) {
	f := newFixture(t)
	f.h.SetMaxWatchers(3)
	a, b := f.h.NewStream(0), f.h.NewStream(0)
	defer b.Close()
	for _, s := range []*Stream{a, a, b} {
		if _, err := s.Watch(AutoWatchID, []byte("k"), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Watch(AutoWatchID, []byte("k"), []byte("l"), 0); !errors.Is(err, ErrHubWatcherLimit) {
		t.Fatalf("a fourth watcher on another stream: %v", err)
	}
	a.Close()
	if _, err := b.Watch(AutoWatchID, []byte("k"), nil, 1); err != nil {
		t.Fatalf("after the other stream closed: %v", err)
	}
	f.h.SetMaxWatchers(0)
	for range 10 {
		if _, err := b.Watch(AutoWatchID, []byte("k"), nil, 0); err != nil {
			t.Fatalf("without a bound: %v", err)
		}
	}
}

// Stats counts open streams, with or without watchers, until each is
// closed (once, however often Close is called).
func TestStatsCountOpenStreams(t *testing.T) {
	f := newFixture(t)
	a, b := f.h.NewStream(0), f.h.NewStream(0)
	if _, err := a.Watch(AutoWatchID, []byte("k"), nil, 0); err != nil {
		t.Fatal(err)
	}
	if st := f.h.Stats(); st.Streams != 2 || st.Synced != 1 {
		t.Fatalf("two streams, one watcher: %+v", st)
	}
	a.Close()
	a.Close()
	if st := f.h.Stats(); st.Streams != 1 || st.Synced != 0 {
		t.Fatalf("after closing one: %+v", st)
	}
	b.Close()
	if st := f.h.Stats(); st.Streams != 0 {
		t.Fatalf("after closing both: %+v", st)
	}
}
