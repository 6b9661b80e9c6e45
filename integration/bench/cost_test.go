package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestZKThreadKindsByLinuxName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"SyncThread:0": "sync", "NIOWorkerThread": "net", "NIOServerCxnFac": "net", "ProcessThread(s": "prep",
		"RequestThrottle": "prep", "C2 CompilerThre": "jit", "C1 CompilerThre": "jit", "VM Thread": "gc",
		"GC Thread#0": "gc", "G1 Conc#0": "gc", "CommitProcWorkT": "commit", "LearnerHandler-": "quorum",
		"QuorumPeer[myid": "quorum", "java": "other", "Signal Dispatch": "other",
	} {
		if got := zkThreadKind(name); got != want {
			t.Errorf("zkThreadKind(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestThreadDeltasCountExitedThreadsApart(t *testing.T) {
	t.Parallel()
	a := map[string]threadTimes{"1": {"sync", 10}, "2": {"jit", 5}, "3": {"jit", 1}}
	b := map[string]threadTimes{"1": {"sync", 12}, "3": {"jit", 1.5}, "4": {"jit", 0.25}} // 2 exited, 4 started
	d := threadDeltas(a, b, 4)
	if d["sync"] != 2 || d["jit"] != 0.75 || d["exited"] != 1.25 {
		t.Errorf("threadDeltas = %v, want sync 2, jit 0.75, exited 1.25", d)
	}
}

func TestParseMetricsKeepsRPCsAndCommitCounters(t *testing.T) {
	t.Parallel()
	page := `# HELP grpc_server_handled_total x
grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 10
grpc_server_handled_total{grpc_code="FailedPrecondition",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 2
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 5
zketcd_commit_duration_seconds_count{outcome="committed"} 7
zketcd_commit_duration_seconds_count{outcome="conflict"} 1
zketcd_commit_batch_ops_sum 24
zketcd_linearizable_reads_total{via="barrier"} 4
zketcd_unrelated_total 99
`
	m, err := parseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"rpc:Txn": 12, "rpc:Range": 5, "zketcd_commit_duration_seconds_count": 8,
		"zketcd_commit_batch_ops_sum": 24, "linread:barrier": 4}
	if len(m) != len(want) {
		t.Errorf("parseMetrics = %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

// TestAddCostDividesDeltasByOps feeds two samples of a zketcd stack on a
// 3-member ensemble and a kube-apiserver and checks the per-operation
// figures.
func TestAddCostDividesDeltasByOps(t *testing.T) {
	t.Parallel()
	member := func(cpu float64, leader bool, zxid int64, packets float64) memberSample {
		return memberSample{ok: true, leader: leader, cpu: cpuTimes{user: cpu * 0.75, sys: cpu * 0.25},
			threads: map[string]threadTimes{"1": {"sync", cpu / 2}, "2": {"gc", cpu / 4}, "3": {"jit", cpu / 4}}, zxid: zxid,
			mntr: map[string]float64{"zk_packets_received": packets, "zk_cnt_readlatency": packets / 2,
				"zk_cnt_updatelatency": packets / 2, "zk_bytes_received_count": packets * 100,
				"zk_response_bytes": packets * 10, "zk_sum_node_changed_watch_count": packets / 4,
				"zk_cnt_fsynctime": packets}}
	}
	a := &costSample{store: cpuTimes{user: 1}, apiserver: 10,
		zk:      []memberSample{member(1, false, 1<<32|5, 0), member(2, true, 1<<32|5, 0), member(1, false, 1<<32|5, 0)},
		metrics: map[string]float64{"rpc:Txn": 0, "zketcd_commit_duration_seconds_count": 0, "zketcd_commit_batch_ops_sum": 0, "zketcd_commit_batch_ops_count": 0}}
	b := &costSample{store: cpuTimes{user: 1.5, sys: 0.5}, apiserver: 13,
		zk:      []memberSample{member(2, false, 1<<32|505, 0), member(4, true, 1<<32|505, 1000), member(2, false, 1<<32|505, 0)},
		metrics: map[string]float64{"rpc:Txn": 2000, "zketcd_commit_duration_seconds_count": 500, "zketcd_commit_batch_ops_sum": 2000, "zketcd_commit_batch_ops_count": 500}}
	tg := &Target{Name: ServerKubeZK3, zk: &zkCluster{}, extraPIDs: []int{1}}
	r := Result{Ops: 1000}
	addCost(&r, tg, a, b)
	near := func(k string, want float64) {
		t.Helper()
		if got, has := r.Extra[k]; !has || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, has, want)
		}
	}
	// store: zketcd 1 s + ZooKeeper 1+2+1 s = 5 s over 1,000 ops
	near(xStorageCPU, 5000)
	near(xAPIServerCPU, 3000)
	near(xZKUser, 3000)
	near(xZKSys, 1000)
	near(xZKThreadPfx+"sync", 2000)
	near(xZKThreadPfx+"gc", 1000)
	near(xZKRequests, 1)
	near(xZKReads, 0.5)
	near(xZKWatches, 0.25)
	near(xZKBytesIn, 100)
	near(xZKTxns, 0.5)       // the leader's zxid went up by 500
	near(xZKFsyncs, 1)       // the leader's fsyncs
	near(xZKCPUPerTxn, 8000) // 4 s of ZooKeeper CPU over 500 transactions
	near(xRPCs, 2)
	near(xRPCPfx+"Txn", 2)
	near(xCommits, 0.5)
	near(xOpsPerCommit, 4)

	// A new epoch (leader change) restarts the counter: no transaction figure.
	b.zk[1].zxid = 2<<32 | 3
	r = Result{Ops: 1000}
	addCost(&r, tg, a, b)
	if _, has := r.Extra[xZKTxns]; has {
		t.Error("transactions counted across an epoch change")
	}
	// A member that could not be read: no ZooKeeper figures, no storage CPU, a note.
	b.zk[2].ok = false
	r = Result{Ops: 1000}
	addCost(&r, tg, a, b)
	if _, has := r.Extra[xStorageCPU]; has || !strings.Contains(r.Note, "could not be read") {
		t.Errorf("unreadable member: extra %v, note %q", r.Extra, r.Note)
	}
}

func TestRequestLogCountsByTypeAndZnode(t *testing.T) {
	t.Parallel()
	lines := `[SyncThread:0] DEBUG org.apache.zookeeper.server.FinalRequestProcessor - Processing request:: sessionid:0x1 type:getData cxid:0x1 zxid:0xfffffffffffffffe txntype:unknown reqpath:/bench/head
[SyncThread:0] DEBUG org.apache.zookeeper.server.FinalRequestProcessor - Processing request:: sessionid:0x1 type:getData cxid:0x2 zxid:0xfffffffffffffffe txntype:unknown reqpath:/bench/log/0000000000/00000000000000000012
[SyncThread:0] DEBUG org.apache.zookeeper.server.FinalRequestProcessor - Processing request:: sessionid:0x1 type:multi cxid:0x3 zxid:0x10 txntype:14 reqpath:n/a
[SyncThread:0] DEBUG org.apache.zookeeper.server.FinalRequestProcessor - Processing request:: sessionid:0x1 type:ping cxid:0x3 zxid:0x10 txntype:14 reqpath:n/a
[main] INFO something else
[SyncThread:0] DEBUG org.apache.zookeeper.server.FinalRequestProcessor - Processing request:: sessionid:0x1 type:getChildren2 cxid:0x4 zxid:0xfffffffffffffffe txntype:unknown reqpath:/bench/members
`
	path := filepath.Join(t.TempDir(), "zookeeper.log")
	head := "---- zkserver: starting\n"
	if err := os.WriteFile(path, []byte(head+lines+"[SyncThread:0] DEBUG x - Processing request:: type:getData reqpath:/bench/head\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	n := readRequestLog(path, int64(len(head)), int64(len(head)+len(lines)), counts)
	want := map[string]float64{"getData:head": 1, "getData:entry": 1, "multi:n/a": 1, "getChildren2:members": 1}
	if n != 4 || len(counts) != len(want) {
		t.Fatalf("read %v lines: %v, want %v", n, counts, want)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s = %v, want %v", k, counts[k], v)
		}
	}
}

func TestParseJFRPrintReadsThreadsAndStacks(t *testing.T) {
	t.Parallel()
	text := `jdk.ExecutionSample {
  startTime = 12:35:54.151
  sampledThread = "SyncThread:0" (javaThreadId = 30)
  state = "STATE_RUNNABLE"
  stackTrace = [
    java.util.zip.CRC32.update(byte[], int, int) line: 76
    org.apache.zookeeper.server.DataTree.digest(String, DataNode) line: 1600
    ...
  ]
}

jdk.ExecutionSample {
  startTime = 12:35:55.000
  sampledThread = "NIOWorkerThread-3" (javaThreadId = 31)
  stackTrace = [
    sun.nio.ch.SocketDispatcher.write0(FileDescriptor, long, int)
  ]
}
`
	day := time.Date(2026, 12, 7, 0, 0, 0, 0, time.Local)
	ss, err := ParseJFRPrint(strings.NewReader(text), day)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 {
		t.Fatalf("%d samples", len(ss))
	}
	if ss[0].Thread != "SyncThread:0" || len(ss[0].Stack) != 2 || ss[0].Stack[1] != "org.apache.zookeeper.server.DataTree.digest(String, DataNode)" {
		t.Errorf("sample 0 = %+v", ss[0])
	}
	if want := time.Date(2026, 12, 7, 12, 35, 54, 151e6, time.Local); !ss[0].At.Equal(want) {
		t.Errorf("time = %v, want %v", ss[0].At, want)
	}
	if pkgOf(ss[1].Stack[0]) != "sun.nio.ch" || threadFamily(ss[1].Thread) != "NIOWorkerThread" {
		t.Errorf("sample 1 = %+v (package %q)", ss[1], pkgOf(ss[1].Stack[0]))
	}
}

func TestPathClassNamesZketcdZnodes(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]string{
		"/bench/head": "head", "/bench/log/0000000000/00000000000000000012": "entry", "/bench/log/0000000000": "bucket",
		"/bench/members/1f": "members", "n/a": "n/a", "/bench": "root", "/bench/zzz": "other", "/bench/readlease": "readlease",
	} {
		if got := pathClass(p); got != want {
			t.Errorf("pathClass(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestCostSectionAndCPUColumns renders rows with cost figures: the
// throughput table carries the CPU per 1,000 operations, the kube table
// its storage CPU and ratio, and the cost section its tables.
func TestCostSectionAndCPUColumns(t *testing.T) {
	t.Parallel()
	rep := &Report{Profile: Profiles["quick"]}
	etcd := synthetic(ServerEtcd, WPutSeq, 16, 1000)
	etcd.ServerCPUSeconds, etcd.ServerCPUPerOpUs = 0.1, 500
	etcd.Extra = map[string]float64{xStorageCPU: 500, xRPCs: 1, xWALFsyncs: 0.2}
	zk := synthetic(ServerZK1, WPutSeq, 16, 800)
	zk.Extra = map[string]float64{xStorageCPU: 1250, "zketcd_cpu_per_op_us": 400, xZKUser: 600, xZKSys: 250,
		xZKThreadPfx + "sync": 300, xZKTxns: 0.25, xZKCPUPerTxn: 3400, xRPCs: 1, xCommits: 0.25, xOpsPerCommit: 4}
	ke := synthetic(ServerKubeEtcd, WKubeCreate, 16, 500)
	ke.Extra = map[string]float64{xStorageCPU: 400, xAPIServerCPU: 900, xRPCPfx + "Txn": 1}
	kz := synthetic(ServerKubeZK1, WKubeCreate, 16, 400)
	kz.Extra = map[string]float64{xStorageCPU: 1200, xAPIServerCPU: 900, xZKUser: 500, xZKSys: 200, xRPCPfx + "Txn": 1}
	rep.Results = append(rep.Results, etcd, zk, ke, kz)
	dir := t.TempDir()
	if err := rep.WriteFiles(filepath.Join(dir, "b.md"), filepath.Join(dir, "bench")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "b.md"))
	text := string(b)
	for _, want := range []string{
		"| put-seq | 16 | 1,000 (0.50 s) | 800 (1.25 s) | 0.80× |",
		"| kube-create | 16 | 500 (",
		"; 0.40 s) | 400 (",
		"; 1.20 s) | 0.80× |",
		" | 3.00× |", // storage CPU per request, zk1 over etcd
		"## Where the storage CPU goes",
		"| zketcd, ZK standalone | put-seq | 16 | 800 | 1,250 | 400 | 600 | 250 |",
		"| 3,400 |",
		"| etcd 3.7.3 | put-seq | 16 | 1.00 | — | — | — | — | — | — | — | 0.20 |",
		"| kube-apiserver on zketcd, ZK standalone | kube-create | 16 | Txn 1.00 |",
		"## Issue 38's targets",
		"| storage CPU per Kubernetes request (every verb and client count), standalone and 3-member | ≤ 1.2× etcd's | worst: kube-create ×16 k-zk1/k-etcd 3.00× | **missed** |",
		"| kube-apiserver throughput at 16 clients, every verb | ≥ 1.0× etcd | worst: kube-create ×16 k-zk1/k-etcd 0.80× | **missed** |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}
