package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/compactor"
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

func (b *Engine) compactLoop() {
	defer b.wg.Done()
	lg := b.log.WithField("component", "compactor")
	t := time.NewTicker(max(compactCheckEvery, b.cfg.IdlePoll))
	defer t.Stop()
	pending := false // memory freed that no release returned yet
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		case <-b.compactKick:
		case <-b.releaseKick: // a copy dropped: the pending release may go
		}
		freed := b.trimCompacted()
		b.updateSpaceMetrics()
		b.checkSizing(lg)
		leader, fence, _ := b.election.State()
		b.followFormat(lg, leader)
		if !leader {
			// Follow the leader's generations for the space accounting.
			if err := b.refreshBase(); err != nil && b.ctx.Err() == nil {
				lg.WithError(err).Debug("read base generation")
			}
		} else {
			published, err := b.compactOnce(lg, fence)
			if err != nil && b.ctx.Err() == nil {
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
		if pending && b.copiesHeld.Load() == 0 && b.cfg.AfterCompaction != nil {
			b.cfg.AfterCompaction()
			pending = false
		}
	}
}

// trimBatch is how many keys one TrimCompacted call visits under the
// view's write lock (~0.3 ms here): compaction frees memory without holding
// applies and reads for O(keys).
const trimBatch = 2048

// trimCompacted drops the versions the view's last compaction made
// invisible, a batch of keys at a time, yielding between batches. It
// reports whether it dropped any.
func (b *Engine) trimCompacted() bool {
	trimmed := false
	for b.ctx.Err() == nil && b.view.TrimCompacted(trimBatch) {
		trimmed = true
		runtime.Gosched()
	}
	return trimmed
}

