package gctune

import (
	"runtime"
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms Go
// runs Linux on that matter here (amd64, arm64 with 4 KiB pages).
const hugePage = 2 << 20

// hugeRegion is a range of the heap's addresses the kernel was asked to
// back with huge pages.
type hugeRegion struct{ beg, end uintptr }

// reserveHuge maps n bytes of heap without touching them and asks for
// huge pages on the 2 MiB-aligned part of them, then frees them for the
// allocator to reuse (it reuses the lowest free addresses first, and the
// heap never returns address space, so the range stays the heap's). A
// refusal (a kernel without transparent huge pages) leaves an empty
// region: the advice is an optimization.
//
// n comes from a base generation's description: it is bounded by half of
// memory (the machine's), so that a description claiming more (damaged, or
// written by someone with write access to the root) costs a bounded
// reservation, never an allocation the runtime cannot map.
func reserveHuge(n, memory int64) hugeRegion {
	n = min(n, memory/2)
	if n < 2*hugePage {
		return hugeRegion{}
	}
	beg, end := mapUntouched(int(n))
	runtime.GC() // frees the slice: its pages are the heap's free pages now
	beg = (beg + hugePage - 1) &^ (hugePage - 1)
	end &^= hugePage - 1
	if beg >= end || madvise(beg, end-beg, syscall.MADV_HUGEPAGE) != nil {
		return hugeRegion{}
	}
	return hugeRegion{beg, end}
}

// mapUntouched allocates n bytes and returns their address range. A large
// allocation that grows the heap gets memory fresh from the system, which
// the runtime knows is zero and does not write.
func mapUntouched(n int) (beg, end uintptr) {
	b := make([]byte, n)
	beg = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return beg, beg + uintptr(n)
}

// release withdraws the request for huge pages.
func (r hugeRegion) release() {
	if r.end > r.beg {
		_ = madvise(r.beg, r.end-r.beg, syscall.MADV_NOHUGEPAGE)
	}
}

func (r hugeRegion) len() int64 { return int64(r.end - r.beg) }

func madvise(addr, n uintptr, advice int) error {
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, addr, n, uintptr(advice)); e != 0 {
		return e
	}
	return nil
}

// physicalMemory returns the machine's memory in bytes (0 if unknown).
func physicalMemory() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
