package backend

import (
	"context"
	"sync"
)

// barrier shares ZooKeeper sync round trips among concurrent linearizable
// reads: a read joins the next round to start, never one already in flight
// (whose sync may predate the read), so every read gets a head read after
// it began.
type barrier struct {
	sync func() (int64, error) // returns the head LSN after a sync

	mu       sync.Mutex
	inflight bool
	next     *round
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
	if !b.inflight {
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
	b.inflight = true
	go func() {
		r.lsn, r.err = b.sync()
		close(r.done)
		b.mu.Lock()
		b.inflight = false
		if b.next != nil {
			b.startLocked()
		}
		b.mu.Unlock()
	}()
}
