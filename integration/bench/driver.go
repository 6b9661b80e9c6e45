package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// errExhausted ends a worker early (e.g. no keys left to delete).
var errExhausted = errors.New("workload exhausted")

// opTimeout bounds one operation.
const opTimeout = 30 * time.Second

// maxWindowFactor bounds the extension of a cell's measured window.
const maxWindowFactor = 6

// inflightGrace is how long a cell waits after its window for operations
// in flight before it cancels them.
const inflightGrace = 3 * time.Second

// pool is a set of client connections shared by the workers of a cell:
// worker i uses connection i mod len (etcd benchmark's --conns/--clients).
type pool struct{ clients []*clientv3.Client }

// newPool dials conns connections, connection i to endpoints[i mod
// len(endpoints)]: clients spread over a cluster's members or a root's
// instances as HA kube-apiservers are, each pointed at its own.
func newPool(endpoints []string, conns int) (*pool, error) {
	p := &pool{}
	for i := 0; i < conns; i++ {
		c, err := newClient(endpoints[i%len(endpoints)])
		if err != nil {
			p.close()
			return nil, err
		}
		p.clients = append(p.clients, c)
	}
	return p, nil
}

func (p *pool) get(i int) *clientv3.Client { return p.clients[i%len(p.clients)] }

// eachIndex calls fn(c, i) for every i in [0, n) from conc workers,
// worker w with p.get(w), until fn fails, ctx ends or every index is done.
// It returns the first error of fn (nil if none).
func (p *pool) eachIndex(ctx context.Context, n, conc int, fn func(c *clientv3.Client, i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, conc)
	for w := 0; w < conc; w++ {
		c := p.get(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(c, i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

func (p *pool) close() {
	for _, c := range p.clients {
		c.Close()
	}
}

// opFunc performs one operation of a workload. It may add workload figures
// to rec (rec.add) but must not record latency itself.
type opFunc func(ctx context.Context, rec *recorder) error

// cellSpec describes one time-bounded cell.
type cellSpec struct {
	workload string
	clients  int
	warmup   time.Duration
	duration time.Duration
	// newWorker returns worker i's operation, bound to connection c.
	newWorker func(i int, c *clientv3.Client) opFunc
	// rawWorker, if set, replaces newWorker for cells that use no etcd
	// connection (the ZooKeeper floor); the pool is then empty.
	rawWorker func(i int) opFunc
	note      string
}

// runCell runs spec against t: every worker loops its operation for
// warmup+duration; operations completing inside the measured window count.
// A worker returning errExhausted stops; if every operation of every
// worker fails, the cell stops early as unsupported.
func runCell(ctx context.Context, t *Target, p *pool, spec cellSpec, profileDir string) Result {
	res := Result{Server: t.Name, Workload: spec.workload, Clients: spec.clients, Conns: len(p.clients), Note: spec.note}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	mStart := start.Add(spec.warmup)
	// The window ends at mEnd, which the runner extends (up to
	// maxWindowFactor × duration) while fewer than minOps operations
	// completed in it: long operations (a LIST of 10,000 keys at 64
	// clients) need a longer window to be measured at all.
	var mEndNs atomic.Int64
	mEndNs.Store(mStart.Add(spec.duration).UnixNano())
	mEnd := func() time.Time { return time.Unix(0, mEndNs.Load()) }
	minOps := int64(max(spec.clients, 1))
	var successes, failures, inWindow atomic.Int64
	recs := make([]*recorder, spec.clients)
	var wg sync.WaitGroup
	for i := 0; i < spec.clients; i++ {
		rec := &recorder{}
		recs[i] = rec
		var op opFunc
		if spec.rawWorker != nil {
			op = spec.rawWorker(i)
		} else {
			op = spec.newWorker(i, p.get(i))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { rec.stopAt = time.Now() }()
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(mEnd()) {
					return
				}
				octx, ocancel := context.WithTimeout(ctx, opTimeout)
				err := op(octx, rec)
				ocancel()
				end := time.Now()
				kind := rec.kind
				rec.kind = ""
				if errors.Is(err, errExhausted) {
					return
				}
				if ctx.Err() != nil {
					return
				}
				// An operation counts if it completed inside the window
				// (long operations may have started in the warm-up).
				measured := !end.Before(mStart) && !end.After(mEnd())
				if err != nil {
					if failures.Add(1) >= 50 && successes.Load() == 0 {
						rec.fail(err)
						cancel() // every request fails: unsupported
						return
					}
					if measured {
						rec.fail(err)
					}
					continue
				}
				successes.Add(1)
				if measured {
					inWindow.Add(1)
					rec.kind = kind
					rec.ok(end.Sub(now))
					rec.kind = ""
				}
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	// A server that dies ends the cell at once (runServer restarts it).
	if len(t.procs) > 0 {
		died := t.died()
		go func() {
			select {
			case <-died:
				cancel()
			case <-allDone:
			}
		}()
	}

	// Sample CPU at the window's edges.
	var cpu0, self0 float64
	var profErr chan error
	select {
	case <-time.After(time.Until(mStart)):
	case <-allDone:
	}
	cpu0, self0 = totalCPU(t.pids()), selfCPU()
	main0 := totalCPU(t.apiPIDs())
	busy0 := machineBusy()
	cost0 := sampleCost(ctx, t)
	if profileDir != "" && t.PprofAddr != "" {
		profErr = make(chan error, 1)
		path := profilePath(profileDir, t.Name, spec.workload, spec.clients)
		secs := int(spec.duration.Seconds())
		go func() { profErr <- fetchProfile(t.PprofAddr, path, max(secs, 1)) }()
	}
	lead := min(50*time.Millisecond, spec.duration/10)
	for {
		select {
		case <-time.After(time.Until(mEnd().Add(-lead))):
		case <-allDone:
		}
		if inWindow.Load() >= minOps || mEnd().Sub(mStart) >= maxWindowFactor*spec.duration || isDone(allDone) {
			break
		}
		mEndNs.Add(int64(spec.duration))
	}
	select {
	case <-time.After(time.Until(mEnd())):
	case <-allDone:
	}
	cpu1, self1 := totalCPU(t.pids()), selfCPU()
	main1 := totalCPU(t.apiPIDs())
	busy1 := machineBusy()
	cost1 := sampleCost(ctx, t)
	// Operations still in flight do not count: give them a moment, then
	// cancel them so that a slow server does not stretch the cell.
	select {
	case <-allDone:
	case <-time.After(inflightGrace):
		cancel()
		<-allDone
	}
	jfrWindow(ctx, t, &res, mStart, mEnd())
	wallEnd := mEnd()
	if last := lastStop(recs); last.Before(wallEnd) {
		wallEnd = last
	}
	secs := wallEnd.Sub(mStart).Seconds()
	if secs <= 0 {
		secs = spec.duration.Seconds()
	}
	summarize(&res, recs, secs)
	keepCDF(&res)
	res.ServerCPUSeconds = cpu1 - cpu0
	res.DriverCPUSeconds = self1 - self0
	res.OtherCPUSeconds = max(0, (busy1-busy0)-res.ServerCPUSeconds-res.DriverCPUSeconds)
	if t.zk != nil && len(t.procs) > 0 && main1 >= main0 && res.Ops > 0 {
		// zketcd's own share of the server CPU (the rest is ZooKeeper).
		res.Extra = withExtra(res.Extra, "zketcd_cpu_per_op_us", (main1-main0)/float64(res.Ops)*1e6)
		res.Extra["zookeeper_cpu_per_op_us"] = max(0, res.ServerCPUSeconds-(main1-main0)) / float64(res.Ops) * 1e6
	}
	if res.Ops > 0 {
		res.ServerCPUPerOpUs = res.ServerCPUSeconds / float64(res.Ops) * 1e6
	}
	addCost(&res, t, cost0, cost1)
	countRequests(&res, t, cost0, cost1)
	res.Load1 = loadAvg()[0]
	if profErr != nil {
		if err := <-profErr; err != nil {
			res.Note = joinNote(res.Note, "pprof: "+err.Error())
		}
	}
	return res
}

func lastStop(recs []*recorder) time.Time {
	var last time.Time
	for _, r := range recs {
		if r.stopAt.After(last) {
			last = r.stopAt
		}
	}
	return last
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func withExtra(m map[string]float64, k string, v float64) map[string]float64 {
	if m == nil {
		m = map[string]float64{}
	}
	m[k] = v
	return m
}
