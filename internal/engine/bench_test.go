package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
)

// BenchmarkPutParallel puts 256-byte values from 16 goroutines sharing one
// client, as etcd's benchmark does with --clients=16 --conns=1. Throughput
// lands in the ns/op figure; run it with -cpuprofile to find hot spots.
func BenchmarkPutParallel(b *testing.B) {
	in := embedtest.Start(b, []string{zkAddr(b)}, embedtest.Options{})
	c := in.Client(b)
	val := string(make([]byte, 256))
	b.ResetTimer()
	runParallel(b, 16, func(i int64) error {
		_, err := c.Put(context.Background(), fmt.Sprintf("k%07d", i%100000), val)
		return err
	})
	b.StopTimer()
	reportCommitStats(b, in)
}

// reportCommitStats reports the mean commit latency and ops per entry.
func reportCommitStats(b *testing.B, in *embedtest.Instance) {
	mfs, err := in.Zketcd().Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "zketcd_commit_duration_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				if h.GetSampleCount() > 0 {
					b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1e3, "ms/commit")
				}
			}
		case "zketcd_commit_batch_ops":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() > 0 {
				b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount()), "ops/entry")
			}
		case "zketcd_read_barrier_duration_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() > 0 {
				b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1e3, "ms/barrier")
			}
		}
	}
}

// BenchmarkGetParallel reads one key linearizably (or serializably) from
// 16 goroutines.
func BenchmarkGetParallel(b *testing.B) {
	for _, serializable := range []bool{false, true} {
		b.Run(fmt.Sprintf("serializable=%v", serializable), func(b *testing.B) {
			in := embedtest.Start(b, []string{zkAddr(b)}, embedtest.Options{})
			c := in.Client(b)
			if _, err := c.Put(context.Background(), "k", "v"); err != nil {
				b.Fatal(err)
			}
			var opts []clientv3.OpOption
			if serializable {
				opts = append(opts, clientv3.WithSerializable())
			}
			b.ResetTimer()
			runParallel(b, 16, func(int64) error {
				_, err := c.Get(context.Background(), "k", opts...)
				return err
			})
			b.StopTimer()
			reportCommitStats(b, in)
		})
	}
}

// BenchmarkLeaseKeepAlive renews 1,000 leases from 1 and from 64 goroutines
// sharing one client (KeepAliveOnce, round robin over the leases) and
// reports how many ZooKeeper multis and token writes the keepalives cost.
// The one instance is the leader, so it renews them in memory (0 writes);
// at a follower concurrent keepalives share one multi, so the multis per
// keepalive fall as concurrency grows, while each lease renewed in a multi
// is one token write.
func BenchmarkLeaseKeepAlive(b *testing.B) {
	for _, workers := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", workers), func(b *testing.B) {
			in := embedtest.Start(b, []string{zkAddr(b)}, embedtest.Options{})
			c := in.Client(b)
			ctx := context.Background()
			ids := make([]clientv3.LeaseID, 1000)
			for i := range ids {
				resp, err := c.Grant(ctx, 60)
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = resp.ID
			}
			before := leaseCounters(b, in)
			b.ResetTimer()
			runParallel(b, workers, func(i int64) error {
				_, err := c.KeepAliveOnce(ctx, ids[i%int64(len(ids))])
				return err
			})
			b.StopTimer()
			after := leaseCounters(b, in)
			kas := after["zketcd_lease_keepalives_total"] - before["zketcd_lease_keepalives_total"]
			// A single instance leads: its keepalives are renewed in memory.
			if mem := after["zketcd_lease_keepalives_in_memory_total"] - before["zketcd_lease_keepalives_in_memory_total"]; mem > 0 {
				b.ReportMetric(mem/float64(b.N), "in-memory/keepalive")
				b.ReportMetric((after["zketcd_lease_renewal_token_writes_total"]-before["zketcd_lease_renewal_token_writes_total"])/float64(b.N), "writes/keepalive")
			}
			if kas > 0 {
				b.ReportMetric((after["zketcd_lease_renewal_multis_total"]-before["zketcd_lease_renewal_multis_total"])/kas, "multis/keepalive")
				b.ReportMetric((after["zketcd_lease_renewal_token_writes_total"]-before["zketcd_lease_renewal_token_writes_total"])/kas, "writes/keepalive")
			}
		})
	}
}

// leaseCounters reads the instance's lease renewal counters.
func leaseCounters(b *testing.B, in *embedtest.Instance) map[string]float64 {
	mfs, err := in.Zketcd().Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "zketcd_lease_") && len(mf.GetMetric()) > 0 && mf.GetMetric()[0].GetCounter() != nil {
			out[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return out
}

// runParallel calls op with 1..b.N from workers goroutines, each taking the
// next number until b.N are taken; the first error fails the benchmark and
// stops that goroutine.
func runParallel(b *testing.B, workers int, op func(i int64) error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := n.Add(1); i <= int64(b.N); i = n.Add(1) {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
