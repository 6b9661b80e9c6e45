package bench

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Report is everything a run produced.
type Report struct {
	Machine Machine `json:"machine"`
	Profile Profile `json:"profile"`
	// Servers lists the servers measured, in order, with the load average
	// when each started and finished.
	Servers []ServerRun `json:"servers"`
	Results []Result    `json:"results"`
	Notes   []string    `json:"notes,omitempty"`
	// Baseline holds the standalone zketcd rows of an earlier run
	// (Options.BaselinePath), BaselineDate its date.
	Baseline     []BaselineRow `json:"baseline,omitempty"`
	BaselineDate string        `json:"baseline_date,omitempty"`
	BaselineCPU  string        `json:"baseline_cpu_model,omitempty"`
	// ElapsedSeconds is the run's wall time.
	ElapsedSeconds float64 `json:"elapsed_s"`
	// ZooKeeper is how the run started its ZooKeeper servers.
	ZooKeeper *ZKSettings `json:"zookeeper_settings,omitempty"`
}

// ZKSettings are the settings of a run's ZooKeeper servers besides
// internal/zkserver's own zoo.cfg lines.
type ZKSettings struct {
	JVMFlags []string          `json:"jvm_flags"`
	Config   map[string]string `json:"zoo_cfg,omitempty"`
	Props    map[string]string `json:"system_props,omitempty"`
	// Diagnostics names what the run added that costs ZooKeeper CPU
	// (flight recordings, the request log).
	Diagnostics []string `json:"diagnostics,omitempty"`
}

