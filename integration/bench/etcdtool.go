package bench

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// toolCell is one run of etcd's benchmark tool.
type toolCell struct {
	workload string // "tool-put", "tool-range-lin", "tool-range-ser"
	args     []string
}

// Tool workload names.
const (
	WToolPut      = "tool-put"
	WToolRangeLin = "tool-range-lin"
	WToolRangeSer = "tool-range-ser"
)

// toolKeySize is the key size of the tool's puts: that of put-seq's keys
// (seqPrefix and 12 digits), so both drivers write the same bytes.
var toolKeySize = len(seqPrefix) + 12

// toolCells returns the cross-check cells at clients concurrency (as many
// connections), total requests each.
func toolCells(clients, totalPut, totalRange int) []toolCell {
	g := []string{fmt.Sprintf("--conns=%d", clients), fmt.Sprintf("--clients=%d", clients), "--precise"}
	return []toolCell{
		{WToolPut, append(append([]string{}, g...), "put", fmt.Sprintf("--total=%d", totalPut),
			fmt.Sprintf("--key-size=%d", toolKeySize), fmt.Sprintf("--val-size=%d", valueSize), "--sequential-keys", "--key-space-size=1000000")},
		{WToolRangeLin, append(append([]string{}, g...), "range", kvKey(1), fmt.Sprintf("--total=%d", totalRange), "--consistency=l")},
		{WToolRangeSer, append(append([]string{}, g...), "range", kvKey(1), fmt.Sprintf("--total=%d", totalRange), "--consistency=s")},
	}
}

// runTool runs etcd's benchmark tool against t and parses its summary.
func runTool(ctx context.Context, bin string, t *Target, clients int, tc toolCell) Result {
	res := Result{Server: t.Name, Workload: tc.workload, Clients: clients, Conns: clients}
	// With several endpoints the tool dials its connections round-robin
	// over them, as the harness's own pool does.
	args := append([]string{"--endpoints=" + strings.Join(t.Endpoints, ",")}, tc.args...)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cpu0 := totalCPU(t.pids())
	cost0 := sampleCost(ctx, t)
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	res.ServerCPUSeconds = totalCPU(t.pids()) - cpu0
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
