package watchtest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/zketcd/zketcd/embed/embedtest"
)

// BenchmarkWatchLatency measures commit-to-event latency: each iteration
// puts one key and waits until every watcher received its event. Reported:
//
//	event-p50-ms, event-p99-ms: from sending the put to a watcher receiving
//	  the event (all watchers' samples together);
//	put-p50-ms, put-p99-ms: the put's own latency (until its response);
//	after-ack-p50-ms: event arrival minus put response (negative when the
//	  event arrives first).
//
// Cases: same instance (watchers on the instance that commits) and cross
// instance (watchers on a second instance, which learns of the commit by
// tailing ZooKeeper), 1 and 100 watchers (each on its own gRPC stream), and
// embedded etcd for reference. Run with
//
//	cd integration && go test -run '^$' -bench WatchLatency ./watchtest/
func BenchmarkWatchLatency(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("zketcd-same/watchers=%d", n), func(b *testing.B) {
			in := embedtest.Start(b, []string{sharedZK.Addr(b)}, embedtest.Options{})
			benchLatency(b, in.Client(b), in.Client(b), n)
		})
		b.Run(fmt.Sprintf("zketcd-cross/watchers=%d", n), func(b *testing.B) {
			a := embedtest.Start(b, []string{sharedZK.Addr(b)}, embedtest.Options{})
			bi := embedtest.Start(b, []string{sharedZK.Addr(b)}, embedtest.Options{Root: a.Root()})
			benchLatency(b, a.Client(b), bi.Client(b), n)
		})
		b.Run(fmt.Sprintf("etcd/watchers=%d", n), func(b *testing.B) {
			o := startEtcd(b)
			benchLatency(b, o.Client(b), o.Client(b), n)
		})
	}
}

type arrival struct {
	iter int
	at   time.Time
}

func benchLatency(b *testing.B, writer, watcher *clientv3.Client, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const key = "bench/k"
	got := make(chan arrival, 1024)
	for i := 0; i < n; i++ {
		wctx := metadata.AppendToOutgoingContext(ctx, "bench-watcher", strconv.Itoa(i))
		wch := watcher.Watch(wctx, key, clientv3.WithCreatedNotify())
		if wr := <-wch; !wr.Created {
			b.Fatalf("watch %d: %v", i, wr.Err())
		}
		go func() {
			for wr := range wch {
				at := time.Now()
				for _, ev := range wr.Events {
					iter, err := strconv.Atoi(string(ev.Kv.Value))
					if err != nil {
						continue
					}
					select {
					case got <- arrival{iter, at}:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	// Warm up connections and the instances.
	for i := 0; i < 20; i++ {
		if _, err := writer.Put(ctx, key, "warmup"); err != nil {
			b.Fatal(err)
		}
	}
	events := make([]time.Duration, 0, b.N*n)
	afterAck := make([]time.Duration, 0, b.N*n)
	puts := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := writer.Put(ctx, key, strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		puts = append(puts, acked.Sub(start))
		for seen := 0; seen < n; {
			select {
			case a := <-got:
				if a.iter != i {
					continue // a late warm-up event
				}
				events = append(events, a.at.Sub(start))
				afterAck = append(afterAck, a.at.Sub(acked))
				seen++
			case <-time.After(10 * time.Second):
				b.Fatalf("iteration %d: %d of %d watchers got the event", i, seen, n)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(events, 50)), "event-p50-ms")
	b.ReportMetric(ms(percentile(events, 99)), "event-p99-ms")
	b.ReportMetric(ms(percentile(puts, 50)), "put-p50-ms")
	b.ReportMetric(ms(percentile(puts, 99)), "put-p99-ms")
	b.ReportMetric(ms(percentile(afterAck, 50)), "after-ack-p50-ms")
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
