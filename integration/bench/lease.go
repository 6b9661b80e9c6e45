package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WKeepalive keeps many leases alive at the rate their clients would.
const WKeepalive = "lease-keepalive"

// keepaliveTTL is the TTL of the keepalive cell's leases; clients renew a
// lease every TTL/3 (as clientv3 does), so N leases cost N/(TTL/3)
// keepalives per second.
const keepaliveTTL = 30

func init() {
	WorkloadDoc[WKeepalive] = fmt.Sprintf("N leases (TTL %d s, granted first) kept alive at the rate clientv3 would "+
		"(each every TTL/3: N/10 keepalives per second) over long-lived LeaseKeepAlive streams, one per connection; "+
		"the row gives the server's CPU in cores and, for zketcd, ZooKeeper writes per keepalive (zxid delta)", keepaliveTTL)
}

// runKeepalive grants leases leases on t and keeps them alive at
// leases/(TTL/3) per second for warmup+duration; the window measures the
// server's CPU share and (with ZooKeeper) the ZooKeeper transactions per
// keepalive. Clients = leases in the result. With profileDir (and the
// pprof child), a CPU profile of the window is saved there.
func runKeepalive(ctx context.Context, t *Target, p *pool, leases int, warmup, duration time.Duration, profileDir string) Result {
	res := Result{Server: t.Name, Workload: WKeepalive, Clients: leases, Conns: len(p.clients)}
	fail := func(err error) Result {
		res.Status, res.FirstError = "failed", err.Error()
		return res
	}
	ids, err := grantLeases(ctx, p, leases)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]pb.Lease_LeaseKeepAliveClient, len(p.clients))
	for i, c := range p.clients {
		if streams[i], err = pb.NewLeaseClient(c.ActiveConnection()).LeaseKeepAlive(ctx); err != nil {
			return fail(fmt.Errorf("open keepalive stream: %w", err))
		}
	}
	// Each stream's receiver times its keepalives (sent in order on it).
	type sent struct{ at time.Time }
	pending := make([]chan sent, len(streams))
	var answered, failed atomic.Int64
	var measuring atomic.Bool
	recs := make([]*recorder, len(streams))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i, s := range streams {
		pending[i] = make(chan sent, 4096)
		recs[i] = &recorder{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := s.Recv()
				if err != nil {
					if ctx.Err() == nil || status.Code(err) != codes.Canceled {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				snt := <-pending[i]
				if r.TTL <= 0 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("lease %x expired (keepalive answered TTL %d)", r.ID, r.TTL))
					continue
				}
				if measuring.Load() {
					answered.Add(1)
					recs[i].ok(time.Since(snt.at))
				}
			}
		}()
	}
	rate := float64(leases) / (keepaliveTTL / 3.0)
	interval := time.Duration(float64(time.Second) / rate)
	began := time.Now()
	end := began.Add(warmup + duration)
	var cpu0, busy0, self0, api0 float64
	var zx0 int64
	var profErr chan error
	started := false
	for n := 0; ; n++ {
		at := began.Add(time.Duration(n) * interval)
		if !at.Before(end) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Until(at))
		if !started && !time.Now().Before(began.Add(warmup)) {
			started = true
			cpu0, busy0, self0, api0 = totalCPU(t.pids()), machineBusy(), selfCPU(), totalCPU(t.apiPIDs())
			zx0 = zkTxns(t)
			measuring.Store(true)
			if profileDir != "" && t.PprofAddr != "" {
				profErr = make(chan error, 1)
				path := profilePath(profileDir, t.Name, WKeepalive, leases)
				go func() { profErr <- fetchProfile(t.PprofAddr, path, max(int(duration.Seconds()), 1)) }()
			}
		}
		i := n % len(streams)
		pending[i] <- sent{time.Now()}
		if err := streams[i].Send(&pb.LeaseKeepAliveRequest{ID: int64(ids[n%len(ids)])}); err != nil {
			// The server ended the stream: its reason is what the
			// receiver got.
			cancel()
			wg.Wait()
			revokeLeases(context.Background(), p, ids)
			if e, ok := firstErr.Load().(error); ok {
				err = e
			}
			res = fail(fmt.Errorf("keepalive: %w", err))
			if status.Code(err) == codes.Unimplemented || strings.Contains(err.Error(), "not supported") {
				res.Status = "unsupported"
			}
			return res
		}
	}
	secs := time.Since(began.Add(warmup)).Seconds()
	cpu1, busy1, self1, api1 := totalCPU(t.pids()), machineBusy(), selfCPU(), totalCPU(t.apiPIDs())
	zx1 := zkTxns(t)
	measuring.Store(false)
	time.Sleep(200 * time.Millisecond) // the last answers
	cancel()
	for _, s := range streams {
		_ = s.CloseSend()
	}
	wg.Wait()
	summarize(&res, recs, secs)
	res.Errors += failed.Load()
	if e, ok := firstErr.Load().(error); ok {
		res.FirstError = e.Error()
	}
	res.ServerCPUSeconds = cpu1 - cpu0
	res.DriverCPUSeconds = self1 - self0
	res.OtherCPUSeconds = max(0, busy1-busy0-res.ServerCPUSeconds-res.DriverCPUSeconds)
	if res.Ops > 0 {
		res.ServerCPUPerOpUs = res.ServerCPUSeconds / float64(res.Ops) * 1e6
	}
	res.Extra = withExtra(res.Extra, "server_cores", res.ServerCPUSeconds/secs)
	res.Extra["keepalive_rate"] = rate
	if t.zk != nil {
		res.Extra["zketcd_cores"] = (api1 - api0) / secs
	}
	if zx0 >= 0 && zx1 >= zx0 && res.Ops > 0 {
		res.Extra["zk_txns_per_keepalive"] = float64(zx1-zx0) / float64(res.Ops)
	}
	res.Load1 = loadAvg()[0]
	res.Note = fmt.Sprintf("%d leases, TTL %d s, %.0f keepalives/s", leases, keepaliveTTL, rate)
	if profErr != nil {
		if err := <-profErr; err != nil {
			res.Note = joinNote(res.Note, "pprof: "+err.Error())
		}
	}
	// Leave no leases behind for the cells that follow.
	revokeLeases(context.Background(), p, ids)
	return res
}

