package bench

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// toolCell is one run of etcd's benchmark tool.
type toolCell struct {
	workload string // "tool-put", "tool-range-lin", "tool-range-ser"
	args     []string
	// firstOnly gives the tool only the target's first endpoint; warm
	// runs the same command once, unmeasured, before the measured run.
	firstOnly, warm bool
}

// Tool workload names.
const (
	WToolPut      = "tool-put"
	WToolRangeLin = "tool-range-lin"
	WToolRangeSer = "tool-range-ser"
)

// Variants of tool-put, each one difference from it, run only when named
// in -workloads: they tell why the tool's figures and put-seq's differ.
const (
	WToolPutConns16 = "tool-put-conns16" // at most 16 connections, as the harness's pool
	WToolPutKey8    = "tool-put-key8"    // the tool's default 8-byte keys
	WToolPutFirst   = "tool-put-first"   // the first endpoint only (the harness's connection 0)
	WToolPutWarm    = "tool-put-warm"    // measured after an unmeasured run of the same size
)

// ToolVariants are the tool-put variants.
var ToolVariants = []string{WToolPutConns16, WToolPutKey8, WToolPutFirst, WToolPutWarm}

func init() {
	WorkloadDoc[WToolPut] = "etcd's `benchmark put` (the tool's defaults but put-seq's key and value sizes)"
	WorkloadDoc[WToolPutConns16] = "`tool-put` over at most 16 connections (`--conns=min(N,16)`), as the harness's pool"
	WorkloadDoc[WToolPutKey8] = "`tool-put` with the tool's default 8-byte keys"
	WorkloadDoc[WToolPutFirst] = "`tool-put` given only the first endpoint (one member or instance, as the harness's connection 0)"
	WorkloadDoc[WToolPutWarm] = "`tool-put` measured after an unmeasured run of the same size"
}

// toolVariantCells returns the tool-put variants among want at clients,
// total requests each.
func toolVariantCells(want []string, clients, maxConns, total int) []toolCell {
	put := func(conns, keySize int) []string {
		return []string{fmt.Sprintf("--conns=%d", conns), fmt.Sprintf("--clients=%d", clients), "--precise",
			"put", fmt.Sprintf("--total=%d", total), fmt.Sprintf("--key-size=%d", keySize), fmt.Sprintf("--val-size=%d", valueSize),
			"--sequential-keys", "--key-space-size=1000000"}
	}
	var out []toolCell
	for _, w := range ToolVariants {
		if !slices.Contains(want, w) {
			continue
		}
		switch w {
		case WToolPutConns16:
			out = append(out, toolCell{workload: w, args: put(min(clients, maxConns), toolKeySize)})
		case WToolPutKey8:
			out = append(out, toolCell{workload: w, args: put(clients, 8)})
		case WToolPutFirst:
			out = append(out, toolCell{workload: w, args: put(clients, toolKeySize), firstOnly: true})
		case WToolPutWarm:
			out = append(out, toolCell{workload: w, args: put(clients, toolKeySize), warm: true})
		}
	}
	return out
}

// toolKeySize is the key size of the tool's puts: that of put-seq's keys
// (seqPrefix and 12 digits), so both drivers write the same bytes.
var toolKeySize = len(seqPrefix) + 12

// toolCells returns the cross-check cells at clients concurrency (as many
// connections), total requests each.
func toolCells(clients, totalPut, totalRange int) []toolCell {
	g := []string{fmt.Sprintf("--conns=%d", clients), fmt.Sprintf("--clients=%d", clients), "--precise"}
	return []toolCell{
		{workload: WToolPut, args: append(append([]string{}, g...), "put", fmt.Sprintf("--total=%d", totalPut),
			fmt.Sprintf("--key-size=%d", toolKeySize), fmt.Sprintf("--val-size=%d", valueSize), "--sequential-keys", "--key-space-size=1000000")},
		{workload: WToolRangeLin, args: append(append([]string{}, g...), "range", kvKey(1), fmt.Sprintf("--total=%d", totalRange), "--consistency=l")},
		{workload: WToolRangeSer, args: append(append([]string{}, g...), "range", kvKey(1), fmt.Sprintf("--total=%d", totalRange), "--consistency=s")},
	}
}

