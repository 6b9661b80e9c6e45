// Package wallstep is a test clock that behaves as time.Now does after the
// system's wall clock was stepped (by an operator, NTP or a VM resume): the
// times it returns have their wall reading moved by the steps so far and
// their monotonic reading untouched, exactly what time.Now returns on a
// machine whose clock was stepped. Code that measures time with
// time.Time.Sub, Before and After between such values (which use the
// monotonic reading when both have one) is not affected; code that compares
// them with wall-clock times (Unix seconds, ZooKeeper's mtimes, a time
// without a monotonic reading) is.
//
// Stepping the real clock would disturb every process on the machine; this
// rewrites the wall reading inside time.Time values instead, which relies
// on time.Time's layout since Go 1.9 (checked when the package loads).
package wallstep

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// Clock is a wall-clock step simulator. The zero value has no step. Safe
// for concurrent use.
type Clock struct {
	offset atomic.Int64 // whole seconds
}

// Step moves the wall clock by d (whole seconds; d may be negative).
func (c *Clock) Step(d time.Duration) {
	c.offset.Add(int64(d / time.Second))
}

// Now returns time.Now with the wall reading moved by the steps so far.
func (c *Clock) Now() time.Time {
	return shiftWall(time.Now(), c.offset.Load())
}

// timeLayout mirrors time.Time: wall holds, when hasMonotonic is set, 33
// bits of seconds since 1885 above 30 bits of nanoseconds; ext holds the
// monotonic reading.
type timeLayout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const (
	hasMonotonic = 1 << 63
	nsecBits     = 30
	secMask      = (1<<33 - 1) << nsecBits
)

func shiftWall(t time.Time, secs int64) time.Time {
	p := (*timeLayout)(unsafe.Pointer(&t))
	if p.wall&hasMonotonic == 0 {
		panic("wallstep: time without a monotonic reading")
	}
	sec := int64(p.wall&secMask>>nsecBits) + secs
	p.wall = p.wall&^secMask | uint64(sec)<<nsecBits&secMask
	return t
}

func init() {
	if unsafe.Sizeof(time.Time{}) != unsafe.Sizeof(timeLayout{}) {
		panic("wallstep: time.Time layout changed")
	}
	now := time.Now()
	later := shiftWall(now, 3600)
	if later.Unix()-now.Unix() != 3600 || later.Sub(now) != 0 {
		panic(fmt.Sprintf("wallstep: time.Time layout changed (%v, %v)", later.Unix()-now.Unix(), later.Sub(now)))
	}
}
