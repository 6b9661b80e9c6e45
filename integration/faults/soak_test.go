package faults

import (
	"context"
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// Environment of TestSoak (make soak):
//
//	SOAK_DURATION     workload time (e.g. 2h); unset: the test is skipped.
//	SOAK_FAULT_EVERY  time between faults (default 3m).
//	SOAK_SAMPLE_EVERY time between samples (default 15s).
//	SOAK_OUT          directory for soak.csv and soak.png (default: a new
//	                  temporary directory, named in the log).
//	SOAK_MAX_LINEARIZABILITY_OPS  the linearizability search is skipped
//	                  above this many operations (default 100000; 0: never
//	                  skipped): its memory grows with the history (over 14
//	                  GiB at 264,000). Every other check covers it all.

// soakFaults are the faults a soak injects, in turn: the scenarios' own
// injectors.
var soakFaults = []string{"ZKLeaderKill", "ZketcdKill", "ZKRollingRestart", "ZketcdSigstop",
	"ZKFollowerKill", "ZKConnectStringChange", "ZketcdPartition", "ZKEnsembleRestart"}

// sample is one row of soak.csv.
type sample struct {
	At                 time.Duration
	RSS, Heap, Gorout  [2]float64 // zketcd A, B: bytes, bytes, count
	Znodes, ZKDataSize float64    // mntr zk_znode_count, zk_approximate_data_size
	DataDir            float64    // bytes in ZooKeeper member 1's data directory
	Revision           float64    // zketcd B's applied revision
}

var sampleHeader = []string{"seconds", "rss_a_bytes", "rss_b_bytes", "heap_a_bytes", "heap_b_bytes",
	"goroutines_a", "goroutines_b", "zk_znode_count", "zk_approximate_data_size", "zk_data_dir_bytes", "revision"}

func (s sample) record() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return []string{f(s.At.Seconds()), f(s.RSS[0]), f(s.RSS[1]), f(s.Heap[0]), f(s.Heap[1]),
		f(s.Gorout[0]), f(s.Gorout[1]), f(s.Znodes), f(s.ZKDataSize), f(s.DataDir), f(s.Revision)}
}

