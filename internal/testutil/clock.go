package testutil

import (
	"sync"
	"time"
)

// Clock is a time source that moves only when the test moves it, for code
// that takes its clock as a func() time.Time (e.g. engine.Config.Now). Its
// readings keep the monotonic reading of the moment it was made, so they
// compare with each other (Sub, Before, After) as time.Now's do. Safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading the current time.
func NewClock() *Clock { return &Clock{now: time.Now()} }

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (d < 0 is ignored: the clock never
// goes back) and returns the new reading.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	return c.now
}

// AdvanceTo moves the clock forward to t if t is later than its reading,
// and returns the new reading.
func (c *Clock) AdvanceTo(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	return c.now
}
