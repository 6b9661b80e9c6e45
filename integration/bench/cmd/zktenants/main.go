// Command zktenants runs the tenants benchmark (issue 35, `make
// bench-tenants`): many tenants on one zketcd fleet against etcd 3.7.3 per
// tenant and a shared etcd in Kamaji's layout, and a quiet tenant beside a
// flooding neighbour. It writes docs/bench/tenants.{json,md}, the plots,
// and its section of docs/benchmarks.md.
//
//	cd integration && go run ./bench/cmd/zktenants -repo .. -zketcd ../bin/zketcd \
//	    -md ../docs/benchmarks.md
//
// A smoke run: -tenants 4 -objects 50 -churn 5s -isolation-rounds 1
// -isolation-phase 3s -md ../out/tenants/benchmarks.md.
package main

import (
	"context"
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
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "zktenants:", err)
		os.Exit(1)
	}
}

func run() error {
	var o bench.TenantsOptions
	flag.IntVar(&o.Tenants, "tenants", 100, "tenants")
	flag.IntVar(&o.Objects, "objects", 500, "kube-like objects loaded into each tenant")
	flag.IntVar(&o.Instances, "instances", 2, "zketcd serve --tenants instances")
	flag.IntVar(&o.ZKMembers, "zk-members", 3, "ZooKeeper servers (1: standalone)")
	flag.StringVar(&o.ZKHeap, "zk-heap", "2g", "each ZooKeeper JVM's -Xmx")
	flag.IntVar(&o.Sessions, "tenant-zk-sessions", 0, "the fleet's --tenant-zk-sessions (0: zketcd's default)")
	flag.IntVar(&o.LoadClients, "load-clients", 64, "goroutines loading the objects")
	flag.Float64Var(&o.ChurnRate, "churn-rate", 300, "churn operations a second over all tenants")
	flag.DurationVar(&o.ChurnFor, "churn", 2*time.Minute, "how long the churn runs")
	flag.DurationVar(&o.Settle, "settle", 5*time.Second, "quiet time before each sample, over which CPU and ZooKeeper's requests are measured")
	flag.IntVar(&o.Isolation.Rounds, "isolation-rounds", 3, "rounds of the isolation phases (0: none)")
	flag.DurationVar(&o.Isolation.Phase, "isolation-phase", 20*time.Second, "each isolation phase's length per round")
	flag.Float64Var(&o.Isolation.QuietRate, "quiet-rate", 40, "the quiet tenant's requests a second")
	flag.IntVar(&o.Isolation.FloodClients, "flood-clients", 32, "the flooding neighbour's goroutines")
	flag.Int64Var(&o.Isolation.FloodLimit, "flood-limit", 200, "the neighbour's --requests-per-second in the limited phases")
	stacks := flag.String("stacks", "", "stacks to run, comma separated (default all): "+strings.Join([]string{bench.TenantsFleet, bench.TenantsEtcdOne, bench.TenantsEtcdShared}, ","))
	repo := flag.String("repo", "..", "the zketcd repository root")
	md := flag.String("md", "", "markdown report to splice the section into (e.g. ../docs/benchmarks.md); empty: none")
	data := flag.String("data", "", "directory for tenants.json, tenants.md and the plots (default: bench/ beside -md)")
	etcdBin := flag.String("etcd", "", "etcd binary (default: build-peers.sh)")
	zketcdBin := flag.String("zketcd", "", "zketcd binary (default: go build ./cmd/zketcd)")
	keep := flag.Bool("keep", false, "keep the work directory (server data and logs)")
	zketcdArgs := flag.String("zketcd-args", "", "more flags for every fleet instance, space separated")
	render := flag.Bool("render", false, "measure nothing: re-render the section (-md, -data) from -data's tenants.json")
	flag.Parse()

	dir := *data
	if dir == "" && *md != "" {
		dir = filepath.Join(filepath.Dir(*md), "bench")
	}
	if *render {
		if dir == "" {
			return fmt.Errorf("-render needs -md or -data")
		}
		rep, err := bench.LoadTenantsReport(filepath.Join(dir, "tenants.json"))
		if err != nil {
			return err
		}
		return rep.WriteFiles(dir, *md)
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	for _, s := range strings.Split(*stacks, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.Stacks = append(o.Stacks, s)
		}
	}
	o.RepoRoot, o.EtcdBin, o.ZketcdBin, o.KeepWorkDir = root, *etcdBin, *zketcdBin, *keep
	o.ZketcdArgs = strings.Fields(*zketcdArgs)
	o.DataDir, o.MarkdownPath = dir, *md
	o.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	o.Command = "zktenants " + strings.Join(os.Args[1:], " ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := bench.RunTenants(ctx, o)
	if rep != nil {
		o.Logf("tenants benchmark done in %s", time.Since(start).Round(time.Second))
	}
	return err
}
