package backend

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// barrier shares ZooKeeper barrier round trips among concurrent
// linearizable reads. A read joins a round that starts after it arrived —
// never one already in flight, whose barrier may predate the read. Up to
// maxRounds rounds are in flight at once (ZooKeeper batches their
// transactions into fewer fsyncs); reads arriving while all are busy wait
// together for the next one.
type barrier struct {
	sync      func() (int64, error) // returns the head LSN after a barrier
	maxRounds int

	mu       sync.Mutex
	inflight int
	next     *round // the round reads join; not started yet
}

type round struct {
	done chan struct{}
	lsn  int64
	err  error
}

// wait returns a head LSN read after wait was called.
func (b *barrier) wait(ctx context.Context) (int64, error) {
	b.mu.Lock()
	if b.next == nil {
		b.next = &round{done: make(chan struct{})}
	}
	r := b.next
	if b.inflight < max(b.maxRounds, 1) {
		b.startLocked()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.lsn, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (b *barrier) startLocked() {
	r := b.next
	b.next = nil
	b.inflight++
	go func() {
		r.lsn, r.err = b.sync()
		close(r.done)
		b.mu.Lock()
		b.inflight--
		if b.next != nil {
			b.startLocked()
		}
		b.mu.Unlock()
	}()
}

func (b *Backend) syncHead() (int64, error) {
	read := b.store.QuorumHead
	if b.cfg.RelaxedReads {
		read = b.store.SyncHead
	}
	h, err := read()
	if err != nil {
		return 0, err
	}
	return h.LSN, nil
}

// Linearize waits until the view holds every write acknowledged (by any
// instance) before the call: it waits for the position of a barrier, the
// leader's (ReadIndex) when forwarding writes. Errors: ErrGRPCNoLeader when ZooKeeper cannot
// be reached, ctx's error, ErrGRPCCorrupt for a broken view or a halted
// instance.
func (b *Backend) Linearize(ctx context.Context) error {
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
		return b.stopped(err)
	}
	if b.view.State().LSN >= lsn {
		return nil
	}
	b.kickTailer()
	if err := b.view.WaitApplied(ctx, lsn); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rpctypes.ErrGRPCCorrupt
	}
	return nil
}
