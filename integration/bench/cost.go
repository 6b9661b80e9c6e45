package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// The cost accounting of a cell: besides the server's CPU (runCell's
// totals), what each of its processes and ZooKeeper members did in the
// measured window, divided by the operations completed. It answers "what
// does one operation cost the storage stack, and where": the store's CPU
// without the kube-apiservers, ZooKeeper's user and system time, the JVM's
// collector and JIT share (by thread), ZooKeeper's requests, transactions,
// fsyncs, bytes and watches fired (from `mntr` and `srvr` of every
// member), and the etcd RPCs the store answered (from its /metrics).
//
// Every figure is stored in Result.Extra under the names below, per
// operation unless the name says otherwise.
const (
	xStorageCPU   = "storage_cpu_per_op_us"   // the store's processes (etcd members; zketcd and ZooKeeper)
	xAPIServerCPU = "apiserver_cpu_per_op_us" // the kube-apiservers (kube stacks only)
	xZketcdCPU    = "zketcd_cpu_per_op_us"    // the zketcd processes of a zketcd stack
	xZKUser       = "zk_user_cpu_per_op_us"
	xZKSys        = "zk_sys_cpu_per_op_us"
	xZKRequests   = "zk_requests_per_op"  // packets received from clients, every member
	xZKReads      = "zk_reads_per_op"     // read requests (readlatency count), every member
	xZKWrites     = "zk_writes_per_op"    // write requests (updatelatency count), every member
	xZKTxns       = "zk_txns_per_op"      // transactions: the leader's zxid advance
	xZKFsyncs     = "zk_fsyncs_per_op"    // the leader's txn-log fsyncs (each member fsyncs as many)
	xZKBytesIn    = "zk_bytes_in_per_op"  // bytes received from clients, every member
	xZKBytesOut   = "zk_bytes_out_per_op" // response bytes sent to clients, every member
	xZKWatches    = "zk_watches_fired_per_op"
	xZKCPUPerTxn  = "zk_cpu_per_txn_us"
	xRPCs         = "rpcs_per_op" // etcd RPCs the store handled (grpc_server_handled_total)
	xCommits      = "commits_per_op"
	xOpsPerCommit = "txns_per_commit"      // zketcd: etcd transactions per log entry (one commit multi)
	xBarriers     = "barriers_per_op"      // zketcd: read barrier round trips
	xWALFsyncs    = "wal_fsyncs_per_op"    // etcd: WAL fsyncs
	xZKThreadPfx  = "zk_threads_us:"       // + category: ZooKeeper CPU per op by thread kind
	xRPCPfx       = "rpc_per_op:"          // + method
	xLinReadPfx   = "lin_reads_per_op:"    // + via (zketcd)
	xZKReqPfx     = "zk_request_per_op:"   // + type:path class (-zk-request-log)
	xZKRequestLog = "zk_request_log_lines" // requests logged in the window (-zk-request-log)
)

// zkThreadKinds classifies the ZooKeeper JVM's threads by the prefix of
// their (15-character) Linux name, first match wins; the rest are "other".
var zkThreadKinds = []struct{ prefix, kind string }{
	{"GC Thread", "gc"}, {"G1 ", "gc"}, {"VM Thread", "gc"}, // the serial collector runs in the VM thread
	{"C1 CompilerThre", "jit"}, {"C2 CompilerThre", "jit"}, {"Sweeper thread", "jit"},
	{"NIOServerCxnFac", "net"}, {"NIOWorkerThread", "net"}, {"nioEventLoopGro", "net"}, {"epollEventLoopG", "net"},
	{"RequestThrottle", "prep"}, {"ProcessThread(s", "prep"},
	{"SyncThread", "sync"},
	{"CommitProcWorkT", "commit"}, {"CommitProcessor", "commit"},
	{"LearnerHandler", "quorum"}, {"QuorumPeer", "quorum"}, {"FollowerRequest", "quorum"},
	{"LearnerSender", "quorum"}, {"LearnerCnxAccep", "quorum"}, {"Sender-", "quorum"},
	{"ObserverRequest", "quorum"}, {"WorkerReceiver", "quorum"}, {"WorkerSender", "quorum"},
	{"RecvWorker", "quorum"}, {"SendWorker", "quorum"},
}

// ZKThreadKinds lists the thread categories of the ZooKeeper CPU split in
// report order.
var ZKThreadKinds = []string{"net", "prep", "sync", "commit", "quorum", "gc", "jit", "other", "exited"}

func zkThreadKind(name string) string {
	for _, k := range zkThreadKinds {
		if strings.HasPrefix(name, k.prefix) {
			return k.kind
		}
	}
	return "other"
}

// cpuTimes is user and system CPU seconds.
type cpuTimes struct{ user, sys float64 }