// grantLeases grants n leases of keepaliveTTL from 64 workers.
func grantLeases(ctx context.Context, p *pool, n int) ([]clientv3.LeaseID, error) {
	ids := make([]clientv3.LeaseID, n)
	err := p.eachIndex(ctx, n, 64, func(c *clientv3.Client, i int) error {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		r, err := c.Grant(octx, keepaliveTTL)
		if err != nil {
			return fmt.Errorf("grant lease %d: %w", i, err)
		}
		ids[i] = r.ID
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, ctx.Err()
}

// revokeLeases revokes ids from 64 workers, ignoring errors.
func revokeLeases(ctx context.Context, p *pool, ids []clientv3.LeaseID) {
	_ = p.eachIndex(ctx, len(ids), 64, func(c *clientv3.Client, i int) error {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		_, _ = c.Revoke(octx, ids[i])
		return nil
	})
}

// zkTxns returns the count of ZooKeeper transactions so far (the counter
// of the highest zxid any member of t's ZooKeeper reports), or -1 without
// ZooKeeper. Within one leader epoch, its difference over a window is the
// number of writes committed in it.
func zkTxns(t *Target) int64 {
	if t.zk == nil {
		return -1
	}
	best := int64(-1)
	for _, addr := range strings.Split(t.zk.connect(), ",") {
		if z, err := srvrZxid(addr); err == nil && z > best {
			best = z
		}
	}
	if best < 0 {
		return -1
	}
	return best & 0xffffffff
}

// srvrZxid asks a ZooKeeper server for its last zxid ("srvr").
func srvrZxid(addr string) (int64, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Zxid: "); ok {
			return strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(v), "0x"), 16, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("srvr: no Zxid line")
}