// String renders s for the report: flags, then zoo.cfg lines and -D
// properties, sorted.
func (s *ZKSettings) String() string {
	parts := append([]string{}, s.JVMFlags...)
	for _, k := range slices.Sorted(maps.Keys(s.Props)) {
		parts = append(parts, "-D"+k+"="+s.Props[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Config)) {
		parts = append(parts, k+"="+s.Config[k])
	}
	out := "`" + strings.Join(parts, " ") + "`"
	if len(s.Diagnostics) > 0 {
		out += " (with " + strings.Join(s.Diagnostics, ", ") + ")"
	}
	return out
}

// ServerRun records one server's turn.
type ServerRun struct {
	Name      string     `json:"name"`
	LoadStart [3]float64 `json:"load_start"`
	LoadEnd   [3]float64 `json:"load_end"`
	Seconds   float64    `json:"seconds"`
	Error     string     `json:"error,omitempty"`
}

// find returns the result for (server, workload, clients).
func (r *Report) find(server, workload string, clients int) *Result {
	for i := range r.Results {
		x := &r.Results[i]
		if x.Server == server && x.Workload == workload && x.Clients == clients {
			return x
		}
	}
	return nil
}

// cells returns the (workload, clients) pairs present for workloads, in
// the order of workloads and ascending clients.
func (r *Report) cells(workloads []string) [][2]string { return r.cellsOf(workloads, nil) }

// cellsOf is cells over the results of servers only (nil: every server).
func (r *Report) cellsOf(workloads, servers []string) [][2]string {
	var out [][2]string
	for _, w := range workloads {
		seen := map[int]bool{}
		var cs []int
		for _, x := range r.Results {
			if servers != nil && !slices.Contains(servers, x.Server) {
				continue
			}
			if x.Workload == w && !seen[x.Clients] {
				seen[x.Clients] = true
				cs = append(cs, x.Clients)
			}
		}
		sort.Ints(cs)
		for _, c := range cs {
			out = append(out, [2]string{w, strconv.Itoa(c)})
		}
	}
	return out
}

// serversPresent returns the servers of list that have results, in
// list's order.
func (r *Report) serversPresent(list []string) []string {
	var out []string
	for _, s := range list {
		for _, x := range r.Results {
			if x.Server == s {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func ok(x *Result) bool { return x != nil && x.Status == "ok" && x.Ops > 0 }

// fmtNum formats a throughput: thousands separators, no decimals above 100.
func fmtNum(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}

// fmtMs formats a latency in milliseconds with two significant digits or
// more.
func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v < 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	if v >= 10 {
		return strconv.FormatFloat(v, 'f', 0, 64) + "×"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "×"
}

func cellStatus(x *Result) string {
	switch {
	case x == nil:
		return "not run"
	case x.Status == "unsupported":
		return "unsupported"
	case x.Status == "crashed":
		return "crashed"
	case x.Status == "timeout":
		return "none completed"
	case x.Status != "ok":
		return "failed"
	}
	return ""
}

// throughputRatio is a/b for two ok results, NaN otherwise.
func throughputRatio(a, b *Result) float64 {
	if !ok(a) || !ok(b) || b.Throughput == 0 {
		return math.NaN()
	}
	return a.Throughput / b.Throughput
}

// storageCPU is the store's CPU per operation of x in µs: etcd's
// members, or zketcd and every ZooKeeper member (for a kube stack: not
// the kube-apiservers). NaN when not measured.
func storageCPU(x *Result) float64 {
	if x == nil || x.Ops <= 0 {
		return math.NaN()
	}
	if v, ok := x.Extra[xStorageCPU]; ok {
		return v
	}
	if isKubeServer(x.Server) {
		return math.NaN() // an older run: its server CPU holds the kube-apiservers
	}
	if x.ServerCPUSeconds == 0 {
		return math.NaN()
	}
	return x.ServerCPUPerOpUs
}

// cpuRatio is a's storage CPU per operation over b's, NaN unless both
// were measured.
func cpuRatio(a, b *Result) float64 {
	if !ok(a) || !ok(b) {
		return math.NaN()
	}
	x, y := storageCPU(a), storageCPU(b)
	if math.IsNaN(x) || math.IsNaN(y) || y == 0 {
		return math.NaN()
	}
	return x / y
}

// withCPU appends to v, in brackets, x's storage CPU in seconds per
// 1,000 operations, when it was measured.
func withCPU(v string, x *Result) string {
	if c := storageCPU(x); !math.IsNaN(c) {
		return v + " (" + fmtCPUk(c) + ")"
	}
	return v
}

// rateP99CPU formats x as "ops/s (p99 ms; CPU s per 1,000 ops)", the CPU
// left out when not measured.
func rateP99CPU(x *Result) string {
	if c := storageCPU(x); !math.IsNaN(c) {
		return fmt.Sprintf("%s (%s; %s)", fmtNum(x.Throughput), fmtMs(x.P99Ms), fmtCPUk(c))
	}
	return fmt.Sprintf("%s (%s)", fmtNum(x.Throughput), fmtMs(x.P99Ms))
}

// fmtCPUk formats a CPU cost per operation (µs) as CPU seconds per 1,000
// operations.
func fmtCPUk(us float64) string {
	if math.IsNaN(us) {
		return "—"
	}
	v := us / 1000
	switch {
	case v < 0.1:
		return strconv.FormatFloat(v, 'f', 3, 64) + " s"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64) + " s"
	default:
		return strconv.FormatFloat(v, 'f', 0, 64) + " s"
	}
}

func p99Ratio(a, b *Result) float64 {
	if !ok(a) || !ok(b) || b.P99Ms == 0 {
		return math.NaN()
	}
	return a.P99Ms / b.P99Ms
}

var zketcdServers = []string{ServerZK1, ServerZK3}
var peerServers = []string{ServerEtcd, ServerKine}

// ratioPair is a ratio column: num's figure divided by den's.
type ratioPair struct{ num, den string }

func (p ratioPair) header() string { return shortName(p.num) + "/" + shortName(p.den) }

// standalonePairs are the ratio columns of the standalone tables: each
// zketcd variant against each peer.
func standalonePairs() []ratioPair {
	var out []ratioPair
	for _, p := range peerServers {
		for _, z := range zketcdServers {
			out = append(out, ratioPair{z, p})
		}
	}
	return out
}

// deployedPairs are the ratio columns of the deployed-shape tables: every
// zketcd shape and kine on PostgreSQL against the 3-member etcd cluster,
// then the cost of spreading clients over 2 and 3 instances.
func deployedPairs() []ratioPair {
	return []ratioPair{
		{ServerZK3, ServerEtcd3}, {ServerZK3x2, ServerEtcd3}, {ServerZK3x3, ServerEtcd3}, {ServerKinePG, ServerEtcd3},
		{ServerZK3x2, ServerZK3}, {ServerZK3x3, ServerZK3},
		{ServerZK3Lease, ServerEtcd3}, {ServerZK3x2Lease, ServerEtcd3},
	}
}

// headlinePairs are the (zketcd, peer) pairs of the summary.
func headlinePairs() []ratioPair {
	return append(standalonePairs(), ratioPair{ServerZK3, ServerEtcd3}, ratioPair{ServerZK3x2, ServerEtcd3}, ratioPair{ServerZK3x3, ServerEtcd3})
}

func shortName(s string) string {
	switch s {
	case ServerZK1:
		return "zk1"
	case ServerZK3:
		return "zk3"
	case ServerZK3x2:
		return "zk3×2"
	case ServerZK3x3:
		return "zk3×3"
	case ServerZK3Lease:
		return "zk3-lease"
	case ServerZK3x2Lease:
		return "zk3×2-lease"
	case ServerEtcd3:
		return "etcd3"
	case ServerKinePG:
		return "kine-pg"
	case ServerKubeEtcd:
		return "k-etcd"
	case ServerKubeZK1:
		return "k-zk1"
	case ServerKubeEtcd3:
		return "k-etcd3"
	case ServerKubeZK3:
		return "k-zk3"
	case ServerKubeEtcd3x2:
		return "k2-etcd3"
	case ServerKubeZK3x2:
		return "k2-zk3×2"
	case ServerKubeZK3Lease:
		return "k-zk3-lease"
	case ServerKubeZK3x2Lease:
		return "k2-zk3×2-lease"
	}
	return s
}

// geoMean returns the geometric mean of vs (NaNs skipped) and the count.
func geoMean(vs []float64) (float64, int) {
	var s float64
	n := 0
	for _, v := range vs {
		if !math.IsNaN(v) && v > 0 && !math.IsInf(v, 0) {
			s += math.Log(v)
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return math.Exp(s / float64(n)), n
}

// Headline is a summary ratio of a zketcd variant against a peer over the
// throughput rows.
type Headline struct {
	Zketcd, Peer string
	GeoMean      float64
	Rows         int
	Faster       int // by more than 10%
	Slower       int // by more than 10%
	Even         int // within ±10%
	Worst        string
	WorstRatio   float64
	Best         string
	BestRatio    float64
}

// Headlines computes, for each zketcd variant and peer, the geometric mean
// of the throughput ratios over the client-count workloads, and the best
// and worst row.
func (r *Report) Headlines() []Headline {
	var out []Headline
	cells := r.cells(AllWorkloads)
	for _, pair := range headlinePairs() {
		z, p := pair.num, pair.den
		h := Headline{Zketcd: z, Peer: p, WorstRatio: math.Inf(1), BestRatio: math.Inf(-1)}
		var vs []float64
		for _, c := range cells {
			n, _ := strconv.Atoi(c[1])
			v := throughputRatio(r.find(z, c[0], n), r.find(p, c[0], n))
			if math.IsNaN(v) {
				continue
			}
			vs = append(vs, v)
			switch {
			case v >= 1.1:
				h.Faster++
			case v <= 0.9:
				h.Slower++
			default:
				h.Even++
			}
			name := fmt.Sprintf("%s ×%d", c[0], n)
			if v < h.WorstRatio {
				h.WorstRatio, h.Worst = v, name
			}
			if v > h.BestRatio {
				h.BestRatio, h.Best = v, name
			}
		}
		h.GeoMean, h.Rows = geoMean(vs)
		out = append(out, h)
	}
	return out
}

// WriteFiles writes results.json, results.csv, the plots and the markdown
// report: md is the markdown file, dataDir the directory for the rest
// (its path relative to md's directory is used for links).
func (r *Report) WriteFiles(md, dataDir string) error {
	if err := writeJSON(dataDir, "results.json", r); err != nil {
		return err
	}
	if err := r.writeCSV(filepath.Join(dataDir, "results.csv")); err != nil {
		return err
	}
	plots, err := r.writePlots(dataDir)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(md), dataDir)
	if err != nil {
		rel = dataDir
	}
	analysis, err := readAnalysis(dataDir)
	if err != nil {
		return err
	}
	// The scale benchmark's section (zkbench -scale) is kept in the data
	// directory and carried over by every run and re-render.
	out := r.Markdown(rel, plots, analysis)
	if sc := embedScale(dataDir); sc != "" {
		out = strings.TrimRight(out, "\n") + "\n\n" + sc
	}
	return os.WriteFile(md, []byte(out), 0o644)
}

// AnalysisFile is the hand-written analysis (profiles, latency budgets) in
// the data directory that the report embeds when it exists.
const AnalysisFile = "analysis.md"

// readAnalysis returns the content of dataDir/analysis.md, or "" if there
// is none.
func readAnalysis(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, AnalysisFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return string(b), err
}

func (r *Report) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"server", "workload", "clients", "conns", "status", "ops", "errors", "seconds",
		"throughput", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms",
		"server_cpu_s", "server_cpu_per_op_us", "driver_cpu_s", "load1", "extra", "first_error", "note"})
	f64 := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, x := range r.Results {
		var extra []string
		keys := make([]string, 0, len(x.Extra))
		for k := range x.Extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			extra = append(extra, k+"="+f64(x.Extra[k]))
		}
		_ = w.Write([]string{x.Server, x.Workload, strconv.Itoa(x.Clients), strconv.Itoa(x.Conns), x.Status,
			strconv.FormatInt(x.Ops, 10), strconv.FormatInt(x.Errors, 10), f64(x.Seconds),
			f64(x.Throughput), f64(x.MeanMs), f64(x.P50Ms), f64(x.P90Ms), f64(x.P99Ms), f64(x.P999Ms), f64(x.MaxMs),
			f64(x.ServerCPUSeconds), f64(x.ServerCPUPerOpUs), f64(x.DriverCPUSeconds), f64(x.Load1),
			strings.Join(extra, ";"), x.FirstError, x.Note})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadReport reads a results.json written by WriteFiles.
func LoadReport(path string) (*Report, error) { return loadJSON[Report](path) }

// loadJSON reads the JSON file at path into a new T.
func loadJSON[T any](path string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &v, nil
}

// writeJSON writes v, indented, to dir/name (making dir).
func writeJSON(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}

// relDir is dataDir as the markdown file md links to it ("bench" when md
// is empty or no relative path exists).
func relDir(md, dataDir string) string {
	if md != "" {
		if rr, err := filepath.Rel(filepath.Dir(md), dataDir); err == nil {
			return rr
		}
	}
	return "bench"
}