// TestSoak runs kube-apiserver-like load (the faults workload: creates,
// updates and deletes over prefixes, lists, leases granted, kept alive,
// revoked and expired, watchers opened and closed, compaction every
// minute) against a 3-member ensemble and two zketcd instances for
// SOAK_DURATION, injects one fault every SOAK_FAULT_EVERY (the scenarios'
// injectors in turn), samples memory, goroutines, znodes and ZooKeeper's
// data size, writes them as CSV and a plot, and checks the whole history
// with the faults checker at the end.
func TestSoak(t *testing.T) {
	ds := os.Getenv("SOAK_DURATION")
	if ds == "" {
		t.Skip("SOAK_DURATION is not set: run make soak")
	}
	duration, err := time.ParseDuration(ds)
	if err != nil {
		t.Fatalf("SOAK_DURATION: %v", err)
	}
	faultEvery := envDuration(t, "SOAK_FAULT_EVERY", 3*time.Minute)
	sampleEvery := envDuration(t, "SOAK_SAMPLE_EVERY", 15*time.Second)
	profileEvery := envDuration(t, "SOAK_PROFILE_EVERY", 10*time.Minute)
	maxLin := 100000
	if v := os.Getenv("SOAK_MAX_LINEARIZABILITY_OPS"); v != "" {
		if maxLin, err = strconv.Atoi(v); err != nil {
			t.Fatalf("SOAK_MAX_LINEARIZABILITY_OPS: %v", err)
		}
	}
	out := os.Getenv("SOAK_OUT")
	if out == "" {
		if out, err = os.MkdirTemp("", "zketcd-soak-"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	byName := map[string]scenario{}
	for _, sc := range scenarios {
		byName[sc.name] = sc
	}

	// ZooKeeper keeps every transaction log and snapshot unless told to
	// purge them, as an operator's ensemble would be (hourly, the
	// shortest interval ZooKeeper has).
	cl := newCluster(t, clusterOptions{zk: func(_ *testing.T, o *zkserver.Options) {
		o.ExtraConfig["autopurge.purgeInterval"] = "1"
		o.ExtraConfig["autopurge.snapRetainCount"] = "3"
	}})
	w, err := Start(Config{
		Clients:        cl.clients,
		KubeWorkers:    []string{"A", "B", "AB", "AB"},
		EtcdWorkers:    []string{"A", "B"},
		LeaseClient:    "AB",
		CompactEvery:   time.Minute,
		RequestTimeout: 4 * time.Second,
		Seed:           uint64(time.Now().UnixNano()),
		WatchChurn:     20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()

	var mu sync.Mutex // samples; cl.a/cl.b are replaced by no fault, only restarted
	var samples []sample
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		profiled := time.Duration(-1)
		for {
			at := time.Since(began)
			if profiled < 0 || at-profiled >= profileEvery {
				saveGoroutines(t, cl, filepath.Join(out, "goroutines"), at)
				profiled = at
			}
			s := takeSample(cl, at)
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	var whats []string
	deadline := began.Add(duration)
	for n := 0; time.Until(deadline) > faultEvery/2; n++ {
		wait := time.Until(began.Add(time.Duration(n+1) * faultEvery))
		if wait > time.Until(deadline) {
			break
		}
		time.Sleep(wait)
		sc := byName[soakFaults[n%len(soakFaults)]]
		i, err := w.Probe(sc.name, 3)
		if err != nil {
			t.Fatal(err)
		}
		what, heal := sc.inject(t, cl)
		t.Logf("%.1fs: fault %d: %s", w.Since().Seconds(), n+1, what)
		time.Sleep(sc.hold)
		heal()
		w.Healed(i)
		if !cl.waitHealthy(60 * time.Second) {
			t.Errorf("instances not healthy 60s after fault %d (%s) healed", n+1, sc.name)
		}
		t.Logf("%.1fs: healed", w.Since().Seconds())
		whats = append(whats, sc.name+": "+what)
	}
	time.Sleep(time.Until(deadline))
	close(stopSampling)
	<-sampled
	saveGoroutines(t, cl, filepath.Join(out, "goroutines"), time.Since(began))
	w.WaitProbes(leaseBound)
	h := w.Stop()
	t.Logf("soak ran %.1fs; checking %d operations and %d watches", h.Elapsed.Seconds(), len(h.Ops), len(h.Watches))
	mu.Lock()
	defer mu.Unlock()
	if err := writeSamples(filepath.Join(out, "soak.csv"), samples); err != nil {
		t.Error(err)
	}
	if err := plotSamples(filepath.Join(out, "soak.png"), samples); err != nil {
		t.Error(err)
	}
	t.Logf("samples written to %s (soak.csv, soak.png)", out)
	for _, l := range summarizeSamples(samples) {
		t.Log(l)
	}
	res := Check(h, CheckOptions{LeaseBound: leaseBound, Takeover: sessionTimeout, ArtifactDir: out, MaxLinearizabilityOps: maxLin})
	report(t, scenario{name: "Soak"}, h, res, whats, nil)
	for _, v := range res.Violations {
		t.Errorf("VIOLATION: %s", v)
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// saveGoroutines writes both instances' goroutine profiles (pprof's
// debug=1 text: one stack per distinct goroutine state, with counts) to
// dir/goroutines-<instance>-<seconds>s.txt, so growth can be traced to the
// stacks that grow. An instance down for a fault is skipped.
func saveGoroutines(t *testing.T, cl *cluster, dir string, at time.Duration) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("goroutine profiles: %v", err)
		return
	}
	for _, z := range []*Zketcd{cl.a, cl.b} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+z.Metrics+"/debug/pprof/goroutine?debug=1", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("goroutines-%s-%05.0fs.txt", z.Name, at.Seconds())), b, 0o644)
			} else if err == nil {
				err = fmt.Errorf("%s", resp.Status)
			}
		}
		cancel()
		if err != nil {
			t.Logf("goroutine profile of %s at %.0fs: %v", z.Name, at.Seconds(), err)
		}
	}
}

// takeSample reads both instances' RSS (/proc) and Go heap and goroutines
// (/metrics), the leader's mntr and member 1's data directory; a value that
// cannot be read (an instance or member down for a fault) is left 0.
func takeSample(cl *cluster, at time.Duration) sample {
	s := sample{At: at}
	for i, z := range []*Zketcd{cl.a, cl.b} {
		s.RSS[i] = rss(z.PID())
		if m, err := scrapeMetrics(z.Metrics); err == nil {
			s.Heap[i] = m["go_memstats_heap_alloc_bytes"]
			s.Gorout[i] = m["go_goroutines"]
			if i == 1 {
				s.Revision = m["zketcd_applied_revision"]
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, m := range cl.ens.Members() {
		v, err := m.Monitor(ctx)
		if err != nil || (v["zk_server_state"] != "leader" && v["zk_server_state"] != "standalone") {
			continue
		}
		s.Znodes, _ = strconv.ParseFloat(v["zk_znode_count"], 64)
		s.ZKDataSize, _ = strconv.ParseFloat(v["zk_approximate_data_size"], 64)
	}
	_ = filepath.WalkDir(filepath.Join(cl.ens.Member(0).Dir(), "data"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				s.DataDir += float64(fi.Size())
			}
		}
		return nil
	})
	return s
}

// rss is the resident set size of pid in bytes (0 if unknown).
func rss(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb * 1024
		}
	}
	return 0
}

