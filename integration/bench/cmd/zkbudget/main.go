// Command zkbudget measures the latency budget of one sequential put and one
// linearizable get: ZooKeeper's own time (from its `mntr` summaries:
// fsync, update and read latency), the raw ZooKeeper floor of the requests
// zketcd sends (a commit-like multi, a barrier-like multi{check} + get,
// from a go-zookeeper client), zketcd's own metrics (commit and barrier
// durations, gRPC handling time) and, for comparison, etcd's put and get
// in the same session. One client, one request in flight. It backs
// docs/bench/analysis.md.
//
//	cd integration && go run ./bench/cmd/zkbudget -zketcd ../bin/zketcd -n 3000
//	go run ./bench/cmd/zkbudget -force-sync no -etcd none   # ZooKeeper without fsync
//
// Everything listens on 127.0.0.1 and runs in a temporary directory.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/bench/zkfloor"
	"github.com/zketcd/zketcd/internal/zkserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "zkbudget:", err)
		os.Exit(1)
	}
}

var (
	n         = flag.Int("n", 3000, "measured operations per phase")
	warm      = flag.Int("warmup", 3000, "unmeasured operations before each phase (JIT warm-up)")
	forceSync = flag.String("force-sync", "yes", "ZooKeeper forceSync (yes: fsync every log write, as the benchmarks)")
	zketcdBin = flag.String("zketcd", "../bin/zketcd", `zketcd binary ("none" skips the zketcd phases)`)
	etcdBin   = flag.String("etcd", filepath.Join(os.Getenv("HOME"), ".cache/zketcd/etcd-v3.7.3/etcd"), `etcd binary ("none" skips etcd)`)
	heap      = flag.String("zk-heap", "1g", "ZooKeeper JVM heap, as the benchmarks")
	zkPID     int
	hold      = flag.Duration("hold", 0, "after the phases, keep the servers up this long (to attach a profiler)")
)

func run() error {
	flag.Parse()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "zkbudget-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	srv, err := zkserver.StartStandalone(ctx, zkserver.Options{
		Dir:               filepath.Join(dir, "zk"),
		NoDefaultJVMFlags: true,
		JVMFlags:          []string{"-Xmx" + *heap, "-Xms" + *heap, "-XX:-UsePerfData"},
		ExtraConfig:       map[string]string{"forceSync": *forceSync},
		Logger:            logrus.NewEntry(lg),
		StartTimeout:      2 * time.Minute,
	})
	if err != nil {
		return err
	}
	defer srv.Stop()
	fmt.Printf("ZooKeeper standalone on %s, forceSync=%s, heap %s; %d ops per phase after %d warm-up ops\n\n",
		srv.Addr(), *forceSync, *heap, *n, *warm)

	zkPID = srv.PID()
	if err := rawPhases(srv.Addr()); err != nil {
		return err
	}
	if *zketcdBin != "none" {
		if err := zketcdPhases(ctx, dir, srv.Addr()); err != nil {
			return err
		}
	}
	if *etcdBin != "none" {
		if err := etcdPhases(ctx, dir); err != nil {
			return err
		}
	}
	if *hold > 0 {
		time.Sleep(*hold)
	}
	return nil
}

// ---- raw ZooKeeper -------------------------------------------------------

func rawPhases(addr string) error {
	f, err := zkfloor.Open([]string{addr}, "/floor")
	if err != nil {
		return err
	}
	defer f.Close()
	for _, ph := range []struct {
		name string
		op   func() error
	}{
		{fmt.Sprintf("raw commit multi(check, create %d B, setData)", zkfloor.EntrySize), f.CommitChained},
		{"raw barrier multi(check(head)) + get(head)", f.Barrier},
		{"raw multi(check(head)) alone", f.Check},
		{"raw get(head)", f.Get},
	} {
		if err := measure(ph.name, addr, nil, ph.op); err != nil {
			return err
		}
	}
	return nil
}

