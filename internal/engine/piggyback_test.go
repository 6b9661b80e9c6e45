package engine

// Linearizable reads answered by the committer's landed commits instead of
// barrier round trips (barrier.go), on memlog.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// slowLog gives memlog ZooKeeper-like latencies: every commit and every
// quorum barrier takes a round trip.
type slowLog struct {
	*memlog.Client
	rtt time.Duration
}

func (l *slowLog) QuorumHead() (zkstore.Head, error) {
	time.Sleep(l.rtt)
	return l.Client.QuorumHead()
}

func (l *slowLog) Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error) {
	time.Sleep(l.rtt)
	return l.Client.Commit(ctx, req)
}

// slowEngine starts an Engine named name on a slowLog over st.
func slowEngine(t testing.TB, st *memlog.Store, name string, rtt time.Duration) *Engine {
	t.Helper()
	return slowEngineWith(t, st, name, rtt, nil)
}

// slowEngineWith is slowEngine with configure (if not nil) applied to the
// Config.
func slowEngineWith(t testing.TB, st *memlog.Store, name string, rtt time.Duration, configure func(*Config)) *Engine {
	t.Helper()
	lg := testutil.Logger(logrus.ErrorLevel)
	cfg := Config{Name: name, Logger: lg.WithField("member", name), Registerer: prometheus.NewRegistry()}
	if configure != nil {
		configure(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := New(ctx, cfg, &slowLog{Client: st.Client(), rtt: rtt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	return written(t, c).GetCounter().GetValue()
}

// written is what metric c writes.
func written(t testing.TB, c prometheus.Metric) *dto.Metric {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func TestBarrierRoundsWaitForACommitSentAfterThem(t *testing.T) {
	var trips atomic.Int32
	gate := make(chan struct{}, 10)
	br := &barrier{maxRounds: 1, sync: func() (int64, error) {
		trips.Add(1)
		<-gate
		return 100, nil
	}}
	type answer struct {
		name string
		lsn  int64
	}
	answers := make(chan answer, 10)
	read := func(name string) {
		go func() {
			lsn, err := br.wait(context.Background())
			if err != nil {
				t.Error(err)
			}
			answers <- answer{name, lsn}
		}()
	}
	joined := func(n uint64) {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d reads joined", n), func() bool {
			br.mu.Lock()
			defer br.mu.Unlock()
			return br.seq == n
		})
	}
	expect := func(name string, lsn int64) {
		t.Helper()
		select {
		case a := <-answers:
			if a.name != name || a.lsn != lsn {
				t.Fatalf("read %s answered at %d, want read %s at %d", a.name, a.lsn, name, lsn)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("read %s not answered", name)
		}
	}
	quiet := func() {
		t.Helper()
		select {
		case a := <-answers:
			t.Fatalf("read %s answered early", a.name)
		case <-time.After(50 * time.Millisecond):
		}
	}

	read("r1") // starts the round trip
	joined(1)
	read("r2")
	read("r3") // both wait in a pending round
	joined(3)
	mark := br.sending() // a commit sent after r2 and r3
	read("r4")           // arrived after the send: not covered by it
	joined(4)
	gate <- struct{}{}
	expect("r1", 100)
	quiet() // the commit in flight covers r2, r3: no round trip for them
	if n := trips.Load(); n != 1 {
		t.Fatalf("%d round trips while a commit was in flight, want 1", n)
	}
	br.landed(mark, 42, true)
	got := map[string]int64{}
	for range 2 {
		select {
		case a := <-answers:
			got[a.name] = a.lsn
		case <-time.After(2 * time.Second):
		}
	}
	if got["r2"] != 42 || got["r3"] != 42 || len(got) != 2 {
		t.Fatalf("after the commit landed: %v, want r2 and r3 at 42", got)
	}
	quiet() // r4 waits for the committer's next step
	br.idle()
	gate <- struct{}{}
	expect("r4", 100)
	if n := trips.Load(); n != 2 {
		t.Fatalf("%d round trips, want 2", n)
	}

	// A commit that fails lets the covered reads take a round trip.
	mark = br.sending()
	read("r5")
	joined(5)
	quiet()
	br.landed(mark, 0, false)
	gate <- struct{}{}
	expect("r5", 100)
	if n := trips.Load(); n != 3 {
		t.Fatalf("%d round trips, want 3", n)
	}
}

// TestReadsUnderConcurrentWritesNeedFewerBarriers runs the same linearizable
// read load without and with concurrent writes on the instance: with writes,
// most reads are answered by the commits and round trips fall.
func TestReadsUnderConcurrentWritesNeedFewerBarriers(t *testing.T) {
	const readers, reads, rtt = 8, 60, 3 * time.Millisecond
	run := func(writers int) (trips, viaCommit, viaBarrier float64) {
		st := memlog.New(memlog.Options{})
		b := slowEngine(t, st, "a", rtt)
		// Writers as many clients are: a put every millisecond each, not
		// waiting for the previous answer.
		stop := make(chan struct{})
		var wwg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wwg.Add(1)
			go func() {
				defer wwg.Done()
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					wwg.Add(1)
					go func() { defer wwg.Done(); put(t, b, fmt.Sprintf("w%d", w), fmt.Sprint(i)) }()
				}
			}()
		}
		if writers > 0 {
			testutil.Eventually(t, 10*time.Second, "writes flowing", func() bool { return b.State().Rev > 5 })
		}
		t0 := counterValue(t, b.metrics.barrierTrips)
		c0 := counterValue(t, b.metrics.linearizableReads.WithLabelValues("commit"))
		b0 := counterValue(t, b.metrics.linearizableReads.WithLabelValues("barrier"))
		var rwg sync.WaitGroup
		for r := 0; r < readers; r++ {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				for i := 0; i < reads; i++ {
					get(t, b, "w0", false)
				}
			}()
		}
		rwg.Wait()
		trips = counterValue(t, b.metrics.barrierTrips) - t0
		viaCommit = counterValue(t, b.metrics.linearizableReads.WithLabelValues("commit")) - c0
		viaBarrier = counterValue(t, b.metrics.linearizableReads.WithLabelValues("barrier")) - b0
		close(stop)
		wwg.Wait()
		return trips, viaCommit, viaBarrier
	}
	idleTrips, idleCommit, _ := run(0)
	busyTrips, busyCommit, busyBarrier := run(4)
	t.Logf("%d linearizable reads: %.0f round trips without writes; with 4 writers %.0f round trips, %.0f reads answered by commits, %.0f by round trips",
		readers*reads, idleTrips, busyTrips, busyCommit, busyBarrier)
	if idleCommit != 0 {
		t.Fatalf("%.0f reads answered by commits when nothing was written", idleCommit)
	}
	if busyCommit < float64(readers*reads)/2 {
		t.Fatalf("only %.0f of %d reads answered by commits under writes", busyCommit, readers*reads)
	}
	if busyTrips*4 > idleTrips {
		t.Fatalf("%.0f round trips under writes, %.0f without: want at most a quarter", busyTrips, idleTrips)
	}
}

// TestLinearizableReadsNeverMissAnAcknowledgedWrite: writers on two
// instances (one of them committing the reads' piggybacked commits) with
// lost compare-and-swaps and lost answers; every linearizable read, on either
// instance, sees every write acknowledged before it started.
func TestLinearizableReadsNeverMissAnAcknowledgedWrite(t *testing.T) {
	st := memlog.New(memlog.Options{})
	var mu sync.Mutex
	rng := rand.New(rand.NewSource(1))
	st.SetCommitFault(func(zkstore.CommitRequest) memlog.Fault {
		mu.Lock()
		defer mu.Unlock()
		switch n := rng.Intn(100); {
		case n < 4:
			return memlog.LoseCAS
		case n < 6:
			return memlog.UnknownApplied
		case n < 8:
			return memlog.UnknownLost
		}
		return memlog.NoFault
	})
	a := slowEngine(t, st, "a", time.Millisecond)
	b := slowEngine(t, st, "b", time.Millisecond)
	instances := []*Engine{a, b}
	const writers = 4
	var acked [writers]atomic.Int64 // newest value acknowledged per writer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := instances[w%2]
			for i := int64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := in.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("w%d", w)), Value: []byte(fmt.Sprint(i))})
				cancel()
				if err == nil {
					acked[w].Store(i)
				}
			}
		}()
	}
	var checked atomic.Int64
	var rwg sync.WaitGroup
	for r := 0; r < 6; r++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			in := instances[r%2]
			for i := 0; i < 150; i++ {
				var floor [writers]int64
				for w := range floor {
					floor[w] = acked[w].Load()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := in.Range(ctx, &pb.RangeRequest{Key: []byte("w"), RangeEnd: []byte("x")})
				cancel()
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
						return
					}
					continue
				}
				got := map[string]int64{}
				for _, kv := range resp.Kvs {
					var v int64
					fmt.Sscan(string(kv.Value), &v)
					got[string(kv.Key)] = v
				}
				for w, f := range floor {
					if g := got[fmt.Sprintf("w%d", w)]; g < f {
						t.Errorf("instance %d read w%d = %d, but %d was acknowledged before the read began", r%2, w, g, f)
						return
					}
				}
				checked.Add(1)
			}
		}()
	}
	rwg.Wait()
	close(stop)
	wg.Wait()
	byCommit := counterValue(t, a.metrics.linearizableReads.WithLabelValues("commit")) +
		counterValue(t, b.metrics.linearizableReads.WithLabelValues("commit"))
	t.Logf("%d reads checked, %.0f answered by commits", checked.Load(), byCommit)
	if byCommit == 0 {
		t.Fatal("no read was answered by a commit: the test did not exercise piggybacking")
	}
}
