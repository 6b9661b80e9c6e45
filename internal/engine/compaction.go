package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Physical compaction, run by the leader instance:
//
//  1. once a compaction entry has been applied past the current base
//     generation, snapshot the view (the state and the history kept since
//     the compacted revision) at its applied log position L;
//  2. write it as a new base generation in a fresh path, and make it
//     current with a fenced multi that checks the previous one is still
//     current (a crash anywhere before leaves the old generation current);
//  3. delete the log entries below the previous generation's position, so
//     instances a compaction cycle behind can still tail, and generations
//     older than the previous one, and unreferenced chunks.
//
// Recovery loads the current generation and replays the log after it.
const (
	compactCheckEvery = 2 * time.Second
	chunkGrace        = 10 * time.Minute
)

// compaction is physical compaction (above) and the upkeep that runs
// beside it every compactCheckEvery on every instance: the trim of what
// the view's compactions made invisible, the space metrics, the ZooKeeper
// heap warning, the root's format, and the memory release after them. Safe
// for concurrent use; run is its loop.
type compaction struct {
	*core
	space  *space
	sizing *sizing
	// kick asks for a round now (Compact with physical); release is sent
	// when an observer of compactions drops its copy of the view.
	kick, release chan struct{}
	copiesHeld    atomic.Int64 // copies of the view compaction observers hold
}

// run is the compaction loop, until the engine stops.
func (c *compaction) run() {
	lg := c.log.WithField("component", "compactor")
	t := time.NewTicker(max(compactCheckEvery, c.cfg.IdlePoll))
	defer t.Stop()
	pending := false // memory freed that no release returned yet
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		case <-c.release: // a copy dropped: the pending release may go
		}
		freed := c.trim()
		c.updateSpaceMetrics()
		c.checkSizing(lg)
		leader, fence, _ := c.election.State()
		followFormat(c.core, lg, leader)
		if !leader {
			// Follow the leader's generations for the space accounting.
			if err := c.refreshBase(); err != nil && c.ctx.Err() == nil {
				lg.WithError(err).Debug("read base generation")
			}
		} else {
			published, err := c.compactOnce(lg, fence)
			if err != nil && c.ctx.Err() == nil {
				lg.WithError(err).Warn("physical compaction")
			}
			freed = freed || published
		}
		// One release per round, after the trim and the generation it
		// allowed: each release is a whole collection and a return of
		// every free page, which stalls the instance for as long as the
		// heap is large. An observer that still holds the copy of the
		// view before the compaction (OnCompact: the compaction's hash,
		// seconds at a million keys) keeps what the trim dropped alive,
		// and a release beside its work would free nothing and slow both;
		// the round its drop wakes releases it all.
		pending = pending || freed
		if pending && c.copiesHeld.Load() == 0 && c.cfg.AfterCompaction != nil {
			c.cfg.AfterCompaction()
			pending = false
		}
	}
}

// trimBatch is how many keys one TrimCompacted call visits under the
// view's write lock (~0.3 ms here): compaction frees memory without holding
// applies and reads for O(keys).
const trimBatch = 2048

// trim drops the versions the view's last compaction made
// invisible, a batch of keys at a time, yielding between batches. It
// reports whether it dropped any.
func (c *compaction) trim() bool {
	trimmed := false
	for c.ctx.Err() == nil && c.view.TrimCompacted(trimBatch) {
		trimmed = true
		runtime.Gosched()
	}
	return trimmed
}

// compactOnce makes the view's last compaction physical if it is past the
// current generation's, and reports whether it published a generation
// (what the caller's memory release follows); an error says which step
// failed, the generation before staying current.
func (c *compaction) compactOnce(lg *logrus.Entry, fence zkstore.Fence) (bool, error) {
	base, err := c.store.ReadBase()
	if err != nil {
		return false, err
	}
	c.space.setBase(base)
	c.view.PruneRemoved(base.Rev)
	st := c.view.State()
	if st.CompactRev <= base.CompactRev || st.CompactRev <= 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	snap := c.view.Snapshot()
	if logData, keep := c.logServesAsBase(base, snap); keep {
		err := c.keepLog(lg, fence, base, snap, logData, start)
		return err == nil, err
	}
	nb, err := c.store.PrepareBase(ctx, snap, base, c.nonce)
	if err != nil {
		return false, fmt.Errorf("write base generation at entry %d: %w", snap.State.LSN, err)
	}
	if err := c.hook("base-prepared"); err != nil {
		return false, err
	}
	nb.LogRaw, nb.LogBytes = c.space.keptLog(base, nb.Gen)
	nb.PrevSize, nb.PrevRaw = base.StoredSize(), baseLogical(base)
	if len(nb.Deltas) > 0 {
		nb.PrevSize, nb.PrevRaw = 0, 0 // a delta shares every layer of the previous generation
	}
	if nb, err = c.store.PublishBase(fence, nb); err != nil {
		return false, fmt.Errorf("publish base generation at entry %d: %w", snap.State.LSN, err)
	}
	c.space.setBase(nb)
	wrote := time.Since(start)
	if len(nb.Deltas) > len(base.Deltas) {
		c.metrics.compactions.WithLabelValues("delta").Inc()
	} else {
		c.metrics.compactions.WithLabelValues("whole").Inc()
	}
	if err := c.hook("base-published"); err != nil {
		return true, err
	}
	var deleted int
	if base.Gen > 0 {
		if deleted, err = c.store.TruncateLog(ctx, fence, base.Gen); err != nil {
			return true, fmt.Errorf("truncate log below entry %d: %w", base.Gen, err)
		}
	}
	if err := c.hook("log-truncated"); err != nil {
		return true, err
	}
	gens, err := c.store.CollectBases(ctx, fence, nb)
	if err != nil {
		return true, err
	}
	chunks, err := c.store.CollectChunks(ctx, fence, chunkGrace.Milliseconds())
	if err != nil {
		return true, err
	}
	lg.WithFields(logrus.Fields{
		"generation": nb.Gen, "revision": nb.Rev, "compacted": nb.CompactRev,
		"keys": snap.Len(), "bytes": nb.StoredSize(), "deltas": len(nb.Deltas),
		"log_entries_deleted": deleted, "old_generations_deleted": gens, "chunks_deleted": chunks,
		"write_took": wrote.Round(time.Millisecond), "took": time.Since(start).Round(time.Millisecond),
	}).Info("physical compaction")
	return true, nil
}

