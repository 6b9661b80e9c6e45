package engine

import (
	"errors"
	"time"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// apply applies e to the view and tells the observer, once per entry.
func (b *Engine) apply(e *revision.Entry, size int) error {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	prev := b.view.State()
	if e.LSN <= prev.LSN {
		return nil
	}
	if err := b.rolledBack(); err != nil {
		return err
	}
	b.origins.record(e) // first: the index is never behind the view
	events, err := b.view.Apply(e)
	if err != nil {
		b.log.WithError(err).WithField("lsn", e.LSN).Error("cannot apply log entry; this instance stops serving")
		return err
	}
	b.rb.record(e, prev.Rev, b.view.State().Rev)
	b.space.applied(e.LSN, size, int64(zkstore.RecordBytes(e)), e.DataBytes())
	b.metrics.applied(e)
	b.hub.Notify(e, events)
	return nil
}

// tail follows the head znode and applies new entries. A watch on the head
// is the trigger; a one-second probe and kicks from barriers back it up.
func (b *Engine) tail() {
	defer b.wg.Done()
	probe := time.NewTicker(max(time.Second, b.cfg.IdlePoll))
	defer probe.Stop()
	var fired <-chan struct{}
	backoff := 50 * time.Millisecond
	for {
		var head zkstore.Head
		var err error
		applied := b.view.State().LSN
		if fired == nil {
			head, fired, err = b.store.WatchHead()
		} else {
			head, err = b.store.Head()
		}
		if err == nil {
			if head.LSN < applied {
				b.recheckHistory() // ZooKeeper's head went back?
			}
			err = b.checkHistory()
		}
		if err == nil {
			err = b.catchUp(head.LSN)
			if err == nil {
				b.lastHead.Store(&headSeen{head: head, at: time.Now()})
			}
		}
		if err != nil {
			if b.ctx.Err() != nil || b.rolledBack() != nil {
				return
			}
			if errors.Is(err, zkstore.ErrNewerFormat) {
				b.halt(err) // never misread a newer zketcd's data
				return
			}
			if b.view.Err() != nil {
				return // broken view: nothing more can be applied
			}
			b.log.WithError(err).Warn("tailer")
			select {
			case <-b.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		select {
		case <-b.ctx.Done():
			return
		case <-fired:
			fired = nil
			b.deferRearm()
		case <-b.kick:
		case <-probe.C:
		}
	}
}

// Re-arming the head watch after each of the leader's own commits would
// double ZooKeeper's requests per write (the commit, then a getW of the
// head). While the leader commits, its own answers keep its view current,
// and a commit by anyone else makes its next commit conflict, which kicks
// the tailer at once. So the leader re-arms only once its commits pause
// for rearmQuiet, and at least every rearmMax while they do not.
const (
	rearmQuiet = 10 * time.Millisecond
	rearmMax   = 100 * time.Millisecond
)

// deferRearm waits, after the head watch fired, until the tailer should
// set it again: at once unless this instance is the committing leader and
// landed a commit in the last rearmQuiet; a kick or a stop ends the wait.
func (b *Engine) deferRearm() {
	if !b.cfg.ForwardWrites {
		return
	}
	if leader, _, _ := b.election.State(); !leader {
		return
	}
	deadline := time.Now().Add(rearmMax)
	for {
		sinceLanded := time.Since(b.opened) - time.Duration(b.ownLanded.Load())
		wait := min(rearmQuiet-sinceLanded, time.Until(deadline))
		if wait <= 0 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-b.ctx.Done():
		case <-b.kick:
			b.kickTailer() // the loop reads the head at once
		case <-t.C:
			continue
		}
		t.Stop()
		return
	}
}

// catchUp applies every entry up to lsn.
func (b *Engine) catchUp(lsn int64) error {
	from := b.view.State().LSN + 1
	if from > lsn {
		return nil
	}
	err := b.store.ReadEntries(b.ctx, from, lsn, b.cfg.ReadWindow, func(e *revision.Entry, size int) error {
		return b.apply(e, size)
	})
	if errors.Is(err, zkstore.ErrEntryMissing) {
		return b.reload()
	}
	return err
}

// kickTailer asks the tailer to read the head now.
func (b *Engine) kickTailer() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}
