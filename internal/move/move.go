package move

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Config configures a move.
type Config struct {
	// Source is the root the cluster is served from; Dest the root it
	// moves to (Dest.Servers empty: the source's ensemble).
	Source, Dest zkstore.Config
	// Logger receives progress (required).
	Logger *logrus.Entry
	// CatchUpLag is how far behind the source's head the copy may be when
	// the fence is committed (0: 64 entries): the rest is copied while
	// writes wait.
	CatchUpLag int64
	// ReleaseTimeout bounds the wait for every instance to leave the
	// source after the fence (0: 2 minutes): an instance cut off from
	// ZooKeeper leaves when its session expires.
	ReleaseTimeout time.Duration
	// ProgressEvery is how many entries the copy logs its progress after
	// (0: 10,000): a long copy says how far it is and how fast it goes.
	ProgressEvery int64
	// BeforeFence and AfterFence, if set, are called right before the
	// fence is committed and right after (tests: a crash there).
	BeforeFence, AfterFence func() error
	// AfterFinish, if set, is called by RunTenant once the destination is
	// finished, before the registry names it (tests: a crash there).
	AfterFinish func() error

	// tenant is the fleet tenant whose data Source.Root holds (RunTenant;
	// nil: a root move).
	tenant *zkstore.TenantRef
}

// Result is what a move did.
type Result struct {
	// FenceLSN is the fence's log position, Rev the revision both roots
	// hold at it; Copied the entries copied by this run.
	FenceLSN, Rev int64
	Copied        int64
	// AlreadyMoved says the source was moved by an earlier run (nothing
	// done).
	AlreadyMoved bool
	// Paused is how long writes could not commit: from the fence to the
	// destination finished.
	Paused time.Duration
	// From is the root a tenant's data moved from (RunTenant).
	From string
}

// Run moves cfg.Source's cluster into cfg.Dest, or continues a move that
// stopped. Errors say plainly why a move cannot continue.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.CatchUpLag <= 0 {
		cfg.CatchUpLag = 64
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 2 * time.Minute
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10000
	}
	if len(cfg.Dest.Servers) == 0 {
		cfg.Dest.Servers = cfg.Source.Servers
	}
	lg := cfg.Logger.WithFields(logrus.Fields{"component": "move", "from": cfg.Source.Root, "to": cfg.Dest.Root})
	to := revision.Move{Root: cfg.Dest.Root}
	if !sameServers(cfg.Source.Servers, cfg.Dest.Servers) {
		to.Servers = zkstore.JoinServers(cfg.Dest.Servers)
	}
	if cfg.Source.Root == cfg.Dest.Root && to.Servers == "" {
		return Result{}, errors.New("move: the destination is the source")
	}
	rc, err := openCopy(ctx, cfg)
	if err != nil {
		return Result{}, fmt.Errorf("move: %w", err)
	}
	defer rc.Close()
	if m, ok, err := rc.Moved(); err != nil {
		return Result{}, err
	} else if ok {
		if m.Root != to.Root || m.Servers != to.Servers {
			return Result{}, fmt.Errorf("move: %s moved to %s%s already", cfg.Source.Root, m.Servers, m.Root)
		}
		return Result{FenceLSN: m.FenceLSN, AlreadyMoved: true}, nil
	}
	rec, resumed, err := rc.Claim(zkstore.JoinServers(cfg.Source.Servers))
	if err != nil {
		return Result{}, fmt.Errorf("move: %w", err)
	}
	head, err := destStart(ctx, rc, lg, cfg.Dest.Root)
	if err != nil {
		return Result{}, err
	}
	cp := &copier{rc: rc, lg: lg, every: cfg.ProgressEvery}
	copyTo := func(lsn int64) error {
		cp.head = head
		err := cp.copyTo(ctx, lsn)
		head = cp.head
		return err
	}
	lg.WithFields(logrus.Fields{"resumed": resumed, "lsn": head.LSN, "revision": head.Rev}).Info("destination at")
	res := Result{}
	start := head.LSN
	// Follow the source until the copy is close to its head (or it is
	// fenced already: a run before this one committed the fence).
	var fence *revision.Move
	var fenceLSN int64
	for {
		sh, err := rc.Source().SyncHead()
		if err != nil {
			return res, err
		}
		if mv, err := fenceAt(ctx, rc.Source(), sh.LSN); err != nil {
			return res, err
		} else if mv != nil {
			if mv.Root != to.Root || mv.Servers != to.Servers {
				return res, fmt.Errorf("move: %s is fenced toward %s%s, not this destination", cfg.Source.Root, mv.Servers, mv.Root)
			}
			fence, fenceLSN = mv, sh.LSN
			break
		}
		if sh.LSN-head.LSN <= cfg.CatchUpLag {
			break
		}
		if err := copyTo(sh.LSN); err != nil {
			return res, fmt.Errorf("move: %w", err)
		}
		lg.WithFields(logrus.Fields{"lsn": head.LSN, "source_lsn": sh.LSN}).Info("copied")
	}
	var fencedAt time.Time
	if fence == nil {
		if cfg.BeforeFence != nil {
			if err := cfg.BeforeFence(); err != nil {
				return res, err
			}
		}
		if fenceLSN, err = commitFence(ctx, rc.Source(), to); err != nil {
			return res, fmt.Errorf("move: fence: %w", err)
		}
		fencedAt = time.Now()
		lg.WithField("fence_lsn", fenceLSN).Warn("source fenced: its writes wait for the destination")
		if cfg.AfterFence != nil {
			if err := cfg.AfterFence(); err != nil {
				return res, err
			}
		}
	} else {
		fencedAt = time.Now()
		lg.WithField("fence_lsn", fenceLSN).Warn("source fenced by an earlier run: finishing the move")
	}
	if err := copyTo(fenceLSN); err != nil {
		return res, fmt.Errorf("move: %w", err)
	}
	if err := waitReleased(ctx, rc, cfg.ReleaseTimeout, lg); err != nil {
		return res, err
	}
	if err := fenceIsLast(rc.Source(), fenceLSN); err != nil {
		return res, err
	}
	leases, err := rc.CopyLeaseTokens()
	if err != nil {
		return res, fmt.Errorf("move: %w", err)
	}
	if err := rc.Finish(rec, to, fenceLSN); err != nil {
		return res, fmt.Errorf("move: %w", err)
	}
	res.FenceLSN, res.Rev, res.Copied, res.Paused = fenceLSN, head.Rev, head.LSN-start, time.Since(fencedAt)
	lg.WithFields(logrus.Fields{"fence_lsn": fenceLSN, "revision": head.Rev, "leases": leases, "writes_paused": res.Paused.Round(time.Millisecond)}).
		Warn("moved: the destination is finished, the instances switch to it")
	return res, nil
}

