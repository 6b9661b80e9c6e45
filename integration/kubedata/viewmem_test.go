package kubedata

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestViewMemoryPerByteOfKubeData measures what the view holds per byte
// of data: n objects applied as the tailer applies them (entries of 64
// objects, decoded from their stored form), the live heap after a
// collection, before and after a compaction that leaves one version of
// each, and after the compaction where the heap's pages are (live objects,
// the free room inside partly used spans, whole free spans the runtime
// kept). It only logs (KUBEDATA_VIEWMEM=n objects).
func TestViewMemoryPerByteOfKubeData(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KUBEDATA_VIEWMEM"))
	if n == 0 {
		t.Skip("a measurement: set KUBEDATA_VIEWMEM to a number of objects")
	}
	live := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	g := New(22)
	base := live()
	v := revision.NewView(1, 1)
	var data int64
	lsn, rev := int64(1), int64(1)
	counting := true
	apply := func(from, to int) {
		var changes []revision.Change
		e := &revision.Entry{}
		for i := from; i < to; i++ {
			o := g.Object(i)
			if counting {
				data += int64(len(o.Key) + len(o.Value))
			}
			rev++
			e.Ops = append(e.Ops, revision.Op{Kind: revision.OpTxn, Rev: rev, Changes: append(changes[:0:0], revision.Change{Key: []byte(o.Key), Value: o.Value})})
		}
		lsn++
		d, err := zkstore.DecodeEntry(zkstore.EncodeEntryFormat(e, 2))
		if err != nil {
			t.Fatal(err)
		}
		d.LSN = lsn
		if _, err := v.Apply(d); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 64 {
		apply(i, min(i+64, n))
	}
	loaded := live() - base
	t.Logf("%d objects, %d MB of keys and values: view heap %d MB = %.3f bytes per byte, %.0f bytes per object beyond the data",
		n, data>>20, loaded>>20, float64(loaded)/float64(data), float64(int64(loaded)-data)/float64(n))
	held(t, "after the load, its memory released", data)
	// Write a tenth again (the same bytes), compact to the head, trim.
	counting = false
	for i := 0; i < n/10; i += 64 {
		apply(i, min(i+64, n/10))
	}
	// The compaction's hash (what an instance computes in the background
	// from the copy before each compaction, for HashKV at its revision).
	began := time.Now()
	if _, err := etcdformat.CompactionHash(v.Snapshot(), rev); err != nil {
		t.Fatal(err)
	}
	t.Logf("the compaction's hash over %d versions: %v", n+n/10, time.Since(began).Round(time.Millisecond))
	lsn++
	if _, err := v.Apply(&revision.Entry{LSN: lsn, Ops: []revision.Op{{Kind: revision.OpCompact, Rev: rev}}}); err != nil {
		t.Fatal(err)
	}
	for v.TrimCompacted(2048) {
	}
	compacted := live() - base
	t.Logf("after compaction: view heap %d MB = %.3f bytes per byte", compacted>>20, float64(compacted)/float64(data))
	held(t, "after the compaction's memory release", data)
	runtime.KeepAlive(v)
}

// held returns the freed memory to the system, as the compaction loop
// does, and logs where the pages the process still holds are: the
// objects, the free slots of spans that still hold some (the room of
// garbage that was interleaved with live objects of its size class, which
// a non-moving collector cannot return), whole free spans kept, and the
// runtime's own (stacks, metadata).
func held(t *testing.T, when string, data int64) {
	debug.FreeOSMemory()
	m := heapClasses()
	total := m["/memory/classes/total:bytes"] - m["/memory/classes/heap/released:bytes"]
	objects, unused, free := m["/memory/classes/heap/objects:bytes"], m["/memory/classes/heap/unused:bytes"], m["/memory/classes/heap/free:bytes"]
	t.Logf("%s: held %d MB = %.3f bytes per byte: objects %d MB, free slots in used spans %d MB, free spans kept %d MB, runtime %d MB",
		when, total>>20, float64(total)/float64(data), objects>>20, unused>>20, free>>20, (total-objects-unused-free)>>20)
}

// heapClasses reads the runtime's memory classes, in bytes.
func heapClasses() map[string]uint64 {
	names := []string{
		"/memory/classes/total:bytes",
		"/memory/classes/heap/released:bytes",
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/unused:bytes",
		"/memory/classes/heap/free:bytes",
	}
	samples := make([]metrics.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	metrics.Read(samples)
	out := make(map[string]uint64, len(names))
	for _, s := range samples {
		out[s.Name] = s.Value.Uint64()
	}
	return out
}
