package engine

import (
	"context"
	"sync"
	"time"
)

// barrier gives linearizable reads a ZooKeeper-ordered event that happened
// after they arrived, and shares it among them. Two kinds of event qualify:
//
//   - a barrier round (sync), started after the read arrived. A read joins a
//     round not started yet — never one in flight, whose barrier may predate
//     the read. Up to maxRounds rounds are in flight at once; reads arriving
//     while all are busy wait together in pending rounds.
//   - a commit multi of this instance that lands, sent after the read
//     arrived (piggybacking, below). It satisfies pending rounds without a
//     round trip of their own.
//
// Why a landed commit proves what a round proves. A read R joins under mu,
// taking the next read sequence number; the committer calls sending, also
// under mu, before it hands the multi to the log, and keeps the sequence
// number it returns (the mark). So every read numbered at most mark arrived
// before the multi was first sent (a re-send of an unknown outcome is later
// still). A write acknowledged, by any instance, before R arrived is in
// ZooKeeper's log before R arrived, so before the multi was sent, so before
// ZooKeeper applied it. The multi creates log entry n+1 and checks entry n
// exists, and log positions are dense: landing (outcome Committed, resolved
// by writer tag if the answer was lost) means every entry ZooKeeper applied
// before it — that write's among them — is at a position ≤ n. Serving R from
// a view at n+1 or later is therefore linearizable. This needs a ZooKeeper
// transaction only (it goes through the ZooKeeper leader and a quorum, unlike
// sync), not the leader's fence. Only rounds not yet started are satisfied
// this way; one in flight ends with its own answer.
//
// While a commit is in flight, or has just landed and the committer has not
// yet sent the next one nor gone idle, a pending round does not start a
// round trip: the committer's next send covers it, and a round trip would
// cost a ZooKeeper transaction for what the commit proves for free. The
// committer ends the wait by sending (the round is covered, and answered
// when that commit lands), by a failed landing (round trips start again
// until the next send) or by going idle (idle starts one). A reader waits for at most two commits this way, as
// long as it would wait for the round in flight and the next one.
//
// All methods are safe for concurrent use.
type barrier struct {
	sync      func() (int64, error) // returns the head LSN after a barrier round
	maxRounds int
	// observe, if not nil, is told of every completed round: whether a
	// commit satisfied it, and how many reads it answered.
	observe func(byCommit bool, reads int)
	// proved, if not nil, is told the send time and log position of every
	// commit that landed: ZooKeeper applied it, so the session was alive
	// after then.
	proved func(sentAt time.Time, lsn int64)

	mu       sync.Mutex
	inflight int      // round trips in flight
	pending  []*round // not started, oldest first; the last one may be open
	seq      uint64   // reads joined so far
	flying   int      // commits sent, not landed
	soon     bool     // the last commit landed; the committer sends the next or goes idle
	stalled  bool     // a commit failed: round trips may start until the next send
}

type round struct {
	done chan struct{}
	lsn  int64
	err  error

	last   uint64 // sequence number of the newest read in it
	reads  int
	sealed bool // closed to new reads: a commit was sent after them
}

// wait returns a head LSN read (or committed) after wait was called.
func (b *barrier) wait(ctx context.Context) (int64, error) {
	b.mu.Lock()
	var r *round
	if n := len(b.pending); n > 0 && !b.pending[n-1].sealed {
		r = b.pending[n-1]
	} else {
		r = &round{done: make(chan struct{})}
		b.pending = append(b.pending, r)
	}
	b.seq++
	r.last = b.seq
	r.reads++
	b.maybeStartLocked()
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.lsn, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// maybeStartLocked starts a round trip for every pending round if one may
// start: a slot is free and no commit that could satisfy them is in flight.
func (b *barrier) maybeStartLocked() {
	if len(b.pending) == 0 || b.inflight >= max(b.maxRounds, 1) || ((b.flying > 0 || b.soon) && !b.stalled) {
		return
	}
	rs := b.pending
	b.pending = nil
	b.inflight++
	go func() {
		lsn, err := b.sync()
		for _, r := range rs {
			b.complete(r, lsn, err, false)
		}
		b.mu.Lock()
		b.inflight--
		b.maybeStartLocked()
		b.mu.Unlock()
	}()
}

func (b *barrier) complete(r *round, lsn int64, err error, byCommit bool) {
	r.lsn, r.err = lsn, err
	close(r.done)
	if b.observe != nil {
		b.observe(byCommit, r.reads)
	}
}

// sendMark is what landed needs to know of a sent commit.
type sendMark struct {
	seq uint64    // reads numbered up to seq arrived before the send
	at  time.Time // when it was sent
}

// sending is called by the committer right before it hands a commit multi
// to the log. It returns the mark to give to landed.
func (b *barrier) sending() sendMark {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.pending); n > 0 {
		b.pending[n-1].sealed = true
	}
	b.flying++
	b.soon, b.stalled = false, false
	return sendMark{seq: b.seq, at: time.Now()}
}

// landed is called by the committer once for every commit sending was
// called for. committed reports that it landed and lsn is its log position,
// already applied to the view; pending rounds whose reads all arrived before
// mark are answered with it. A commit that did not land lets round trips
// start again.
func (b *barrier) landed(mark sendMark, lsn int64, committed bool) {
	b.mu.Lock()
	b.flying--
	var done []*round
	if committed {
		kept := b.pending[:0]
		for _, r := range b.pending {
			if r.last <= mark.seq {
				done = append(done, r)
			} else {
				kept = append(kept, r)
			}
		}
		b.pending = kept
		b.soon = b.flying == 0
	} else {
		b.stalled = true
		b.maybeStartLocked()
	}
	b.mu.Unlock()
	if committed && b.proved != nil {
		b.proved(mark.at, lsn)
	}
	for _, r := range done {
		b.complete(r, lsn, nil, true)
	}
}

// idle is called by the committer when it will not send a commit before it
// is handed more work (nothing to commit, or it waits on a barrier itself):
// rounds that waited for a commit start their round trip.
func (b *barrier) idle() {
	b.mu.Lock()
	b.soon = false
	b.maybeStartLocked()
	b.mu.Unlock()
}
