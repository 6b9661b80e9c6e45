package bench

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var v []float64
	for i := 1; i <= 1000; i++ {
		v = append(v, float64(i))
	}
	for _, c := range []struct{ p, want float64 }{{50, 500}, {99, 990}, {99.9, 999}, {100, 1000}, {0, 1}} {
		if got := Percentile(v, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("empty: want NaN")
	}
}

func TestSummarize(t *testing.T) {
	a := &recorder{}
	for i := 1; i <= 100; i++ {
		a.ok(time.Duration(i) * time.Millisecond)
	}
	b := &recorder{}
	b.kind = "get"
	b.ok(5 * time.Millisecond)
	b.kind = ""
	b.fail(errors.New("boom"))
	b.add("conflicts", 2)
	var r Result
	summarize(&r, []*recorder{a, b}, 2)
	if r.Status != "ok" || r.Ops != 101 || r.Errors != 1 || r.FirstError != "boom" {
		t.Fatalf("summary %+v", r)
	}
	if r.Throughput != 50.5 || r.P50Ms != 50 || r.MaxMs != 100 {
		t.Errorf("throughput %v p50 %v max %v", r.Throughput, r.P50Ms, r.MaxMs)
	}
	if r.Extra["conflicts"] != 2 || r.Extra["get_ops"] != 1 || r.Extra["get_p99_ms"] != 5 {
		t.Errorf("extra %v", r.Extra)
	}
	var u Result
	c := &recorder{}
	c.fail(errors.New("Unimplemented"))
	summarize(&u, []*recorder{c}, 1)
	if u.Status != "unsupported" {
		t.Errorf("all errors: status %q", u.Status)
	}
}

const toolOutput = `
Summary:
  Total:	7.961176075 secs.
  Slowest:	0.730696132 secs.
  Fastest:	0.001389387 secs.
  Average:	0.04238044990833336 secs.
  Stddev:	0.08010122776576348 secs.
  Requests/sec:	376.8287463733805

Response time histogram:
  0.001389387 [1]	|

Latency distribution:
  10% in 0.005950943 secs.
  50% in 0.015697855 secs.
  90% in 0.115305076 secs.
  99% in 0.422933516 secs.
  99.9% in 0.73028768 secs.
`