func (c cpuTimes) total() float64 { return c.user + c.sys }

// procTimes reads utime and stime of /proc/<path>/stat (a process or one
// of its threads, "pid/task/tid") and the name in it.
func procTimes(path string) (name string, t cpuTimes, err error) {
	b, err := os.ReadFile("/proc/" + path + "/stat")
	if err != nil {
		return "", t, err
	}
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return "", t, fmt.Errorf("malformed stat of %s", path)
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) < 13 {
		return "", t, fmt.Errorf("short stat of %s", path)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return "", t, fmt.Errorf("bad stat of %s", path)
	}
	return string(b[i+1 : j]), cpuTimes{u / clockTicks, s / clockTicks}, nil
}

// threadTimes is one thread's kind and CPU seconds.
type threadTimes struct {
	kind string
	cpu  float64
}

// threadsOf reads pid's threads, by thread id.
func threadsOf(pid int) map[string]threadTimes {
	out := map[string]threadTimes{}
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		name, t, err := procTimes(strconv.Itoa(pid) + "/task/" + e.Name())
		if err != nil {
			continue
		}
		out[e.Name()] = threadTimes{zkThreadKind(name), t.total()}
	}
	return out
}

// threadDeltas returns the CPU each kind of thread used between a and b
// (thread ids in both, or started after a) and, as "exited", what the
// process used besides: threads that ended in between (the JVM retires
// idle compiler threads).
func threadDeltas(a, b map[string]threadTimes, process float64) map[string]float64 {
	out := map[string]float64{}
	var known float64
	for tid, tb := range b {
		d := tb.cpu - a[tid].cpu
		out[tb.kind] += d
		known += d
	}
	out["exited"] = max(0, process-known)
	return out
}

// memberSample is one ZooKeeper member's state at one instant.
type memberSample struct {
	ok      bool
	leader  bool // standalone or leader
	cpu     cpuTimes
	threads map[string]threadTimes // by thread id
	mntr    map[string]float64
	zxid    int64
	logSize int64 // size of the member's log file (-zk-request-log)
}

// costSample is everything a cell's cost accounting reads at one edge of
// the window.
type costSample struct {
	store     cpuTimes // the store's etcd-API processes (etcd, zketcd)
	apiserver float64  // the kube-apiservers
	helpers   float64  // the store's helpers and their children (PostgreSQL)
	zk        []memberSample
	metrics   map[string]float64 // summed over the store's /metrics
}

// sampleCost reads t's processes, ZooKeeper members and metrics. It never
// fails: what cannot be read is left out (and the figure is not reported).
func sampleCost(ctx context.Context, t *Target) *costSample {
	s := &costSample{}
	for _, pid := range t.apiPIDs() {
		if _, c, err := procTimes(strconv.Itoa(pid)); err == nil {
			s.store.user += c.user
			s.store.sys += c.sys
		}
	}
	var helpers []int
	for _, p := range t.helpers {
		if !p.exited() {
			helpers = append(helpers, p.pid())
		}
	}
	s.helpers = totalCPU(withDescendants(helpers))
	s.apiserver = totalCPU(withDescendants(t.extraPIDs))
	var wg sync.WaitGroup
	if t.zk != nil {
		members := t.zk.servers()
		s.zk = make([]memberSample, len(members))
		for i, m := range members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.zk[i] = sampleMember(ctx, m)
			}()
		}
	}
	if len(t.metricsURLs) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.metrics = scrapeAll(ctx, t.metricsURLs)
		}()
	}
	wg.Wait()
	return s
}

func sampleMember(ctx context.Context, m *zkserver.Server) memberSample {
	pid := m.PID()
	if pid == 0 {
		return memberSample{}
	}
	ms := memberSample{threads: threadsOf(pid), mntr: map[string]float64{}}
	var err error
	if _, ms.cpu, err = procTimes(strconv.Itoa(pid)); err != nil {
		return memberSample{}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	vals, err := m.Monitor(cctx)
	if err != nil {
		return memberSample{}
	}
	for k, v := range vals {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			ms.mntr[k] = f
		}
	}
	st := vals["zk_server_state"]
	ms.leader = st == "leader" || st == "standalone"
	if ms.zxid, err = m.Zxid(cctx); err != nil {
		return memberSample{}
	}
	if fi, err := os.Stat(m.LogPath()); err == nil {
		ms.logSize = fi.Size()
	}
	ms.ok = true
	return ms
}

