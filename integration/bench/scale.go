package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/kubedata"
	"github.com/zketcd/zketcd/integration/kubelab"
)

// The scale benchmark (issue 22): a 3-member etcd 3.7.3 against zketcd on
// a 3-member ZooKeeper ensemble, at growing numbers of kube-like objects
// (integration/kubedata: kube-apiserver's own encodings and keys), one
// stack at a time. Per stack and size it measures the load, the memory of
// every process and ZooKeeper's own data size, disk, a paginated LIST at
// one revision, a watch catching up from before the load, physical
// compaction (time, peak memory, write and read p99 during it against
// before it), a second one after another share is written again (the
// steady state of a cluster compacted every few minutes), a defragment, one instance (member) restart, a restart of
// the whole ensemble (cluster), and at ScaleKubeAt objects kube-apiserver's
// 10,000-object load.

// Scale stacks.
const (
	ScaleEtcd   = "etcd-3"
	ScaleZketcd = "zketcd-zk3"
)

// scaleQuota is both stacks' --quota-backend-bytes: above what any size
// stores.
const scaleQuota = 16 << 30

// ScaleOptions configure RunScale.
type ScaleOptions struct {
	// Sizes are the object counts, in run order (default 100k, 300k, 1M).
	Sizes []int
	// Stacks to measure (default both), each size etcd first.
	Stacks []string
	// ZKHeap is each ZooKeeper server's -Xmx (default "3g"); the heap
	// starts small and grows (-Xms64m), as a JVM left to size itself does.
	ZKHeap string
	// Clients load the objects (default 64).
	Clients int
	// UpdateShare of the objects is written again before the compaction
	// (default 0.1): history for it to remove.
	UpdateShare float64
	// ChurnShare of the objects is written again before a third compaction
	// (default 0.5): past what zketcd keeps in the log without a base
	// generation (superseded versions up to half the live data), so that
	// compaction writes a whole base.
	ChurnShare float64
	// KubeAt is the size at which kube-apiserver's 10,000-object load runs
	// (0: never); it needs KubeAPIServerBin.
	KubeAt int
	// WatchCap bounds the watch catch-up (default 20 min). A watch still
	// behind then is noted with the events it had, and the steps after it
	// go on.
	WatchCap time.Duration
	// Restarts is how many times one instance (member) is restarted; the
	// table shows the median (default 3: a single restart's time varies by
	// a third between runs on a shared host).
	Restarts int
	Seed     uint64

	RepoRoot, EtcdBin, ZketcdBin, KubeAPIServerBin string
	// DataDir receives scale.json, scale.md and the plots; MarkdownPath,
	// if set, gets the section spliced in (between scaleBegin and
	// scaleEnd, appended if absent).
	DataDir, MarkdownPath string
	KeepWorkDir           bool
	// ZketcdArgs are more flags for the zketcd instance (-zketcd-args),
	// after the benchmark's own.
	ZketcdArgs []string
	Logf       func(format string, args ...any)
}

// ScaleRow is one stack at one size.
type ScaleRow struct {
	Stack   string `json:"stack"`
	Objects int    `json:"objects"`
	// DataBytes is the live data: every object's key and value.
	DataBytes int64              `json:"data_bytes"`
	M         map[string]float64 `json:"measures"`
	Errors    []string           `json:"errors,omitempty"`
	// Notes are what a step did not finish without stopping the row.
	Notes []string      `json:"notes,omitempty"`
	Load  [2][3]float64 `json:"load_avg"` // at start and end
	// Measured says when and from which zketcd build (the repository's
	// commit) the row was measured: a report keeps rows of earlier runs.
	Measured string `json:"measured,omitempty"`
}

// ScaleReport is a run of the scale benchmark.
type ScaleReport struct {
	Machine Machine    `json:"machine"`
	Date    string     `json:"date"`
	ZKHeap  string     `json:"zk_heap"`
	Clients int        `json:"clients"`
	Mix     []MixShare `json:"mix"`
	Rows    []ScaleRow `json:"rows"`
	Elapsed float64    `json:"elapsed_s"`
}

// MixShare describes one kind of the generated objects.
type MixShare struct {
	Kind      string  `json:"kind"`
	Share     float64 `json:"share"`
	MeanBytes float64 `json:"mean_bytes"`
	Encoding  string  `json:"encoding"`
}

