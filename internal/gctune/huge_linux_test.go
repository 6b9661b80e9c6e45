package gctune

import (
	"bufio"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// vmFlags returns the VmFlags of the mapping holding addr in
// /proc/self/smaps.
func vmFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rng, _, ok := strings.Cut(line, " "); ok && strings.Contains(rng, "-") && !strings.HasSuffix(rng, ":") {
			lo, hi, _ := strings.Cut(rng, "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}

func TestReserveHugeAsksForHugePagesUntilReleased(t *testing.T) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skip("no transparent huge pages on this host")
	}
	r := reserveHuge(64<<20, physicalMemory())
	if r.len() < 60<<20 {
		t.Fatalf("reserved %d bytes of 64 MiB", r.len())
	}
	if f := vmFlags(t, r.beg); !strings.Contains(f, " hg") {
		t.Errorf("reserved range not advised: %s", f)
	}
	r.release()
	if f := vmFlags(t, r.beg); strings.Contains(f, " hg") || !strings.Contains(f, " nh") {
		t.Errorf("released range still advised: %s", f)
	}
	if small := reserveHuge(1<<20, physicalMemory()); small.len() != 0 {
		t.Errorf("a load under two huge pages reserved %d", small.len())
	}
}

// A size no machine holds (a hostile or damaged base description) reserves
// at most half the memory there is, and the load ends as any other.
func TestLoadOfAnImpossibleSizeReservesWhatTheMachineHas(t *testing.T) {
	const memory = 256 << 20
	if r := reserveHuge(1<<50, memory); r.len() > memory/2 || r.len() < memory/4 {
		t.Fatalf("reserved %d bytes of a machine of %d", r.len(), memory)
	}
	if physicalMemory() <= 0 {
		t.Fatal("the machine's memory is unknown")
	}
	tu := New(Config{Memory: memory})
	limit := debug.SetMemoryLimit(-1)
	done := tu.Load(math.MaxInt64)
	if got := debug.SetMemoryLimit(-1); got <= 0 || got > heldBytes()+2*memory {
		t.Errorf("memory limit during the load %d, want the held %d and at most %d more", got, heldBytes(), 2*memory)
	}
	done()
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit after the load %d, want %d", got, limit)
	}
}
