package bench

import (
	"cmp"
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
	// WFloorCommitPadded is WFloorCommit with the entry padded to the
	// request size of WFloorCommitZketcd; WFloorCommitZketcd is zketcd's
	// commit shape (check, create, setData, the read-lease guard's create
	// and delete); WFloorCommitTailed is that with a tailer re-reading the
	// head with a watch after each commit, as an instance's does.
	WFloorCommitPadded = "zk-commit-padded"
	WFloorCommitZketcd = "zk-commit-zketcd"
	WFloorCommitTailed = "zk-commit-zketcd-tailed"
)

// FloorWorkloads are the floor's workloads in report order (the tailed
// commit last: its tailer stays on for the rest of the turn).
var FloorWorkloads = []string{WFloorCommit, WFloorCheck, WFloorSyncGet, WFloorGet, WFloorCommitPadded, WFloorCommitZketcd, WFloorCommitTailed}

func init() {
	WorkloadDoc[WFloorCommit] = fmt.Sprintf("raw go-zookeeper `multi(create(%d B entry), setData(head))`: the writes of one zketcd commit", zkfloor.EntrySize)
	WorkloadDoc[WFloorCheck] = "raw go-zookeeper `multi(check(head))`: zketcd's strict read barrier without its read"
	WorkloadDoc[WFloorSyncGet] = "raw go-zookeeper `sync(head)` then `get(head)`"
	WorkloadDoc[WFloorGet] = "raw go-zookeeper `get(head)` from the session's server"
	WorkloadDoc[WFloorCommitPadded] = "raw go-zookeeper `zk-commit` with the entry padded to the request size of `zk-commit-zketcd`: a minimal multi of the same bytes"
	WorkloadDoc[WFloorCommitZketcd] = "raw go-zookeeper multi of zketcd's default commit shape: `check(entry)`, `create(entry)`, `setData(head)`, `create` and `delete` of the read-lease guard"
	WorkloadDoc[WFloorCommitTailed] = "`zk-commit-zketcd` with a tailer on the same session holding a watch on the head and re-reading it (`getW`) each time it fires, as a zketcd instance's tailer"
}

// floorOp returns the operation of floor workload w.
func floorOp(f *zkfloor.Floor, w string) func() error {
	switch w {
	case WFloorCommit, WFloorCommitPadded:
		return f.Commit
	case WFloorCommitZketcd, WFloorCommitTailed:
		return f.CommitZketcd
	case WFloorCheck:
		return f.Check
	case WFloorSyncGet:
		return f.SyncGet
	case WFloorGet:
		return f.Get
	}
	return nil
}

// runFloor starts an ensemble of members (as under zketcd-zk1 or
// zketcd-zk3) as server name and measures the floor workloads at every
// client count of p: all goroutines share one session, as a zketcd
// instance's requests do.
func runFloor(ctx context.Context, env *Env, p *Profile, opts *Options, name string, members int, logf func(string, ...any)) (results []Result, err error) {
	start := time.Now()
	zk, err := env.StartZooKeeper(ctx, name, members)
	if err != nil {
		return nil, fmt.Errorf("start ZooKeeper: %w", err)
	}
	defer func() { err = errors.Join(err, zk.stop()) }()
	logf("ZooKeeper (%d) serving on %s after %.1fs", members, zk.connect(), time.Since(start).Seconds())
	f, err := zkfloor.Open(strings.Split(zk.connect(), ","), "/floor")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entry := cmp.Or(p.FloorEntryBytes, zkfloor.EntrySize)
	t := &Target{Name: name, zk: zk}
	for _, w := range opts.selected(FloorWorkloads) {
		switch w {
		case WFloorCommitPadded:
			f.SetEntrySize(entry + f.ZketcdExtraBytes())
		case WFloorCommitTailed:
			if err := f.Tail(); err != nil {
				return results, err
			}
			fallthrough
		default:
			f.SetEntrySize(entry)
		}
		op := floorOp(f, w)
		for _, c := range p.Clients {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			spec := cellSpec{workload: w, clients: c, warmup: p.Warmup, duration: p.Duration,
				note:      fmt.Sprintf("one go-zookeeper session; entry %d B", entry),
				rawWorker: func(int) opFunc { return func(context.Context, *recorder) error { return op() } }}
			r := runCell(ctx, t, &pool{}, spec, "")
			r.Conns = 1
			if err := f.TailErr(); err != nil {
				r.Status, r.FirstError = "failed", "tailer: "+err.Error()
			}
			logCell(logf, r)
			results = append(results, r)
		}
	}
	return results, nil
}
