package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// cellTable is one markdown table of servers over cells: a row per cell,
// starting with first(cell), then value(result) of each server (or the
// cell's status when it did not run), then a ratio column per pair.
type cellTable struct {
	head   []string // the leading columns
	prefix string   // before each ratio column's header
	first  func(c [2]string) []string
	find   func(server string, c [2]string) *Result
	value  func(x *Result) string
	ratio  func(a, b *Result) float64
}

func (r *Report) writeCellTable(b *strings.Builder, t cellTable, servers []string, cells [][2]string, pairs []ratioPair) {
	head := append([]string{}, t.head...)
	for _, s := range servers {
		head = append(head, ServerLabel(s))
	}
	for _, p := range pairs {
		head = append(head, t.prefix+p.header())
	}
	mdHeader(b, head...)
	for _, c := range cells {
		row := t.first(c)
		for _, s := range servers {
			x := t.find(s, c)
			if st := cellStatus(x); st != "" {
				row = append(row, st)
			} else {
				row = append(row, t.value(x))
			}
		}
		for _, p := range pairs {
			row = append(row, fmtRatio(t.ratio(t.find(p.num, c), t.find(p.den, c))))
		}
		mdRow(b, row...)
	}
	b.WriteString("\n")
}

// workloadCells is the cellTable layout of (workload, clients) cells.
func (r *Report) workloadCells(prefix string, value func(*Result) string, ratio func(a, b *Result) float64) cellTable {
	return cellTable{
		head:   []string{"workload", "clients"},
		prefix: prefix,
		first:  func(c [2]string) []string { return []string{c[0], c[1]} },
		find: func(server string, c [2]string) *Result {
			n, _ := strconv.Atoi(c[1])
			return r.find(server, c[0], n)
		},
		value: value,
		ratio: ratio,
	}
}

// writeThroughput writes the throughput table of servers over cells with
// the ratio columns pairs.
func (r *Report) writeThroughput(b *strings.Builder, servers []string, cells [][2]string, pairs []ratioPair) {
	t := r.workloadCells("", func(x *Result) string { return withCPU(fmtNum(x.Throughput), x) }, throughputRatio)
	r.writeCellTable(b, t, servers, cells, pairs)
}

// writeLatency writes the p50 / p99 / p99.9 table of servers over cells
// with p99 ratio columns.
func (r *Report) writeLatency(b *strings.Builder, servers []string, cells [][2]string, pairs []ratioPair) {
	t := r.workloadCells("p99 ", func(x *Result) string {
		return fmt.Sprintf("%s / %s / %s", fmtMs(x.P50Ms), fmtMs(x.P99Ms), fmtMs(x.P999Ms))
	}, p99Ratio)
	r.writeCellTable(b, t, servers, cells, pairs)
}

// documentedWorkloads are the workloads of the report's workload table:
// the etcd-level ones, then the floor's and the kube stacks' that ran.
func (r *Report) documentedWorkloads() []string {
	out := append(append([]string{}, AllWorkloads...), WWatch)
	for _, w := range append(append([]string{}, FloorWorkloads...), KubeWorkloads...) {
		if len(r.cells([]string{w})) > 0 {
			out = append(out, w)
		}
	}
	return out
}