// defaultLogGenerationLimit is Config.LogGenerationLimit's default.
const defaultLogGenerationLimit = 1.5

// logServesAsBase reports whether a compaction from cur (the current
// description) to snap's compacted revision may leave the log as the
// generation (Config.LogGenerationLimit), with the log's data bytes up to
// snap's position. Only while there is no base generation: once one
// exists, the log below it goes and deltas keep compactions small.
func (c *compaction) logServesAsBase(cur zkstore.Base, snap *revision.Snapshot) (int64, bool) {
	limit := c.cfg.LogGenerationLimit
	if limit == 0 {
		limit = defaultLogGenerationLimit
	}
	if limit < 0 || cur.Gen != 0 || cur.Path != "" {
		return 0, false
	}
	logData, complete := c.space.logData(snap.State.LSN)
	if !complete {
		return 0, false // this instance did not apply the whole log: cannot tell
	}
	live := snap.DataBytes()
	return logData, float64(logData) <= limit*float64(live)
}

// keepLog publishes a log generation (zkstore.LogGeneration): the
// compaction to snap's compacted revision is physical once recorded, as
// the log it leaves holds little besides the live data.
func (c *compaction) keepLog(lg *logrus.Entry, fence zkstore.Fence, cur zkstore.Base, snap *revision.Snapshot, logData int64, start time.Time) error {
	nb, err := c.store.PublishBase(fence, zkstore.LogGeneration(cur, snap.State.CompactRev, logData))
	if err != nil {
		return fmt.Errorf("record compaction to %d in the log generation: %w", snap.State.CompactRev, err)
	}
	c.space.setBase(nb)
	c.metrics.compactions.WithLabelValues("log").Inc()
	if err := c.hook("base-published"); err != nil {
		return err
	}
	lg.WithFields(logrus.Fields{
		"compacted": nb.CompactRev, "entry": snap.State.LSN, "log_data_bytes": logData,
		"took": time.Since(start).Round(time.Millisecond),
	}).Info("physical compaction: the log kept as the generation (mostly live data; no base written)")
	return nil
}

// hook calls the configured compaction hook, if any.
func (c *compaction) hook(step string) error {
	if c.cfg.CompactionHook == nil {
		return nil
	}
	return c.cfg.CompactionHook(step)
}

// waitPhysical waits until a base generation holds a compaction at or
// above rev (etcd's Compact with physical=true returns once the compaction
// is done on disk).
func (c *compaction) waitPhysical(ctx context.Context, rev int64) error {
	select {
	case c.kick <- struct{}{}:
	default:
	}
	for {
		base, err := c.store.ReadBase()
		if err != nil {
			return err
		}
		if base.CompactRev >= rev {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// refreshBase reads the base description into the space accounting.
func (c *compaction) refreshBase() error {
	base, err := c.store.ReadBase()
	if err != nil {
		return err
	}
	c.space.setBase(base)
	c.view.PruneRemoved(base.Rev) // the generation holds those removals
	return nil
}

// updateSpaceMetrics sets the DB size and alarm gauges.
func (c *compaction) updateSpaceMetrics() {
	logical, stored := c.space.sizes(c.view.State().LSN)
	c.metrics.dbSize.Set(float64(logical.total))
	c.metrics.dbSizeInUse.Set(float64(logical.inUse))
	c.metrics.rootStored.Set(float64(stored.total))
	counts := map[string]int{pb.AlarmType_NOSPACE.String(): 0, pb.AlarmType_CORRUPT.String(): 0}
	for _, a := range c.view.Alarms() {
		counts[pb.AlarmType(a.Type).String()]++
	}
	for t, n := range counts {
		c.metrics.alarms.WithLabelValues(t).Set(float64(n))
	}
}

// checkSizing updates the sizing metrics and warns when ZooKeeper's data
// nears what its heap holds (sizing.check).
func (c *compaction) checkSizing(lg *logrus.Entry) {
	_, stored := c.space.sizes(c.view.State().LSN)
	c.sizing.check(c.ctx, current(c.store), c.cfg, stored.total, lg)
}

// observe makes f (nil: none) run with a copy of the view's state before
// every compaction it applies (see Engine.OnCompact), counting the copies
// held until dropped.
func (c *compaction) observe(f func(before *revision.Snapshot, rev int64, dropped func())) {
	if f == nil {
		c.view.OnCompact(nil)
		return
	}
	c.view.OnCompact(func(before *revision.Snapshot, rev int64) {
		c.copiesHeld.Add(1)
		var once sync.Once
		f(before, rev, func() { once.Do(c.copyDropped) })
	})
}

// copyDropped counts a copy of the view (OnCompact) dropped and asks the
// compaction loop for a memory release.
func (c *compaction) copyDropped() {
	c.copiesHeld.Add(-1)
	select {
	case c.release <- struct{}{}:
	default: // one is pending: it releases this copy's memory too
	}
}
