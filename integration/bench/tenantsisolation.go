package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// The isolation phases, in the order each round runs them.
const (
	PhaseAlone         = "alone"
	PhaseLimitedShared = "limited-shared-session"
	PhaseLimitedOther  = "limited-other-session"
	PhaseUnlimited     = "unlimited"
)

// IsolationTarget is issue 35's target: the quiet tenant's p99 beside a
// neighbour flooding at its limit at most this many times its p99 alone.
const IsolationTarget = 1.5

// IsolationResult is the noisy-neighbour measurement on the fleet.
type IsolationResult struct {
	// Quiet is the quiet tenant; Instance the instance that leads it and
	// its neighbours, which every client of the measurement is on.
	Quiet    string `json:"quiet"`
	Instance string `json:"instance"`
	// Limit is the neighbours' --requests-per-second in the limited
	// phases.
	Limit  int64            `json:"limit"`
	Phases []IsolationPhase `json:"phases"`
	// ProfileTop is the top of a CPU profile of the instance taken during
	// the first limited flood (go tool pprof -top).
	ProfileTop []string `json:"profile_top,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// IsolationPhase is one phase over every round.
type IsolationPhase struct {
	Name string `json:"name"`
	// Neighbour is the flooding tenant (none alone); SharesSession tells
	// whether it shares the quiet tenant's ZooKeeper session on the
	// instance.
	Neighbour     string  `json:"neighbour,omitempty"`
	SharesSession bool    `json:"shares_session,omitempty"`
	Seconds       float64 `json:"seconds"`
	// Put and Get are the quiet tenant's latencies; PutCDF and GetCDF
	// 200 quantiles of them, for the plot.
	Put         OpStats   `json:"put"`
	Get         OpStats   `json:"get"`
	PutCDF      []float64 `json:"put_cdf,omitempty"`
	GetCDF      []float64 `json:"get_cdf,omitempty"`
	QuietErrors int       `json:"quiet_errors,omitempty"`
	// The neighbour's requests: served, refused with "too many
	// requests", failed otherwise.
	FloodOK      int64 `json:"flood_ok,omitempty"`
	FloodRefused int64 `json:"flood_refused,omitempty"`
	FloodErrors  int64 `json:"flood_errors,omitempty"`
	// CPU is the instance's cores used; ZKOutstandingMax and
	// ZKOutstandingMean the ZooKeeper servers' outstanding requests
	// (mntr, sampled every 250 ms, summed over the servers); ZKPackets
	// the requests a second they received.
	CPU               float64 `json:"cpu_cores"`
	ZKOutstandingMax  int64   `json:"zk_outstanding_max"`
	ZKOutstandingMean float64 `json:"zk_outstanding_mean"`
	ZKPackets         float64 `json:"zk_packets_per_s"`

	put, get []float64
}

// isoPhaseSpec is a phase as run: its neighbour and that neighbour's
// limit (-1: none).
type isoPhaseSpec struct {
	name      string
	neighbour string
	shared    bool
	limit     int64
}

// runIsolation measures the quiet tenant's latency alone and beside
// flooding neighbours, every client on the instance that leads all of
// them. The fleet's churn is over; its other tenants idle, watched.
func runIsolation(ctx context.Context, f *tenantFleet, sec *kubelab.Security, names []string, opts *TenantsOptions) *IsolationResult {
	io := opts.Isolation
	res := &IsolationResult{Limit: io.FloodLimit}
	leaders, err := f.leaders(ctx)
	if err != nil {
		res.Errors = append(res.Errors, "leaders: "+err.Error())
		return res
	}
	_, owner, err := tenantSessions(f.zk, names)
	if err != nil {
		res.Errors = append(res.Errors, "sessions: "+err.Error())
		return res
	}
	// The instance leading the most tenants; its first tenant is the
	// quiet one, its neighbours the next ones on the same session and on
	// another.
	byInstance := map[string][]string{}
	for _, n := range names {
		if l := leaders[n]; l != "" {
			byInstance[l] = append(byInstance[l], n)
		}
	}
	var inst *fleetInstance
	for _, in := range f.instances {
		if inst == nil || len(byInstance[in.name]) > len(byInstance[inst.name]) {
			inst = in
		}
	}
	led := byInstance[inst.name]
	if len(led) < 2 {
		res.Errors = append(res.Errors, fmt.Sprintf("%s leads %d tenants: no neighbour to flood", inst.name, len(led)))
		return res
	}
	res.Instance, res.Quiet = inst.name, led[0]
	var shared, other string
	for _, n := range led[1:] {
		same := owner[n][inst.name] != 0 && owner[n][inst.name] == owner[res.Quiet][inst.name]
		if same && shared == "" {
			shared = n
		}
		if !same && other == "" {
			other = n
		}
	}
	specs := []isoPhaseSpec{{name: PhaseAlone}}
	if shared != "" {
		specs = append(specs, isoPhaseSpec{name: PhaseLimitedShared, neighbour: shared, shared: true, limit: io.FloodLimit})
	} else {
		res.Notes = append(res.Notes, fmt.Sprintf("no tenant led by %s shares %s's ZooKeeper session: the same-session phase was not run", inst.name, res.Quiet))
	}
	if other != "" {
		specs = append(specs, isoPhaseSpec{name: PhaseLimitedOther, neighbour: other, limit: io.FloodLimit})
	} else {
		res.Notes = append(res.Notes, fmt.Sprintf("every tenant led by %s shares %s's ZooKeeper session: the other-session phase was not run", inst.name, res.Quiet))
	}
	unlimited := shared
	if unlimited == "" {
		unlimited = other
	}
	specs = append(specs, isoPhaseSpec{name: PhaseUnlimited, neighbour: unlimited, shared: unlimited == shared, limit: -1})
	for _, n := range []string{shared, other} {
		if n == "" {
			continue
		}
		if _, err := f.tenantCmd(ctx, "limits", n, "--requests-per-second", strconv.FormatInt(io.FloodLimit, 10)); err != nil {
			res.Errors = append(res.Errors, err.Error())
			return res
		}
	}
	time.Sleep(time.Second) // the instances follow the registry
	opts.Logf("tenants: isolation on %s: quiet %s, neighbours %s (same session) and %s (another), limit %d requests/s",
		inst.name, res.Quiet, shared, other, io.FloodLimit)

	clients := map[string]*clientv3.Client{}
	for _, n := range []string{res.Quiet, shared, other} {
		if n == "" {
			continue
		}
		cfg, err := tenantTLS(sec, n)
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			return res
		}
		c, err := tenantClient(cfg, inst.addr)
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			return res
		}
		defer c.Close()
		clients[n] = c
	}
	phases := make([]IsolationPhase, len(specs))
	for i, sp := range specs {
		phases[i] = IsolationPhase{Name: sp.name, Neighbour: sp.neighbour, SharesSession: sp.shared}
	}
	profiled := false
	for round := 1; round <= io.Rounds; round++ {
		for i, sp := range specs {
			if ctx.Err() != nil {
				return res
			}
			if sp.limit < 0 {
				if _, err := f.tenantCmd(ctx, "limits", sp.neighbour, "--requests-per-second", "-1"); err != nil {
					res.Errors = append(res.Errors, err.Error())
					return res
				}
				time.Sleep(time.Second)
			}
			var profile func() []string
			if !profiled && sp.limit > 0 {
				profiled = true
				profile = f.profileDuring(ctx, inst, io.Phase, filepath.Join(f.dir, "isolation-cpu.pb.gz"))
			}
			runIsoPhase(ctx, f, inst, clients[res.Quiet], clients[sp.neighbour], io, &phases[i])
			if profile != nil {
				res.ProfileTop = profile()
			}
			if sp.limit < 0 {
				if _, err := f.tenantCmd(ctx, "limits", sp.neighbour, "--requests-per-second", strconv.FormatInt(io.FloodLimit, 10)); err != nil {
					res.Errors = append(res.Errors, err.Error())
					return res
				}
			}
			time.Sleep(time.Second) // what the phase queued drains
			p := &phases[i]
			opts.Logf("tenants: isolation round %d, %s: quiet put p99 %.2f ms, get p99 %.2f ms; neighbour %d served, %d refused; instance %.2f cores",
				round, sp.name, pctOf(p.put, 99), pctOf(p.get, 99), p.FloodOK, p.FloodRefused, p.CPU/p.Seconds)
		}
	}
	for i := range phases {
		p := &phases[i]
		p.Put, p.Get = opStats(p.put, 0), opStats(p.get, 0)
		p.PutCDF, p.GetCDF = cdfOf(p.put), cdfOf(p.get)
		if p.Seconds > 0 {
			p.CPU /= p.Seconds
			p.ZKPackets /= p.Seconds
		}
	}
	res.Phases = phases
	return res
}

// leaders returns each tenant's leader instance (etcd_server_is_leader on
// the instances' metrics).
func (f *tenantFleet) leaders(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, in := range f.instances {
		ms, err := scrapeSamples(ctx, "http://"+in.metricsAddr+"/metrics", "etcd_server_is_leader")
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if m.value == 1 && m.labels["tenant"] != "" {
				out[m.labels["tenant"]] = in.name
			}
		}
	}
	return out, nil
}

// profileDuring starts a CPU profile of in for most of a phase of length
// d and returns a function that waits for it and returns the top of it
// (nil if it failed).
func (f *tenantFleet) profileDuring(ctx context.Context, in *fleetInstance, d time.Duration, path string) func() []string {
	secs := max(1, int((d-2*time.Second)/time.Second))
	done := make(chan error, 1)
	go func() {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		done <- fetchProfile(in.metricsAddr, path, secs)
	}()
	return func() []string {
		if err := <-done; err != nil {
			return []string{"profile: " + err.Error()}
		}
		out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).Output()
		if err != nil {
			return []string{"go tool pprof: " + err.Error()}
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
				continue
			}
			lines = append(lines, l)
		}
		return lines
	}
}

// runIsoPhase runs one phase of one round: the quiet tenant's client at
// its steady rate (a put, then a linearizable get, in turn) while the
// neighbour (if any) floods with puts from FloodClients goroutines; it
// adds to p.
func runIsoPhase(ctx context.Context, f *tenantFleet, inst *fleetInstance, quiet, flood *clientv3.Client, io IsolationOptions, p *IsolationPhase) {
	pctx, cancel := context.WithTimeout(ctx, io.Phase)
	defer cancel()
	cpu0 := cpuSeconds0(inst.p.pid())
	pk0 := zkPackets(ctx, f.zk)
	var wg sync.WaitGroup
	var ok, refused, failed atomic.Int64
	if flood != nil {
		val := strings.Repeat("x", 256)
		for g := range io.FloodClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; pctx.Err() == nil; i++ {
					_, err := flood.Put(pctx, fmt.Sprintf("/flood/%02d/%04d", g, i%1000), val)
					switch {
					case err == nil:
						ok.Add(1)
					case pctx.Err() != nil:
					case errors.Is(err, rpctypes.ErrTooManyRequests) || strings.Contains(err.Error(), "too many requests"):
						refused.Add(1)
					default:
						failed.Add(1)
					}
				}
			}()
		}
	}
	var outMax int64
	var outSum, outN float64
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			var sum int64
			for _, srv := range zkServers(f.zk) {
				mctx, c := context.WithTimeout(ctx, 2*time.Second)
				vals, err := srv.Monitor(mctx)
				c()
				if err == nil {
					v, _ := strconv.ParseInt(vals["zk_outstanding_requests"], 10, 64)
					sum += v
				}
			}
			outMax = max(outMax, sum)
			outSum += float64(sum)
			outN++
		}
	}()
	val := strings.Repeat("q", 256)
	start := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / io.QuietRate))
	for put := true; ; put = !put {
		select {
		case <-pctx.Done():
		case <-tick.C:
		}
		if pctx.Err() != nil {
			break
		}
		octx, c := context.WithTimeout(ctx, opTimeout)
		t0 := time.Now()
		var err error
		if put {
			_, err = quiet.Put(octx, "/quiet/k", val)
		} else {
			_, err = quiet.Get(octx, "/quiet/k")
		}
		d := float64(time.Since(t0)) / float64(time.Millisecond)
		c()
		switch {
		case err != nil:
			p.QuietErrors++
		case put:
			p.put = append(p.put, d)
		default:
			p.get = append(p.get, d)
		}
	}
	tick.Stop()
	wg.Wait()
	secs := time.Since(start).Seconds()
	p.Seconds += secs
	p.FloodOK += ok.Load()
	p.FloodRefused += refused.Load()
	p.FloodErrors += failed.Load()
	p.CPU += cpuSeconds0(inst.p.pid()) - cpu0
	p.ZKOutstandingMax = max(p.ZKOutstandingMax, outMax)
	if outN > 0 {
		// A mean over the rounds, weighted by their lengths.
		p.ZKOutstandingMean = (p.ZKOutstandingMean*(p.Seconds-secs) + outSum/outN*secs) / p.Seconds
	}
	p.ZKPackets += zkPackets(ctx, f.zk) - pk0
}

// zkPackets sums zk_packets_received over zk's servers.
func zkPackets(ctx context.Context, z *zkCluster) float64 {
	var sum float64
	for _, srv := range zkServers(z) {
		mctx, c := context.WithTimeout(ctx, 2*time.Second)
		vals, err := srv.Monitor(mctx)
		c()
		if err == nil {
			v, _ := strconv.ParseFloat(vals["zk_packets_received"], 64)
			sum += v
		}
	}
	return sum
}

// cpuSeconds0 is cpuSeconds, 0 on an error.
func cpuSeconds0(pid int) float64 {
	v, _ := cpuSeconds(pid)
	return v
}

// pctOf is the p-th percentile of unsorted values.
func pctOf(v []float64, p float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return Percentile(s, p)
}

// cdfOf keeps 200 quantiles of unsorted values.
func cdfOf(v []float64) []float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return quantiles(s, 200)
}