// addCost stores in r.Extra what happened between a and b, per operation
// of r. zk request counts by type and path (-zk-request-log) are added by
// the caller.
func addCost(r *Result, t *Target, a, b *costSample) {
	if a == nil || b == nil || r.Ops <= 0 {
		return
	}
	ops := float64(r.Ops)
	per := func(v float64) float64 { return v / ops }
	us := func(v float64) float64 { return v / ops * 1e6 }
	set := func(k string, v float64) { r.Extra = withExtra(r.Extra, k, v) }

	storage := b.store.total() - a.store.total() + (b.helpers - a.helpers)
	var zkCPU cpuTimes
	var threads = map[string]float64{}
	var zk = map[string]float64{}
	var txns, fsyncs float64
	zkOK := len(a.zk) > 0 && len(a.zk) == len(b.zk)
	for i := range a.zk {
		ma, mb := a.zk[i], b.zk[i]
		if !ma.ok || !mb.ok {
			zkOK = false
			break
		}
		zkCPU.user += mb.cpu.user - ma.cpu.user
		zkCPU.sys += mb.cpu.sys - ma.cpu.sys
		for k, v := range threadDeltas(ma.threads, mb.threads, mb.cpu.total()-ma.cpu.total()) {
			threads[k] += v
		}
		for _, k := range []string{"zk_packets_received", "zk_cnt_readlatency", "zk_cnt_updatelatency", "zk_bytes_received_count",
			"zk_response_bytes", "zk_sum_node_changed_watch_count", "zk_sum_node_created_watch_count",
			"zk_sum_node_deleted_watch_count", "zk_sum_node_children_watch_count"} {
			zk[k] += mb.mntr[k] - ma.mntr[k]
		}
		if mb.leader && ma.leader {
			txns = float64(mb.zxid&0xffffffff) - float64(ma.zxid&0xffffffff)
			if mb.zxid>>32 != ma.zxid>>32 {
				txns = -1 // a new epoch: the counter restarted
			}
			fsyncs = mb.mntr["zk_cnt_fsynctime"] - ma.mntr["zk_cnt_fsynctime"]
		}
	}
	if zkOK {
		storage += zkCPU.total()
		set(xZKUser, us(zkCPU.user))
		set(xZKSys, us(zkCPU.sys))
		for _, k := range ZKThreadKinds {
			set(xZKThreadPfx+k, us(threads[k]))
		}
		set(xZKRequests, per(zk["zk_packets_received"]))
		set(xZKReads, per(zk["zk_cnt_readlatency"]))
		set(xZKWrites, per(zk["zk_cnt_updatelatency"]))
		set(xZKBytesIn, per(zk["zk_bytes_received_count"]))
		set(xZKBytesOut, per(zk["zk_response_bytes"]))
		set(xZKWatches, per(zk["zk_sum_node_changed_watch_count"]+zk["zk_sum_node_created_watch_count"]+
			zk["zk_sum_node_deleted_watch_count"]+zk["zk_sum_node_children_watch_count"]))
		if txns >= 0 {
			set(xZKTxns, per(txns))
			set(xZKFsyncs, per(fsyncs))
			if txns > 0 {
				set(xZKCPUPerTxn, zkCPU.total()/txns*1e6)
			}
		}
	} else if t.zk != nil {
		r.Note = joinNote(r.Note, "ZooKeeper's counters could not be read at both edges of the window")
	}
	if t.zk == nil || zkOK {
		set(xStorageCPU, us(storage))
	}
	if t.zk != nil && len(t.procs) > 0 {
		set(xZketcdCPU, us(b.store.total()-a.store.total()))
	}
	if len(t.extraPIDs) > 0 {
		set(xAPIServerCPU, us(b.apiserver-a.apiserver))
	}
	if a.metrics != nil && b.metrics != nil {
		d := func(k string) float64 { return b.metrics[k] - a.metrics[k] }
		var rpcs float64
		for k, v := range b.metrics {
			if m, ok := strings.CutPrefix(k, "rpc:"); ok {
				n := v - a.metrics[k]
				rpcs += n
				if n > 0 {
					set(xRPCPfx+m, per(n))
				}
			}
			if via, ok := strings.CutPrefix(k, "linread:"); ok {
				if n := v - a.metrics[k]; n > 0 {
					set(xLinReadPfx+via, per(n))
				}
			}
		}
		set(xRPCs, per(rpcs))
		if c := d("zketcd_commit_duration_seconds_count"); c > 0 {
			set(xCommits, per(c))
			if n := d("zketcd_commit_batch_ops_count"); n > 0 {
				set(xOpsPerCommit, d("zketcd_commit_batch_ops_sum")/n)
			}
		}
		if _, ok := b.metrics["zketcd_read_barrier_round_trips_total"]; ok {
			set(xBarriers, per(d("zketcd_read_barrier_round_trips_total")))
		}
		if c := d("etcd_disk_wal_fsync_duration_seconds_count"); c > 0 {
			set(xWALFsyncs, per(c))
		}
		if _, ok := b.metrics["etcd_disk_wal_fsync_duration_seconds_count"]; ok {
			set(xCommits, per(d("etcd_disk_backend_commit_duration_seconds_count")))
		}
	}
}

