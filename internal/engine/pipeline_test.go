package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// drive lands flights of size requests on p for windows windows, each
// window committing at rate(limit) requests per second, with the queue
// backed up; it returns the limits at the end of each window.
func drive(p *pacer, windows int, rate func(limit int) float64) []int {
	now := time.Unix(0, 0)
	var limits []int
	for range windows {
		r := rate(p.limit)
		step := time.Duration(float64(time.Second) * 10 / r) // 10 requests a flight
		before := p.steps
		for p.steps == before {
			now = now.Add(step)
			p.landed(now, 10, time.Millisecond, p.limit-1, 100)
		}
		limits = append(limits, p.limit)
	}
	return limits
}

func TestAutoDepthGoesDeeperWhileItPays(t *testing.T) {
	p := newPacer(0)
	limits := drive(p, 40, func(limit int) float64 { return 1000 * float64(min(limit, 4)) })
	deep := 0
	for _, l := range limits[len(limits)-20:] {
		if l >= 4 {
			deep++
		}
	}
	if deep < 15 {
		t.Fatalf("limits %v; want mostly at least 4 at the end where the rate grows up to depth 4 (a shallower trial now and then)", limits)
	}
	for _, l := range limits {
		if l > MaxAutoCommitPipeline {
			t.Fatalf("limit %d above %d", l, MaxAutoCommitPipeline)
		}
	}
}

func TestAutoDepthStaysShallowWhenDeeperDoesNotPay(t *testing.T) {
	p := newPacer(0)
	limits := drive(p, 40, func(limit int) float64 { return 2000 / float64(limit) })
	at1 := 0
	for _, l := range limits {
		if l == 1 {
			at1++
		}
		if l > 2 {
			t.Fatalf("limit %d in %v: deeper only costs here", l, limits)
		}
	}
	if at1 < len(limits)*3/4 {
		t.Fatalf("limits %v: mostly 1 expected", limits)
	}
}

// TestAutoDepthJudgesAChangeOnceItSettled: the window right after a change
// of depth commits less than either depth does once settled (clients split
// into cohorts by a deeper pipeline arrive apart for a while after it goes
// back). Judged on that window, every trial fails and the pacer stays at
// whatever depth it reached; judged on the next one, it finds depth 1 and
// stays there.
func TestAutoDepthJudgesAChangeOnceItSettled(t *testing.T) {
	settled := func(limit int) float64 { return 2000 / float64(limit) }
	p := newPacer(0)
	p.limit = 2 // reached by a lucky trial
	prev := p.limit
	var limits []int
	limits = append(limits, drive(p, 60, func(limit int) float64 {
		r := settled(limit)
		if limit != prev {
			r = 0.8 * min(settled(prev), r) // the change under way
		}
		prev = limit
		return r
	})...)
	at1 := 0
	for _, l := range limits[20:] {
		if l == 1 {
			at1++
		}
	}
	if at1 < 30 {
		t.Fatalf("limits %v: depth 1 pays here, mostly 1 expected after the first 20 windows", limits)
	}
}

func TestAutoDepthHalvesOnARefusal(t *testing.T) {
	p := newPacer(0)
	p.limit = 8
	p.refused()
	if p.limit != 4 {
		t.Fatalf("limit %d after a refusal at 8, want 4", p.limit)
	}
}

func TestFixedDepthNeverMoves(t *testing.T) {
	for _, n := range []int{1, 4} {
		p := newPacer(n)
		p.refused()
		now := time.Unix(0, 0)
		for range 1000 {
			now = now.Add(10 * time.Millisecond)
			p.landed(now, 10, time.Millisecond, n-1, 100)
		}
		if p.limit != n {
			t.Fatalf("fixed %d: limit %d", n, p.limit)
		}
	}
	if p := newPacer(-1); !p.auto() || p.limit != 1 {
		t.Fatal("a negative depth must be auto, starting at 1")
	}
}

func TestFillKeepsExtraFlightsFromCarryingCrumbs(t *testing.T) {
	p := newPacer(4)
	p.landed(time.Unix(1, 0), 16, time.Millisecond, 0, 0)
	if p.mayLaunch(1, 3) {
		t.Fatal("a second flight of 3 behind flights of 16")
	}
	if !p.mayLaunch(1, 8) || !p.mayLaunch(0, 1) || p.mayLaunch(4, 100) {
		t.Fatal("fill or limit misapplied")
	}
}

// TestDepthOneWritesNoMarker: at a fixed depth of 1 (and whenever the
// limit is 1) a commit's multi is what versions without a pipeline wrote.
func TestDepthOneWritesNoMarker(t *testing.T) {
	for _, depth := range []int{1, 4} {
		st := memlog.New(memlog.Options{})
		var marked, chained atomic.Int32
		st.SetCommitFault(func(req zkstore.CommitRequest) memlog.Fault {
			if req.Marker != nil {
				marked.Add(1)
			}
			if req.Pipelined {
				chained.Add(1)
			}
			return memlog.NoFault
		})
		b, _ := engine(t, st, "a", func(c *Config) { c.CommitPipeline = depth; c.CommitLinger = -1 })
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					put(t, b, fmt.Sprintf("w%d", w), fmt.Sprint(i))
				}
			}()
		}
		wg.Wait()
		if depth == 1 && (marked.Load() != 0 || chained.Load() != 0) {
			t.Fatalf("depth 1: %d commits with a marker, %d chained", marked.Load(), chained.Load())
		}
		if depth > 1 && marked.Load() == 0 {
			t.Fatalf("depth %d: no commit carried the marker", depth)
		}
	}
}

// overtakeLog makes every chained commit overtake the one it is chained
// on, as the ZooKeeper client may: a commit that is not pipelined is held
// back a while, a pipelined one is sent without waiting for its
// predecessor's hand-over.
type overtakeLog struct {
	*memlog.Client
	overtaken atomic.Int32
}

func (l *overtakeLog) Commit(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error) {
	if req.Pipelined && req.After != nil {
		req.After = nil
	} else if !req.Pipelined {
		time.Sleep(5 * time.Millisecond)
	}
	res, err := l.Client.Commit(ctx, req)
	if res.PrevMissing {
		l.overtaken.Add(1)
	}
	return res, err
}

func TestOvertakenFlightsAreSentAgainInOrder(t *testing.T) {
	st := memlog.New(memlog.Options{})
	lg := testutil.Logger(logrus.ErrorLevel)
	log := &overtakeLog{Client: st.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	b, err := New(ctx, Config{Name: "a", Logger: lg, Registerer: reg, CommitPipeline: 4, CommitLinger: -1}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	const writers, each = 8, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for i := range each {
				rev := put(t, b, fmt.Sprintf("w%d", w), fmt.Sprint(i))
				if rev <= last {
					t.Errorf("writer %d: revision %d after %d", w, rev, last)
				}
				last = rev
			}
		}()
	}
	wg.Wait()
	if log.overtaken.Load() == 0 {
		t.Fatal("no flight overtook its predecessor: the test does not test")
	}
	if n := counterValue(t, b.metrics.pipelineRefusals.WithLabelValues("reordered")); n == 0 {
		t.Fatal("no flight was sent again")
	}
	for w := range writers {
		kv := get(t, b, fmt.Sprintf("w%d", w), false).Kvs
		if len(kv) != 1 || kv[0].Version != each || string(kv[0].Value) != fmt.Sprint(each-1) {
			t.Fatalf("w%d = %v, want version %d holding %d", w, kv, each, each-1)
		}
	}
	checkLogReplaysToView(t, st, b)
}