// ---- zketcd and etcd ---------------------------------------------------

func zketcdPhases(ctx context.Context, dir, zkAddr string) error {
	port, mport := freePort(), freePort()
	ep := "127.0.0.1:" + strconv.Itoa(port)
	murl := "http://127.0.0.1:" + strconv.Itoa(mport)
	cmd := exec.Command(*zketcdBin, "serve", "--zk", zkAddr, "--zk-root", "/zketcd",
		"--name", "budget", "--listen-client-urls", "http://"+ep, "--listen-metrics-urls", murl, "--log-level", "warn")
	stop, err := startLogged(cmd, filepath.Join(dir, "zketcd.log"))
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("zketcd (%s) on %s, metrics and /debug/pprof (if served) on %s\n", *zketcdBin, ep, murl)
	return kvPhases(ctx, "zketcd", ep, zkAddr, murl)
}

func etcdPhases(ctx context.Context, dir string) error {
	cport, pport := freePort(), freePort()
	curl := "http://127.0.0.1:" + strconv.Itoa(cport)
	purl := "http://127.0.0.1:" + strconv.Itoa(pport)
	cmd := exec.Command(*etcdBin, "--name", "n1", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "n1="+purl, "--log-level", "warn")
	stop, err := startLogged(cmd, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("etcd (%s) on %s\n", *etcdBin, curl)
	return kvPhases(ctx, "etcd", "127.0.0.1:"+strconv.Itoa(cport), "", "")
}

// startLogged starts cmd with its output in logPath and returns a function
// that interrupts it and waits for it to exit.
func startLogged(cmd *exec.Cmd, logPath string) (stop func(), err error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		logf.Close()
	}, nil
}

func kvPhases(ctx context.Context, name, ep, zkAddr, murl string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(cctx, "/budget/ready")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not serving: %w", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	val := strings.Repeat("v", 256)
	seq := 0
	put := func() error {
		seq++
		_, err := cli.Put(ctx, fmt.Sprintf("/budget/seq/%012d", seq), val)
		return err
	}
	get := func() error {
		_, err := cli.Get(ctx, "/budget/seq/000000000001")
		return err
	}
	if err := measure(name+" put (256 B, sequential keys)", zkAddr, metricsProbe(murl, "Put"), put); err != nil {
		return err
	}
	return measure(name+" linearizable get", zkAddr, metricsProbe(murl, "Range"), get)
}

// ---- measurement ---------------------------------------------------------

// probe snapshots counters (name → value) before and after a phase.
type probe func() (map[string]float64, error)

