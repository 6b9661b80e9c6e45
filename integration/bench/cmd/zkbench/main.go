// Command zkbench benchmarks zketcd against etcd and kine side by side on
// one machine — standalone, then in the deployed shape (3-member etcd,
// kine on PostgreSQL, several zketcd instances, the raw ZooKeeper floor,
// kube-apiservers on each store) — and writes docs/benchmarks.md with the
// raw results in docs/bench/. `make bench` (quick profile) and `make bench-long` run it
// from the repository root.
//
//	cd integration && go run ./bench/cmd/zkbench -profile quick -repo .. \
//	    -md ../docs/benchmarks.md -data ../docs/bench
//
// `zkbench serve-zketcd` is internal: the zketcd child the harness runs
// (with net/http/pprof) when -pprof is given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/zketcd/zketcd/integration/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "jfr-top" {
		if err := jfrTop(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "jfr-top:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "serve-zketcd" {
		if err := bench.ServeZketcd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "serve-zketcd:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "zkbench:", err)
		os.Exit(1)
	}
}

func run() error {
	profile := flag.String("profile", "quick", "quick or long")
	servers := flag.String("servers", "all", "servers to measure, comma separated: "+strings.Join(bench.AllServers, ",")+", or the groups all, standalone, deployed, kube")
	workloads := flag.String("workloads", "", "workloads to run, comma separated (default all): "+
		strings.Join(bench.AllWorkloads, ",")+","+bench.WWatch+","+bench.WKeepalive+","+bench.WToolPut+","+bench.WRecovery+
		"; tool-put's variants (only when named): "+strings.Join(bench.ToolVariants, ",")+
		"; the floor's: "+strings.Join(bench.FloorWorkloads, ",")+"; the kube stacks': "+strings.Join(bench.KubeWorkloads, ","))
	duration := flag.Duration("duration", 0, "measured time per cell (default: the profile's)")
	warmup := flag.Duration("warmup", -1, "warm-up per cell (default: the profile's)")
	clients := flag.String("clients", "", "client counts, comma separated (default: the profile's)")
	recoveryKeys := flag.String("recovery-keys", "", "key counts for the recovery measurement, comma separated (default: the profile's)")
	baseline := flag.String("baseline", "", "an earlier results.json whose standalone zketcd rows the report compares with (read before it is overwritten)")
	leases := flag.Int("leases", 0, "leases the lease-keepalive cell keeps alive (default: the profile's)")
	maxConns := flag.Int("max-conns", 0, "most connections a cell's clients share (default: the profile's, 16)")
	floorEntry := flag.Int("floor-entry-bytes", 0, "size of the ZooKeeper floors' log entries (default: that of a 256 B put)")
	kubeObjects := flag.Int("kube-objects", 0, "objects the kube stacks create, then read, update and list (default: the profile's)")
	repo := flag.String("repo", "..", "the zketcd repository root")
	md := flag.String("md", "", "markdown report to write (e.g. ../docs/benchmarks.md); empty: none")
	data := flag.String("data", "", "directory for results.json, results.csv and the plots (default: bench/ beside -md)")
	etcdBin := flag.String("etcd", "", "etcd binary (default: build-peers.sh)")
	kineBin := flag.String("kine", "", "kine binary (default: build-peers.sh)")
	benchBin := flag.String("benchmark", "", `etcd benchmark tool binary (default: build-peers.sh; "none" skips the cross-check)`)
	zketcdBin := flag.String("zketcd", "", "zketcd binary (default: go build ./cmd/zketcd)")
	kubeBin := flag.String("kube-apiserver", "", "kube-apiserver binary for the kube stacks (default: integration/kube/build-kube-apiserver.sh)")
	pgBin := flag.String("pg-bin", "", "directory of PostgreSQL's initdb, postgres and pg_isready (default: the newest /usr/lib/postgresql/*/bin)")
	pprofDir := flag.String("pprof", "", "run zketcd in-process in a child with net/http/pprof and save a CPU profile of every cell here")
	keep := flag.Bool("keep", false, "keep the work directory (server data and logs)")
	zketcdArgs := flag.String("zketcd-args", "", `more flags for every zketcd server, space separated (e.g. "--commit-pipeline 4")`)
	scale := flag.Bool("scale", false, "run the scale benchmark instead (issue 22: etcd 3-member vs zketcd on a 3-member ensemble at -scale-sizes kube-like objects); writes scale.json, scale.md and its plots into -data and splices the section into -md")
	scaleSizes := flag.String("scale-sizes", "100000,300000,1000000", "object counts of the scale benchmark")
	scaleStacks := flag.String("scale-stacks", "", "stacks of the scale benchmark (default both): "+bench.ScaleEtcd+","+bench.ScaleZketcd)
	scaleHeap := flag.String("scale-zk-heap", "3g", "each ZooKeeper JVM's -Xmx in the scale benchmark")
	scaleRender := flag.Bool("scale-render", false, "measure nothing: re-render the scale section (-md, -data) from -data's scale.json")
	scaleKubeAt := flag.Int("scale-kube-at", 300000, "size at which the scale benchmark runs kube-apiserver's 10,000-object load (0: never)")
	scaleRestarts := flag.Int("scale-restarts", 3, "how many times the scale benchmark restarts one instance (member); its table shows the median")
	scaleChurn := flag.Float64("scale-churn-share", 0.5, "share of the objects the scale benchmark writes again before its third compaction (zketcd writes a whole base once superseded versions pass half the live data; a small share keeps the log as the generation, whose replay the restarts then measure)")
	scaleWatchCap := flag.Duration("scale-watch-cap", 20*time.Minute, "how long the scale benchmark's watch catch-up may take; one still behind is noted and the steps after it go on")
	zkJVM := flag.String("zk-jvm", "", `the ZooKeeper servers' JVM flags besides the heap, space separated, instead of the harness's defaults (`+strings.Join(bench.ZKDefaultJVMFlags(), " ")+`); "none": no flags`)
	zkCfg := flag.String("zk-cfg", "", "more zoo.cfg lines for every ZooKeeper server, comma separated key=value (e.g. snapCount=200000)")
	zkProps := flag.String("zk-props", "", "more system properties for every ZooKeeper JVM, comma separated key=value (e.g. zookeeper.digest.enabled=false)")
	zkJFR := flag.String("zk-jfr", "", "record a Java Flight Recording of every ZooKeeper JVM and dump each cell's window into this directory (summarize with `zkbench jfr-top FILES`)")
	zkReqLog := flag.Bool("zk-request-log", false, "make ZooKeeper log every request and count them per cell by type and path (costs ZooKeeper CPU: for counts only)")
	render := flag.String("render", "", "measure nothing: re-render -md (and the plots, CSV, JSON) from this results.json (with -baseline: against that one)")
	flag.Parse()

	if *render != "" {
		if *md == "" {
			return fmt.Errorf("-render needs -md")
		}
		rep, err := bench.LoadReport(*render)
		if err != nil {
			return err
		}
		if *baseline != "" {
			old, err := bench.LoadReport(*baseline)
			if err != nil {
				return fmt.Errorf("baseline: %w", err)
			}
			rep.SetBaseline(old)
		}
		dir := *data
		if dir == "" {
			dir = filepath.Join(filepath.Dir(*md), "bench")
		}
		return rep.WriteFiles(*md, dir)
	}

	if *scaleRender {
		dir := *data
		if dir == "" {
			dir = filepath.Join(filepath.Dir(*md), "bench")
		}
		rep, err := bench.LoadScaleReport(filepath.Join(dir, "scale.json"))
		if err != nil {
			return err
		}
		return rep.WriteFiles(dir, *md)
	}
	if *scale {
		return runScale(*scaleSizes, *scaleStacks, *scaleHeap, *scaleKubeAt, *scaleRestarts, *scaleChurn, *scaleWatchCap, *repo, *md, *data, *etcdBin, *zketcdBin, *kubeBin, *keep, strings.Fields(*zketcdArgs))
	}
	p, ok := bench.Profiles[*profile]
	if !ok {
		return fmt.Errorf("unknown profile %q", *profile)
	}
	if *duration > 0 {
		p.Duration = *duration
		p.Name += "-custom"
	}
	if *warmup >= 0 {
		p.Warmup = *warmup
	}
	if *clients != "" {
		cs, err := ints(*clients)
		if err != nil {
			return err
		}
		p.Clients = cs
		if !strings.HasSuffix(p.Name, "-custom") {
			p.Name += "-custom"
		}
	}
	if *recoveryKeys != "" {
		ks, err := ints(*recoveryKeys)
		if err != nil {
			return err
		}
		p.RecoveryKeys = ks
	}
	if *leases > 0 {
		p.KeepaliveLeases = *leases
	}
	if *kubeObjects > 0 {
		p.KubeObjects = *kubeObjects
	}
	if *maxConns > 0 {
		p.MaxConns = *maxConns
		if !strings.HasSuffix(p.Name, "-custom") {
			p.Name += "-custom"
		}
	}
	if *floorEntry > 0 {
		p.FloorEntryBytes = *floorEntry
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	opts := bench.Options{
		Profile: p, Servers: list(*servers), Workloads: list(*workloads),
		RepoRoot: root, EtcdBin: *etcdBin, KineBin: *kineBin, BenchmarkBin: *benchBin, ZketcdBin: *zketcdBin,
		KubeAPIServerBin: *kubeBin, PGBinDir: *pgBin, BaselinePath: *baseline,
		SelfBin: self, PprofDir: *pprofDir, KeepWorkDir: *keep, ZketcdArgs: strings.Fields(*zketcdArgs),
		ZKJFRDir: *zkJFR, ZKRequestLog: *zkReqLog,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		},
	}
	switch *zkJVM {
	case "":
	case "none":
		opts.ZKJVMFlags = []string{}
	default:
		opts.ZKJVMFlags = strings.Fields(*zkJVM)
	}
	if opts.ZKConfig, err = keyValues(*zkCfg); err != nil {
		return fmt.Errorf("-zk-cfg: %w", err)
	}
	if opts.ZKProps, err = keyValues(*zkProps); err != nil {
		return fmt.Errorf("-zk-props: %w", err)
	}
	if *md != "" {
		opts.MarkdownPath = *md
		opts.DataDir = *data
		if opts.DataDir == "" {
			opts.DataDir = filepath.Join(filepath.Dir(*md), "bench")
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := bench.Run(ctx, opts)
	if rep != nil {
		opts.Logf("done in %s: %d results", time.Since(start).Round(time.Second), len(rep.Results))
		for _, h := range rep.Headlines() {
			if h.Rows > 0 {
				opts.Logf("headline: %s vs %s: geo-mean throughput ratio %.2f over %d rows (%d >10%% faster, %d within ±10%%, %d >10%% slower)",
					h.Zketcd, h.Peer, h.GeoMean, h.Rows, h.Faster, h.Even, h.Slower)
			}
		}
	}
	return err
}

func runScale(sizes, stacks, heap string, kubeAt, restarts int, churn float64, watchCap time.Duration, repo, md, data, etcdBin, zketcdBin, kubeBin string, keep bool, zketcdArgs []string) error {
	ns, err := ints(sizes)
	if err != nil {
		return err
	}
	root, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	opts := bench.ScaleOptions{Sizes: ns, Stacks: list(stacks), ZKHeap: heap, KubeAt: kubeAt, Restarts: restarts, ChurnShare: churn, WatchCap: watchCap, RepoRoot: root,
		EtcdBin: etcdBin, ZketcdBin: zketcdBin, KubeAPIServerBin: kubeBin, KeepWorkDir: keep, ZketcdArgs: zketcdArgs,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		},
	}
	if md != "" {
		opts.MarkdownPath = md
		opts.DataDir = data
		if opts.DataDir == "" {
			opts.DataDir = filepath.Join(filepath.Dir(md), "bench")
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := bench.RunScale(ctx, opts)
	if rep != nil {
		opts.Logf("scale benchmark done in %s: %d rows", time.Since(start).Round(time.Second), len(rep.Rows))
	}
	return err
}

// keyValues parses "k=v,k=v".
func keyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range list(s) {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", p)
		}
		out[k] = v
	}
	return out, nil
}

// jfrTop is `zkbench jfr-top [-n N] FILE.jfr...`: the samples of flight
// recordings the harness dumped (-zk-jfr), inside each cell's window,
// by thread kind, innermost frame and package, and ZooKeeper frame.
func jfrTop(args []string) error {
	fs := flag.NewFlagSet("jfr-top", flag.ContinueOnError)
	n := fs.Int("n", 25, "rows per table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: zkbench jfr-top [-n N] FILE.jfr")
	}
	out, err := bench.JFRTop(fs.Args(), *n)
	if err != nil {
		return err
	}
	fmt.Print(out)
	return nil
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func ints(s string) ([]int, error) {
	var out []int
	for _, p := range list(s) {
		var n int
		if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q", p)
		}
		out = append(out, n)
	}
	return out, nil
}
