package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// costRows returns the results the cost tables show: every cell with a
// measured storage CPU of the etcd and zketcd stacks and the floor, the
// client-count workloads at 16 clients only (the CSV holds the rest), the
// kube, tool and floor workloads at every count.
func (r *Report) costRows() []*Result {
	var rows []*Result
	order := append(append(append([]string{}, StandaloneServers...), DeployedServers...), FloorServers...)
	order = append(order, KubeServers...)
	seen := map[string]bool{}
	for _, s := range order {
		if seen[s] || s == ServerKine || s == ServerKinePG {
			continue
		}
		seen[s] = true
		for _, w := range append(append(append(append([]string{}, AllWorkloads...), append([]string{WToolPut, WToolRangeLin, WToolRangeSer}, ToolVariants...)...), FloorWorkloads...), KubeWorkloads...) {
			for _, c := range r.cellsOf([]string{w}, []string{s}) {
				n, _ := strconv.Atoi(c[1])
				x := r.find(s, w, n)
				if !ok(x) || math.IsNaN(storageCPU(x)) {
					continue
				}
				if slices.Contains(AllWorkloads, w) && n != 16 {
					continue
				}
				rows = append(rows, x)
			}
		}
	}
	return rows
}

// writeCost writes where each operation's storage CPU goes and what it
// costs ZooKeeper (cost.go's figures).
func (r *Report) writeCost(b *strings.Builder) {
	rows := r.costRows()
	var zkRows []*Result
	for _, x := range rows {
		if _, has := x.Extra[xZKUser]; has {
			zkRows = append(zkRows, x)
		}
	}
	if len(zkRows) == 0 {
		return
	}
	b.WriteString("## Where the storage CPU goes\n\n" +
		"Per operation of each cell (etcd-level workloads at 16 clients; the tool, floor and kube-apiserver workloads at every " +
		"count; every cell is in `results.csv`), read at the edges of the measured window from `/proc` (each process's user " +
		"and system time, and each ZooKeeper JVM's threads by name), from `mntr` and `srvr` of every ZooKeeper member and from " +
		"the store's `/metrics`. The store is every etcd member, or zketcd and every ZooKeeper member; kube-apiserver's own CPU " +
		"is not in it. ZooKeeper's threads: `net` the connection threads (reading requests, writing answers and watch events), " +
		"`prep` the request throttler and the prep processor, `sync` the transaction log (serialize, write, fsync; on a " +
		"standalone server also applying the transaction and queueing its answer), `commit` the commit processor (ensemble), " +
		"`quorum` the leader/follower links, `gc` the collector (the serial collector runs in the VM thread), `jit` the " +
		"compilers, `exited` threads that ended during the window (the JVM retires idle compiler threads).\n\n")
	b.WriteString("CPU in µs per operation:\n\n")
	head := []string{"server", "workload", "clients", "ops/s", "store", "zketcd", "ZK user", "ZK sys"}
	for _, k := range ZKThreadKinds {
		head = append(head, "ZK "+k)
	}
	head = append(head, "ZK per txn")
	mdHeader(b, head...)
	f0 := func(x *Result, k string) string {
		v, has := x.Extra[k]
		if !has {
			return "—"
		}
		return fmtNum(v)
	}
	for _, x := range zkRows {
		row := []string{ServerLabel(x.Server), x.Workload, strconv.Itoa(x.Clients), fmtNum(x.Throughput), fmtNum(storageCPU(x)),
			f0(x, xZketcdCPU), f0(x, xZKUser), f0(x, xZKSys)}
		for _, k := range ZKThreadKinds {
			row = append(row, f0(x, xZKThreadPfx+k))
		}
		row = append(row, f0(x, xZKCPUPerTxn))
		mdRow(b, row...)
	}
	b.WriteString("\n")

	b.WriteString("What one operation asks of the store: etcd RPCs the store answered (for a kube-apiserver request: what " +
		"kube-apiserver sent), zketcd's commits (log entries; etcd: backend commits) and etcd transactions per commit, read " +
		"barrier round trips, and ZooKeeper's side summed over its members: requests received, of which reads and writes, " +
		"transactions (the leader's zxid advance) and the leader's fsyncs, bytes received and sent, watches fired. " +
		"etcd rows show their WAL fsyncs in the fsync column.\n\n")
	mdHeader(b, "server", "workload", "clients", "RPCs", "commits", "txns/commit", "barriers", "ZK requests", "ZK reads", "ZK writes",
		"ZK txns", "fsyncs", "watches fired", "bytes in", "bytes out")
	f2 := func(x *Result, k string) string {
		v, has := x.Extra[k]
		if !has {
			return "—"
		}
		if v >= 100 {
			return fmtNum(v)
		}
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	for _, x := range rows {
		fs := f2(x, xZKFsyncs)
		if _, has := x.Extra[xWALFsyncs]; has {
			fs = f2(x, xWALFsyncs)
		}
		mdRow(b, ServerLabel(x.Server), x.Workload, strconv.Itoa(x.Clients), f2(x, xRPCs), f2(x, xCommits), f2(x, xOpsPerCommit),
			f2(x, xBarriers), f2(x, xZKRequests), f2(x, xZKReads), f2(x, xZKWrites), f2(x, xZKTxns), fs, f2(x, xZKWatches),
			f2(x, xZKBytesIn), f2(x, xZKBytesOut))
	}
	b.WriteString("\n")

	var rpcRows []*Result
	for _, x := range rows {
		if isKubeServer(x.Server) && len(costKeys(x, xRPCPfx)) > 0 {
			rpcRows = append(rpcRows, x)
		}
	}
	if len(rpcRows) > 0 {
		b.WriteString("etcd RPCs per kube-apiserver request, by method:\n\n")
		mdHeader(b, "server", "workload", "clients", "RPCs by method")
		for _, x := range rpcRows {
			var parts []string
			for _, k := range costKeys(x, xRPCPfx) {
				parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(k, xRPCPfx), x.Extra[k]))
			}
			for _, k := range costKeys(x, xLinReadPfx) {
				parts = append(parts, fmt.Sprintf("linearizable reads via %s %.2f", strings.TrimPrefix(k, xLinReadPfx), x.Extra[k]))
			}
			mdRow(b, ServerLabel(x.Server), x.Workload, strconv.Itoa(x.Clients), strings.Join(parts, ", "))
		}
		b.WriteString("\n")
	}

	var logRows []*Result
	for _, x := range rows {
		if x.Extra[xZKRequestLog] > 0 {
			logRows = append(logRows, x)
		}
	}
	if len(logRows) > 0 {
		b.WriteString("ZooKeeper requests per operation by type and znode (ZooKeeper's request log, `-zk-request-log`; " +
			"writes carry no path in it, `n/a`):\n\n")
		mdHeader(b, "server", "workload", "clients", "requests by type:znode")
		for _, x := range logRows {
			var parts []string
			for _, k := range costKeys(x, xZKReqPfx) {
				parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(k, xZKReqPfx), x.Extra[k]))
			}
			mdRow(b, ServerLabel(x.Server), x.Workload, strconv.Itoa(x.Clients), strings.Join(parts, ", "))
		}
		b.WriteString("\n")
	}
}