// openCopy opens the copy of cfg's source into its destination: a
// tenant's (which the caller checked against the registry), or a root's.
func openCopy(ctx context.Context, cfg Config) (*zkstore.RootCopy, error) {
	if cfg.tenant != nil {
		return zkstore.OpenTenantCopy(ctx, cfg.Source, cfg.Dest, *cfg.tenant)
	}
	return zkstore.OpenRootCopy(ctx, cfg.Source, cfg.Dest)
}

// destStart returns the destination's head to copy on from: a new copy of
// the source's base generation if it holds no head yet (after removing
// what a run cut short left there), or a new one again if
// the source's compaction removed the entry it ends with. Errors say why
// the copy cannot continue into dest.
func destStart(ctx context.Context, rc *zkstore.RootCopy, lg *logrus.Entry, dest string) (zkstore.Head, error) {
	head, ok, err := rc.DestHead()
	if err != nil {
		return zkstore.Head{}, err
	}
	if !ok {
		// No head: a fresh destination (only the move record), or one a
		// run cut short while it reset or initialised it. What is left of
		// that goes first.
		if err := rc.Reset(ctx); err != nil {
			return zkstore.Head{}, fmt.Errorf("move: %w", err)
		}
		if b, err := rc.Source().ReadBase(); err == nil {
			// How much the copy loads and writes before its first
			// progress line: the base generation is copied whole.
			lg = lg.WithFields(logrus.Fields{"base_gen": b.Gen, "base_bytes": max(b.Raw, int64(b.Size)), "base_chunks": b.Chunks})
		}
		lg.Info("copying the source's base generation")
		start := time.Now()
		if head, err = rc.Init(ctx); err != nil {
			return zkstore.Head{}, fmt.Errorf("move: %w", err)
		}
		lg.WithFields(logrus.Fields{"lsn": head.LSN, "revision": head.Rev, "took": time.Since(start).Round(time.Millisecond)}).Info("base generation copied")
	} else if same, err := rc.SameEntry(head.LSN); errors.Is(err, zkstore.ErrEntryMissing) {
		if head, err = recopy(ctx, rc, lg, err); err != nil {
			return zkstore.Head{}, err
		}
	} else if err != nil || !same {
		if err == nil {
			err = fmt.Errorf("the destination's entry %d differs from the source's", head.LSN)
		}
		return zkstore.Head{}, fmt.Errorf("move: cannot continue into %s: %w; delete it and move again", dest, err)
	}
	return head, nil
}

// copier copies the source's entries, starting over from its current base
// generation when its compaction removed entries the copy had not read yet
// (at most maxRecopies times), and logs its progress every so many
// entries.
type copier struct {
	rc       *zkstore.RootCopy
	lg       *logrus.Entry
	every    int64
	head     zkstore.Head
	recopies int
}

