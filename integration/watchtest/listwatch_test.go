package watchtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/watchcheck"
)

// list reads [prefix, end) in pages of limit keys as kube-apiserver does:
// the first page at the current revision R, the next ones at R from the key
// after the last one read. It returns R and the keys.
func list(ctx context.Context, c *clientv3.Client, prefix, end string, limit int64) (int64, []*mvccpb.KeyValue, int, error) {
	var rev int64
	var kvs []*mvccpb.KeyValue
	key, pages := prefix, 0
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.Get(ctx, key, opts...)
		if err != nil {
			return 0, nil, pages, err
		}
		pages++
		if rev == 0 {
			rev = resp.Header.Revision
		}
		kvs = append(kvs, resp.Kvs...)
		if !resp.More {
			return rev, kvs, pages, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// TestListWatch does what a kube-apiserver reflector does, three times
// while writers keep writing: a paginated LIST at a pinned revision R, then
// a WATCH from R+1. Each time, the list plus the watch's events must
// rebuild exactly the state a final linearizable read returns, the list
// must be the history's state at R, and the watch must hold every change
// after R exactly once (the checker).
func TestListWatch(t *testing.T) {
	in := startZketcd(t, embedtest.Options{})
	runListWatch(t, in.Client(t), []*clientv3.Client{in.Client(t), in.Client(t), in.Client(t)})
}

// TestListWatchCrossInstance lists and watches on instance B while the
// writes go through A.
func TestListWatchCrossInstance(t *testing.T) {
	a := startZketcd(t, embedtest.Options{})
	b := startZketcd(t, embedtest.Options{Root: a.Root()})
	runListWatch(t, b.Client(t), []*clientv3.Client{a.Client(t), a.Client(t), a.Client(t)})
}

func runListWatch(t *testing.T, c *clientv3.Client, writers []*clientv3.Client) {
	w := newWorkload("l/")
	w.letters, w.digits = "abcdefgh", 8
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Start with every key present.
	for _, l := range w.letters {
		for d := 0; d < w.digits; d++ {
			if _, err := w.h.Do(ctx, writers[0], clientv3.OpPut(fmt.Sprintf("l/%c%d", l, d), w.value(99))); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop := make(chan struct{})
	wait := w.runWriters(t, kvsOf(writers), 0, stop, false)

	type cycle struct {
		rev int64
		kvs []*mvccpb.KeyValue
		rec *watchcheck.Recorder
	}
	var cycles []cycle
	for i := 0; i < 3; i++ {
		time.Sleep(300 * time.Millisecond)
		rev, kvs, pages, err := list(ctx, c, w.prefix, w.end(), 7)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("list %d: %d keys in %d pages at revision %d", i, len(kvs), pages, rev)
		rec := watchcheck.Record(c, watchcheck.Spec{Name: fmt.Sprintf("watch-%d", i), Key: w.prefix, End: w.end(), PrevKV: true},
			rev+1, watchcheck.RecordOptions{})
		cycles = append(cycles, cycle{rev, kvs, rec})
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	n, _ := wait()
	final, finalResp := finalRev(t, writers[0], w)
	t.Logf("%d writes, final revision %d, %d keys", n, final, len(finalResp.Kvs))
	var recs []*watchcheck.Recorder
	for _, cy := range cycles {
		recs = append(recs, cy.rec)
	}
	watches := stopAll(t, final, recs...)
	check(t, w.h, watches...)

	want := map[string]*mvccpb.KeyValue{}
	for _, kv := range finalResp.Kvs {
		want[string(kv.Key)] = kv
	}
	for i, cy := range cycles {
		if atR := watchcheck.StateAt(w.h, cy.rev); !sameState(byKey(cy.kvs), atR) {
			t.Errorf("list %d at revision %d is not the history's state there:\n%s", i, cy.rev, stateDiff(byKey(cy.kvs), atR))
		}
		state := byKey(cy.kvs)
		for _, s := range watches[i].Segments {
			for _, r := range s.Responses {
				for _, ev := range r.Events {
					if ev.Type == mvccpb.DELETE {
						delete(state, string(ev.Kv.Key))
					} else {
						state[string(ev.Kv.Key)] = ev.Kv
					}
				}
			}
		}
		if !sameState(state, want) {
			t.Errorf("list %d at revision %d + its watch events != the final read at %d:\n%s", i, cy.rev, final, stateDiff(state, want))
		}
	}
}

func byKey(kvs []*mvccpb.KeyValue) map[string]*mvccpb.KeyValue {
	m := make(map[string]*mvccpb.KeyValue, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv
	}
	return m
}

func sameState(a, b map[string]*mvccpb.KeyValue) bool {
	if len(a) != len(b) {
		return false
	}
	for k, kv := range a {
		if !proto.Equal(kv, b[k]) {
			return false
		}
	}
	return true
}

func stateDiff(got, want map[string]*mvccpb.KeyValue) string {
	var out string
	for k, kv := range got {
		if w, ok := want[k]; !ok {
			out += fmt.Sprintf("  extra %q=%q\n", k, kv.Value)
		} else if !proto.Equal(kv, w) {
			out += fmt.Sprintf("  %q: got %v, want %v\n", k, kv, w)
		}
	}
	for k, kv := range want {
		if _, ok := got[k]; !ok {
			out += fmt.Sprintf("  missing %q=%q\n", k, kv.Value)
		}
	}
	return out
}
