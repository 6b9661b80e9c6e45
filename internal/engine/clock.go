package engine

import "time"

// now is the time source of lease expiry: Config.Now, or time.Now. Lease
// deadlines are its readings plus a TTL, compared with later readings, so
// they run on the monotonic clock and a wall-clock step moves none.
func (b *Engine) now() time.Time {
	if b.cfg.Now != nil {
		return b.cfg.Now()
	}
	return time.Now()
}
