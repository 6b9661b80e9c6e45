package watchtest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/watchcheck"
)

// watchSet is the watchers of a guarantees run: every kind of range, with
// and without prev_kv and filters, from history and from now, on streams of
// their own and sharing one.
func watchSet(w *workload, now int64) []struct {
	spec  watchcheck.Spec
	start int64
	opts  watchcheck.RecordOptions
} {
	p, end := w.prefix, w.end()
	return []struct {
		spec  watchcheck.Spec
		start int64
		opts  watchcheck.RecordOptions
	}{
		{watchcheck.Spec{Name: "all-from-2", Key: p, End: end, PrevKV: true}, 2, watchcheck.RecordOptions{}},
		{watchcheck.Spec{Name: "all-now-progress", Key: p, End: end}, now + 1, watchcheck.RecordOptions{ProgressNotify: true}},
		{watchcheck.Spec{Name: "prefix-a", Key: p + "a", End: clientv3.GetPrefixRangeEnd(p + "a")}, now + 1, watchcheck.RecordOptions{}},
		{watchcheck.Spec{Name: "key-b3-from-2", Key: p + "b3", PrevKV: true}, 2, watchcheck.RecordOptions{}},
		{watchcheck.Spec{Name: "range-b-d-nodelete", Key: p + "b", End: p + "d", NoDelete: true}, now + 1, watchcheck.RecordOptions{}},
		{watchcheck.Spec{Name: "from-c-noput", Key: p + "c", End: "\x00", NoPut: true, PrevKV: true}, now + 1, watchcheck.RecordOptions{}},
		{watchcheck.Spec{Name: "shared-all", Key: p, End: end, PrevKV: true}, now + 1, watchcheck.RecordOptions{SharedStream: true}},
		{watchcheck.Spec{Name: "shared-key-a0", Key: p + "a0"}, now + 1, watchcheck.RecordOptions{SharedStream: true}},
		{watchcheck.Spec{Name: "fragment-all", Key: p, End: end}, now + 1, watchcheck.RecordOptions{Fragment: true}},
	}
}

// runGuarantees writes concurrently through writers (transactions, range
// deletes, nested transactions) while watchers record watches through
// watchers (round robin), one watch is restarted twice (resumed from the
// last observed revision + 1) and one starts from revision 2 in the middle
// of the writes (it catches up while events keep coming); then checks every
// guarantee on every watch.
func runGuarantees(t *testing.T, writers, watchers []*clientv3.Client, writesEach int) {
	w := newWorkload("p/")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		if _, err := w.h.Do(ctx, writers[0], clientv3.OpPut(w.key(r), w.value(99))); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := writers[0].Get(ctx, "p/")
	if err != nil {
		t.Fatal(err)
	}
	now := resp.Header.Revision
	var recs []*watchcheck.Recorder
	for i, s := range watchSet(w, now) {
		recs = append(recs, watchcheck.Record(watchers[i%len(watchers)], s.spec, s.start, s.opts))
	}
	resumed := watchcheck.Record(watchers[0], watchcheck.Spec{Name: "resumed", Key: w.prefix, End: w.end(), PrevKV: true},
		now+1, watchcheck.RecordOptions{})
	recs = append(recs, resumed)

	began := time.Now()
	wait := w.runWriters(t, kvsOf(writers), writesEach, nil, false)
	stopProgress := make(chan struct{})
	go askProgress(stopProgress, recs...)
	time.Sleep(300 * time.Millisecond)
	resumed.Restart()
	late := watchcheck.Record(watchers[len(watchers)-1], watchcheck.Spec{Name: "late-from-2", Key: w.prefix, End: w.end(), PrevKV: true},
		2, watchcheck.RecordOptions{})
	recs = append(recs, late)
	time.Sleep(300 * time.Millisecond)
	resumed.Restart()
	ok, _ := wait()
	close(stopProgress)
	final, _ := finalRev(t, writers[0], w)
	t.Logf("%d writes up to revision %d in %v", ok, final, time.Since(began).Round(time.Millisecond))
	began = time.Now()
	watches := stopAll(t, final, recs...)
	t.Logf("watches observed revision %d %v later", final, time.Since(began).Round(time.Millisecond))
	rep := check(t, w.h, watches...)
	if rep.Events == 0 {
		t.Fatal("no event checked")
	}
	for _, wa := range watches {
		if wa.Name == "resumed" && len(wa.Segments) < 3 {
			t.Errorf("watch resumed has %d segments, want 3", len(wa.Segments))
		}
	}
}

// TestGuaranteesEtcd runs the guarantees workload against embedded etcd:
// the reference must pass the checker (this validates the checker and the
// workload).
func TestGuaranteesEtcd(t *testing.T) {
	o := startEtcd(t)
	c := o.Client(t)
	runGuarantees(t, []*clientv3.Client{c, o.Client(t), o.Client(t)}, []*clientv3.Client{c, o.Client(t)}, 250)
}

// TestGuaranteesOneInstance: writers and watchers on one zketcd instance.
func TestGuaranteesOneInstance(t *testing.T) {
	in := startZketcd(t, embedtest.Options{})
	c := in.Client(t)
	runGuarantees(t, []*clientv3.Client{c, in.Client(t), in.Client(t)}, []*clientv3.Client{c, in.Client(t)}, 250)
}

// TestGuaranteesCrossInstance: writes through instance A, watchers on
// instance B (which learns of them only by tailing the log in ZooKeeper),
// and on A too.
func TestGuaranteesCrossInstance(t *testing.T) {
	a := startZketcd(t, embedtest.Options{})
	b := startZketcd(t, embedtest.Options{Root: a.Root()})
	ca := a.Client(t)
	runGuarantees(t, []*clientv3.Client{ca, a.Client(t), a.Client(t)}, []*clientv3.Client{b.Client(t), b.Client(t), ca}, 250)
}