// writeDeployed writes the deployed-shape section: zketcd on a 3-member
// ensemble with 1, 2 and 3 instances and kine on PostgreSQL against a
// 3-member etcd cluster, the ZooKeeper floor, the kube-apiserver stacks
// and issue 11's targets.
func (r *Report) writeDeployed(b *strings.Builder) {
	servers := r.serversPresent(DeployedServers)
	floor := r.cellsOf(FloorWorkloads, []string{ServerZKFloor})
	kube := r.serversPresent(KubeServers)
	if !slices.Contains(servers, ServerEtcd3) && len(floor) == 0 && len(kube) == 0 {
		return
	}
	b.WriteString("## Deployed shape\n\n" +
		"The shape users deploy, on the same machine in the same run: zketcd on a 3-member ZooKeeper ensemble with 1, 2 and 3 " +
		"instances on one root, against a **3-member etcd cluster** (fsync on, the settings of the single etcd above) and kine on " +
		"PostgreSQL (kine's HA deployment). With several members or instances the harness's connections are spread over them " +
		"round-robin (connection i to endpoint i mod n; at 1 client only the first is used), as HA kube-apiservers are each " +
		"pointed at their own. Ratios: a server's figure divided by the 3-member etcd cluster's (`…/etcd3`), and the cost of " +
		"spreading clients over 2 and 3 zketcd instances against one (`zk3×2/zk3`, `zk3×3/zk3`: below 1 spreading costs throughput).\n\n")
	pairs := presentPairs(deployedPairs(), servers)
	if len(servers) > 0 {
		cells := r.cellsOf(AllWorkloads, servers)
		b.WriteString("### Throughput (deployed shape)\n\nSuccessful operations per second, as in the standalone table.\n\n")
		r.writeThroughput(b, servers, cells, pairs)
		b.WriteString("### Latency (deployed shape)\n\np50 / p99 / p99.9 in milliseconds; ratios compare p99 (below 1 faster).\n\n")
		r.writeLatency(b, servers, cells, pairs)
		if len(r.cellsOf([]string{WWatch}, servers)) > 0 {
			b.WriteString("#")
			r.writeWatch(b, servers, pairs)
		}
		b.WriteString("### Server CPU per operation (deployed shape)\n\n")
		r.writeCPUTable(b, servers, cells)
		if len(r.cellsOf([]string{WToolPut, WToolRangeLin, WToolRangeSer}, servers)) > 0 {
			b.WriteString("#")
			r.writeTool(b, servers, pairs)
		}
	}
	r.writeFloor(b, floor)
	r.writeKeepalive(b, servers)
	r.writeKube(b, kube)
	r.writeTargets(b)
}

func (r *Report) writeKeepalive(b *strings.Builder, servers []string) {
	cells := r.cellsOf([]string{WKeepalive}, servers)
	if len(cells) == 0 {
		return
	}
	b.WriteString("### Lease keepalives (deployed shape)\n\n" + WorkloadDoc[WKeepalive] + ". Each cell: keepalives answered per second " +
		"(p99 ms); the server's CPU in cores (zketcd: with its ZooKeeper JVMs, zketcd's own share after it); ZooKeeper " +
		"transactions committed per keepalive.\n\n")
	head := []string{"leases"}
	for _, s := range servers {
		head = append(head, ServerLabel(s))
	}
	mdHeader(b, head...)
	for _, c := range cells {
		n, _ := strconv.Atoi(c[1])
		row := []string{fmtNum(float64(n))}
		for _, s := range servers {
			x := r.find(s, WKeepalive, n)
			v := cellStatus(x)
			if v == "" {
				v = fmt.Sprintf("%s/s (%s); %.2f cores", fmtNum(x.Throughput), fmtMs(x.P99Ms), x.Extra["server_cores"])
				if z, ok := x.Extra["zketcd_cores"]; ok {
					v += fmt.Sprintf(" (zketcd %.2f)", z)
				}
				if z, ok := x.Extra["zk_txns_per_keepalive"]; ok {
					v += fmt.Sprintf("; %.2f ZK txns/keepalive", z)
				}
			}
			row = append(row, v)
		}
		mdRow(b, row...)
	}
	b.WriteString("\n")
}

// floorPeers maps each floor workload to the zketcd workload built on it.
var floorPeers = map[string]string{WFloorCommit: WPutSeq, WFloorCheck: WGetLin, WFloorSyncGet: WGetLin, WFloorGet: WGetSer,
	WFloorCommitPadded: WPutSeq, WFloorCommitZketcd: WPutSeq, WFloorCommitTailed: WPutSeq}