func TestParseToolOutput(t *testing.T) {
	var r Result
	if err := parseToolOutput(toolOutput, &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "ok" || math.Abs(r.Throughput-376.83) > 0.01 || r.Ops != 3000 {
		t.Errorf("throughput %v ops %v status %q", r.Throughput, r.Ops, r.Status)
	}
	if math.Abs(r.P50Ms-15.697855) > 1e-6 || math.Abs(r.P99Ms-422.933516) > 1e-6 || math.Abs(r.P999Ms-730.28768) > 1e-6 {
		t.Errorf("p50 %v p99 %v p999 %v", r.P50Ms, r.P99Ms, r.P999Ms)
	}
	var e Result
	errOut := "\nError distribution:\n  [4014]\trpc error: code = Unimplemented desc = serializable is not implemented by kine\n"
	if err := parseToolOutput(errOut, &e); err != nil {
		t.Fatal(err)
	}
	if e.Status != "unsupported" || e.Errors != 4014 || !strings.Contains(e.FirstError, "Unimplemented") {
		t.Errorf("error output: %+v", e)
	}
	if err := parseToolOutput("garbage", &Result{}); err == nil {
		t.Error("garbage: want an error")
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[float64]string{1234567: "1,234,567", 999: "999", 55.55: "55.5", 3.14159: "3.14"} {
		if got := fmtNum(in); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", in, got, want)
		}
	}
	if got := fmtRatio(0.5); got != "0.50×" {
		t.Errorf("fmtRatio = %q", got)
	}
	if got := fmtRatio(math.NaN()); got != "—" {
		t.Errorf("fmtRatio(NaN) = %q", got)
	}
}

// TestReportFiles renders a synthetic report: markdown tables with
// ratios, CSV, JSON and the PNG plots.
func TestReportFiles(t *testing.T) {
	rep := &Report{Machine: Machine{NProc: 2, CPUModel: "test"}, Profile: Profiles["quick"]}
	rate := map[string]float64{ServerEtcd: 1000, ServerKine: 500, ServerZK1: 2000, ServerZK3: 800}
	for _, s := range StandaloneServers {
		for _, w := range AllWorkloads {
			for _, c := range []int{1, 16, 64} {
				r := Result{Server: s, Workload: w, Clients: c}
				rec := &recorder{}
				for i := 1; i <= 200; i++ {
					rec.ok(time.Duration(i) * time.Duration(rate[s]) * time.Microsecond)
				}
				summarize(&r, []*recorder{rec}, 200/rate[s])
				if s == ServerKine && w == WGetSer {
					r = Result{Server: s, Workload: w, Clients: c, Status: "unsupported", Errors: 50, FirstError: "Unimplemented"}
				}
				rep.Results = append(rep.Results, r)
			}
		}
		rep.Results = append(rep.Results, Result{Server: s, Workload: WWatch, Clients: 100, Status: "ok", Ops: 10, P99Ms: rate[s] / 100})
	}
	rep.Results = append(rep.Results, recoveryResult(ServerZK1, WRecoveryLog, 100000, 2*time.Second, 200<<20, 20<<20, "log"))
	rep.Results = append(rep.Results, recoveryResult(ServerEtcd, WRecovery, 100000, time.Second, 100<<20, 20<<20, "restart"))
	dir := t.TempDir()
	md := filepath.Join(dir, "benchmarks.md")
	if err := rep.WriteFiles(md, filepath.Join(dir, "bench")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		"| put-seq | 16 | 1,000 | 500 | 2,000 | 800 | 2.00× | 0.80× | 4.00× | 1.60× |",
		"| get-ser | 1 | 1,000 | unsupported |",
		"| zketcd, ZK standalone | recovery-log (log) | 100,000 | 2.00 | 200 | 20 | 180.0 | 2.00× |",
		"![throughput vs clients, put-seq](bench/throughput-put-seq.png)",
		"slower in 30 of 30 rows", // zk3 at 0.8× etcd everywhere
	} {
		if !strings.Contains(text, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	for _, f := range []string{"results.json", "results.csv", "throughput-list-10k.png", "cdf-put-seq-16.png"} {
		if fi, err := os.Stat(filepath.Join(dir, "bench", f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// synthetic returns an ok result of server s for workload w at c clients
// at rate ops/s (200 operations, latencies i/rate ms).
func synthetic(s, w string, c int, rate float64) Result {
	r := Result{Server: s, Workload: w, Clients: c}
	rec := &recorder{}
	for i := 1; i <= 200; i++ {
		rec.ok(time.Duration(float64(i) * 1000 / rate * float64(time.Millisecond)))
	}
	summarize(&r, []*recorder{rec}, 200/rate)
	return r
}

// TestDeployedShapeTables renders the deployed-shape section: ratios
// against the 3-member etcd cluster and between instance counts, the
// ZooKeeper floor, the kube-apiserver table and the targets.
func TestDeployedShapeTables(t *testing.T) {
	rep := &Report{Profile: Profiles["quick"]}
	rate := map[string]float64{ServerEtcd3: 1000, ServerKinePG: 500, ServerZK3: 2000, ServerZK3x2: 1900, ServerZK3x3: 1000}
	for s, v := range rate {
		for _, w := range []string{WPutSeq, WCreate, WGetLin} {
			for _, c := range []int{1, 16, 64} {
				rep.Results = append(rep.Results, synthetic(s, w, c, v))
			}
		}
	}
	rep.Results = append(rep.Results, synthetic(ServerZKFloor, WFloorCommit, 1, 2500))
	for s, v := range map[string]float64{ServerKubeEtcd3: 100, ServerKubeZK3: 150, ServerKubeEtcd3x2: 100, ServerKubeZK3x2: 80, ServerKubeZK3Lease: 120} {
		rep.Results = append(rep.Results, synthetic(s, WKubeCreate, 16, v))
	}
	rep.Machine.CPUModel = "AMD"
	rep.Results = append(rep.Results, synthetic(ServerEtcd, WPutSeq, 16, 1000))
	rep.SetBaseline(&Report{Machine: Machine{Date: "then", CPUModel: "Intel"},
		Results: []Result{synthetic(ServerZK3, WPutSeq, 16, 1000), synthetic(ServerEtcd, WPutSeq, 16, 500)}})
	dir := t.TempDir()
	if err := rep.WriteFiles(filepath.Join(dir, "b.md"), filepath.Join(dir, "bench")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "b.md"))
	text := string(b)
	for _, want := range []string{
		"## Deployed shape",
		"| workload | clients | etcd 3.7.3, 3 members | kine 0.17.5 (PostgreSQL) | zketcd, ZK 3-member | zketcd ×2, ZK 3-member | zketcd ×3, ZK 3-member | zk3/etcd3 | zk3×2/etcd3 | zk3×3/etcd3 | kine-pg/etcd3 | zk3×2/zk3 | zk3×3/zk3 |",
		"| put-seq | 64 | 1,000 | 500 | 2,000 | 1,900 | 1,000 | 2.00× | 1.90× | 1.00× | 0.50× | 0.95× | 0.50× |",
		"| zk-commit | 1 | 2,500 (",
		"| kube-create | 16 | 100 (",    // etcd stack first
		"| 1.50× | 0.67× | — | 0.80× |", // k-zk3/k-etcd3 throughput, its p99, its CPU (not measured), k2-zk3×2/k2-etcd3
		"| put ×64, one and several instances | ≥ 2.0× etcd3 | put-seq ×64 zk3 2.00×, put-seq ×64 zk3×2 1.90×, put-seq ×64 zk3×3 1.00× | **missed** |",
		"| put ×1 against the raw ZooKeeper floor (`zk-commit` ×1) | ≥ 0.8× the floor | put-seq ×1 zk3/floor 0.80×, put-seq ×1 zk3×2/floor 0.76×, put-seq ×1 zk3×3/floor 0.40× | **missed** |",
		"worst: put-seq ×16 zk3×3/zk3 0.50×",
		"| standalone zketcd rows against the baseline run of then (baseline on",
		"zk3 geo-mean over 1 rows 2.00×",
		"(baseline on Intel, this run on AMD: compare the next row)",
		"| the same rows relative to standalone etcd in each run (zketcd/etcd now ÷ zketcd/etcd then) | geo-mean ≥ 0.95× the baseline's | zk3/etcd geo-mean over 1 rows 1.00× |",
		"| `kube-create` |",
		"| kube-apiserver, safe read path: every verb's throughput | ≥ 1.0× etcd | worst: kube-create ×16 k2-zk3×2/k2-etcd3 0.80× | **missed** |",
		"| kube-apiserver on `--read-lease`: every verb's throughput | ≥ 1.0× etcd | worst: kube-create ×16 k-zk3-lease/k-etcd3 1.20× | met |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	// The standalone tables do not grow deployed columns.
	if strings.Contains(text, "| workload | clients | etcd 3.7.3, 3 members | kine 0.17.5 (PostgreSQL) | zketcd, ZK 3-member | zketcd ×2, ZK 3-member | zketcd ×3, ZK 3-member | zk1/etcd") {
		t.Error("standalone table has deployed columns")
	}
	if t.Failed() {
		t.Log(text)
	}
}

func TestExpandServers(t *testing.T) {
	got := ExpandServers([]string{"etcd", "standalone", "kube-etcd-3"})
	want := []string{ServerEtcd, ServerKine, ServerZK1, ServerZK3, ServerZK1Floor, ServerKubeEtcd, ServerKubeZK1, ServerKubeEtcd3}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("ExpandServers = %v, want %v", got, want)
	}
	if got := ExpandServers([]string{"all"}); len(got) != len(AllServers) {
		t.Errorf("all: %v", got)
	}
}

// TestPartialReport renders a report in which only some servers ran (as
// after each server's turn of a run).
func TestPartialReport(t *testing.T) {
	rep := &Report{Profile: Profiles["quick"]}
	for _, w := range []string{WPutSeq, WPutRand, WGetLin} {
		r := Result{Server: ServerEtcd, Workload: w, Clients: 16}
		rec := &recorder{}
		rec.ok(time.Millisecond)
		summarize(&r, []*recorder{rec}, 1)
		rep.Results = append(rep.Results, r)
	}
	rep.Results = append(rep.Results, Result{Server: ServerKine, Workload: WPutSeq, Clients: 16, Status: "crashed"})
	dir := t.TempDir()
	if err := rep.WriteFiles(filepath.Join(dir, "b.md"), filepath.Join(dir, "bench")); err != nil {
		t.Fatal(err)
	}
	// Re-render from the JSON, as -render does.
	again, err := LoadReport(filepath.Join(dir, "bench", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := again.WriteFiles(filepath.Join(dir, "c.md"), filepath.Join(dir, "bench2")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "c.md"))
	if !strings.Contains(string(b), "| put-seq | 16 | 1.00 | crashed |") {
		t.Errorf("re-rendered markdown:\n%s", b)
	}
}

// TestReportEmbedsAnalysis checks that a hand-written analysis.md in the
// data directory becomes a section after the summary, headings one level
// down (not inside code blocks), and that without it nothing changes.
func TestReportEmbedsAnalysis(t *testing.T) {
	rep := &Report{Profile: Profiles["quick"]}
	r := Result{Server: ServerEtcd, Workload: WPutSeq, Clients: 1}
	rec := &recorder{}
	rec.ok(time.Millisecond)
	summarize(&r, []*recorder{rec}, 1)
	rep.Results = append(rep.Results, r)
	dir := t.TempDir()
	data := filepath.Join(dir, "bench")
	if err := rep.WriteFiles(filepath.Join(dir, "plain.md"), data); err != nil {
		t.Fatal(err)
	}
	plain, _ := os.ReadFile(filepath.Join(dir, "plain.md"))
	if strings.Contains(string(plain), "hand-written") {
		t.Fatalf("no analysis.md, yet:\n%s", plain)
	}
	analysis := "# Where the time goes\n\nIntro.\n\n## Puts\n\n```sh\n# a shell comment\n```\n"
	if err := os.WriteFile(filepath.Join(data, AnalysisFile), []byte(analysis), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteFiles(filepath.Join(dir, "b.md"), data); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "b.md"))
	text := string(b)
	for _, want := range []string{
		"\n## Where the time goes\n\n*This section is hand-written: it is copied from [`bench/analysis.md`](bench/analysis.md)",
		"Intro.\n\n### Puts\n\n```sh\n# a shell comment\n```\n\n## Setup\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("markdown lacks %q:\n%s", want, text)
		}
	}
	// Apart from the section, the report is the same as without it.
	a, e := strings.Index(text, "## Where the time goes"), strings.Index(text, "## Setup")
	if a < 0 || e < a || text[:a]+text[e:] != string(plain) {
		t.Errorf("with the section cut out, the report differs from the one without analysis.md")
	}
}
