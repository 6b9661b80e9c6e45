package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/internal/gctune"
)

// The scale section is spliced into the markdown report once, replaced on
// every write, carried by the main report's re-render, and names a missed
// target.
func TestScaleSectionIsSplicedOnceAndCarriedByTheMainReport(t *testing.T) {
	dir := t.TempDir()
	md, data := filepath.Join(dir, "benchmarks.md"), filepath.Join(dir, "bench")
	if err := os.WriteFile(md, []byte("# Benchmarks\n\nhand-written\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := &ScaleReport{ZKHeap: "3g", Clients: 64, Rows: []ScaleRow{
		{Stack: ScaleZketcd, Objects: 100000, DataBytes: 300 << 20, M: map[string]float64{"rss_load_api_mb": 420, "list_s": 2, "load_s": 30, "load_objects_per_s": 3000}},
		{Stack: ScaleEtcd, Objects: 100000, DataBytes: 300 << 20, M: map[string]float64{"rss_load_api_mb": 480, "list_s": 8, "load_s": 80, "load_objects_per_s": 1200}},
	}}
	for i := 0; i < 2; i++ {
		if err := rep.WriteFiles(data, md); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(md)
	s := string(b)
	if strings.Count(s, scaleBegin) != 1 || strings.Count(s, scaleEnd) != 1 || !strings.Contains(s, "hand-written") {
		t.Fatalf("section not spliced once:\n%s", s)
	}
	if !strings.Contains(s, "| instance RSS ≤ 1.2× the data it holds, after load | 100,000 | 1.40× | **no** |") {
		t.Fatalf("no missed target in:\n%s", s)
	}
	if !strings.Contains(s, "| LIST no slower than etcd | 100,000 | 0.25× etcd's | yes |") {
		t.Fatalf("no LIST target in:\n%s", s)
	}
	if embedScale(data) == "" {
		t.Fatal("the main report would not carry the section")
	}
	back, err := LoadScaleReport(filepath.Join(data, "scale.json"))
	if err != nil || len(back.Rows) != 2 || back.row(ScaleEtcd, 100000).M["list_s"] != 8 {
		t.Fatalf("scale.json: %+v %v", back, err)
	}
}

// A report holding rows of more than one run says which run measured
// which rows; one of a single run says nothing of it.
func TestScaleReportSaysWhichRunMeasuredWhichRows(t *testing.T) {
	row := func(stack string, n int, measured string) ScaleRow {
		return ScaleRow{Stack: stack, Objects: n, DataBytes: 300 << 20, Measured: measured, M: map[string]float64{"list_s": 2}}
	}
	one := &ScaleReport{Rows: []ScaleRow{row(ScaleZketcd, 100000, "now, build b"), row(ScaleEtcd, 100000, "now, build b")}}
	if s := one.Markdown("bench", nil); strings.Contains(s, "more than one run") {
		t.Fatalf("a single run's report names runs:\n%s", s)
	}
	mixed := &ScaleReport{Rows: []ScaleRow{row(ScaleZketcd, 100000, "now, build b"), row(ScaleZketcd, 1000000, "")}}
	s := mixed.Markdown("bench", nil)
	for _, want := range []string{
		"- now, build b: " + ScaleZketcd + " at 100,000\n",
		"- an earlier run that did not record its build: " + ScaleZketcd + " at 1,000,000\n",
	} {
		if !strings.Contains(s, want) {
			t.Fatalf("no %q in:\n%s", want, s)
		}
	}
}

// BenchmarkTouchFreshHeap measures what a fresh process pays to touch
// memory the first time: 100 MB of 3.2 KB values, the size of the kube-like
// objects a recovering instance decodes into its view (go test -run '^$'
// -bench TouchFreshHeap -benchtime 1x). On a virtual machine each first
// touch of a page is a page fault the hypervisor also handles; a restart
// touches every byte the view holds (analysis.md, "Restart times").
func BenchmarkTouchFreshHeap(b *testing.B) {
	touchFreshHeap(b)
}

// BenchmarkTouchFreshHeapPrepared is BenchmarkTouchFreshHeap with the heap
// prepared as zketcd serve prepares a recovery's (gctune.Tuner.Load:
// collection deferred, transparent huge pages asked for). Run it in a
// process of its own (-bench 'TouchFreshHeapPrepared$'): the first
// benchmark of a process is the only one whose heap is fresh.
func BenchmarkTouchFreshHeapPrepared(b *testing.B) {
	done := gctune.New(gctune.Config{}).Load(touchValues * touchSize)
	defer done()
	touchFreshHeap(b)
}

const touchValues, touchSize = 32000, 3200

func touchFreshHeap(b *testing.B) {
	const values, size = touchValues, touchSize
	for b.Loop() {
		keep := make([][]byte, 0, values)
		for range values {
			v := make([]byte, size)
			for j := 0; j < size; j += 512 {
				v[j] = 1
			}
			keep = append(keep, v)
		}
		runtime.KeepAlive(keep)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/(values*size/1e6), "ms/MB")
}
