package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// space accounts for the bytes the root holds in ZooKeeper, etcd's "DB
// size" (what the quota is checked against) and "DB size in use":
//
//   - in use: the current base generation and the log entries after it —
//     what recovery reads, and all a defragment leaves;
//   - total: that, plus what physical compaction keeps for one more cycle
//     (instances a little behind may still tail it): the previous
//     generation and the log entries after it up to the current one.
//
// Entry sizes are those this instance applied (an entry written as chunks
// counts its chunks); for the part of the log it did not apply (it
// recovered from the current generation) the description's LogBytes, which
// the leader that published it counted, stands in. ZooKeeper's own
// per-znode overhead, the head, members and lease tokens are not counted.
// Safe for concurrent use.
type space struct {
	mu   sync.Mutex
	from int64   // log position of cum[0]
	cum  []int64 // cum[i]: bytes of the entries from..from+i
	raw  []int64 // raw[i]: their data bytes before encoding (Entry.DataBytes)
	base zkstore.Base
}

// applied records the size of entry lsn and its data bytes before
// encoding. Entries arrive in order; after a gap (a reload) the record
// starts again at lsn.
func (s *space) applied(lsn int64, size int, raw int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch next := s.from + int64(len(s.cum)); {
	case len(s.cum) == 0 || lsn != next:
		if len(s.cum) > 0 && lsn < next {
			return // already recorded
		}
		s.from, s.cum, s.raw = lsn, append(s.cum[:0], int64(size)), append(s.raw[:0], raw)
	default:
		s.cum = append(s.cum, s.cum[len(s.cum)-1]+int64(size))
		s.raw = append(s.raw, s.raw[len(s.raw)-1]+raw)
	}
}

// reset forgets every entry's size.
func (s *space) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cum, s.raw, s.from = s.cum[:0], s.raw[:0], 0
}

// logData returns the data bytes before encoding of the log entries 1..to
// (what a replay of the log from its start decodes), and whether this
// instance recorded all of them (entry 1, the root's sentinel, holds none
// and is not replayed).
func (s *space) logData(to int64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.raw) == 0 || s.from > 2 || s.from+int64(len(s.raw))-1 < to {
		return 0, false
	}
	if to < s.from {
		return 0, true
	}
	return s.raw[to-s.from], true
}

// setBase records the current generation and forgets the sizes of entries
// the root no longer holds (below its previous generation).
func (s *space) setBase(b zkstore.Base) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Gen < s.base.Gen || (b.Gen == s.base.Gen && b.PrevGen < s.base.PrevGen) {
		return // an older description read late
	}
	s.base = b
	if drop := b.PrevGen - s.from; drop > 0 {
		if drop >= int64(len(s.cum)) {
			s.cum, s.raw = s.cum[:0], s.raw[:0]
		} else {
			s.cum = append(s.cum[:0:0], s.cum[drop:]...)
			s.raw = append(s.raw[:0:0], s.raw[drop:]...)
		}
		s.from = b.PrevGen
	}
}

// logBytesLocked returns the bytes of the entries after lsn a up to b that
// this instance recorded, and whether it recorded all of them.
func (s *space) logBytesLocked(a, b int64) (int64, bool) {
	if b <= a {
		return 0, true
	}
	if len(s.cum) == 0 {
		return 0, false
	}
	last := s.from + int64(len(s.cum)) - 1
	lo, hi := max(a+1, s.from), min(b, last)
	if lo > hi {
		return 0, false
	}
	n := s.cum[hi-s.from]
	if lo > s.from {
		n -= s.cum[lo-1-s.from]
	}
	return n, lo == a+1 && hi == b
}

// sizes returns the total and in-use bytes with the view applied up to
// entry applied.
func (s *space) sizes(applied int64) (total, inUse int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.base
	after, _ := s.logBytesLocked(b.Gen, applied)
	inUse = int64(b.StoredSize()) + after
	if b.Gen == 0 {
		return inUse, inUse // no compaction yet: the whole log is in use
	}
	kept, complete := s.logBytesLocked(b.PrevGen, b.Gen)
	if !complete {
		kept = max(kept, b.LogBytes)
	}
	total = inUse + kept
	if b.PrevPath != "" {
		total += int64(b.PrevSize)
	}
	return total, inUse
}

// keptLogBytes is the LogBytes a new generation at gen, following cur,
// records: the entries after cur's position up to gen (see space).
func (s *space) keptLogBytes(cur zkstore.Base, gen int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := s.logBytesLocked(cur.Gen, gen)
	return n
}

// DBSize returns the bytes the root holds in ZooKeeper as this instance
// accounts them (see space): etcd's DB size, against which the quota is
// checked.
func (b *Engine) DBSize() int64 {
	total, _ := b.space.sizes(b.view.State().LSN)
	return total
}

// DBSizeInUse returns the bytes of the current base generation and the log
// after it: what a defragment would leave (etcd's DB size in use).
func (b *Engine) DBSizeInUse() int64 {
	_, inUse := b.space.sizes(b.view.State().LSN)
	return inUse
}

// refreshBase reads the base description into the space accounting.
func (b *Engine) refreshBase() error {
	base, err := b.store.ReadBase()
	if err != nil {
		return err
	}
	b.space.setBase(base)
	b.view.PruneRemoved(base.Rev) // the generation holds those removals
	return nil
}

// Defragment frees at once the space the last compaction made obsolete
// (etcd's defragment): it waits until a base generation holds the view's
// compaction (the leader writes it within a few seconds), then deletes the
// log below that generation and the generation before it
// (Log.FreeCompacted). Instances tailing behind that generation reload
// from it. Errors: the log's, or ctx's.
func (b *Engine) Defragment(ctx context.Context) error {
	if err := b.servable(); err != nil {
		return err
	}
	start := time.Now()
	if rev := b.view.State().CompactRev; rev > 0 {
		if err := b.waitPhysical(ctx, rev); err != nil {
			return b.stopped(fmt.Errorf("defragment: wait for the compaction to %d: %w", rev, err))
		}
	}
	for attempt := 0; ; attempt++ {
		cur, err := b.store.ReadBase()
		if err != nil {
			return err
		}
		nb, deleted, err := b.store.FreeCompacted(ctx, cur)
		if errors.Is(err, zkstore.ErrBaseChanged) && attempt < 3 {
			continue // a new generation was published meanwhile: free below it
		}
		if err != nil {
			return b.stopped(fmt.Errorf("defragment: %w", err))
		}
		b.space.setBase(nb)
		total, inUse := b.space.sizes(b.view.State().LSN)
		b.log.WithFields(logrus.Fields{
			"generation": nb.Gen, "log_entries_deleted": deleted, "previous_generation": cur.PrevPath != "",
			"db_size": total, "db_size_in_use": inUse, "took": time.Since(start).Round(time.Millisecond),
		}).Info("defragmented: compacted history freed")
		return nil
	}
}