func writeSamples(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("soak csv: %w", err)
	}
	cw := csv.NewWriter(f)
	_ = cw.Write(sampleHeader)
	for _, s := range samples {
		_ = cw.Write(s.record())
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		f.Close()
		return fmt.Errorf("soak csv: %w", err)
	}
	return f.Close()
}

// summarizeSamples compares each series' mean over the second quarter of
// the run (after warm-up) with its mean over the last quarter, and gives
// its maximum; samples where the value is 0 (down for a fault) are left out.
func summarizeSamples(samples []sample) []string {
	series := []struct {
		name  string
		unit  float64
		label string
		get   func(sample) float64
	}{
		{"RSS zketcd A", 1 << 20, "MiB", func(s sample) float64 { return s.RSS[0] }},
		{"RSS zketcd B", 1 << 20, "MiB", func(s sample) float64 { return s.RSS[1] }},
		{"Go heap A", 1 << 20, "MiB", func(s sample) float64 { return s.Heap[0] }},
		{"Go heap B", 1 << 20, "MiB", func(s sample) float64 { return s.Heap[1] }},
		{"goroutines A", 1, "", func(s sample) float64 { return s.Gorout[0] }},
		{"goroutines B", 1, "", func(s sample) float64 { return s.Gorout[1] }},
		{"znodes", 1, "", func(s sample) float64 { return s.Znodes }},
		{"ZooKeeper data size (mntr)", 1 << 20, "MiB", func(s sample) float64 { return s.ZKDataSize }},
		{"ZooKeeper data dir (member 1)", 1 << 20, "MiB", func(s sample) float64 { return s.DataDir }},
	}
	mean := func(get func(sample) float64, from, to int) float64 {
		sum, n := 0.0, 0
		for _, s := range samples[from:to] {
			if v := get(s); v > 0 {
				sum += v
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	n := len(samples)
	if n < 4 {
		return []string{fmt.Sprintf("%d samples: too few to compare quarters", n)}
	}
	var out []string
	for _, sr := range series {
		q2, q4 := mean(sr.get, n/4, n/2), mean(sr.get, 3*n/4, n)
		mx := 0.0
		for _, s := range samples {
			mx = max(mx, sr.get(s))
		}
		out = append(out, fmt.Sprintf("%s: %.1f%s (2nd quarter mean) -> %.1f%s (last quarter mean), max %.1f%s",
			sr.name, q2/sr.unit, sr.label, q4/sr.unit, sr.label, mx/sr.unit, sr.label))
	}
	return out
}

// plotSamples draws the series over time, one panel each.
func plotSamples(path string, samples []sample) error {
	type line struct {
		label string
		get   func(sample) float64
	}
	panels := []struct {
		title, unit string
		scale       float64
		lines       []line
	}{
		{"RSS", "MiB", 1 << 20, []line{{"zketcd A", func(s sample) float64 { return s.RSS[0] }}, {"zketcd B", func(s sample) float64 { return s.RSS[1] }}}},
		{"Go heap in use", "MiB", 1 << 20, []line{{"zketcd A", func(s sample) float64 { return s.Heap[0] }}, {"zketcd B", func(s sample) float64 { return s.Heap[1] }}}},
		{"goroutines", "", 1, []line{{"zketcd A", func(s sample) float64 { return s.Gorout[0] }}, {"zketcd B", func(s sample) float64 { return s.Gorout[1] }}}},
		{"ZooKeeper znodes (mntr zk_znode_count)", "", 1, []line{{"znodes", func(s sample) float64 { return s.Znodes }}}},
		{"ZooKeeper data", "MiB", 1 << 20, []line{{"data dir, member 1", func(s sample) float64 { return s.DataDir }}, {"mntr zk_approximate_data_size", func(s sample) float64 { return s.ZKDataSize }}}},
	}
	colors := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}
	rows := len(panels)
	plots := make([][]*plot.Plot, rows)
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = pn.unit
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		for li, l := range pn.lines {
			var xys plotter.XYs
			for _, s := range samples {
				if v := l.get(s); v > 0 {
					xys = append(xys, plotter.XY{X: s.At.Minutes(), Y: v / pn.scale})
				}
			}
			if len(xys) == 0 {
				continue
			}
			ln, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("soak plot: %w", err)
			}
			ln.Color = colors[li%len(colors)]
			p.Add(ln)
			p.Legend.Add(l.label, ln)
		}
		plots[i] = []*plot.Plot{p}
	}
	img := vgimg.New(9*vg.Inch, vg.Length(rows)*2.4*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("soak plot: %w", err)
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("soak plot: %w", err)
	}
	return f.Close()
}
