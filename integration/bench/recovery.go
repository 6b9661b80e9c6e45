package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// recoveryTxnOps is how many puts one loading transaction carries
// (zketcd's and etcd's default --max-txn-ops).
const recoveryTxnOps = 128

// Recovery workload names.
const (
	WRecoveryLog  = "recovery-log"  // zketcd: replays the whole log
	WRecoveryBase = "recovery-base" // zketcd: loads a base generation after Compact(physical)
	WRecovery     = "recovery"      // etcd: restart on its data dir
)

// loadKeys writes n keys of 256 B under recoveryPrefix through c, in
// transactions of recoveryTxnOps puts, conc at a time, and returns the last
// revision.
func loadKeys(ctx context.Context, c *clientv3.Client, n, conc int) (int64, error) {
	var next atomic.Int64
	var last atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, conc)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(recoveryTxnOps)) - recoveryTxnOps
				if from >= n || ctx.Err() != nil {
					return
				}
				to := min(from+recoveryTxnOps, n)
				ops := make([]clientv3.Op, 0, to-from)
				for i := from; i < to; i++ {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%08d", recoveryPrefix, i), string(benchValue)))
				}
				var err error
				for attempt := 0; attempt < 5; attempt++ {
					octx, cancel := context.WithTimeout(ctx, opTimeout)
					var r *clientv3.TxnResponse
					r, err = c.Txn(octx).Then(ops...).Commit()
					cancel()
					if err == nil {
						for {
							cur := last.Load()
							if r.Header.Revision <= cur || last.CompareAndSwap(cur, r.Header.Revision) {
								break
							}
						}
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return last.Load(), nil
}

// RecoveryResult is a recovery measurement, kept in Result with
// Workload WRecovery*, Clients = number of keys, Seconds = time from
// the process start until it served a linearizable count of every key.
func recoveryResult(server, workload string, keys int, took time.Duration, rss, rssEmpty int64, note string) Result {
	r := Result{Server: server, Workload: workload, Clients: keys, Status: "ok", Ops: 1,
		Seconds: took.Seconds(), Note: note, Load1: loadAvg()[0]}
	r.Extra = map[string]float64{
		"keys":         float64(keys),
		"rss_mb":       float64(rss) / (1 << 20),
		"rss_empty_mb": float64(rssEmpty) / (1 << 20),
	}
	if keys > 0 && rss > 0 {
		r.Extra["rss_per_100k_mb"] = float64(rss-rssEmpty) / (1 << 20) / (float64(keys) / 100000)
	}
	return r
}

// measureZketcdRecovery loads keys into a fresh root on zk through a
// loader instance, then times a fresh instance's start on that root twice:
// replaying the whole log, and (after Compact with physical=true) loading
// the base generation. It also reports the RSS of the instances.
func measureZketcdRecovery(ctx context.Context, env *Env, server string, zk *zkCluster, keys int, logf func(string, ...any)) ([]Result, error) {
	root := fmt.Sprintf("/bench-recovery-%d", keys)
	// The empty instance's RSS is the baseline.
	loader, _, err := env.StartZketcd(ctx, server, fmt.Sprintf("recovery-%d-loader", keys), zk, root, 0)
	if err != nil {
		return nil, err
	}
	defer loader.Stop()
	time.Sleep(time.Second)
	rssEmpty, _ := rssBytes(loader.mainPID())
	c, err := newClient(loader.Endpoint)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	lastRev, err := loadKeys(ctx, c, keys, 4)
	c.Close()
	if err != nil {
		return nil, fmt.Errorf("load %d keys: %w", keys, err)
	}
	logf("%s: loaded %d keys in %.1fs (rev %d)", server, keys, time.Since(start).Seconds(), lastRev)
	rssLoaded, _ := rssBytes(loader.mainPID())
	if err := loader.Stop(); err != nil {
		return nil, err
	}

	var out []Result
	for _, phase := range []string{WRecoveryLog, WRecoveryBase} {
		t, took, err := env.StartZketcd(ctx, server, fmt.Sprintf("recovery-%d-%s", keys, phase), zk, root, keys)
		if err != nil {
			return out, fmt.Errorf("%s: %w", phase, err)
		}
		rss, _ := rssBytes(t.mainPID())
		note := "log replay of every entry"
		if phase == WRecoveryBase {
			note = "base generation after Compact(physical)"
		}
		r := recoveryResult(server, phase, keys, took, rss, rssEmpty, note)
		r.Extra["rss_loader_mb"] = float64(rssLoaded) / (1 << 20)
		out = append(out, r)
		logf("%s: %s over %d keys: serving after %.2fs, RSS %.0f MB", server, phase, keys, took.Seconds(), float64(rss)/(1<<20))
		if phase == WRecoveryLog {
			cc, err := newClient(t.Endpoint)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				_, err = cc.Compact(cctx, lastRev, clientv3.WithCompactPhysical())
				cancel()
				cc.Close()
			}
			if err != nil {
				_ = t.Stop()
				return out, fmt.Errorf("compact: %w", err)
			}
		}
		if err := t.Stop(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// measureEtcdRecovery loads keys into a fresh etcd, stops it and times its
// restart on the same data directory, for reference.
func measureEtcdRecovery(ctx context.Context, env *Env, keys int, logf func(string, ...any)) (Result, error) {
	name := fmt.Sprintf("etcd-recovery-%d", keys)
	t, err := env.StartEtcd(ctx, name)
	if err != nil {
		return Result{}, err
	}
	time.Sleep(time.Second)
	rssEmpty, _ := rssBytes(t.mainPID())
	c, err := newClient(t.Endpoint)
	if err != nil {
		_ = t.Stop()
		return Result{}, err
	}
	_, err = loadKeys(ctx, c, keys, 4)
	c.Close()
	if err != nil {
		_ = t.Stop()
		return Result{}, err
	}
	if err := t.Stop(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	t, err = env.StartEtcd(ctx, name)
	if err != nil {
		return Result{}, err
	}
	defer t.Stop()
	// StartEtcd waited for a Get; now wait for the count as for zketcd.
	cc, err := newClient(t.Endpoint)
	if err != nil {
		return Result{}, err
	}
	defer cc.Close()
	check := countCheck(recoveryPrefix, keys)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = check(cc, cctx)
		cancel()
		if err == nil || time.Since(start) > readyWithin {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return Result{}, err
	}
	took := time.Since(start)
	rss, _ := rssBytes(t.mainPID())
	logf("etcd: restart over %d keys: serving after %.2fs, RSS %.0f MB", keys, took.Seconds(), float64(rss)/(1<<20))
	return recoveryResult(ServerEtcd, WRecovery, keys, took, rss, rssEmpty, "restart on its data dir (bbolt + WAL)"), nil
}
