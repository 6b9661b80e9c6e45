package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// tailer applies the log to the view: the entries other instances commit
// (it follows the head znode), this instance's own commits (the committer
// calls apply), and a whole new view when this instance fell behind a
// physical compaction (reload). Every entry goes through apply: the
// origin index first, then the view, the rollback record, the space
// accounting and the watch hub. Safe for concurrent use; run is its loop.
type tailer struct {
	*core
	origins *origins
	space   *space
	rb      *rollbackGuard
	// handoff switches the engine to a move's destination (move.go).
	handoff func(*fenceSeen)
	// lastHead is the last head the view was caught up with, and when.
	lastHead atomic.Pointer[headSeen]
	// ownLanded is when the committer last landed a commit, in
	// nanoseconds since opened (monotonic; deferRearm).
	ownLanded atomic.Int64
}

// headSeen is the last head the view was caught up with, and when.
type headSeen struct {
	head zkstore.Head
	at   time.Time
}

// head returns the last head the tailer saw.
func (t *tailer) head() zkstore.Head {
	if hs := t.lastHead.Load(); hs != nil {
		return hs.head
	}
	return zkstore.Head{}
}

// caughtUp records that the view holds head, now.
func (t *tailer) caughtUp(head zkstore.Head) {
	t.lastHead.Store(&headSeen{head: head, at: time.Now()})
}

// apply applies e to the view and tells the observer, once per entry.
func (t *tailer) apply(e *revision.Entry, size int) error {
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	prev := t.view.State()
	if e.LSN <= prev.LSN {
		return nil
	}
	if err := t.rb.rolledBack(); err != nil {
		return err
	}
	t.origins.record(e) // first: the index is never behind the view
	// A fence is noted before the view holds it: a committer that
	// evaluates on a view at the fence's position then finds it fenced
	// (launch), and commits nothing after it on this log.
	t.noteFence(e)
	events, err := t.view.Apply(e)
	if err != nil {
		t.log.WithError(err).WithField("lsn", e.LSN).Error("cannot apply log entry; this instance stops serving")
		return err
	}
	if t.cfg.appliedHook != nil {
		t.cfg.appliedHook(e)
	}
	t.rb.record(e, prev.Rev, t.view.State().Rev)
	t.space.applied(e.LSN, size, int64(zkstore.RecordBytes(e)), e.DataBytes())
	t.metrics.applied(e)
	t.hub.Notify(e, events)
	return nil
}

// run follows the head znode and applies new entries, until the engine
// stops or halts. A watch on the head is the trigger; a one-second probe
// and kicks from barriers back it up.
func (t *tailer) run() {
	probe := time.NewTicker(max(time.Second, t.cfg.IdlePoll))
	defer probe.Stop()
	var fired <-chan struct{}
	backoff := 50 * time.Millisecond
	for {
		var head zkstore.Head
		var err error
		applied := t.view.State().LSN
		if fired == nil {
			head, fired, err = t.store.WatchHead()
		} else {
			head, err = t.store.Head()
		}
		if err == nil {
			if head.LSN < applied {
				t.rb.recheck() // ZooKeeper's head went back?
			}
			err = t.rb.check()
		}
		if err == nil {
			err = t.catchUp(head.LSN)
			if err == nil {
				t.caughtUp(head)
			}
		}
		if f := t.fenced(); err == nil && f != nil {
			// Nothing follows a fence: the log goes on at the destination.
			t.handoff(f)
			if t.ctx.Err() != nil {
				return // closed while fenced
			}
			fired = nil
			continue
		}
		if err != nil {
			if t.ctx.Err() != nil || t.rb.rolledBack() != nil {
				return
			}
			if errors.Is(err, zkstore.ErrNewerFormat) {
				t.rb.halt(err) // never misread a newer zketcd's data
				return
			}
			if t.view.Err() != nil {
				return // broken view: nothing more can be applied
			}
			t.log.WithError(err).Warn("tailer")
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		select {
		case <-t.ctx.Done():
			return
		case <-fired:
			fired = nil
			t.deferRearm()
		case <-t.kick:
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

// landed records that the committer landed a commit now (see deferRearm).
func (t *tailer) landed() {
	t.ownLanded.Store(int64(time.Since(t.opened)))
}

// deferRearm waits, after the head watch fired, until the tailer should
// set it again: at once unless this instance is the committing leader and
// landed a commit in the last rearmQuiet; a kick or a stop ends the wait.
func (t *tailer) deferRearm() {
	if !t.cfg.ForwardWrites {
		return
	}
	if leader, _ := t.leader(); !leader {
		return
	}
	deadline := time.Now().Add(rearmMax)
	for {
		sinceLanded := time.Since(t.opened) - time.Duration(t.ownLanded.Load())
		wait := min(rearmQuiet-sinceLanded, time.Until(deadline))
		if wait <= 0 {
			return
		}
		timer := time.NewTimer(wait)
		select {
		case <-t.ctx.Done():
		case <-t.kick:
			t.kickTailer() // the loop reads the head at once
		case <-timer.C:
			continue
		}
		timer.Stop()
		return
	}
}

// catchUp applies every entry up to lsn.
func (t *tailer) catchUp(lsn int64) error {
	from := t.view.State().LSN + 1
	if from > lsn {
		return nil
	}
	err := t.store.ReadEntries(t.ctx, from, lsn, t.cfg.ReadWindow, func(e *revision.Entry, size int) error {
		return t.apply(e, size)
	})
	if errors.Is(err, zkstore.ErrEntryMissing) {
		return t.reload()
	}
	return err
}

// waitApplied waits until the view applied lsn (kicking the tailer): nil,
// ctx's error, or ErrGRPCCorrupt for a view that cannot get there.
func (t *tailer) waitApplied(ctx context.Context, lsn int64) error {
	if t.view.State().LSN >= lsn {
		return nil
	}
	t.kickTailer()
	if err := t.view.WaitApplied(ctx, lsn); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rpctypes.ErrGRPCCorrupt
	}
	return nil
}

// reload rebuilds the view from the current base generation and the log,
// for an instance that fell behind a physical compaction; watchers catch up
// from the new view's history or are canceled as compacted.
func (t *tailer) reload() error {
	start := time.Now()
	var rec replayed
	view, head, _, err := replay(t.ctx, t.store, t.cfg.ReadWindow, func(e *revision.Entry) {
		t.origins.record(e)
		t.noteFence(e)
	}, &rec)
	if err != nil {
		return err
	}
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	if view.State().LSN <= t.view.State().LSN {
		return nil // caught up meanwhile
	}
	t.origins.setFrom(rec.base.Gen + 1) // the entries skipped by the base were not read
	t.view.Reset(view)
	t.hub.Resync()
	rec.account(t.space)
	t.caughtUp(head)
	t.log.WithFields(logrus.Fields{"lsn": head.LSN, "took": time.Since(start).Round(time.Millisecond)}).
		Warn("reloaded the view: this instance fell behind a compaction of the log")
	return nil
}
