package gctune

import (
	"math"
	"runtime/debug"
	"runtime/metrics"

	"github.com/sirupsen/logrus"
)

// Load prepares the process for a bulk load that keeps what it allocates:
// about size bytes that stay live, built from nothing (an instance
// recovering its view from a base generation). It returns the function
// that ends the load; call it once. Until then:
//
//   - Collection is off, bounded by a memory limit (debug.SetMemoryLimit)
//     at what the process held plus size plus a quarter of size (at least
//     Floor): the runtime collects only if the load's garbage reaches
//     that. Collections every Floor bytes, as Run sets
//     them, would each mark the whole growing heap and free almost
//     nothing. A lower limit the operator set (GOMEMLIMIT) stays.
//   - On Linux, size bytes of heap are mapped at once and the kernel is
//     asked to back them with transparent huge pages (madvise
//     MADV_HUGEPAGE; hosts whose setting is "madvise" give them only on
//     request), so that the load's first touch of its memory takes one
//     page fault per 2 MiB instead of per 4 KiB. On a virtual machine a
//     fault is what a fresh heap's first touch costs most. The mapping is
//     not touched, so it holds no memory until the load uses it.
//
// The function restores the collector's settings, collects and returns the
// load's garbage to the system (debug.FreeOSMemory), and withdraws the
// request for huge pages (MADV_NOHUGEPAGE), so that the kernel does not
// assemble huge pages again from the pages the runtime later returns.
// Loads may overlap; Run resumes once the last ends.
func (t *Tuner) Load(size int64) (done func()) {
	if size <= 0 {
		return func() {}
	}
	// Nothing larger than the machine loads: a larger size is a damaged or
	// hostile description's.
	size = min(size, t.cfg.Memory)
	held := heldBytes()
	region := reserveHuge(size, t.cfg.Memory)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loads++
	if t.loads == 1 {
		t.limit = debug.SetMemoryLimit(-1)
		debug.SetGCPercent(-1)
		// The reservation may count as held or not (the runtime may
		// return a large freed span at once): the load fills it either way.
		limit := held + size + max(t.cfg.Floor, size/4)
		if limit < t.limit {
			debug.SetMemoryLimit(limit)
		}
		t.cfg.Logger.WithFields(logrus.Fields{"load_bytes": size, "memory_limit": limit, "huge_pages_asked": region.len()}).Debug("bulk load: collection deferred")
	}
	ended := false
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if ended {
			return
		}
		ended = true
		region.release()
		if t.loads--; t.loads == 0 {
			debug.SetMemoryLimit(t.limit)
			debug.SetGCPercent(t.cur)
			// The load's garbage, uncollected until now, goes back to
			// the system at once (the background scavenger would take
			// a minute), before the process serves.
			debug.FreeOSMemory()
		}
	}
}

// heldBytes returns the memory the runtime holds from the system, as its
// memory limit counts it (mapped, not returned).
func heldBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return math.MaxInt64 / 2
	}
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}
