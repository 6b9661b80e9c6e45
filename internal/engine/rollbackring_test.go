package engine

import (
	"runtime"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

// TestRollbackGuardCostsLittleUntilTheLogGrows: the ring of applied
// entries that finds where two histories part costs an engine next to
// nothing until entries arrive, and then in proportion to them up to its
// size (a fleet runs one engine per tenant, most of them idle); every
// entry recorded is found again until the ring wraps over it.
func TestRollbackGuardCostsLittleUntilTheLogGrows(t *testing.T) {
	allocated := func(f func()) uint64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	const small = 64 << 10
	var g *rollbackGuard
	if n := allocated(func() { g = newRollbackGuard(nil, nil, nil) }); n > small {
		t.Fatalf("a new guard allocates %d bytes, want at most %d", n, small)
	}
	rec := func(lsn int64) {
		g.record(&revision.Entry{LSN: lsn, Zxid: lsn << 8, Writer: revision.WriterTag{Nonce: 7, Seq: uint64(lsn)}}, lsn, lsn+1)
	}
	if n := allocated(func() {
		for lsn := int64(1); lsn <= 100; lsn++ {
			rec(lsn)
		}
	}); n > small {
		t.Fatalf("100 entries allocate %d bytes, want at most %d", n, small)
	}
	for lsn := int64(1); lsn <= 100; lsn++ {
		a, ok := g.lookup(lsn)
		if !ok || a.zxid != lsn<<8 || a.rev != lsn+1 || a.writer.Seq != uint64(lsn) {
			t.Fatalf("entry %d: %+v %v", lsn, a, ok)
		}
	}
	for _, lsn := range []int64{0, 101, 100 + ringSize} {
		if _, ok := g.lookup(lsn); ok {
			t.Fatalf("entry %d found, never recorded", lsn)
		}
	}
	for lsn := int64(101); lsn <= ringSize+50; lsn++ {
		rec(lsn)
	}
	if _, ok := g.lookup(50); ok {
		t.Fatal("entry 50 found after the ring wrapped over it")
	}
	if a, ok := g.lookup(ringSize + 50); !ok || a.rev != ringSize+51 {
		t.Fatalf("the newest entry: %+v %v", a, ok)
	}
	if got := g.oldest(); got != 51 {
		t.Fatalf("oldest %d, want 51", got)
	}
}
