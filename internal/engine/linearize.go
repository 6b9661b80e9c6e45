package engine

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Linearize waits until the view holds every write acknowledged (by any
// instance) before the call: it waits for the position of a barrier, the
// leader's (ReadIndex) when forwarding writes. Errors: ErrGRPCNoLeader when ZooKeeper cannot
// be reached, ctx's error, ErrGRPCCorrupt for a broken view or a halted
// instance.
func (b *Engine) Linearize(ctx context.Context) error {
	if err := b.servable(); err != nil {
		return err
	}
	start := time.Now()
	defer func() { b.metrics.barrierWait.Observe(time.Since(start).Seconds()) }()
	lsn, err := b.readIndex(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return stopped(err)
	}
	return b.tail.waitApplied(ctx, lsn)
}

// readIndex returns a position to wait for before a linearizable read:
// the read lease's when this instance holds it, the leader's answer to
// ReadIndex when forwarding, else (or when the leader does not answer
// within readIndexLimit) this instance's barrier.
func (b *Engine) readIndex(ctx context.Context) (int64, error) {
	if lsn, ok, err := b.reads.index(ctx); ok || err != nil {
		return lsn, err
	}
	if lsn, ok, err := b.fwd.readIndex(ctx); ok || err != nil {
		return lsn, err
	}
	return b.barrier.wait(ctx)
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
