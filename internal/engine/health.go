package engine

import (
	"errors"
	"fmt"
	"time"
)

// Health reports nil when the instance has a live ZooKeeper session and its
// view is caught up with the head it last saw; otherwise why not (for a
// halted instance, an error wrapping ErrHalted).
func (b *Engine) Health() error {
	if err := b.rb.rolledBack(); err != nil {
		return err
	}
	if err := b.view.Err(); err != nil {
		return err
	}
	if _, ok := b.store.Session(); !ok {
		return errors.New("no zookeeper session")
	}
	hs := b.tail.lastHead.Load()
	if hs == nil {
		return errors.New("head not read yet")
	}
	if since := time.Since(hs.at); since > b.cfg.StaleAfter {
		return fmt.Errorf("view last caught up with the head %s ago", since.Round(time.Millisecond))
	}
	return nil
}

// Lag returns how many log entries the view is behind the last seen head.
func (b *Engine) Lag() int64 {
	hs := b.tail.lastHead.Load()
	if hs == nil {
		return 0
	}
	return max(0, hs.head.LSN-b.view.State().LSN)
}
