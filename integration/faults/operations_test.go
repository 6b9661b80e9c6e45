package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zketcd/zketcd/integration/faultproxy"
	"github.com/zketcd/zketcd/internal/zkserver"
)

// The operator's procedures as scenarios: a rolling restart of the
// ensemble, a change of zketcd's --zk connect string, and a slow disk.

// rollingRestart restarts the ensemble's members one at a time (followers
// first, the leader last, as operators do), each with SIGTERM and a start on
// its old data, and waits after each for a quorum with every member serving
// (srvr) and the leader's mntr showing all followers synced before the
// next.
func rollingRestart(t *testing.T, cl *cluster) (string, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, err := waitLeader(ctx, cl.ens)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for i := range cl.ens.Size() {
		if i != leader {
			order = append(order, i)
		}
	}
	order = append(order, leader)
	var steps []string
	for _, i := range order {
		m := cl.ens.Member(i)
		began := time.Now()
		if err := m.Stop(); err != nil {
			t.Fatalf("stop ZooKeeper member %d: %v", i+1, err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatalf("start ZooKeeper member %d: %v", i+1, err)
		}
		if err := waitSynced(ctx, cl.ens); err != nil {
			t.Fatalf("after restarting ZooKeeper member %d: %v", i+1, err)
		}
		steps = append(steps, fmt.Sprintf("%d (%.1f s)", i+1, time.Since(began).Seconds()))
	}
	return "rolling restart of the 3 ZooKeeper members, followers first, quorum and synced followers awaited after each: members " +
		strings.Join(steps, ", "), func() {}
}

// waitLeader polls for the ensemble's leader.
func waitLeader(ctx context.Context, ens *zkserver.Ensemble) (int, error) {
	for {
		li, err := ens.Leader(ctx)
		if err == nil {
			return li, nil
		}
		if ctx.Err() != nil {
			return -1, fmt.Errorf("no ZooKeeper leader: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitSynced waits for a quorum of all members (srvr) and for the leader's
// mntr to count every other member as a synced follower.
func waitSynced(ctx context.Context, ens *zkserver.Ensemble) error {
	if err := ens.WaitQuorum(ctx); err != nil {
		return err
	}
	for {
		li, err := ens.Leader(ctx)
		if err == nil {
			m, err := ens.Member(li).Monitor(ctx)
			if err == nil && m["zk_synced_followers"] == strconv.Itoa(ens.Size()-1) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("followers not synced: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// changeConnectString restarts the zketcd instances one by one onto other
// member lists: A onto new client addresses of the same members (new fault
// proxies, as when members move to other ports or hosts), B onto a subset
// of two members; the heal restarts B onto the full list again.
func changeConnectString(t *testing.T, cl *cluster) (string, func()) {
	var fresh []*faultproxy.Proxy
	var addrs []string
	for _, addr := range cl.ens.Addrs() {
		p, err := faultproxy.Start(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		fresh = append(fresh, p)
		addrs = append(addrs, p.Addr())
	}
	restart := func(z *Zketcd, zk []string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := z.Stop(); err != nil {
			t.Fatalf("stop zketcd %s: %v", z.Name, err)
		}
		z.SetZK(zk)
		if err := z.Start(ctx); err != nil {
			t.Fatalf("restart zketcd %s onto --zk %s: %v", z.Name, strings.Join(zk, ","), err)
		}
	}
	restart(cl.a, addrs)
	for _, p := range cl.proxies {
		_ = p.Close()
	}
	cl.proxies = fresh
	subset := cl.ens.Addrs()[:2]
	restart(cl.b, subset)
	return fmt.Sprintf("zketcd A restarted onto new client addresses of the 3 members (--zk %s), then B onto 2 of the 3 (--zk %s); healed by restarting B onto all 3",
			strings.Join(addrs, ","), strings.Join(subset, ",")), func() {
			restart(cl.b, cl.ens.Addrs())
		}
}

// slowDisk prepares the ensemble for the slow-disk scenario: the fsync
// shim preloaded into every member's JVM (fsyncs slow while the control
// file exists) and forceSync on (the other scenarios turn it off, and with
// it off ZooKeeper does not fsync its log).
func slowDisk(t *testing.T, o *zkserver.Options) {
	dir := t.TempDir()
	so := filepath.Join(dir, "slowfsync.so")
	src, err := filepath.Abs(filepath.Join("testdata", "slowfsync.c"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl").CombinedOutput(); err != nil {
		t.Skipf("gcc cannot build the fsync shim: %v\n%s", err, out)
	}
	o.Env = append(o.Env, "LD_PRELOAD="+so, "SLOWFSYNC_CONTROL="+filepath.Join(dir, "slow"),
		"SLOWFSYNC_MIN_MS=50", "SLOWFSYNC_MAX_MS=200")
	o.ExtraConfig["forceSync"] = "yes"
}

// slowFsync makes every member's fsync take 50–200 ms for the fault's hold
// and reports what zketcd A's metrics and ZooKeeper's mntr saw: the mean
// ops per committed entry and commit time during the slow window against
// the same span before it, and ZooKeeper's fsync times.
func slowFsync(t *testing.T, cl *cluster) (string, func()) {
	ctl := ""
	for _, kv := range cl.zkOpts.Env {
		if v, ok := strings.CutPrefix(kv, "SLOWFSYNC_CONTROL="); ok {
			ctl = v
		}
	}
	if ctl == "" {
		t.Fatal("slowFsync needs the slowDisk ensemble")
	}
	ctx := context.Background()
	// The same span of fast disk before the fault, for comparison.
	fast0 := scrape(t, cl.a)
	time.Sleep(slowHold)
	fast1 := scrape(t, cl.a)
	slow0 := fsyncs(ctx, cl.ens)
	if err := os.WriteFile(ctl, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	began := fast1
	return "fsync and fdatasync of every ZooKeeper member slowed to 50–200 ms (LD_PRELOAD shim) for " + slowHold.String(), func() {
		end := scrape(t, cl.a)
		if err := os.Remove(ctl); err != nil {
			t.Fatal(err)
		}
		slow1 := fsyncs(ctx, cl.ens)
		n, sum := slow1.cnt-slow0.cnt, slow1.sum-slow0.sum
		mean := 0.0
		if n > 0 {
			mean = sum / n
		}
		note := fmt.Sprintf("zketcd A, fast disk (%v before): %s; slow disk (%v): %s; ZooKeeper (mntr, all members): %.0f fsyncs during the slow window, mean %.0f ms",
			slowHold, fast0.delta(fast1), slowHold, began.delta(end), n, mean)
		t.Log(note)
		cl.notes = append(cl.notes, note)
		if mean < 40 {
			t.Errorf("ZooKeeper's fsyncs took %.1f ms on average while the disk was slow: the shim did not reach them", mean)
		}
	}
}

const slowHold = 12 * time.Second

// fsyncStats sums mntr's zk_cnt_fsynctime and zk_sum_fsynctime (ms) over
// the running members.
type fsyncStats struct{ cnt, sum float64 }

func fsyncs(ctx context.Context, ens *zkserver.Ensemble) fsyncStats {
	var f fsyncStats
	for _, m := range ens.Members() {
		v, err := m.Monitor(ctx)
		if err != nil {
			continue
		}
		c, _ := strconv.ParseFloat(v["zk_cnt_fsynctime"], 64)
		s, _ := strconv.ParseFloat(v["zk_sum_fsynctime"], 64)
		f.cnt += c
		f.sum += s
	}
	return f
}

// commitStats is a scrape of zketcd's commit histograms.
type commitStats struct {
	batchSum, batchCount float64 // zketcd_commit_batch_ops
	secSum, secCount     float64 // zketcd_commit_duration_seconds, all outcomes
}

func (a commitStats) delta(b commitStats) string {
	n := b.batchCount - a.batchCount
	if n <= 0 {
		return "no commits"
	}
	ms := 0.0
	if c := b.secCount - a.secCount; c > 0 {
		ms = (b.secSum - a.secSum) / c * 1000
	}
	return fmt.Sprintf("%.0f entries, %.2f ops per entry, mean commit %.1f ms", n, (b.batchSum-a.batchSum)/n, ms)
}

func scrape(t *testing.T, z *Zketcd) commitStats {
	m, err := scrapeMetrics(z.Metrics)
	if err != nil {
		t.Logf("scrape %s: %v", z.Name, err)
	}
	return commitStats{
		batchSum: m["zketcd_commit_batch_ops_sum"], batchCount: m["zketcd_commit_batch_ops_count"],
		secSum: m["zketcd_commit_duration_seconds_sum"], secCount: m["zketcd_commit_duration_seconds_count"],
	}
}

// scrapeMetrics reads a Prometheus text page and sums each metric's series
// over their labels; each labelled series is there under its full name as
// well (name{label="value"}).
func scrapeMetrics(addr string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return map[string]float64{}, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		name := l[:i]
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		if j := strings.IndexByte(name, '{'); j >= 0 {
			out[name] = v
			name = name[:j]
		}
		out[name] += v
	}
	return out, sc.Err()
}
