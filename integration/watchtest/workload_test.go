package watchtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/integration/watchcheck"
	"github.com/zketcd/zketcd/internal/testutil"
)

// progressInterval is the progress notification interval of every server
// the tests start.
const progressInterval = 300 * time.Millisecond

// workload writes random puts, deletes and transactions (nested ones and
// range deletes too) on keys prefix+letter+digit and records them all in h.
// Every put writes a value never written before.
type workload struct {
	h       *watchcheck.History
	prefix  string
	letters string
	digits  int
	// putsOnly limits the writes to puts and transactions of puts, whose
	// outcome the checker can establish from the events when the client
	// got an error.
	putsOnly bool
	seq      atomic.Int64
}

func newWorkload(prefix string) *workload {
	return &workload{h: &watchcheck.History{}, prefix: prefix, letters: "abcd", digits: 5}
}

func (w *workload) key(r *rand.Rand) string {
	return fmt.Sprintf("%s%c%d", w.prefix, w.letters[r.IntN(len(w.letters))], r.IntN(w.digits))
}

func (w *workload) value(writer int) string { return fmt.Sprintf("w%d-%d", writer, w.seq.Add(1)) }

// keys returns n distinct keys.
func (w *workload) keys(r *rand.Rand, n int) []string {
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		if k := w.key(r); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// end is the range end of the whole key space.
func (w *workload) end() string { return clientv3.GetPrefixRangeEnd(w.prefix) }

func (w *workload) op(r *rand.Rand, id int) clientv3.Op {
	if w.putsOnly {
		if r.IntN(10) < 6 {
			return clientv3.OpPut(w.key(r), w.value(id))
		}
		var ops []clientv3.Op
		for _, k := range w.keys(r, 2+r.IntN(2)) {
			ops = append(ops, clientv3.OpPut(k, w.value(id)))
		}
		return clientv3.OpTxn(nil, ops, nil)
	}
	switch p := r.IntN(100); {
	case p < 40:
		return clientv3.OpPut(w.key(r), w.value(id))
	case p < 55:
		return clientv3.OpDelete(w.key(r), clientv3.WithPrevKV())
	case p < 80:
		var ops []clientv3.Op
		for _, k := range w.keys(r, 2+r.IntN(3)) {
			if r.IntN(10) < 7 {
				ops = append(ops, clientv3.OpPut(k, w.value(id)))
			} else {
				ops = append(ops, clientv3.OpDelete(k, clientv3.WithPrevKV()))
			}
		}
		return clientv3.OpTxn(nil, ops, nil)
	case p < 90:
		ks := w.keys(r, 2)
		return clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Version(ks[0]), ">", 0)},
			[]clientv3.Op{clientv3.OpPut(ks[1], w.value(id)), clientv3.OpDelete(ks[0], clientv3.WithPrevKV())},
			[]clientv3.Op{clientv3.OpPut(ks[0], w.value(id))})
	case p < 96:
		ks := w.keys(r, 3)
		inner := clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut(ks[0], w.value(id)), clientv3.OpPut(ks[1], w.value(id))}, nil)
		return clientv3.OpTxn(nil, []clientv3.Op{inner, clientv3.OpDelete(ks[2], clientv3.WithPrevKV())}, nil)
	default:
		return clientv3.OpDelete(fmt.Sprintf("%s%c", w.prefix, w.letters[r.IntN(len(w.letters))]),
			clientv3.WithPrefix(), clientv3.WithPrevKV())
	}
}

// run makes n writes (until stop is closed if n is 0) through kv as writer
// id. Errors fail the test unless tolerate is set; they are counted.
func (w *workload) run(t testing.TB, kv clientv3.KV, id, n int, stop <-chan struct{}, tolerate bool) (ok, failed int) {
	r := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for i := 0; n == 0 || i < n; i++ {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := w.h.Do(ctx, kv, w.op(r, id))
		cancel()
		if err != nil {
			failed++
			if !tolerate {
				t.Errorf("writer %d: %v", id, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		ok++
	}
	return
}

// runWriters runs one goroutine per client; n writes each, or until stop.
func (w *workload) runWriters(t testing.TB, kvs []clientv3.KV, n int, stop <-chan struct{}, tolerate bool) func() (ok, failed int) {
	var wg sync.WaitGroup
	var okN, failedN atomic.Int64
	for i, kv := range kvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, f := w.run(t, kv, i, n, stop, tolerate)
			okN.Add(int64(o))
			failedN.Add(int64(f))
		}()
	}
	return func() (int, int) {
		wg.Wait()
		return int(okN.Load()), int(failedN.Load())
	}
}

// askProgress asks for progress notifications on the recorders' streams
// every 50 ms until stop is closed, so that notifications interleave with
// events (the bookmarkable guarantee is checked against them).
func askProgress(stop <-chan struct{}, recs ...*watchcheck.Recorder) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
		for _, r := range recs {
			_ = r.RequestProgress()
		}
	}
}

// finalRev makes a linearizable read through c, retrying while the server
// is unavailable, records its revision as the history's final one and
// returns it with the keys read.
func finalRev(t testing.TB, c *clientv3.Client, w *workload) (int64, *clientv3.GetResponse) {
	t.Helper()
	var resp *clientv3.GetResponse
	testutil.Eventually(t, 30*time.Second, "the final read", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		resp, err = c.Get(ctx, w.prefix, clientv3.WithPrefix())
		return err
	})
	w.h.SetFinal(resp.Header.Revision)
	return resp.Header.Revision, resp
}

// stopAll waits until every recorder observed rev, stops them and returns
// their watches.
func stopAll(t testing.TB, rev int64, recs ...*watchcheck.Recorder) []*watchcheck.Watch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*watchcheck.Watch
	for _, r := range recs {
		if err := r.WaitObserved(ctx, rev); err != nil {
			t.Errorf("%v", err)
		}
	}
	for _, r := range recs {
		out = append(out, r.Stop())
	}
	return out
}

// check runs the checker and fails the test on any problem.
func check(t testing.TB, h *watchcheck.History, watches ...*watchcheck.Watch) *watchcheck.Report {
	t.Helper()
	rep := watchcheck.Check(h, watches...)
	acked, unknown := h.Len()
	t.Logf("checked %d watches: %s (%d acknowledged writes, %d with unknown outcome)", len(watches), rep, acked, unknown)
	for _, w := range watches {
		events, progress := 0, 0
		for _, s := range w.Segments {
			for _, r := range s.Responses {
				events += len(r.Events)
				if r.Progress {
					progress++
				}
			}
		}
		t.Logf("  watch %s: %d segments, %d events, %d progress notifications", w.Name, len(w.Segments), events, progress)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	return rep
}

func kvsOf(cs []*clientv3.Client) []clientv3.KV {
	out := make([]clientv3.KV, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// startZketcd starts an instance on the shared ZooKeeper.
func startZketcd(t testing.TB, opts embedtest.Options) *embedtest.Instance {
	if opts.ProgressNotifyInterval == 0 {
		opts.ProgressNotifyInterval = progressInterval
	}
	return embedtest.Start(t, []string{sharedZK.Addr(t)}, opts)
}

// startEtcd starts embedded etcd with the tests' progress interval.
func startEtcd(t testing.TB) *etcdoracle.Oracle {
	return etcdoracle.Start(t, etcdoracle.WithWatchProgressNotifyInterval(progressInterval))
}