func (r *Report) writeFloor(b *strings.Builder, cells [][2]string) {
	if len(cells) == 0 {
		return
	}
	b.WriteString("### The ZooKeeper floor (3-member ensemble)\n\n" +
		"The requests zketcd's put and linearizable get are made of, sent by a raw go-zookeeper client on **one session** " +
		"(all goroutines share it, as a zketcd instance's requests do) to a fresh 3-member ensemble with the same settings: " +
		"ops/s and p50 / p99 ms. The zketcd column is the workload built on that request (put-seq on the commit multi, " +
		"get-lin on the barrier, get-ser on a plain read), one instance on the 3-member ensemble; the ratio divides zketcd's " +
		"throughput by the floor's (1.00× = zketcd adds nothing to ZooKeeper's own cost).\n\n")
	mdHeader(b, "request", "clients", ServerLabel(ServerZKFloor), "zketcd workload", ServerLabel(ServerZK3), "zk3/floor")
	for _, c := range cells {
		n, _ := strconv.Atoi(c[1])
		x := r.find(ServerZKFloor, c[0], n)
		v := cellStatus(x)
		if v == "" {
			v = fmt.Sprintf("%s (%s / %s)", fmtNum(x.Throughput), fmtMs(x.P50Ms), fmtMs(x.P99Ms))
		}
		peer := floorPeers[c[0]]
		z := r.find(ServerZK3, peer, n)
		zv := cellStatus(z)
		if zv == "" {
			zv = fmt.Sprintf("%s (%s / %s)", fmtNum(z.Throughput), fmtMs(z.P50Ms), fmtMs(z.P99Ms))
		}
		mdRow(b, c[0], c[1], v, peer, zv, fmtRatio(throughputRatio(z, x)))
	}
	b.WriteString("\n")
}

// kubePairs are the ratio columns of the kube table: each zketcd stack
// against the etcd stack with as many kube-apiservers.
var kubePairs = []ratioPair{{ServerKubeZK1, ServerKubeEtcd}, {ServerKubeZK3, ServerKubeEtcd3}, {ServerKubeZK3x2, ServerKubeEtcd3x2},
	{ServerKubeZK3Lease, ServerKubeEtcd3}, {ServerKubeZK3x2Lease, ServerKubeEtcd3x2}}

// kubeLeaseStack tells whether kube stack s runs zketcd with --read-lease.
func kubeLeaseStack(s string) bool { return s == ServerKubeZK3Lease || s == ServerKubeZK3x2Lease }

func (r *Report) writeKube(b *strings.Builder, servers []string) {
	if len(servers) == 0 {
		return
	}
	cells := r.cellsOf(KubeWorkloads, servers)
	b.WriteString("### kube-apiserver on each store\n\n" +
		"Real kube-apiservers (v1.37.2, the flags of `make e2e`, watch cache on) as child processes, one per etcd member or " +
		"zketcd instance they are pointed at (a single kube-apiserver on the etcd cluster is given all three members); N clients, " +
		"each with its own HTTP/1.1 connection, spread over the kube-apiservers, create, update, get, list and watch ConfigMaps " +
		"and Pods through the REST API. Each cell: ops/s (p99 ms; the **store's** CPU seconds per 1,000 requests: " +
		"etcd's members, or zketcd and every ZooKeeper member, not the kube-apiservers); for " +
		"`kube-create-10k`: the seconds to create all the objects first. Ratios: zketcd's throughput, p99 and storage CPU " +
		"per request divided by those of etcd with as many kube-apiservers.\n\n")
	head := []string{"workload", "clients"}
	for _, s := range servers {
		head = append(head, ServerLabel(s))
	}
	pairs := presentPairs(kubePairs, servers)
	for _, p := range pairs {
		head = append(head, p.header(), "p99 "+p.header(), "cpu "+p.header())
	}
	mdHeader(b, head...)
	for _, c := range cells {
		n, _ := strconv.Atoi(c[1])
		row := []string{c[0], c[1]}
		for _, s := range servers {
			x := r.find(s, c[0], n)
			v := cellStatus(x)
			if v == "" {
				v = rateP99CPU(x)
				if c[0] == WKubeLoad {
					v = fmt.Sprintf("%.1f s: ", x.Seconds) + v
				}
			}
			row = append(row, v)
		}
		for _, p := range pairs {
			a, d := r.find(p.num, c[0], n), r.find(p.den, c[0], n)
			row = append(row, fmtRatio(throughputRatio(a, d)), fmtRatio(p99Ratio(a, d)), fmtRatio(cpuRatio(a, d)))
		}
		mdRow(b, row...)
	}
	b.WriteString("\n")
}

