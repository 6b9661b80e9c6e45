package bench

import (
	"math"
	"slices"
	"time"
)

// Result is one measured cell: one server, one workload, one concurrency.
type Result struct {
	Server   string `json:"server"`
	Workload string `json:"workload"`
	// Clients is the number of concurrent clients (for watch cells: the
	// number of watchers).
	Clients int `json:"clients"`
	Conns   int `json:"conns,omitempty"`
	// Status is "ok", "unsupported" (every request failed, e.g. kine's
	// serializable reads) or "failed".
	Status     string  `json:"status"`
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	// Throughput is successful operations per second.
	Throughput float64 `json:"throughput"`
	// Latencies of successful operations, milliseconds.
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	// ServerCPUSeconds is the CPU time (user+system) the server's processes
	// (for zketcd: zketcd and its ZooKeeper JVMs) used during the measured
	// window; ServerCPUPerOpUs divides it by Ops.
	ServerCPUSeconds float64 `json:"server_cpu_s"`
	ServerCPUPerOpUs float64 `json:"server_cpu_per_op_us"`
	// DriverCPUSeconds is the harness's own CPU time in the window.
	DriverCPUSeconds float64 `json:"driver_cpu_s"`
	// OtherCPUSeconds is the CPU time the rest of the machine (neither the
	// server's processes nor the harness) used during the window.
	OtherCPUSeconds float64 `json:"other_cpu_s"`
	// Load1 is the machine's 1-minute load average at the end of the cell.
	Load1 float64 `json:"load1"`
	// Extra holds workload-specific figures (CAS conflicts, keys/s, ...).
	Extra map[string]float64 `json:"extra,omitempty"`
	Note  string             `json:"note,omitempty"`
	// CDF holds 500 evenly spaced quantiles of the latency (ms) for the
	// cells plotted as CDFs, so that a report can be re-rendered from the
	// JSON alone.
	CDF []float64 `json:"cdf_ms,omitempty"`

	samples []float64 // sorted latencies in ms, kept for CDF plots
}

// Samples returns the sorted latencies (ms) of the cell, if kept.
func (r *Result) Samples() []float64 { return r.samples }

// recorder collects the latencies of one worker.
type recorder struct {
	lat    []time.Duration
	errs   int64
	first  error
	extra  map[string]float64
	ops    int64
	stopAt time.Time // when the worker stopped (for early exhaustion)
	// kind is set by an operation that has sub-types (the mix); the
	// runner records its latency under that kind as well.
	kind  string
	typed map[string][]time.Duration
}

func (r *recorder) ok(d time.Duration) {
	r.lat = append(r.lat, d)
	r.ops++
	if r.kind != "" {
		if r.typed == nil {
			r.typed = map[string][]time.Duration{}
		}
		r.typed[r.kind] = append(r.typed[r.kind], d)
	}
}

func (r *recorder) fail(err error) {
	r.errs++
	if r.first == nil {
		r.first = err
	}
}

func (r *recorder) add(name string, v float64) {
	if r.extra == nil {
		r.extra = map[string]float64{}
	}
	r.extra[name] += v
}

// summarize fills r's counters and latency percentiles from the workers'
// recorders; seconds is the measured wall time.
func summarize(res *Result, recs []*recorder, seconds float64) {
	var all []float64
	typed := map[string][]float64{}
	for _, rc := range recs {
		for k, ds := range rc.typed {
			for _, d := range ds {
				typed[k] = append(typed[k], float64(d)/float64(time.Millisecond))
			}
		}
		res.Ops += rc.ops
		res.Errors += rc.errs
		if rc.first != nil && res.FirstError == "" {
			res.FirstError = rc.first.Error()
		}
		for k, v := range rc.extra {
			if res.Extra == nil {
				res.Extra = map[string]float64{}
			}
			res.Extra[k] += v
		}
		for _, d := range rc.lat {
			all = append(all, float64(d)/float64(time.Millisecond))
		}
	}
	res.Seconds = seconds
	setLatencies(res, all)
	for k, ms := range typed {
		slices.Sort(ms)
		if res.Extra == nil {
			res.Extra = map[string]float64{}
		}
		res.Extra[k+"_ops"] = float64(len(ms))
		res.Extra[k+"_p50_ms"] = Percentile(ms, 50)
		res.Extra[k+"_p99_ms"] = Percentile(ms, 99)
	}
	if seconds > 0 {
		res.Throughput = float64(res.Ops) / seconds
	}
	switch {
	case res.Ops > 0:
		res.Status = "ok"
	case res.Errors > 0:
		res.Status = "unsupported"
	default:
		res.Status = "timeout" // nothing completed inside the window
	}
}

// setLatencies sorts ms and sets the latency fields of res from it.
func setLatencies(res *Result, ms []float64) {
	slices.Sort(ms)
	res.samples = ms
	if len(ms) == 0 {
		return
	}
	var sum float64
	for _, v := range ms {
		sum += v
	}
	res.MeanMs = sum / float64(len(ms))
	res.P50Ms = Percentile(ms, 50)
	res.P90Ms = Percentile(ms, 90)
	res.P99Ms = Percentile(ms, 99)
	res.P999Ms = Percentile(ms, 99.9)
	res.MaxMs = ms[len(ms)-1]
}

// Percentile returns the p-th percentile (nearest rank) of sorted values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// quantiles returns n evenly spaced quantiles of sorted (the last one is
// the maximum).
func quantiles(sorted []float64, n int) []float64 {
	if len(sorted) == 0 {
		return nil
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = Percentile(sorted, float64(i+1)*100/float64(n))
	}
	return out
}