// runTool runs etcd's benchmark tool against t and parses its summary.
func runTool(ctx context.Context, bin string, t *Target, clients int, tc toolCell) Result {
	res := Result{Server: t.Name, Workload: tc.workload, Clients: clients, Conns: clients}
	// Each of the tool's connections is a clientv3 client given every
	// endpoint: it balances its requests over them round-robin.
	eps := t.Endpoints
	if tc.firstOnly {
		eps = eps[:1]
	}
	args := append([]string{"--endpoints=" + strings.Join(eps, ",")}, tc.args...)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if tc.warm {
		if out, err := exec.CommandContext(ctx, bin, args...).Output(); err != nil {
			res.Status, res.FirstError = "failed", fmt.Sprintf("warm-up run: %v: %s", err, lastLine(string(out)))
			return res
		}
	}
	cpu0, busy0 := totalCPU(t.pids()), machineBusy()
	cost0 := sampleCost(ctx, t)
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.Output()
	res.ServerCPUSeconds = totalCPU(t.pids()) - cpu0
	if ps := cmd.ProcessState; ps != nil {
		res.DriverCPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	res.OtherCPUSeconds = max(0, machineBusy()-busy0-res.ServerCPUSeconds-res.DriverCPUSeconds)
	cost1 := sampleCost(ctx, t)
	res.Load1 = loadAvg()[0]
	res.Note = "etcd benchmark " + strings.Join(tc.args, " ")
	if err != nil {
		res.Status = "failed"
		res.FirstError = fmt.Sprintf("%v: %s", err, lastLine(string(out)))
		return res
	}
	if perr := parseToolOutput(string(out), &res); perr != nil {
		res.Status = "failed"
		res.FirstError = perr.Error()
		return res
	}
	if res.Seconds == 0 {
		res.Seconds = time.Since(start).Seconds()
	}
	if res.Ops > 0 {
		res.ServerCPUPerOpUs = res.ServerCPUSeconds / float64(res.Ops) * 1e6
	}
	addCost(&res, t, cost0, cost1)
	return res
}

var (
	reTotal   = regexp.MustCompile(`^\s*Total:\s+([0-9.]+) secs`)
	reRPS     = regexp.MustCompile(`^\s*Requests/sec:\s+([0-9.]+)`)
	reAverage = regexp.MustCompile(`^\s*Average:\s+([0-9.]+) secs`)
	reSlowest = regexp.MustCompile(`^\s*Slowest:\s+([0-9.]+) secs`)
	rePct     = regexp.MustCompile(`^\s*([0-9.]+)% in ([0-9.]+) secs`)
	reErr     = regexp.MustCompile(`^\s*\[([0-9]+)\]\s+(.*)$`)
)

// parseToolOutput fills res from the benchmark tool's report ("Summary:",
// "Latency distribution:", "Error distribution:").
func parseToolOutput(out string, res *Result) error {
	var rps float64
	var gotRPS bool
	sc := bufio.NewScanner(strings.NewReader(out))
	inErrors := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "Error distribution") {
			inErrors = true
			continue
		}
		if m := reTotal.FindStringSubmatch(line); m != nil {
			res.Seconds, _ = strconv.ParseFloat(m[1], 64)
		} else if m := reRPS.FindStringSubmatch(line); m != nil {
			rps, _ = strconv.ParseFloat(m[1], 64)
			gotRPS = true
		} else if m := reAverage.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			res.MeanMs = v * 1000
		} else if m := reSlowest.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			res.MaxMs = v * 1000
		} else if m := rePct.FindStringSubmatch(line); m != nil {
			p, _ := strconv.ParseFloat(m[1], 64)
			v, _ := strconv.ParseFloat(m[2], 64)
			switch p {
			case 50:
				res.P50Ms = v * 1000
			case 90:
				res.P90Ms = v * 1000
			case 99:
				res.P99Ms = v * 1000
			case 99.9:
				res.P999Ms = v * 1000
			}
		} else if m := reErr.FindStringSubmatch(line); m != nil && inErrors {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			res.Errors += n
			if res.FirstError == "" {
				res.FirstError = m[2]
			}
		}
	}
	if !gotRPS {
		if res.Errors > 0 { // every request failed
			res.Status = "unsupported"
			return nil
		}
		return fmt.Errorf("no Requests/sec in benchmark output: %s", lastLine(out))
	}
	res.Throughput = rps
	res.Ops = int64(rps*res.Seconds + 0.5)
	res.Status = "ok"
	if rps == 0 {
		res.Status = "unsupported"
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
