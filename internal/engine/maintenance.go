package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// QuotaBytes returns the quota in force over DBSize: --quota-backend-bytes
// (or what SetQuotaBackendBytes set since) resolved as etcd does (0: etcd's
// default of 2 GiB; negative: none).
func (b *Engine) QuotaBytes() int64 { return translate.QuotaBytes(b.quota.Load()) }

// SetQuotaBackendBytes changes the quota of a running engine (as
// Config.QuotaBackendBytes): the next write is checked against it. A raised
// quota does not disarm a NOSPACE alarm already raised (as in etcd, the
// alarm is disarmed by Alarm). Safe for concurrent use.
func (b *Engine) SetQuotaBackendBytes(n int64) { b.quota.Store(n) }

// DBSize returns the bytes the root holds before compression as this
// instance accounts them (see space): etcd's DB size, against which the
// quota is checked.
func (b *Engine) DBSize() int64 {
	logical, _ := b.space.sizes(b.view.State().LSN)
	return logical.total
}

// DBSizeInUse returns the bytes before compression of the current base
// generation and the log after it: what a defragment would leave (etcd's
// DB size in use).
func (b *Engine) DBSizeInUse() int64 {
	logical, _ := b.space.sizes(b.view.State().LSN)
	return logical.inUse
}

// ZooKeeperBytes returns the bytes the root holds in ZooKeeper as stored
// (compressed), counted as DBSize is: what ZooKeeper's heap holds of it.
func (b *Engine) ZooKeeperBytes() int64 {
	_, stored := b.space.sizes(b.view.State().LSN)
	return stored.total
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
		if err := b.compaction.waitPhysical(ctx, rev); err != nil {
			return stopped(fmt.Errorf("defragment: wait for the compaction to %d: %w", rev, err))
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
			return stopped(fmt.Errorf("defragment: %w", err))
		}
		b.space.setBase(nb)
		logical, stored := b.space.sizes(b.view.State().LSN)
		b.log.WithFields(logrus.Fields{
			"generation": nb.Gen, "log_entries_deleted": deleted, "previous_generation": cur.PrevPath != "",
			"db_size": logical.total, "db_size_in_use": logical.inUse, "zookeeper_bytes": stored.total,
			"took": time.Since(start).Round(time.Millisecond),
		}).Info("defragmented: compacted history freed")
		return nil
	}
}

// CheckCorruption runs one round of the corruption check as the leader
// instance: it asks every other instance for its HashKV at the view's
// revision and, as etcd, raises the CORRUPT alarm for one instance whose
// hash differs from its own at the same compacted revision (the lowest
// member ID; all are logged). Errors: the log's, ErrNotLeader, or one
// wrapping errMismatch after raising the alarm.
func (b *Engine) CheckCorruption(ctx context.Context) error { return b.corrupt.check(ctx) }