// target is one of issue 11's targets and what this run measured.
type target struct {
	what, want string
	// ratios are the measured ratios (name → value); the target is met
	// when each is >= min (or <= max when max > 0).
	ratios   []namedRatio
	min, max float64
	note     string // instead of a verdict: why it was not measured
	// format formats a figure (nil: a ratio).
	format func(float64) string
}

type namedRatio struct {
	name string
	v    float64
}

func (t target) verdict() string {
	if t.note != "" {
		return t.note
	}
	var got []namedRatio
	for _, r := range t.ratios {
		if !math.IsNaN(r.v) {
			got = append(got, r)
		}
	}
	if len(got) == 0 {
		return "not run"
	}
	met := true
	for _, r := range got {
		if (t.max > 0 && r.v > t.max) || (t.max == 0 && r.v < t.min) {
			met = false
		}
	}
	if len(got) < len(t.ratios) {
		return fmt.Sprintf("%s (%d of %d measured)", map[bool]string{true: "met so far", false: "**missed**"}[met], len(got), len(t.ratios))
	}
	if met {
		return "met"
	}
	return "**missed**"
}

// measured lists the ratios this run has ("—": none).
func (t target) measured() string {
	var parts []string
	for _, r := range t.ratios {
		if !math.IsNaN(r.v) {
			f := fmtRatio
			if t.format != nil {
				f = t.format
			}
			parts = append(parts, r.name+" "+f(r.v))
		}
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// presentPairs returns the pairs whose two servers are both in servers.
func presentPairs(pairs []ratioPair, servers []string) []ratioPair {
	var out []ratioPair
	for _, p := range pairs {
		if slices.Contains(servers, p.num) && slices.Contains(servers, p.den) {
			out = append(out, p)
		}
	}
	return out
}

// writeTargets lists issue 11's targets against this run.
func (r *Report) writeTargets(b *strings.Builder) {
	ratio := func(num, w string, n int) namedRatio {
		return namedRatio{fmt.Sprintf("%s ×%d %s", w, n, shortName(num)), throughputRatio(r.find(num, w, n), r.find(ServerEtcd3, w, n))}
	}
	shapes := []string{ServerZK3, ServerZK3x2, ServerZK3x3}
	vsEtcd := func(ws []string, n int) []namedRatio {
		var out []namedRatio
		for _, w := range ws {
			for _, z := range shapes {
				out = append(out, ratio(z, w, n))
			}
		}
		return out
	}
	var floor, spread, kubeT, kubeP, kubeLT, kubeLP []namedRatio
	for _, z := range shapes {
		floor = append(floor, namedRatio{"put-seq ×1 " + shortName(z) + "/floor",
			throughputRatio(r.find(z, WPutSeq, 1), r.find(ServerZKFloor, WFloorCommit, 1))})
	}
	for _, w := range []string{WPutSeq, WCreate, WGetLin} {
		for _, n := range []int{16, 64} {
			for _, z := range []string{ServerZK3x2, ServerZK3x3} {
				spread = append(spread, namedRatio{fmt.Sprintf("%s ×%d %s/zk3", w, n, shortName(z)),
					throughputRatio(r.find(z, w, n), r.find(ServerZK3, w, n))})
			}
		}
	}
	for _, c := range r.cellsOf(KubeWorkloads, KubeServers) {
		n, _ := strconv.Atoi(c[1])
		for _, p := range kubePairs {
			a, d := r.find(p.num, c[0], n), r.find(p.den, c[0], n)
			name := fmt.Sprintf("%s ×%d %s", c[0], n, p.header())
			if kubeLeaseStack(p.num) {
				kubeLT = append(kubeLT, namedRatio{name, throughputRatio(a, d)})
				kubeLP = append(kubeLP, namedRatio{name, p99Ratio(a, d)})
				continue
			}
			kubeT = append(kubeT, namedRatio{name, throughputRatio(a, d)})
			kubeP = append(kubeP, namedRatio{name, p99Ratio(a, d)})
		}
	}
	worst := func(rs []namedRatio, high bool) []namedRatio {
		var w *namedRatio
		for i := range rs {
			if math.IsNaN(rs[i].v) {
				continue
			}
			if w == nil || (high && rs[i].v > w.v) || (!high && rs[i].v < w.v) {
				w = &rs[i]
			}
		}
		if w == nil {
			return []namedRatio{{"—", math.NaN()}}
		}
		return []namedRatio{{"worst: " + w.name, w.v}}
	}
	ts := []target{
		{what: "put ×64, one and several instances", want: "≥ 2.0× etcd3", ratios: vsEtcd([]string{WPutSeq}, 64), min: 2},
		{what: "txn (`create`) ×64, one and several instances", want: "≥ 2.0× etcd3", ratios: vsEtcd([]string{WCreate}, 64), min: 2},
		{what: "put and txn ×16", want: "≥ 1.0× etcd3", ratios: vsEtcd([]string{WPutSeq, WCreate}, 16), min: 1},
		{what: "put ×1 against the raw ZooKeeper floor (`zk-commit` ×1)", want: "≥ 0.8× the floor", ratios: floor, min: 0.8},
		{what: "linearizable get ×16 and ×64, safe path", want: "≥ 1.0× etcd3", ratios: append(vsEtcd([]string{WGetLin}, 16), vsEtcd([]string{WGetLin}, 64)...), min: 1},
		{what: "linearizable get ×1, ×16 and ×64 with the read lease (`--read-lease`)", want: "≥ 1.0× etcd3",
			ratios: func() []namedRatio {
				var out []namedRatio
				for _, n := range []int{1, 16, 64} {
					for _, z := range []string{ServerZK3Lease, ServerZK3x2Lease} {
						out = append(out, ratio(z, WGetLin, n))
					}
				}
				return out
			}(), min: 1},
		{what: "spreading clients over 2–3 instances (put-seq, create, get-lin ×16/×64)", want: "≥ 0.90× one instance", ratios: worst(spread, false), min: 0.9},
		// Every ZooKeeper transaction in the window counts, including the
		// leader's liveness-proof barrier (one per LeaderProofWindow while
		// keepalives arrive, whatever their number): a write per keepalive
		// would be 1.0, the barrier alone is ~0.0005 at 1,000/s.
		{what: "keepalive: ZooKeeper writes per keepalive in steady state (every transaction in the window counts)", want: "0 per keepalive (< 0.001)", ratios: r.keepaliveFigures("zk_txns_per_keepalive"), max: 0.001,
			format: func(v float64) string { return fmt.Sprintf("%.4f", v) }},
		{what: "keepalive: zketcd's CPU for 10,000 leases", want: "< 0.10 cores", ratios: r.keepaliveFigures("zketcd_cores"), max: 0.1,
			format: func(v float64) string { return fmt.Sprintf("%.3f cores", v) }},
		{what: "kube-apiserver, safe read path: every verb's throughput", want: "≥ 1.0× etcd", ratios: worst(kubeT, false), min: 1},
		{what: "kube-apiserver, safe read path: every verb's p99", want: "≤ 1.5× etcd", ratios: worst(kubeP, true), max: 1.5},
		{what: "kube-apiserver on `--read-lease`: every verb's throughput", want: "≥ 1.0× etcd", ratios: worst(kubeLT, false), min: 1},
		{what: "kube-apiserver on `--read-lease`: every verb's p99", want: "≤ 1.5× etcd", ratios: worst(kubeLP, true), max: 1.5},
	}
	if len(r.Baseline) > 0 {
		what := "standalone zketcd rows against the baseline run of " + r.BaselineDate
		if r.BaselineCPU != "" && r.BaselineCPU != r.Machine.CPUModel {
			what += fmt.Sprintf(" (baseline on %s, this run on %s: compare the next row)", r.BaselineCPU, r.Machine.CPUModel)
		}
		ts = append(ts, target{what: what,
			want: "geo-mean ≥ 0.95× the baseline (one noisy run each)", ratios: r.baselineRatios(), min: 0.95})
		if rel := r.baselineRelative(); slices.ContainsFunc(rel, func(x namedRatio) bool { return !math.IsNaN(x.v) }) {
			ts = append(ts, target{what: "the same rows relative to standalone etcd in each run (zketcd/etcd now ÷ zketcd/etcd then)",
				want: "geo-mean ≥ 0.95× the baseline's", ratios: rel, min: 0.95})
		}
	} else {
		ts = append(ts, target{what: "standalone rows no worse than before", want: "≥ the previous run", note: "no baseline given (-baseline)"})
	}
	b.WriteString("### Issue 11's targets\n\nEach target of the issue against this run (ratios against the 3-member etcd cluster " +
		"unless stated). \"met\" means every listed ratio is on the right side of the bound; a single noisy run decides " +
		"nothing close to a bound.\n\n")
	mdHeader(b, "target", "bound", "measured", "verdict")
	for _, t := range ts {
		mdRow(b, t.what, t.want, t.measured(), t.verdict())
	}
	b.WriteString("\n")
}

// writeTargets38 lists issue 38's targets (a Kubernetes request costs the
// storage stack no more CPU than it costs etcd) against this run, when
// it has kube-apiserver or tool rows.
func (r *Report) writeTargets38(b *strings.Builder) {
	shapes := []ratioPair{{ServerKubeZK1, ServerKubeEtcd}, {ServerKubeZK3, ServerKubeEtcd3}}
	verbs := []string{WKubeCreate, WKubeUpdate, WKubeGet, WKubeList}
	var cpu, tput, p50 []namedRatio
	for _, sh := range shapes {
		for _, w := range verbs {
			for _, c := range r.cellsOf([]string{w}, []string{sh.num}) {
				n, _ := strconv.Atoi(c[1])
				a, d := r.find(sh.num, w, n), r.find(sh.den, w, n)
				name := fmt.Sprintf("%s ×%d %s", w, n, sh.header())
				cpu = append(cpu, namedRatio{name, cpuRatio(a, d)})
				if n == 16 {
					tput = append(tput, namedRatio{name, throughputRatio(a, d)})
					if (w == WKubeCreate || w == WKubeUpdate) && ok(a) && ok(d) && d.P50Ms > 0 {
						p50 = append(p50, namedRatio{name, a.P50Ms / d.P50Ms})
					}
				}
			}
		}
	}
	var tool, floor []namedRatio
	for _, sh := range []ratioPair{{ServerZK1, ServerEtcd}, {ServerZK3, ServerEtcd3}} {
		for _, n := range []int{16, 64} {
			tool = append(tool, namedRatio{fmt.Sprintf("tool-put ×%d %s", n, sh.header()),
				throughputRatio(r.find(sh.num, WToolPut, n), r.find(sh.den, WToolPut, n))})
		}
	}
	for _, sh := range []ratioPair{{ServerZK1, ServerZK1Floor}, {ServerZK3, ServerZKFloor}} {
		floor = append(floor, namedRatio{"tool-put ×1 " + shortName(sh.num) + "/floor",
			throughputRatio(r.find(sh.num, WToolPut, 1), r.find(sh.den, WFloorCommit, 1))})
	}
	measured := func(rs []namedRatio) bool {
		return slices.ContainsFunc(rs, func(x namedRatio) bool { return !math.IsNaN(x.v) })
	}
	if !measured(cpu) && !measured(tool) {
		return
	}
	worst := func(rs []namedRatio, high bool) []namedRatio {
		var w *namedRatio
		for i := range rs {
			if !math.IsNaN(rs[i].v) && (w == nil || (high && rs[i].v > w.v) || (!high && rs[i].v < w.v)) {
				w = &rs[i]
			}
		}
		if w == nil {
			return []namedRatio{{"—", math.NaN()}}
		}
		return []namedRatio{{"worst: " + w.name, w.v}}
	}
	ts := []target{
		{what: "storage CPU per Kubernetes request (every verb and client count), standalone and 3-member", want: "≤ 1.2× etcd's", ratios: worst(cpu, true), max: 1.2},
		{what: "kube-apiserver throughput at 16 clients, every verb", want: "≥ 1.0× etcd", ratios: worst(tput, false), min: 1},
		{what: "kube-apiserver create and update p50 at 16 clients", want: "≤ etcd's", ratios: worst(p50, true), max: 1},
		{what: "etcd's benchmark put ×16 and ×64, both shapes", want: "≥ 1.0× etcd", ratios: tool, min: 1},
		{what: "etcd's benchmark put ×1 against the raw ZooKeeper multi (`zk-commit` ×1)", want: "≥ 0.9× the floor", ratios: floor, min: 0.9},
	}
	b.WriteString("## Issue 38's targets\n\nThe storage stack's CPU per Kubernetes request (the store's processes only: etcd's members, " +
		"or zketcd and every ZooKeeper member) and etcd's own benchmark tool, against etcd on the same shape; one run decides " +
		"nothing close to a bound.\n\n")
	mdHeader(b, "target", "bound", "measured", "verdict")
	for _, t := range ts {
		mdRow(b, t.what, t.want, t.measured(), t.verdict())
	}
	b.WriteString("\n")
}

// keepaliveFigures returns Extra[key] of each zketcd shape's keepalive
// cell over the profile's lease count (10,000 in both profiles).
func (r *Report) keepaliveFigures(key string) []namedRatio {
	var out []namedRatio
	for _, z := range []string{ServerZK3, ServerZK3x2, ServerZK3x3} {
		v := math.NaN()
		for _, x := range r.Results {
			if x.Server == z && x.Workload == WKeepalive && ok(&x) {
				if f, has := x.Extra[key]; has {
					v = f
				}
			}
		}
		out = append(out, namedRatio{shortName(z), v})
	}
	return out
}

// BaselineRow is a standalone throughput figure of an earlier run, for
// the "no worse than before" target.
type BaselineRow struct {
	Server     string  `json:"server"`
	Workload   string  `json:"workload"`
	Clients    int     `json:"clients"`
	Throughput float64 `json:"throughput"`
}

// SetBaseline keeps the standalone zketcd throughput rows of an earlier
// report (its results.json) to compare this run with.
//
// It keeps the standalone etcd rows as well: divided by the same rows of
// this run, they say how much faster or slower the machine was, so the
// zketcd rows can also be compared relative to etcd (see baselineRelative),
// which holds when the baseline ran on another machine.
func (r *Report) SetBaseline(old *Report) {
	r.BaselineDate = old.Machine.Date
	r.BaselineCPU = old.Machine.CPUModel
	r.Baseline = nil
	for _, x := range old.Results {
		if (slices.Contains(zketcdServers, x.Server) || x.Server == ServerEtcd) && slices.Contains(AllWorkloads, x.Workload) && ok(&x) {
			r.Baseline = append(r.Baseline, BaselineRow{x.Server, x.Workload, x.Clients, x.Throughput})
		}
	}
}

// baselineRatios are, per standalone zketcd server, the geometric mean
// of this run's throughput over the baseline's, over the rows both have.
func (r *Report) baselineRatios() []namedRatio {
	var out []namedRatio
	for _, z := range zketcdServers {
		var vs []float64
		for _, b := range r.Baseline {
			if x := r.find(z, b.Workload, b.Clients); b.Server == z && ok(x) && b.Throughput > 0 {
				vs = append(vs, x.Throughput/b.Throughput)
			}
		}
		g, n := geoMean(vs)
		out = append(out, namedRatio{fmt.Sprintf("%s geo-mean over %d rows", shortName(z), n), g})
	}
	return out
}

// baselineRelative is baselineRatios with each zketcd row first divided by
// the standalone etcd row of its own run (zketcd/etcd now ÷ zketcd/etcd
// then): the machine's own speed cancels out.
func (r *Report) baselineRelative() []namedRatio {
	then := map[[2]any]float64{}
	for _, b := range r.Baseline {
		if b.Server == ServerEtcd && b.Throughput > 0 {
			then[[2]any{b.Workload, b.Clients}] = b.Throughput
		}
	}
	var out []namedRatio
	for _, z := range zketcdServers {
		var vs []float64
		for _, b := range r.Baseline {
			etcdThen := then[[2]any{b.Workload, b.Clients}]
			x, e := r.find(z, b.Workload, b.Clients), r.find(ServerEtcd, b.Workload, b.Clients)
			if b.Server == z && ok(x) && ok(e) && b.Throughput > 0 && etcdThen > 0 && e.Throughput > 0 {
				vs = append(vs, (x.Throughput/e.Throughput)/(b.Throughput/etcdThen))
			}
		}
		g, n := geoMean(vs)
		out = append(out, namedRatio{fmt.Sprintf("%s/etcd geo-mean over %d rows", shortName(z), n), g})
	}
	return out
}
