package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Moving a cluster to another root (`zketcd move`, `zketcd tenant move`).
//
// A mover copies the root's log, verbatim and at the same positions, into
// a destination root, and ends the source's log with a fence: an entry
// (revision.OpFence) naming the destination, committed through the
// ordinary compare-and-swap, so it lands at a position no committer took.
// Nothing can follow it: a committer that evaluated a batch before the
// fence loses the position to it, and one whose view applied it commits
// nothing more on that log. The mover then copies the fence (marked
// Arrived, where it changes nothing) and whatever it had not copied yet,
// and finishes the destination (only then may an instance open it).
//
// An instance whose view applies the fence holds its writes and
// linearizable reads (which the destination may already have outdated),
// waits for the destination to hold the fence, and switches its log to it
// (adopt): the view, the watch hub, the leases and the forwarded requests'
// tags stay in memory, so serializable reads and watches go on and no
// watcher sees a gap or a repeat. Its candidacy, member znode and read
// lease start anew on the destination; the committer's pipeline marker
// too. Its writes then continue at the position after the fence.

// fenceSeen is a fence the view applied: the engine holds writes until it
// runs on the destination (done is closed then).
type fenceSeen struct {
	lsn    int64
	writer revision.WriterTag
	to     revision.Move
	done   chan struct{}
}

// OpenMovedFunc opens the log a moved cluster continues in, with an opener
// of fresh inspector sessions on it (nil: none), for an instance whose
// log cur was fenced toward to (to.Servers empty: cur's ensemble). It
// fails while the destination is not ready (the engine tries again).
type OpenMovedFunc func(ctx context.Context, cur Log, to revision.Move) (Log, func(context.Context) (Log, error), error)

// OpenMovedStore is the OpenMovedFunc of a root on ZooKeeper configured by
// cfg: the destination's root, on the ensemble the fence names, else on
// cur's (cur a *zkstore.Store; else cfg's).
func OpenMovedStore(cfg zkstore.Config) OpenMovedFunc {
	return func(ctx context.Context, cur Log, to revision.Move) (Log, func(context.Context) (Log, error), error) {
		if st, ok := cur.(*zkstore.Store); ok {
			cfg.Servers = st.Servers()
		}
		dc := MovedConfig(cfg, to)
		st, err := zkstore.Open(ctx, dc)
		if err != nil {
			return nil, nil, err
		}
		return st, func(ctx context.Context) (Log, error) {
			in, err := zkstore.OpenInspector(ctx, dc)
			if err != nil {
				return nil, err
			}
			return in, nil
		}, nil
	}
}

// WaitMovedFunc waits until the destination of a move that fenced cur, the
// log the engine runs on, is ready to open (the mover finished it).
// Errors: ctx's, or one reading the destination (the engine tries
// OpenMoved anyway, and waits again).
type WaitMovedFunc func(ctx context.Context, cur Log, to revision.Move) error

// WaitMovedStore is the WaitMovedFunc of a root on ZooKeeper configured by
// cfg: a watch on the destination's move record, on cur's session when
// the destination is on the same ensemble, else on one session of the
// destination's ensemble (the fence names its servers) for the whole
// wait.
func WaitMovedStore(cfg zkstore.Config) WaitMovedFunc {
	return func(ctx context.Context, cur Log, to revision.Move) error {
		if st, ok := cur.(*zkstore.Store); ok && to.Servers == "" {
			return st.WaitMoveFinished(ctx, to.Root)
		}
		return zkstore.WaitMoveFinished(ctx, MovedConfig(cfg, to))
	}
}

// MovedConfig is cfg for the destination of to: its root, and its servers
// if to names any.
func MovedConfig(cfg zkstore.Config, to revision.Move) zkstore.Config {
	cfg.Root = to.Root
	if to.Servers != "" {
		cfg.Servers = strings.Split(to.Servers, ",")
	}
	return cfg
}

// fenced returns the fence the view applied on the current log, or nil.
func (c *core) fenced() *fenceSeen { return c.fence.Load() }

// noteFence records that the view applies e, if e fences the log: called
// before the view applies it, so that whoever reads a view at the fence's
// position finds the engine fenced.
func (c *core) noteFence(e *revision.Entry) {
	if mv := e.Fence(); mv != nil {
		c.fence.Store(&fenceSeen{lsn: e.LSN, writer: e.Writer, to: *mv, done: make(chan struct{})})
	}
}

// waitMoved waits, while the view is fenced, until the engine runs on the
// destination: nil at once when not fenced; ctx's error, or ErrGRPCStopped
// when the engine closes.
func (c *core) waitMoved(ctx context.Context) error {
	f := c.fenced()
	if f == nil {
		return nil
	}
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return rpctypes.ErrGRPCStopped
	}
}