// copyTo copies up to lsn, from c.head, which it moves.
func (c *copier) copyTo(ctx context.Context, lsn int64) error {
	for {
		err := c.copyLogging(ctx, lsn)
		if !errors.Is(err, zkstore.ErrEntryMissing) || c.recopies == maxRecopies {
			return err
		}
		c.recopies++
		if c.head, err = recopy(ctx, c.rc, c.lg, err); err != nil {
			return err
		}
	}
}

// copyLogging copies up to lsn from c.head, c.every entries at a time,
// logging after each step the entries copied, those left and the rate
// (nothing for a copy of c.every entries or fewer).
func (c *copier) copyLogging(ctx context.Context, lsn int64) error {
	from, start := c.head.LSN, time.Now()
	for c.head.LSN < lsn {
		h, err := c.rc.CopyEntries(ctx, c.head, min(lsn, c.head.LSN+c.every))
		c.head = h
		if err != nil {
			return err
		}
		if lsn-from <= c.every {
			continue
		}
		done, took := c.head.LSN-from, time.Since(start)
		c.lg.WithFields(logrus.Fields{
			"entries": done, "left": lsn - c.head.LSN, "lsn": c.head.LSN, "revision": c.head.Rev,
			"entries_per_sec": int64(float64(done) / max(took.Seconds(), 1e-3)), "took": took.Round(time.Millisecond),
		}).Info("copying")
	}
	return nil
}

// maxRecopies bounds how many times one run starts the copy over because
// the source's compaction overtook it.
const maxRecopies = 3

// recopy starts the copy over from the source's current base generation
// (why: the entry the copy needed next was compacted away) and returns the
// destination's new head.
func recopy(ctx context.Context, rc *zkstore.RootCopy, lg *logrus.Entry, why error) (zkstore.Head, error) {
	lg.WithError(why).Warn("the source's compaction overtook the copy: copying again from its current base generation")
	if err := rc.Reset(ctx); err != nil {
		return zkstore.Head{}, fmt.Errorf("move: %w", err)
	}
	h, err := rc.Init(ctx)
	if err != nil {
		return zkstore.Head{}, fmt.Errorf("move: %w", err)
	}
	return h, nil
}

// fenceAt returns the move the source's entry lsn fences toward, or nil.
func fenceAt(ctx context.Context, st *zkstore.Store, lsn int64) (*revision.Move, error) {
	var mv *revision.Move
	err := st.ReadEntries(ctx, lsn, lsn, 1, func(e *revision.Entry, _ int) error {
		mv = e.Fence()
		return nil
	})
	return mv, err
}

// commitFence appends the fence after the source's head, through the
// ordinary compare-and-swap: a commit racing it takes the position first
// (the fence then goes after it) or loses it.
func commitFence(ctx context.Context, st *zkstore.Store, to revision.Move) (int64, error) {
	writer := zkstore.FenceWriter()
	for {
		h, err := st.SyncHead()
		if err != nil {
			return 0, err
		}
		if mv, err := fenceAt(ctx, st, h.LSN); err != nil {
			return 0, err
		} else if mv != nil {
			if *mv != to {
				return 0, fmt.Errorf("fenced toward %s%s meanwhile", mv.Servers, mv.Root)
			}
			return h.LSN, nil
		}
		e := &revision.Entry{LSN: h.LSN + 1, Writer: writer, Ops: []revision.Op{{Kind: revision.OpFence, Move: to}}}
		res, err := st.Commit(ctx, zkstore.CommitRequest{Prev: h.LSN, Entry: e, Rev: h.Rev})
		if err != nil {
			return 0, err
		}
		if res.Outcome == zkstore.Committed {
			return e.LSN, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// fenceIsLast fails if the source holds entries after its fence at
// fenceLSN, once every instance left it: finishing would leave them behind
// (writes acknowledged on the source, missing from the destination).
// Nothing may commit after a fence; this keeps a breach loud.
func fenceIsLast(st *zkstore.Store, fenceLSN int64) error {
	h, err := st.SyncHead()
	if err != nil {
		return fmt.Errorf("move: source head: %w", err)
	}
	if h.LSN != fenceLSN {
		return fmt.Errorf("move: the source holds entries %d-%d after its fence at %d: the destination is not finished (they would be lost); keep serving the source's data from a copy of it, nothing may commit after a fence", fenceLSN+1, h.LSN, fenceLSN)
	}
	return nil
}

// waitReleased waits until no instance is left on the fenced source.
func waitReleased(ctx context.Context, rc *zkstore.RootCopy, timeout time.Duration, lg *logrus.Entry) error {
	deadline := time.Now().Add(timeout)
	warned := false
	for {
		ok, err := rc.SourceReleased()
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("move: instances still on the fenced source after %s (run the move again: it continues)", timeout)
		}
		if !warned && time.Until(deadline) < timeout-5*time.Second {
			lg.Warn("waiting for every instance to leave the fenced source (one cut off from ZooKeeper leaves when its session expires)")
			warned = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func sameServers(a, b []string) bool {
	return zkstore.JoinServers(a) == zkstore.JoinServers(b)
}
