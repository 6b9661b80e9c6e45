package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// watchSpec configures a watch-latency cell.
type watchSpec struct {
	watchers int
	rate     int // puts per second
	warmup   time.Duration
	duration time.Duration
	conns    int // connections the watchers are spread over
}

// runWatch measures commit-to-event latency: one writer (its own
// connection) puts keys under a fresh prefix at spec.rate; spec.watchers
// watchers (each on its own gRPC stream) watch the prefix. A sample is the
// time from the start of the Put call to the receipt of the event, for
// every (put, watcher) pair of the measured window. Events that do not
// arrive within 5 s after the last put count as errors.
func runWatch(ctx context.Context, t *Target, spec watchSpec, cell int) (Result, error) {
	res := Result{Server: t.Name, Workload: WWatch, Clients: spec.watchers}
	prefix := fmt.Sprintf("%sc%d/", watchPrefix, cell)
	total := int(float64(spec.rate)*(spec.warmup+spec.duration).Seconds()) + 1
	starts := make([]atomic.Int64, total)
	writer, err := newClient(t.Endpoint)
	if err != nil {
		return res, err
	}
	defer writer.Close()
	conns := max(1, min(spec.conns, spec.watchers))
	wp, err := newPool(t.Endpoints, conns)
	if err != nil {
		return res, err
	}
	defer wp.close()
	res.Conns = conns

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	firstMeasured := int(float64(spec.rate) * spec.warmup.Seconds())
	var lastMeasured atomic.Int64
	lastMeasured.Store(int64(total))
	type wstate struct {
		lat      []float64
		received int
	}
	states := make([]*wstate, spec.watchers)
	var wg sync.WaitGroup
	var got atomic.Int64
	for i := 0; i < spec.watchers; i++ {
		st := &wstate{}
		states[i] = st
		mctx := metadata.AppendToOutgoingContext(wctx, "bench-watcher", strconv.Itoa(i))
		wch := wp.get(i).Watch(mctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		wr, ok := <-wch
		if !ok || !wr.Created {
			return res, fmt.Errorf("watcher %d not created: %v", i, wr.Err())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wr := range wch {
				at := time.Now().UnixNano()
				for _, ev := range wr.Events {
					seq, err := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), prefix))
					if err != nil || seq < 0 || seq >= total {
						continue
					}
					if seq >= firstMeasured && int64(seq) < lastMeasured.Load() {
						st.lat = append(st.lat, float64(at-starts[seq].Load())/1e6)
						st.received++
						got.Add(1)
					}
				}
			}
		}()
	}

	cpu0, self0 := totalCPU(t.pids()), selfCPU()
	interval := time.Second / time.Duration(spec.rate)
	begin := time.Now()
	var measuredPuts int
	var putErrs int64
	var firstErr error
	mStart := begin.Add(spec.warmup)
	mEnd := mStart.Add(spec.duration)
	var cpuAtStart, selfAtStart, busyAtStart float64
	seq := 0
	for ; seq < total; seq++ {
		next := begin.Add(time.Duration(seq) * interval)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		if seq == firstMeasured {
			cpuAtStart, selfAtStart, busyAtStart = totalCPU(t.pids()), selfCPU(), machineBusy()
			mStart = time.Now()
		}
		if time.Now().After(mEnd) && seq > firstMeasured {
			break
		}
		starts[seq].Store(time.Now().UnixNano())
		pctx, pcancel := context.WithTimeout(ctx, opTimeout)
		_, err := writer.Put(pctx, fmt.Sprintf("%s%08d", prefix, seq), string(benchValue))
		pcancel()
		if err != nil {
			putErrs++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if seq >= firstMeasured {
			measuredPuts++
		}
	}
	lastMeasured.Store(int64(seq))
	mStop := time.Now()
	if cpuAtStart == 0 {
		cpuAtStart, selfAtStart = cpu0, self0
	}
	want := int64(measuredPuts * spec.watchers)
	deadline := time.Now().Add(5 * time.Second)
	for got.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cpu1, self1, busy1 := totalCPU(t.pids()), selfCPU(), machineBusy()
	cancel()
	wg.Wait()

	var all []float64
	for _, st := range states {
		all = append(all, st.lat...)
	}
	res.Ops = int64(len(all))
	res.Errors = putErrs + max(0, want-int64(len(all)))
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	} else if res.Errors > 0 {
		res.FirstError = fmt.Sprintf("%d events missing after 5 s", want-int64(len(all)))
	}
	res.Seconds = mStop.Sub(mStart).Seconds()
	setLatencies(&res, all)
	if res.Seconds > 0 {
		res.Throughput = float64(res.Ops) / res.Seconds
	}
	res.Status = "ok"
	if res.Ops == 0 {
		res.Status = "failed"
	}
	res.ServerCPUSeconds = cpu1 - cpuAtStart
	res.DriverCPUSeconds = self1 - selfAtStart
	if busyAtStart > 0 {
		res.OtherCPUSeconds = max(0, (busy1-busyAtStart)-res.ServerCPUSeconds-res.DriverCPUSeconds)
	}
	if measuredPuts > 0 {
		res.ServerCPUPerOpUs = res.ServerCPUSeconds / float64(measuredPuts) * 1e6
	}
	res.Extra = map[string]float64{"puts": float64(measuredPuts), "put_rate": float64(spec.rate)}
	res.Load1 = loadAvg()[0]
	return res, nil
}
