package engine

import (
	"sync"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// space accounts for the bytes the root holds, counted two ways:
//
//   - logical: what is stored before compression (a log entry's record,
//     zkstore.RecordBytes; a base generation's RawSize). It grows with
//     what is written, as etcd's database does whatever its values hold,
//     and bounds what every instance keeps in memory: etcd's "DB size"
//     and "DB size in use", what the quota is checked against;
//   - stored: the bytes ZooKeeper keeps, compressed (an entry written as
//     chunks counts its chunks): what ZooKeeper's heap holds of the root,
//     what the ZooKeeper heap check counts (sizing.go).
//
// Each is split the same way:
//
//   - in use: the current base generation and the log entries after it —
//     what recovery reads, and all a defragment leaves;
//   - total: that, plus what physical compaction keeps for one more cycle
//     (instances a little behind may still tail it): the previous
//     generation and the log entries after it up to the current one.
//
// Entry sizes are those this instance applied; for the part of the log it
// did not apply (it recovered from the current generation) the
// description's LogBytes and LogRaw, which the leader that published it
// counted, stand in (LogBytes for both in descriptions without LogRaw).
// ZooKeeper's own per-znode overhead, the head, members and lease tokens
// are not counted. Safe for concurrent use.
type space struct {
	mu      sync.Mutex
	from    int64   // log position of stored[0]
	stored  []int64 // stored[i]: stored bytes of the entries from..from+i
	logical []int64 // logical[i]: their records' bytes before compression
	raw     []int64 // raw[i]: their data bytes before encoding (Entry.DataBytes)
	base    zkstore.Base
}

// usage is one count of the root's bytes (see space).
type usage struct{ total, inUse int64 }

// applied records the stored size of entry lsn, its record's size
// before compression and its data bytes before encoding. Entries arrive
// in order; after a gap (a reload) the record starts again at lsn.
func (s *space) applied(lsn int64, stored int, logical, raw int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch next := s.from + int64(len(s.stored)); {
	case len(s.stored) == 0 || lsn != next:
		if len(s.stored) > 0 && lsn < next {
			return // already recorded
		}
		s.from = lsn
		s.stored = append(s.stored[:0], int64(stored))
		s.logical = append(s.logical[:0], logical)
		s.raw = append(s.raw[:0], raw)
	default:
		last := len(s.stored) - 1
		s.stored = append(s.stored, s.stored[last]+int64(stored))
		s.logical = append(s.logical, s.logical[last]+logical)
		s.raw = append(s.raw, s.raw[last]+raw)
	}
}

// reset forgets every entry's size.
func (s *space) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stored, s.logical, s.raw, s.from = s.stored[:0], s.logical[:0], s.raw[:0], 0
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
		if drop >= int64(len(s.stored)) {
			s.stored, s.logical, s.raw = s.stored[:0], s.logical[:0], s.raw[:0]
		} else {
			s.stored = append(s.stored[:0:0], s.stored[drop:]...)
			s.logical = append(s.logical[:0:0], s.logical[drop:]...)
			s.raw = append(s.raw[:0:0], s.raw[drop:]...)
		}
		s.from = b.PrevGen
	}
}

// rangeLocked returns the bytes cum (one of the cumulative records)
// holds for the entries after lsn a up to b, and whether this instance
// recorded all of them.
func (s *space) rangeLocked(cum []int64, a, b int64) (int64, bool) {
	if b <= a {
		return 0, true
	}
	if len(cum) == 0 {
		return 0, false
	}
	last := s.from + int64(len(cum)) - 1
	lo, hi := max(a+1, s.from), min(b, last)
	if lo > hi {
		return 0, false
	}
	n := cum[hi-s.from]
	if lo > s.from {
		n -= cum[lo-1-s.from]
	}
	return n, lo == a+1 && hi == b
}

// baseLogical returns a base generation's bytes before compression: its
// RawSize, or its stored size where the description did not record it
// (older builds; memlog). A log generation (Gen 0) holds nothing of its
// own: the log is its data.
func baseLogical(b zkstore.Base) int64 {
	if b.Gen == 0 {
		return 0
	}
	if raw := b.RawSize(); raw > 0 {
		return raw
	}
	return int64(b.StoredSize())
}

// sizes returns the logical and stored usage with the view applied up to
// entry applied.
func (s *space) sizes(applied int64) (logical, stored usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.base
	after, _ := s.rangeLocked(s.stored, b.Gen, applied)
	stored.inUse = int64(b.StoredSize()) + after
	after, _ = s.rangeLocked(s.logical, b.Gen, applied)
	logical.inUse = baseLogical(b) + after
	if b.Gen == 0 {
		// No compaction yet: the whole log is in use.
		return usage{logical.inUse, logical.inUse}, usage{stored.inUse, stored.inUse}
	}
	kept, complete := s.rangeLocked(s.stored, b.PrevGen, b.Gen)
	if !complete {
		kept = max(kept, b.LogBytes)
	}
	stored.total = stored.inUse + kept
	if kept, complete = s.rangeLocked(s.logical, b.PrevGen, b.Gen); !complete {
		kept = max(kept, b.LogRaw, b.LogBytes)
	}
	logical.total = logical.inUse + kept
	if b.PrevPath != "" {
		stored.total += int64(b.PrevSize)
		logical.total += max(b.PrevRaw, int64(b.PrevSize))
	}
	return logical, stored
}

// keptLog returns the LogRaw and LogBytes a new generation at gen,
// following cur, records: the entries after cur's position up to gen
// (see space), before compression and stored.
func (s *space) keptLog(cur zkstore.Base, gen int64) (logical, stored int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	logical, _ = s.rangeLocked(s.logical, cur.Gen, gen)
	stored, _ = s.rangeLocked(s.stored, cur.Gen, gen)
	return logical, stored
}