func (o *ScaleOptions) setDefaults() {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{100000, 300000, 1000000}
	}
	if len(o.Stacks) == 0 {
		o.Stacks = []string{ScaleEtcd, ScaleZketcd}
	}
	if o.ZKHeap == "" {
		o.ZKHeap = "3g"
	}
	if o.Clients <= 0 {
		o.Clients = 64
	}
	if o.UpdateShare <= 0 {
		o.UpdateShare = 0.1
	}
	if o.ChurnShare <= 0 {
		o.ChurnShare = 0.5
	}
	if o.Seed == 0 {
		o.Seed = 22
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// RunScale runs the scale benchmark and writes its report.
func RunScale(ctx context.Context, opts ScaleOptions) (*ScaleReport, error) {
	opts.setDefaults()
	began := time.Now()
	rep := &ScaleReport{Machine: DescribeMachine(), Date: began.UTC().Format(time.RFC3339), ZKHeap: opts.ZKHeap, Clients: opts.Clients}
	rep.Mix = describeMix(opts.Seed)
	if opts.DataDir != "" {
		// Rows of an earlier run at other sizes (or stacks) stay: a run
		// replaces only the rows it measures.
		if old, err := LoadScaleReport(filepath.Join(opts.DataDir, "scale.json")); err == nil {
			for _, row := range old.Rows {
				if !slices.Contains(opts.Sizes, row.Objects) || !slices.Contains(opts.Stacks, row.Stack) {
					rep.Rows = append(rep.Rows, row)
				}
			}
			rep.Elapsed = old.Elapsed
		}
	}
	work, err := os.MkdirTemp("", "zkscale-")
	if err != nil {
		return nil, err
	}
	if opts.KeepWorkDir {
		opts.Logf("work dir %s (kept)", work)
	} else {
		defer os.RemoveAll(work)
	}
	bopts := Options{RepoRoot: opts.RepoRoot, EtcdBin: opts.EtcdBin, ZketcdBin: opts.ZketcdBin, BenchmarkBin: "none",
		KubeAPIServerBin: opts.KubeAPIServerBin, Logf: opts.Logf,
		Servers: []string{ServerEtcd3, ServerZK3}}
	if opts.KubeAt > 0 {
		bopts.Servers = append(bopts.Servers, ServerKubeEtcd3)
	}
	env := &Env{WorkDir: work, ZKHeap: opts.ZKHeap, ZKHeapMin: "64m", Log: quietLogger(), ZketcdExtraArgs: opts.ZketcdArgs}
	if err := resolveBinaries(ctx, &bopts, env); err != nil {
		return nil, err
	}
	env.EtcdExtraArgs = []string{"--quota-backend-bytes", strconv.FormatInt(scaleQuota, 10)}
	measured := rep.Date + ", build " + repoBuild(ctx, opts.RepoRoot)
	for _, n := range opts.Sizes {
		for _, stack := range opts.Stacks {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			opts.Logf("scale: %s at %d objects", stack, n)
			cellStart := time.Now()
			row := runScaleCell(ctx, env, &opts, stack, n, filepath.Join(work, fmt.Sprintf("%s-%d", stack, n)))
			row.Measured = measured
			rep.Rows = append(rep.Rows, row)
			sort.SliceStable(rep.Rows, func(i, j int) bool { return rep.Rows[i].Objects < rep.Rows[j].Objects })
			for _, e := range row.Errors {
				opts.Logf("scale: %s at %d: %s", stack, n, e)
			}
			rep.Elapsed += time.Since(cellStart).Seconds()
			if err := rep.write(opts); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// describeMix measures the generator's mix over 20,000 objects.
func describeMix(seed uint64) []MixShare {
	g := kubedata.New(seed)
	count, bytes := map[string]int{}, map[string]int{}
	const n = 20000
	for i := 0; i < n; i++ {
		o := g.Object(i)
		count[o.Kind]++
		bytes[o.Kind] += len(o.Value)
	}
	var out []MixShare
	for _, k := range kubedata.Mix {
		enc := "protobuf (k8s envelope)"
		if k.JSON {
			enc = "JSON"
		}
		if c := count[k.Name]; c > 0 {
			out = append(out, MixShare{Kind: k.Name, Share: float64(c) / n, MeanBytes: float64(bytes[k.Name]) / float64(c), Encoding: enc})
		}
	}
	return out
}

// scaleStack is a running stack: its target (API endpoints, processes) and
// for zketcd its ZooKeeper ensemble.
type scaleStack struct {
	name string
	t    *Target
	zk   *zkCluster
	dirs []string // data directories of every member, for disk usage
}

func (s *scaleStack) stop() error {
	var errs []error
	if s.t != nil {
		errs = append(errs, s.t.Stop())
	}
	if s.zk != nil {
		errs = append(errs, s.zk.stop())
	}
	return errors.Join(errs...)
}

// rss returns the RSS of the etcd-API processes and of the ZooKeeper
// servers, bytes.
func (s *scaleStack) rss() (api, zk int64) {
	for _, pid := range s.t.apiPIDs() {
		v, _ := rssBytes(pid)
		api += v
	}
	if s.zk != nil {
		for _, pid := range s.zk.pids() {
			v, _ := rssBytes(pid)
			zk += v
		}
	}
	return api, zk
}

func startScaleStack(ctx context.Context, env *Env, stack, dir string, heapBytes int64) (*scaleStack, error) {
	sub := *env
	sub.WorkDir = dir
	s := &scaleStack{name: stack}
	switch stack {
	case ScaleEtcd:
		t, err := sub.StartEtcdCluster(ctx, "etcd", 3)
		if err != nil {
			return nil, err
		}
		s.t = t
		s.dirs = []string{filepath.Join(dir, "etcd")}
	case ScaleZketcd:
		zk, err := sub.StartZooKeeper(ctx, "zk", 3)
		if err != nil {
			return nil, err
		}
		s.zk = zk
		// The heap is given (its warning shows in the metrics), but the
		// quota is etcd's of this run: the sizing rule (half the heap)
		// would stop a million objects after their first compaction.
		sub.ZketcdExtraArgs = append([]string{"--zk-heap-bytes", strconv.FormatInt(heapBytes, 10), "--quota-backend-bytes", strconv.FormatInt(scaleQuota, 10)}, env.ZketcdExtraArgs...)
		t, _, err := sub.StartZketcd(ctx, ServerZK3, "zketcd", zk, "/scale", 0)
		if err != nil {
			_ = zk.stop()
			return nil, err
		}
		s.t = t
		s.t.zk = zk
		s.dirs = []string{filepath.Join(dir, "zk")}
	default:
		return nil, fmt.Errorf("unknown stack %q", stack)
	}
	return s, nil
}

// runScaleCell measures one stack at n objects; what fails is recorded in
// the row and ends the cell.
func runScaleCell(ctx context.Context, env *Env, opts *ScaleOptions, stack string, n int, dir string) (row ScaleRow) {
	row = ScaleRow{Stack: stack, Objects: n, M: map[string]float64{}}
	row.Load[0] = loadAvg()
	defer func() { row.Load[1] = loadAvg() }()
	fail := func(step string, err error) ScaleRow {
		row.Errors = append(row.Errors, fmt.Sprintf("%s: %v", step, err))
		return row
	}
	heap := parseBytes(opts.ZKHeap)
	s, err := startScaleStack(ctx, env, stack, dir, heap)
	if err != nil {
		return fail("start", err)
	}
	defer func() {
		if err := s.stop(); err != nil {
			row.Errors = append(row.Errors, "stop: "+err.Error())
		}
		if !opts.KeepWorkDir {
			_ = os.RemoveAll(dir)
		}
	}()
	logf := opts.Logf
	api0, zk0 := s.rss()
	row.M["rss_empty_api_mb"], row.M["rss_empty_zk_mb"] = mb(api0), mb(zk0)

	p := newScalePool(s.t.Endpoints, 16)
	defer p.close()
	g := kubedata.New(opts.Seed)
	rev0, err := p.rev(ctx)
	if err != nil {
		return fail("first revision", err)
	}

	// Load.
	start := time.Now()
	data, err := loadObjects(ctx, p, g, n, opts.Clients)
	if err != nil {
		return fail("load", err)
	}
	took := time.Since(start)
	row.DataBytes = data
	row.M["load_s"] = took.Seconds()
	row.M["load_objects_per_s"] = float64(n) / took.Seconds()
	row.M["load_mb_per_s"] = mb(data) / took.Seconds()
	logf("scale: %s: loaded %d objects (%.0f MB) in %.1fs", stack, n, mb(data), took.Seconds())
	s.measureMemory(ctx, row.M, "load")
	rowDisk(row.M, "load", s.dirs)

	// A paginated LIST of everything at one revision.
	start = time.Now()
	items, pages, err := listAll(ctx, p.c(0))
	if err != nil {
		return fail("list", err)
	}
	row.M["list_s"], row.M["list_pages"] = time.Since(start).Seconds(), float64(pages)
	if items != n {
		return fail("list", fmt.Errorf("listed %d objects, want %d", items, n))
	}
	logf("scale: %s: listed %d objects in %d pages in %.1fs", stack, items, pages, row.M["list_s"])

	// A watch from before the load catches up with every object.
	start = time.Now()
	events, err := watchCatchUp(ctx, p.c(1), rev0+1, n, opts.WatchCap)
	switch {
	case errors.Is(err, errWatchBehind):
		note := fmt.Sprintf("watch catch-up: %d of %d events after %.0fs, not caught up (the steps after it went on)", events, n, time.Since(start).Seconds())
		row.Notes = append(row.Notes, note)
		logf("scale: %s: %s", stack, note)
	case err != nil:
		return fail("watch catch-up", err)
	default:
		row.M["watch_catchup_s"] = time.Since(start).Seconds()
		logf("scale: %s: a watch from revision %d caught up with %d events in %.1fs", stack, rev0+1, events, row.M["watch_catchup_s"])
	}

	// History for the compaction to remove: a share of the objects
	// written again (the same bytes: kube-apiserver's objects stay
	// decodable).
	updates := int(float64(n) * opts.UpdateShare)
	start = time.Now()
	if _, err := putObjects(ctx, p, g, updates, opts.Clients); err != nil {
		return fail("updates", err)
	}
	row.M["update_s"] = time.Since(start).Seconds()
	head, err := p.rev(ctx)
	if err != nil {
		return fail("head revision", err)
	}

	// Physical compaction to the head, with a writer and a linearizable
	// reader running before and during it.
	if err := s.compactUnderLoad(ctx, p, head, row.M, logf); err != nil {
		return fail("compaction", err)
	}
	time.Sleep(5 * time.Second) // the compactor's deletions, a collection
	s.measureMemory(ctx, row.M, "compact")
	rowDisk(row.M, "compact", s.dirs)

	// The steady state: another share written again and compacted, as
	// kube-apiserver compacts every five minutes; then half the objects
	// written again and compacted (on zketcd, after a bulk load, the first
	// two compactions keep the log as the generation: it holds little
	// besides live data; the third finds superseded versions past half the
	// live data and writes a whole base).
	for _, c := range []struct {
		prefix, mem string
		share       float64
	}{{"second_", "compact2", opts.UpdateShare}, {"third_", "compact3", opts.ChurnShare}} {
		start = time.Now()
		if _, err := putObjects(ctx, p, g, int(float64(n)*c.share), opts.Clients); err != nil {
			return fail("updates before the "+c.mem+" compaction", err)
		}
		row.M[c.prefix+"update_s"] = time.Since(start).Seconds()
		if head, err = p.rev(ctx); err != nil {
			return fail("head revision", err)
		}
		m := map[string]float64{}
		if err := s.compactUnderLoad(ctx, p, head, m, logf); err != nil {
			return fail(c.mem+" compaction", err)
		}
		for _, k := range []string{"compact_s", "compact_peak_api_mb", "write_p99_before_ms", "write_p99_during_ms", "read_p99_before_ms", "read_p99_during_ms"} {
			row.M[c.prefix+k] = m[k]
		}
		time.Sleep(5 * time.Second)
		s.measureMemory(ctx, row.M, c.mem)
	}

	// Defragment: etcd's members one by one, zketcd's instance (frees the
	// log below the new base generation and the previous generation).
	start = time.Now()
	for _, ep := range s.t.Endpoints {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		_, err := p.c(0).Defragment(dctx, ep)
		cancel()
		if err != nil {
			return fail("defragment", err)
		}
	}
	row.M["defrag_s"] = time.Since(start).Seconds()
	time.Sleep(5 * time.Second)
	s.measureMemory(ctx, row.M, "defrag")
	rowDisk(row.M, "defrag", s.dirs)
	logf("scale: %s: RSS after defragment: API %.0f MB, ZooKeeper %.0f MB", stack, row.M["rss_defrag_api_mb"], row.M["rss_defrag_zk_mb"])
	total := n + 1 // the probe's key

	// One instance (member) restarted, until a linearizable count on it
	// sees every object.
	p.close()
	var restarts []float64
	for range max(1, opts.Restarts) {
		took, err = s.restartOne(ctx, total)
		if err != nil {
			return fail("restart one", err)
		}
		restarts = append(restarts, took.Seconds())
		logf("scale: %s: one instance restarted and serving every key after %.2fs", stack, took.Seconds())
	}
	slices.Sort(restarts)
	row.M["restart_one_s"] = restarts[len(restarts)/2]
	row.M["restart_one_min_s"], row.M["restart_one_max_s"] = restarts[0], restarts[len(restarts)-1]
	api1, _ := s.rss()
	row.M["rss_restart_api_mb"] = mb(api1)

	// The whole ensemble (cluster) restarted.
	took, err = s.restartAll(ctx, total)
	if err != nil {
		return fail("restart all", err)
	}
	row.M["restart_all_s"] = took.Seconds()
	logf("scale: %s: the whole ensemble restarted, serving every key after %.1fs", stack, took.Seconds())

	if opts.KubeAt == n && opts.KubeAPIServerBin != "" {
		if err := s.kubeLoad(ctx, env, dir, row.M, logf); err != nil {
			return fail("kube-apiserver", err)
		}
	}
	return row
}

// measureMemory records the RSS of the stack's processes and ZooKeeper's
// zk_approximate_data_size after step.
func (s *scaleStack) measureMemory(ctx context.Context, m map[string]float64, step string) {
	api, zk := s.rss()
	m["rss_"+step+"_api_mb"], m["rss_"+step+"_zk_mb"], m["rss_"+step+"_total_mb"] = mb(api), mb(zk), mb(api+zk)
	if s.zk == nil {
		return
	}
	var size int64
	for _, srv := range s.zk.ensemble.Members() {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		vals, err := srv.Monitor(mctx)
		cancel()
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(vals["zk_approximate_data_size"], 10, 64); err == nil && v > size {
			size = v
		}
	}
	m["zk_data_"+step+"_mb"] = mb(size)
}

func rowDisk(m map[string]float64, step string, dirs []string) {
	var total int64
	for _, d := range dirs {
		total += dirBytes(d)
	}
	m["disk_"+step+"_mb"] = mb(total)
}

// dirBytes is the disk space the files under dir take (allocated blocks).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// parseBytes reads a JVM size ("3g", "512m").
func parseBytes(s string) int64 {
	s = strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "g"):
		mult, s = 1<<30, strings.TrimSuffix(s, "g")
	case strings.HasSuffix(s, "m"):
		mult, s = 1<<20, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, strings.TrimSuffix(s, "k")
	}
	v, _ := strconv.ParseInt(s, 10, 64)
	return v * mult
}

// scalePool is clients spread over a stack's endpoints.
type scalePool struct{ cs []*clientv3.Client }

func newScalePool(endpoints []string, n int) *scalePool {
	p := &scalePool{}
	for i := 0; i < n; i++ {
		c, err := newClient(endpoints[i%len(endpoints)])
		if err == nil {
			p.cs = append(p.cs, c)
		}
	}
	return p
}

func (p *scalePool) c(i int) *clientv3.Client { return p.cs[i%len(p.cs)] }

func (p *scalePool) close() {
	for _, c := range p.cs {
		c.Close()
	}
	p.cs = nil
}

func (p *scalePool) rev(ctx context.Context) (int64, error) {
	r, err := p.c(0).Get(ctx, "/bench/rev-probe")
	if err != nil {
		return 0, err
	}
	return r.Header.Revision, nil
}

// loadObjects creates objects 0..n-1 as kube-apiserver creates: a
// transaction that puts the key if it does not exist. It returns the bytes
// of keys and values written.
func loadObjects(ctx context.Context, p *scalePool, g *kubedata.Generator, n, clients int) (int64, error) {
	return runObjects(ctx, p, g, n, clients, true)
}

// putObjects writes objects 0..n-1 again (plain puts of the same bytes).
func putObjects(ctx context.Context, p *scalePool, g *kubedata.Generator, n, clients int) (int64, error) {
	return runObjects(ctx, p, g, n, clients, false)
}

func runObjects(ctx context.Context, p *scalePool, g *kubedata.Generator, n, clients int, create bool) (int64, error) {
	var next, bytes atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for w := 0; w < clients; w++ {
		c := p.c(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				o := g.Object(i)
				var err error
				busyUntil := time.Now().Add(2 * time.Minute)
				for attempt := 0; attempt < 5; attempt++ {
					octx, cancel := context.WithTimeout(ctx, opTimeout)
					if create {
						var r *clientv3.TxnResponse
						r, err = c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(o.Key), "=", 0)).
							Then(clientv3.OpPut(o.Key, string(o.Value))).Commit()
						if err == nil && !r.Succeeded {
							err = nil // an earlier attempt landed
						}
					} else {
						_, err = c.Put(octx, o.Key, string(o.Value))
					}
					cancel()
					if err == nil {
						break
					}
					if strings.Contains(err.Error(), "too many requests") && time.Now().Before(busyUntil) {
						// etcd sheds load while its applies lag its
						// commits (after a slow watch, say): a client
						// waits and tries again, for up to 2 minutes.
						attempt--
					}
					time.Sleep(200 * time.Millisecond)
				}
				if err != nil {
					errc <- fmt.Errorf("object %d: %w", i, err)
					return
				}
				bytes.Add(int64(len(o.Key) + len(o.Value)))
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return bytes.Load(), err
	default:
	}
	return bytes.Load(), ctx.Err()
}

// listAll lists /registry/ in pages of kubeListPage at the revision of the
// first page, as kube-apiserver's paginated LIST does.
func listAll(ctx context.Context, c *clientv3.Client) (items, pages int, err error) {
	key, end := "/registry/", "/registry0"
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(kubeListPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		r, err := c.Get(lctx, key, opts...)
		cancel()
		if err != nil {
			return items, pages, err
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		pages++
		items += len(r.Kvs)
		if !r.More || len(r.Kvs) == 0 {
			return items, pages, nil
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// errWatchBehind: a watch catch-up had not caught up when its cap passed.
var errWatchBehind = errors.New("watch still behind at its cap")

// watchCatchUp watches /registry/ from rev until want events arrived, for
// at most limit (then errWatchBehind, with the events that came).
func watchCatchUp(ctx context.Context, c *clientv3.Client, rev int64, want int, limit time.Duration) (int, error) {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	got := 0
	for resp := range c.Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			return got, err
		}
		got += len(resp.Events)
		if got >= want {
			return got, nil
		}
	}
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return got, errWatchBehind
	}
	return got, fmt.Errorf("watch ended after %d of %d events: %v", got, want, wctx.Err())
}

// latencyProbe runs one writer and one linearizable reader and keeps their
// latencies per phase.
type latencyProbe struct {
	mu     sync.Mutex
	phase  string
	writes map[string][]float64
	reads  map[string][]float64
	errs   int
}

func (l *latencyProbe) set(phase string) { l.mu.Lock(); l.phase = phase; l.mu.Unlock() }

func (l *latencyProbe) add(write bool, d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs++
		return
	}
	m := l.reads
	if write {
		m = l.writes
	}
	m[l.phase] = append(m[l.phase], float64(d.Microseconds())/1000)
}

func p99(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return Percentile(s, 99)
}

func (l *latencyProbe) run(ctx context.Context, c *clientv3.Client, write bool) {
	value := strings.Repeat("p", 1024)
	for ctx.Err() == nil {
		t0 := time.Now()
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		var err error
		if write {
			_, err = c.Put(octx, "/bench-probe/w", value)
		} else {
			_, err = c.Get(octx, "/bench-probe/w")
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.add(write, time.Since(t0), err)
		time.Sleep(20 * time.Millisecond) // ~40 ops/s each: a probe, not a load
	}
}

// compactUnderLoad compacts to rev (physical) while the probe runs, 15 s
// before it ("before") and during it ("during"), sampling the RSS of the
// stack's processes for the peak.
func (s *scaleStack) compactUnderLoad(ctx context.Context, p *scalePool, rev int64, m map[string]float64, logf func(string, ...any)) error {
	probe := &latencyProbe{phase: "before", writes: map[string][]float64{}, reads: map[string][]float64{}}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, write := range []bool{true, false} {
		wg.Add(1)
		go func() { defer wg.Done(); probe.run(pctx, p.c(2+i), write) }()
	}
	defer func() { stop(); wg.Wait() }()
	select {
	case <-time.After(15 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	api0, zk0 := s.rss()
	var peakAPI, peakTotal atomic.Int64
	peakAPI.Store(api0)
	peakTotal.Store(api0 + zk0)
	sctx, stopSample := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			api, zk := s.rss()
			if api > peakAPI.Load() {
				peakAPI.Store(api)
			}
			if api+zk > peakTotal.Load() {
				peakTotal.Store(api + zk)
			}
		}
	}()
	probe.set("during")
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	_, err := p.c(0).Compact(cctx, rev, clientv3.WithCompactPhysical())
	cancel()
	took := time.Since(start)
	if took < 3*time.Second {
		// Enough samples for a p99 of a short compaction: the window
		// after it counts as during (the deletions go on).
		time.Sleep(3*time.Second - took)
	}
	probe.set("after")
	stopSample()
	<-sampled
	if err != nil {
		return err
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	m["compact_s"] = took.Seconds()
	m["compact_peak_api_mb"], m["compact_peak_total_mb"] = mb(peakAPI.Load()), mb(peakTotal.Load())
	m["compact_before_api_mb"] = mb(api0)
	m["write_p99_before_ms"], m["write_p99_during_ms"] = p99(probe.writes["before"]), p99(probe.writes["during"])
	m["read_p99_before_ms"], m["read_p99_during_ms"] = p99(probe.reads["before"]), p99(probe.reads["during"])
	m["probe_during_ops"] = float64(len(probe.writes["during"]) + len(probe.reads["during"]))
	m["probe_errors"] = float64(probe.errs)
	logf("scale: %s: compaction to %d in %.1fs; write p99 %.1f -> %.1f ms, read p99 %.1f -> %.1f ms; peak RSS API %.0f MB",
		s.name, rev, took.Seconds(), m["write_p99_before_ms"], m["write_p99_during_ms"], m["read_p99_before_ms"], m["read_p99_during_ms"], m["compact_peak_api_mb"])
	return nil
}

// restartOne stops the first etcd-API process and starts it again on the
// same data, until a linearizable count on it sees want keys.
func (s *scaleStack) restartOne(ctx context.Context, want int) (time.Duration, error) {
	old := s.t.procs[0]
	if err := old.stop(30 * time.Second); err != nil {
		return 0, err
	}
	np, err := old.restart()
	if err != nil {
		return 0, err
	}
	s.t.procs[0] = np
	return waitServing(ctx, s.t.Endpoints[0], np, 10*time.Minute, countAll(want))
}

// restartAll restarts the whole ZooKeeper ensemble under the running
// zketcd (ZooKeeper reloads its snapshot and log), or every etcd member,
// until the first endpoint serves a linearizable count of want keys.
func (s *scaleStack) restartAll(ctx context.Context, want int) (time.Duration, error) {
	start := time.Now()
	if s.zk != nil {
		if err := s.zk.ensemble.Stop(); err != nil {
			return 0, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		err := s.zk.ensemble.Start(sctx)
		cancel()
		if err != nil {
			return 0, err
		}
		_, err = waitServing(ctx, s.t.Endpoints[0], s.t.procs[0], 10*time.Minute, countAll(want))
		return time.Since(start), err
	}
	for _, p := range s.t.procs {
		if err := p.stop(30 * time.Second); err != nil {
			return 0, err
		}
	}
	start = time.Now()
	for i, old := range s.t.procs {
		np, err := old.restart()
		if err != nil {
			return 0, err
		}
		s.t.procs[i] = np
	}
	_, err := waitServing(ctx, s.t.Endpoints[0], s.t.procs[0], 10*time.Minute, countAll(want))
	return time.Since(start), err
}

// countAll is a readiness check: a linearizable count of every key.
func countAll(want int) func(*clientv3.Client, context.Context) error {
	return func(c *clientv3.Client, ctx context.Context) error {
		r, err := c.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if r.Count < int64(want) {
			return fmt.Errorf("count %d, want %d", r.Count, want)
		}
		return nil
	}
}

// kubeLoad starts a kube-apiserver on the stack (its watch cache loads
// every object present), then creates 10,000 objects through it from 16
// clients, as the kube stacks' kube-create-10k.
func (s *scaleStack) kubeLoad(ctx context.Context, env *Env, dir string, m map[string]float64, logf func(string, ...any)) error {
	kdir := filepath.Join(dir, "kube")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		return err
	}
	lab, err := kubelab.New(kdir, env.KubeAPIServer, env.ZketcdBin, nil)
	if err != nil {
		return err
	}
	defer lab.Close()
	servers := ""
	for i, ep := range s.t.Endpoints {
		if i > 0 {
			servers += ","
		}
		servers += "http://" + ep
	}
	start := time.Now()
	a, err := lab.StartAPIServer(kubelab.APIServerOptions{Name: "1", EtcdServers: servers})
	if err != nil {
		return err
	}
	if _, err := a.WaitReady(ctx, 10*time.Minute); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	m["kube_ready_s"] = time.Since(start).Seconds()
	api := newKubeAPI(a.Port, a.Token)
	defer api.close()
	ke := &kubeEnv{apis: []*kubeAPI{api}}
	if err := ke.setup(ctx); err != nil {
		return err
	}
	t := &Target{Name: s.name, Endpoints: s.t.Endpoints, procs: s.t.procs, zk: s.zk}
	t.extraPIDs = childrenRunning(env.KubeAPIServer)
	res, err := ke.load(ctx, t, &Profile{KubeObjects: 10000, KubeLoadClients: 16})
	if err != nil {
		return err
	}
	m["kube_load_s"], m["kube_load_per_s"] = res.Seconds, res.Throughput
	m["kube_load_p50_ms"], m["kube_load_p99_ms"] = res.P50Ms, res.P99Ms
	if pids := childrenRunning(env.KubeAPIServer); len(pids) > 0 {
		v, _ := rssBytes(pids[0])
		m["kube_apiserver_rss_mb"] = mb(v)
	}
	logf("scale: %s: kube-apiserver ready after %.1fs over the objects present; 10,000 creates in %.1fs (%.0f/s, p99 %.0f ms)",
		s.name, m["kube_ready_s"], res.Seconds, res.Throughput, res.P99Ms)
	return nil
}

// LoadScaleReport reads a scale.json.
func LoadScaleReport(path string) (*ScaleReport, error) { return loadJSON[ScaleReport](path) }

// write saves scale.json, scale.md and the plots, and splices the section
// into the markdown report.
func (r *ScaleReport) write(opts ScaleOptions) error {
	if opts.DataDir == "" {
		return nil
	}
	return r.WriteFiles(opts.DataDir, opts.MarkdownPath)
}

// WriteFiles writes scale.json, scale.md and the plots into dataDir and
// splices scale.md into md (if not empty).
func (r *ScaleReport) WriteFiles(dataDir, md string) error {
	if err := writeJSON(dataDir, "scale.json", r); err != nil {
		return err
	}
	plots, err := r.writePlots(dataDir)
	if err != nil {
		return err
	}
	rel := relDir(md, dataDir)
	section := r.Markdown(rel, plots)
	if err := os.WriteFile(filepath.Join(dataDir, "scale.md"), []byte(section), 0o644); err != nil {
		return err
	}
	if md == "" {
		return nil
	}
	return spliceSection(md, section)
}

// The markers around the generated scale section in docs/benchmarks.md.
const (
	scaleBegin = "<!-- scale benchmark: generated by zkbench -scale, do not edit -->"
	scaleEnd   = "<!-- end of the scale benchmark -->"
)

// spliceSection replaces the scale section of the file at md (or appends
// it).
func spliceSection(md, section string) error {
	old, err := os.ReadFile(md)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	block := scaleBegin + "\n" + section + scaleEnd + "\n"
	s := string(old)
	i, j := strings.Index(s, scaleBegin), strings.Index(s, scaleEnd)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(scaleEnd):]
		s = strings.Replace(s, scaleEnd+"\n\n", scaleEnd+"\n", 1)
	} else {
		if !strings.HasSuffix(s, "\n") && s != "" {
			s += "\n"
		}
		s += "\n" + block
	}
	return os.WriteFile(md, []byte(s), 0o644)
}

// embedScale returns the sections kept in dataDir (the scale benchmark's
// and the tenants benchmark's), for the main report to carry (empty if
// there is none).
func embedScale(dataDir string) string {
	var blocks []string
	if b, err := os.ReadFile(filepath.Join(dataDir, "scale.md")); err == nil {
		blocks = append(blocks, scaleBegin+"\n"+string(b)+scaleEnd+"\n")
	}
	if t := embedTenants(dataDir); t != "" {
		blocks = append(blocks, t)
	}
	return strings.Join(blocks, "\n")
}

// row returns the row of stack at n objects, or nil.
func (r *ScaleReport) row(stack string, n int) *ScaleRow {
	for i := range r.Rows {
		if r.Rows[i].Stack == stack && r.Rows[i].Objects == n {
			return &r.Rows[i]
		}
	}
	return nil
}

// sizes returns the object counts present, ascending.
func (r *ScaleReport) sizes() []int {
	seen := map[int]bool{}
	var out []int
	for _, row := range r.Rows {
		if !seen[row.Objects] {
			seen[row.Objects] = true
			out = append(out, row.Objects)
		}
	}
	sort.Ints(out)
	return out
}

func (row *ScaleRow) get(k string) (float64, bool) {
	if row == nil {
		return 0, false
	}
	v, ok := row.M[k]
	return v, ok && !math.IsNaN(v)
}

// repoBuild names the commit checked out at repo, "+changes" when the work
// tree differs from it, or "unknown" when git cannot tell.
func repoBuild(ctx context.Context, repo string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	build := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		build += "+changes"
	}
	return build
}