// Moved reports the destination the log was fenced toward while the
// engine has not switched to it yet (ok false: not fenced).
func (b *Engine) Moved() (to revision.Move, ok bool) {
	if f := b.fenced(); f != nil {
		return f.to, true
	}
	return revision.Move{}, false
}

// Root returns the root of the log the engine runs on.
func (b *Engine) Root() string { return b.store.Root() }

// Moves returns how many times the engine switched to a destination's log.
func (b *Engine) Moves() int64 { return b.moves.Load() }

// handoff switches the engine to the destination of fence f, trying again
// until it succeeds or the engine closes.
func (b *Engine) handoff(f *fenceSeen) {
	lg := b.log.WithFields(logrus.Fields{"component": "move", "fence_lsn": f.lsn, "to_root": f.to.Root, "to_servers": f.to.Servers})
	lg.Warn("this root was fenced by a move: writes wait until the instance runs on the destination")
	// Out of the fenced root's election at once: its leader stops renewing
	// leases and answering reads from memory, and the mover finishes the
	// destination only once every candidate left (or its session ended).
	b.leading.swap(noLeadership{}).Close()
	start := time.Now()
	backoff := 20 * time.Millisecond
	warned := false
	for {
		if wait := b.cfg.WaitMoved; wait != nil {
			// Bounded, so that a mover that is not running is said.
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			err := wait(ctx, current(b.store), f.to)
			cancel()
			if err != nil && b.ctx.Err() == nil {
				lg.WithError(err).Debug("waiting for the destination")
			}
		}
		err := b.tryAdopt(f)
		if err == nil {
			lg.WithField("took", time.Since(start).Round(time.Millisecond)).Warn("moved: the instance runs on the destination root")
			return
		}
		if b.ctx.Err() != nil {
			return
		}
		if !warned && time.Since(start) > 5*time.Second {
			lg.WithError(err).Warn("the destination is not ready yet (is the mover running?)")
			warned = true
		} else {
			lg.WithError(err).Debug("destination not ready")
		}
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// tryAdopt opens the destination and adopts it.
func (b *Engine) tryAdopt(f *fenceSeen) error {
	open := b.cfg.OpenMoved
	if open == nil {
		return errors.New("this instance cannot follow a move (no way to open another root)")
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	dst, inspect, err := open(ctx, current(b.store), f.to)
	if err != nil {
		return fmt.Errorf("open the destination: %w", err)
	}
	if err := b.adopt(f, dst, inspect); err != nil {
		dst.Close()
		return err
	}
	return nil
}

// adopt makes dst, which must hold this cluster's log up to the copy of
// fence f, the engine's log.
func (b *Engine) adopt(f *fenceSeen, dst Log, inspect inspectFunc) error {
	if got, want := dst.Meta().ClusterID, b.store.Meta().ClusterID; got != want {
		return fmt.Errorf("the destination holds cluster %x, not %x", got, want)
	}
	head, err := dst.SyncHead()
	if err != nil {
		return fmt.Errorf("destination head: %w", err)
	}
	if head.LSN < f.lsn {
		return fmt.Errorf("the destination holds entries up to %d, the fence is at %d", head.LSN, f.lsn)
	}
	var arrived *revision.Entry
	if err := dst.ReadEntries(b.ctx, f.lsn, f.lsn, 1, func(e *revision.Entry, _ int) error { arrived = e; return nil }); err != nil {
		return fmt.Errorf("read the fence's copy: %w", err)
	}
	if !isArrivalOf(arrived, f) {
		return fmt.Errorf("the destination's entry %d is not the copy of this root's fence", f.lsn)
	}
	el := dst.Campaign(b.memberID)
	b.applyMu.Lock()
	old := b.moving.swap(dst, inspect)
	oldEl := b.leading.swap(el)
	b.rb.moved(arrived)
	b.fence.Store(nil)
	b.moves.Add(1)
	b.applyMu.Unlock()
	oldEl.Close()
	old.Close()
	if err := b.member.publish(func(*zkstore.Member) {}); err != nil {
		b.log.WithError(err).Warn("publish the member on the destination (it is published again with the next session)")
	}
	close(f.done)
	b.kickTailer()
	return nil
}

// isArrivalOf reports whether e is the destination's copy of fence f.
func isArrivalOf(e *revision.Entry, f *fenceSeen) bool {
	if e == nil || e.Writer != f.writer {
		return false
	}
	for _, op := range e.Ops {
		if op.Kind == revision.OpFence && op.Move.Arrived && op.Move.Root == f.to.Root && op.Move.Servers == f.to.Servers {
			return true
		}
	}
	return false
}
