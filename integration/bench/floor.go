package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/zketcd/zketcd/integration/bench/zkfloor"
)

// The ZooKeeper floor: raw go-zookeeper requests on one session, the
// requests zketcd's put and linearizable get are made of.
const (
	WFloorCommit  = "zk-commit"   // multi(create entry, setData head)
	WFloorCheck   = "zk-check"    // multi(check head)
	WFloorSyncGet = "zk-sync-get" // sync(head) + get(head)
	WFloorGet     = "zk-get"      // get(head)
)

// FloorWorkloads are the floor's workloads in report order.
var FloorWorkloads = []string{WFloorCommit, WFloorCheck, WFloorSyncGet, WFloorGet}

func init() {
	WorkloadDoc[WFloorCommit] = fmt.Sprintf("raw go-zookeeper `multi(create(%d B entry), setData(head))`: the writes of one zketcd commit", zkfloor.EntrySize)
	WorkloadDoc[WFloorCheck] = "raw go-zookeeper `multi(check(head))`: zketcd's strict read barrier without its read"
	WorkloadDoc[WFloorSyncGet] = "raw go-zookeeper `sync(head)` then `get(head)`"
	WorkloadDoc[WFloorGet] = "raw go-zookeeper `get(head)` from the session's server"
}

// floorOp returns the operation of floor workload w.
func floorOp(f *zkfloor.Floor, w string) func() error {
	switch w {
	case WFloorCommit:
		return f.Commit
	case WFloorCheck:
		return f.Check
	case WFloorSyncGet:
		return f.SyncGet
	case WFloorGet:
		return f.Get
	}
	return nil
}

// runFloor starts a 3-member ensemble (as under zketcd-zk3) and measures
// the floor workloads at every client count of p: all goroutines share
// one session, as a zketcd instance's requests do.
func runFloor(ctx context.Context, env *Env, p *Profile, opts *Options, logf func(string, ...any)) (results []Result, err error) {
	start := time.Now()
	zk, err := env.StartZooKeeper(ctx, ServerZKFloor, 3)
	if err != nil {
		return nil, fmt.Errorf("start ZooKeeper: %w", err)
	}
	defer func() { err = errors.Join(err, zk.stop()) }()
	logf("ZooKeeper (3) serving on %s after %.1fs", zk.connect(), time.Since(start).Seconds())
	f, err := zkfloor.Open(strings.Split(zk.connect(), ","), "/floor")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := &Target{Name: ServerZKFloor, zk: zk}
	for _, w := range opts.selected(FloorWorkloads) {
		op := floorOp(f, w)
		for _, c := range p.Clients {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			spec := cellSpec{workload: w, clients: c, warmup: p.Warmup, duration: p.Duration, note: "one go-zookeeper session",
				rawWorker: func(int) opFunc { return func(context.Context, *recorder) error { return op() } }}
			r := runCell(ctx, t, &pool{}, spec, "")
			r.Conns = 1
			logCell(logf, r)
			results = append(results, r)
		}
	}
	return results, nil
}