func measure(name, zkAddr string, extra probe, op func() error) error {
	for i := 0; i < *warm; i++ {
		if err := op(); err != nil {
			return fmt.Errorf("%s warm-up: %w", name, err)
		}
	}
	var before, after, xb, xa map[string]float64
	var err error
	if zkAddr != "" {
		if before, err = mntr(zkAddr); err != nil {
			return err
		}
	}
	if extra != nil {
		if xb, err = extra(); err != nil {
			return err
		}
	}
	cpu0, zcpu0 := procCPU("self"), procCPU(strconv.Itoa(zkPID))
	lat := make([]float64, 0, *n)
	start := time.Now()
	for i := 0; i < *n; i++ {
		t := time.Now()
		if err := op(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		lat = append(lat, float64(time.Since(t).Microseconds())/1000)
	}
	el := time.Since(start)
	cpu1, zcpu1 := procCPU("self"), procCPU(strconv.Itoa(zkPID))
	if zkAddr != "" {
		if after, err = mntr(zkAddr); err != nil {
			return err
		}
	}
	if extra != nil {
		if xa, err = extra(); err != nil {
			return err
		}
	}
	sort.Float64s(lat)
	sum := 0.0
	for _, v := range lat {
		sum += v
	}
	fmt.Printf("%s: %d ops in %.2fs (%.0f/s): client mean %.3f ms, p50 %.3f, p90 %.3f, p99 %.3f\n",
		name, *n, el.Seconds(), float64(*n)/el.Seconds(), sum/float64(len(lat)),
		lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)*99/100])
	fmt.Printf("    CPU per op: this client %.0f µs, ZooKeeper's JVM %.0f µs\n", (cpu1-cpu0)*1e6/float64(*n), (zcpu1-zcpu0)*1e6/float64(*n))
	if before != nil {
		for _, m := range []string{"updatelatency", "readlatency", "fsynctime", "sync_process_time", "prep_process_time",
			"proposal_process_time", "prep_processor_queue_time_ms", "sync_processor_queue_size", "request_throttle_queue_time_ms"} {
			dc := after["zk_cnt_"+m] - before["zk_cnt_"+m]
			ds := after["zk_sum_"+m] - before["zk_sum_"+m]
			if dc > 0 {
				fmt.Printf("    ZooKeeper %-32s count %6.0f (%.2f per op)  mean %.3f\n", m, dc, dc/float64(*n), ds/dc)
			}
		}
		dp := after["zk_packets_received"] - before["zk_packets_received"]
		fmt.Printf("    ZooKeeper packets received per op %.2f\n", dp/float64(*n))
	}
	if xb != nil {
		for _, k := range sortedKeys(xa) {
			if strings.HasSuffix(k, "_count") {
				base := strings.TrimSuffix(k, "_count")
				dc := xa[k] - xb[k]
				ds := xa[base+"_sum"] - xb[base+"_sum"]
				switch {
				case dc <= 0:
				case strings.HasSuffix(base, "_seconds"):
					fmt.Printf("    zketcd %-40s count %6.0f (%.2f per op)  mean %.3f ms\n", base, dc, dc/float64(*n), ds/dc*1000)
				default:
					fmt.Printf("    zketcd %-40s count %6.0f (%.2f per op)  mean %.2f\n", base, dc, dc/float64(*n), ds/dc)
				}
			}
		}
		if v, ok := xa["process_cpu_seconds_total"]; ok {
			fmt.Printf("    zketcd process CPU per op %.0f µs\n", (v-xb["process_cpu_seconds_total"])*1e6/float64(*n))
		}
	}
	fmt.Println()
	return nil
}

// mntr returns ZooKeeper's numeric mntr values.
func mntr(addr string) (map[string]float64, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "mntr"); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				out[f[0]] = v
			}
		}
	}
	return out, sc.Err()
}

// metricsProbe scrapes zketcd's /metrics: the commit and barrier
// histograms, the gRPC handling time of method, the process CPU.
func metricsProbe(url, method string) probe {
	if url == "" {
		return nil
	}
	return func() (map[string]float64, error) {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		out := map[string]float64{}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				continue
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			key := f[0]
			if i := strings.IndexByte(key, '{'); i >= 0 {
				if strings.HasPrefix(key, "grpc_server_handling_seconds") && !strings.Contains(key, `grpc_method="`+method+`"`) {
					continue
				}
				if strings.Contains(key, `le="`) {
					continue
				}
				key = key[:i]
			}
			switch {
			case strings.HasPrefix(key, "zketcd_commit_duration_seconds"), strings.HasPrefix(key, "zketcd_read_barrier_duration_seconds"),
				strings.HasPrefix(key, "grpc_server_handling_seconds"), strings.HasPrefix(key, "zketcd_commit_batch_ops"),
				key == "process_cpu_seconds_total":
				v, err := strconv.ParseFloat(f[1], 64)
				if err == nil {
					out[key] += v
				}
			}
		}
		return out, sc.Err()
	}
}

// procCPU returns the user+system CPU seconds of a process ("self" or a
// PID), threads included.
func procCPU(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	sy, _ := strconv.ParseFloat(f[12], 64)
	return (u + sy) / 100
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func sortedKeys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