// scrapeAll sums the metrics the cost accounting reads over urls.
func scrapeAll(ctx context.Context, urls []string) map[string]float64 {
	out := map[string]float64{}
	for _, u := range urls {
		m, err := scrapeMetrics(ctx, u)
		if err != nil {
			return nil
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// scrapeMetrics reads the counters the accounting uses from a Prometheus
// text page: grpc_server_handled_total by method ("rpc:<method>"),
// zketcd_linearizable_reads_total by via ("linread:<via>"), and a few
// series by name (summed over their labels).
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// costSeries are the series parseMetrics keeps by name.
var costSeries = map[string]bool{
	"zketcd_commit_duration_seconds_count":            true,
	"zketcd_commit_batch_ops_sum":                     true,
	"zketcd_commit_batch_ops_count":                   true,
	"zketcd_read_barrier_round_trips_total":           true,
	"etcd_disk_wal_fsync_duration_seconds_count":      true,
	"etcd_disk_backend_commit_duration_seconds_count": true,
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		series, labels, _ := strings.Cut(line[:sp], "{")
		switch {
		case series == "grpc_server_handled_total":
			if m := label(labels, "grpc_method"); m != "" {
				out["rpc:"+m] += v
			}
		case series == "zketcd_linearizable_reads_total":
			out["linread:"+label(labels, "via")] += v
		case costSeries[series]:
			out[series] += v
		}
	}
	return out, sc.Err()
}

// label returns the value of label name in a series' label list
// (`a="x",b="y"}`).
func label(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(name)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// zkRequestLog is the -zk-request-log system property: ZooKeeper logs
// every request its final processor handles ("Processing request:: ...
// type:getData ... reqpath:/bench/head"), which the harness counts by
// type and path per cell. It costs ZooKeeper CPU: use it for counts, not
// for CPU figures.
const zkRequestLogProp = "org.slf4j.simpleLogger.log.org.apache.zookeeper.server.FinalRequestProcessor"

// countRequests counts the requests each member logged between a and b
// by type and path class, per op of r, into r.Extra.
func countRequests(r *Result, t *Target, a, b *costSample) {
	if t.zk == nil || a == nil || b == nil || r.Ops <= 0 || len(a.zk) != len(b.zk) {
		return
	}
	counts := map[string]float64{}
	var lines float64
	for i, m := range t.zk.servers() {
		if !a.zk[i].ok || !b.zk[i].ok {
			continue
		}
		n := readRequestLog(m.LogPath(), a.zk[i].logSize, b.zk[i].logSize, counts)
		lines += n
	}
	if lines == 0 {
		return
	}
	r.Extra = withExtra(r.Extra, xZKRequestLog, lines)
	for k, v := range counts {
		r.Extra[xZKReqPfx+k] = v / float64(r.Ops)
	}
}

// readRequestLog counts the request lines of path between offsets from
// and to into counts ("type:class") and returns how many it read.
func readRequestLog(path string, from, to int64, counts map[string]float64) float64 {
	f, err := os.Open(path)
	if err != nil || to <= from {
		return 0
	}
	defer f.Close()
	if _, err := f.Seek(from, 0); err != nil {
		return 0
	}
	sc := bufio.NewScanner(io.LimitReader(f, to-from))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var n float64
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "Processing request:: ")
		if i < 0 {
			continue
		}
		typ := field(line[i:], "type:")
		if typ == "ping" {
			continue
		}
		counts[typ+":"+pathClass(field(line[i:], "reqpath:"))]++
		n++
	}
	return n
}

// field returns the space-delimited value after key in s.
func field(s, key string) string {
	i := strings.Index(s, " "+key)
	if i < 0 {
		return ""
	}
	v := s[i+len(key)+1:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// pathClass names the zketcd znode a request path is (its layout's
// names: head, entry, bucket, ...), or "n/a" for a write (ZooKeeper logs
// no path for those), or "other".
func pathClass(p string) string {
	if p == "" || p == "n/a" {
		return "n/a"
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) < 2 {
		return "root"
	}
	rest := parts[1:]
	switch rest[0] {
	case "log":
		switch len(rest) {
		case 1:
			return "log"
		case 2:
			return "bucket"
		}
		return "entry"
	case "head", "meta", "compact", "readlease":
		return rest[0]
	case "members", "election", "leases", "tokens", "chunks", "base", "auth":
		return rest[0]
	}
	return "other"
}

// costKeys returns the Extra keys of r with prefix, sorted.
func costKeys(r *Result, prefix string) []string {
	var out []string
	for k := range r.Extra {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// metricsURL is the /metrics page of an etcd-API endpoint or metrics
// address ("127.0.0.1:port").
func metricsURL(hostport string) string { return "http://" + hostport + "/metrics" }