// compactOnce makes the view's last compaction physical if it is past the
// current generation's, and reports whether it published a generation
// (what the caller's memory release follows); an error says which step
// failed, the generation before staying current.
func (b *Engine) compactOnce(lg *logrus.Entry, fence zkstore.Fence) (bool, error) {
	base, err := b.store.ReadBase()
	if err != nil {
		return false, err
	}
	b.space.setBase(base)
	b.view.PruneRemoved(base.Rev)
	st := b.view.State()
	if st.CompactRev <= base.CompactRev || st.CompactRev <= 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	snap := b.view.Snapshot()
	if logData, keep := b.logServesAsBase(base, snap); keep {
		err := b.keepLog(lg, fence, base, snap, logData, start)
		return err == nil, err
	}
	nb, err := b.store.PrepareBase(ctx, snap, base, b.nonce)
	if err != nil {
		return false, fmt.Errorf("write base generation at entry %d: %w", snap.State.LSN, err)
	}
	if err := b.hook("base-prepared"); err != nil {
		return false, err
	}
	nb.LogRaw, nb.LogBytes = b.space.keptLog(base, nb.Gen)
	nb.PrevSize, nb.PrevRaw = base.StoredSize(), baseLogical(base)
	if len(nb.Deltas) > 0 {
		nb.PrevSize, nb.PrevRaw = 0, 0 // a delta shares every layer of the previous generation
	}
	if nb, err = b.store.PublishBase(fence, nb); err != nil {
		return false, fmt.Errorf("publish base generation at entry %d: %w", snap.State.LSN, err)
	}
	b.space.setBase(nb)
	wrote := time.Since(start)
	if len(nb.Deltas) > len(base.Deltas) {
		b.metrics.compactions.WithLabelValues("delta").Inc()
	} else {
		b.metrics.compactions.WithLabelValues("whole").Inc()
	}
	if err := b.hook("base-published"); err != nil {
		return true, err
	}
	var deleted int
	if base.Gen > 0 {
		if deleted, err = b.store.TruncateLog(ctx, fence, base.Gen); err != nil {
			return true, fmt.Errorf("truncate log below entry %d: %w", base.Gen, err)
		}
	}
	if err := b.hook("log-truncated"); err != nil {
		return true, err
	}
	gens, err := b.store.CollectBases(ctx, fence, nb)
	if err != nil {
		return true, err
	}
	chunks, err := b.store.CollectChunks(ctx, fence, chunkGrace.Milliseconds())
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
func (b *Engine) logServesAsBase(cur zkstore.Base, snap *revision.Snapshot) (int64, bool) {
	limit := b.cfg.LogGenerationLimit
	if limit == 0 {
		limit = defaultLogGenerationLimit
	}
	if limit < 0 || cur.Gen != 0 || cur.Path != "" {
		return 0, false
	}
	logData, complete := b.space.logData(snap.State.LSN)
	if !complete {
		return 0, false // this instance did not apply the whole log: cannot tell
	}
	live := snap.DataBytes()
	return logData, float64(logData) <= limit*float64(live)
}

// keepLog publishes a log generation (zkstore.LogGeneration): the
// compaction to snap's compacted revision is physical once recorded, as
// the log it leaves holds little besides the live data.
func (b *Engine) keepLog(lg *logrus.Entry, fence zkstore.Fence, cur zkstore.Base, snap *revision.Snapshot, logData int64, start time.Time) error {
	nb, err := b.store.PublishBase(fence, zkstore.LogGeneration(cur, snap.State.CompactRev, logData))
	if err != nil {
		return fmt.Errorf("record compaction to %d in the log generation: %w", snap.State.CompactRev, err)
	}
	b.space.setBase(nb)
	b.metrics.compactions.WithLabelValues("log").Inc()
	if err := b.hook("base-published"); err != nil {
		return err
	}
	lg.WithFields(logrus.Fields{
		"compacted": nb.CompactRev, "entry": snap.State.LSN, "log_data_bytes": logData,
		"took": time.Since(start).Round(time.Millisecond),
	}).Info("physical compaction: the log kept as the generation (mostly live data; no base written)")
	return nil
}

// hook calls the configured compaction hook, if any.
func (b *Engine) hook(step string) error {
	if b.cfg.CompactionHook == nil {
		return nil
	}
	return b.cfg.CompactionHook(step)
}

// waitPhysical waits until a base generation holds a compaction at or
// above rev (etcd's Compact with physical=true returns once the compaction
// is done on disk).
func (b *Engine) waitPhysical(ctx context.Context, rev int64) error {
	select {
	case b.compactKick <- struct{}{}:
	default:
	}
	for {
		base, err := b.store.ReadBase()
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

// Compact commits a compaction to req.Revision: reads below it fail from
// then on, on every instance. Errors: ErrGRPCCompacted if already compacted
// there, ErrGRPCFutureRev above the current revision.
func (b *Engine) Compact(ctx context.Context, req *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return b.compact(ctx, req, zkstore.Fence{})
}

// compact is Compact; with a valid fence, the compaction is committed only
// while that leadership holds (errRefused otherwise).
func (b *Engine) compact(ctx context.Context, req *pb.CompactionRequest, fence zkstore.Fence) (*pb.CompactionResponse, error) {
	if err := b.compactBarrier(ctx, req); err != nil {
		return nil, err
	}
	var resp *pb.CompactionResponse
	var err error
	if fence.Valid() {
		resp, err = writeGuarded(ctx, b, req, compactKind.eval(b, req, nil),
			func() []zkstore.Guard { return []zkstore.Guard{fence.Guard()} })
	} else {
		resp, err = compactKind.write(ctx, b, req, nil)
	}
	if err != nil {
		return nil, err
	}
	if req.Physical {
		if err := b.waitPhysical(ctx, req.Revision); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// compactBarrier is the barrier before a compaction past the view's
// revision: that revision may exist on another instance, so it is decided
// after a barrier.
func (b *Engine) compactBarrier(ctx context.Context, req *pb.CompactionRequest) error {
	if req.Revision > b.view.State().Rev {
		return b.Linearize(ctx)
	}
	return nil
}

// autoCompactTarget is the auto-compactor's view of the engine: the
// view's revision, the election shared with lease expiry and physical
// compaction, and Compact, the Compact RPC's path, fenced by the
// leadership so that a deposed leader's compaction is refused.
type autoCompactTarget struct{ b *Engine }

func (t autoCompactTarget) Rev() int64 { return t.b.view.State().Rev }

func (t autoCompactTarget) Leader() bool {
	leader, _, _ := t.b.election.State()
	return leader
}

func (t autoCompactTarget) Compact(ctx context.Context, rev int64) error {
	leader, fence, _ := t.b.election.State()
	if !leader || !fence.Valid() {
		return ErrNotLeader // lost since the compactor checked
	}
	_, err := t.b.compact(ctx, &pb.CompactionRequest{Revision: rev}, fence)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrGRPCCompacted):
		return fmt.Errorf("compact to %d: %w", rev, compactor.ErrCompacted)
	case errors.Is(err, errRefused):
		return fmt.Errorf("compact to %d: leadership lost: %w", rev, err)
	}
	return fmt.Errorf("compact to %d: %w", rev, err)
}
