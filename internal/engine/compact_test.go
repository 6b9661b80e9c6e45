package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// countLogEntries counts the log entry znodes under root.
func countLogEntries(t *testing.T, zkAddrs []string, root string) int {
	t.Helper()
	c, _, err := zk.Connect(zkAddrs, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buckets, _, err := c.Children(root + "/log")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range buckets {
		es, _, err := c.Children(root + "/log/" + b)
		if err != nil {
			t.Fatal(err)
		}
		n += len(es)
	}
	return n
}

func TestPhysicalCompactionShrinksTheLogAndRestartLoadsTheBase(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	write := func(n int, prefix string) int64 {
		var rev int64
		for i := 0; i < n; i++ {
			resp, err := c.Put(ctx, fmt.Sprintf("%s%03d", prefix, i%40), fmt.Sprint(i))
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		return rev
	}
	r1 := write(200, "a/")
	if _, err := c.Compact(ctx, r1-50, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	r2 := write(200, "b/")
	before := countLogEntries(t, []string{zkAddr(t)}, in.Root())
	if _, err := c.Compact(ctx, r2-10, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// The second cycle deletes the entries below the first generation.
	var after int
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("the log shrinks below its %d entries after two compactions", before), func() bool {
		after = countLogEntries(t, []string{zkAddr(t)}, in.Root())
		return after < before
	})
	t.Logf("log entries: %d before the second compaction, %d after it", before, after)

	want, err := c.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	hist, err := c.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(r2-10))
	if err != nil {
		t.Fatal(err)
	}
	in.Restart()
	c2 := in.Client(t)
	got, err := c2.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision != want.Header.Revision || fmt.Sprint(got.Kvs) != fmt.Sprint(want.Kvs) {
		t.Fatalf("after restart from the base:\n%v\nwant\n%v", got.Kvs, want.Kvs)
	}
	hist2, err := c2.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(r2-10))
	if err != nil || fmt.Sprint(hist2.Kvs) != fmt.Sprint(hist.Kvs) {
		t.Fatalf("read at the compacted revision after restart: %v %v", hist2, err)
	}
	if _, err := c2.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(r2-11)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the compacted revision after restart: %v", err)
	}
	// Watch from the compacted revision replays the kept history.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w := c2.Watch(wctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(r2-10))
	n := 0
	for resp := range w {
		n += len(resp.Events)
		if n >= 11 {
			break
		}
	}
	if n != 11 {
		t.Fatalf("watch from the compacted revision got %d events, want 11", n)
	}
	if resp, err := c2.Put(ctx, "after", "restart"); err != nil || resp.Header.Revision != want.Header.Revision+1 {
		t.Fatalf("write after restart: %v %v", resp, err)
	}
}

func TestHugeTransactionsAndValuesOnDefaultJuteMaxbuffer(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	other := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: in.Root()})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	big := make([]byte, 1500*1024)
	for i := range big {
		big[i] = byte(i)
	}
	if _, err := c.Put(ctx, "big", string(big)); err != nil {
		t.Fatalf("1.5 MB value: %v", err)
	}
	tooBig := make([]byte, 1600*1024)
	if _, err := c.Put(ctx, "toobig", string(tooBig)); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
		t.Fatalf("value over --max-request-bytes: %v", err)
	}
	// 20k keys, then one DeleteRange removing them all in one revision:
	// an entry of a few MB, written as chunks.
	for i := 0; i < 20000; i += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("many/%05d", j), "some value of moderate size"))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	del, err := c.Delete(ctx, "many/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil || del.Deleted != 20000 || len(del.PrevKvs) != 20000 {
		t.Fatalf("delete 20k keys: %v", err)
	}
	// The other instance reads the chunked entries through its tailer.
	co := other.Client(t)
	got, err := co.Get(ctx, "big")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != string(big) {
		t.Fatalf("big value through the other instance: %v", err)
	}
	n, err := co.Get(ctx, "many/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || n.Count != 0 || n.Header.Revision != del.Header.Revision {
		t.Fatalf("after the huge delete, through the other instance: %v %v", n, err)
	}
}

// TestCompactionCrashAtEachStepLeavesAConsistentStore stops a physical
// compaction after each of its steps (as a crash would: all state is in
// ZooKeeper), then starts a fresh instance on the root, which must serve
// the same data and history and finish the compaction.
func TestCompactionCrashAtEachStepLeavesAConsistentStore(t *testing.T) {
	big := string(make([]byte, 1500*1024))
	for _, step := range []string{"base-prepared", "base-published", "log-truncated"} {
		t.Run(step, func(t *testing.T) {
			crashed := make(chan struct{}, 1)
			var reached atomic.Int32 // cycles that reached step
			hook := func(s string) error {
				if s == step {
					reached.Add(1)
					select {
					case crashed <- struct{}{}:
					default:
					}
					return errors.New("injected crash at " + s)
				}
				return nil
			}
			a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{CompactionHook: hook})
			c := a.Client(t)
			ctx := testutil.Context(t, 30*time.Second)
			var rev int64
			// Keys no round changes: the second cycle changes under a
			// quarter of the keys, so it writes a delta after the first.
			for i := 0; i < 100; i++ {
				if _, err := c.Put(ctx, fmt.Sprintf("s%03d", i), "static"); err != nil {
					t.Fatal(err)
				}
			}
			for round := 0; round < 2; round++ { // two cycles: the second truncates the log
				for i := 0; i < 60; i++ {
					v := fmt.Sprint(round, i)
					if i == 7 {
						v = big
					}
					resp, err := c.Put(ctx, fmt.Sprintf("k%02d", i%20), v)
					if err != nil {
						t.Fatal(err)
					}
					rev = resp.Header.Revision
				}
				if _, err := c.Compact(ctx, rev-5); err != nil {
					t.Fatal(err)
				}
				if round == 0 {
					// Let the first cycle run up to the step (where it
					// stops) before the second round's writes.
					testutil.Eventually(t, 10*time.Second, "the first compaction cycle reached "+step, func() bool { return reached.Load() > 0 })
				}
			}
			select {
			case <-crashed:
			case <-time.After(10 * time.Second):
				t.Fatalf("compaction never reached %s", step)
			}
			testutil.Eventually(t, 10*time.Second, "the second compaction cycle reached "+step, func() bool { return reached.Load() > 1 })
			want, err := c.Get(ctx, "k", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			hist, err := c.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(rev-5))
			if err != nil {
				t.Fatal(err)
			}
			a.Close() // the crash
			if deltas := baseDeltas(t, a.Root()); step != "base-prepared" && deltas != 1 {
				t.Fatalf("the second cycle published %d deltas, want 1", deltas)
			}
			b := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: a.Root()})
			cb := b.Client(t)
			got, err := cb.Get(ctx, "k", clientv3.WithPrefix())
			if err != nil || got.Header.Revision != want.Header.Revision || fmt.Sprint(got.Kvs) != fmt.Sprint(want.Kvs) {
				t.Fatalf("after the crash: %v (err %v)", got, err)
			}
			hist2, err := cb.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(rev-5))
			if err != nil || fmt.Sprint(hist2.Kvs) != fmt.Sprint(hist.Kvs) {
				t.Fatalf("history after the crash: %v %v", hist2, err)
			}
			// The new leader finishes the work: a physical compaction at the
			// same revision returns once a base holds it.
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if _, err := cb.Compact(pctx, rev-5, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
				t.Fatal(err)
			}
			waitBase(t, cb, rev-5)
		})
	}
}

// waitBase checks that physical compaction works again: a write, then a
// physical compaction at its revision, which returns once a base holds it.
func waitBase(t *testing.T, c *clientv3.Client, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Put(ctx, "after-crash", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("a physical compaction after the crash did not complete: %v", err)
	}
}

// TestInstanceBehindACompactionReloads cuts one instance off ZooKeeper (its
// only server is paused) while the other writes and compacts the log twice;
// when it comes back, the entries it lacks are gone, so it reloads from the
// base, and its watcher continues without losing or repeating an event.
func TestInstanceBehindACompactionReloads(t *testing.T) {
	ens := zkservertest.Ensemble(t, 3)
	addrs := ens.Addrs()
	a := embedtest.Start(t, addrs[:2], embedtest.Options{})
	b := embedtest.Start(t, addrs[2:], embedtest.Options{Root: a.Root(), SessionTimeout: 30 * time.Second})
	ca, cb := a.Client(t), b.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	first, err := ca.Put(ctx, "w/0", "0")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cb.Watch(wctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))
	if err := ens.Member(2).Pause(); err != nil {
		t.Fatal(err)
	}
	var last int64
	for round := 0; round < 2; round++ {
		for i := 0; i < 50; i++ {
			resp, err := ca.Put(ctx, fmt.Sprintf("w/%d", i%10), fmt.Sprint(round, i))
			if err != nil {
				t.Fatal(err)
			}
			last = resp.Header.Revision
		}
		if _, err := ca.Compact(ctx, last-2, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	if err := ens.Member(2).Resume(); err != nil {
		t.Fatal(err)
	}
	got, err := cb.Get(ctx, "w/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision < last {
		t.Fatalf("instance b at revision %d after coming back, want >= %d", got.Header.Revision, last)
	}
	// The watcher started before the compaction: it either receives every
	// event up to last in order, or is canceled as compacted; never a gap.
	next := first.Header.Revision
	for next <= last {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatal("watch channel closed")
			}
			if resp.CompactRevision != 0 {
				t.Logf("watcher canceled as compacted at %d after %d events", resp.CompactRevision, next-first.Header.Revision)
				return
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision != next {
					t.Fatalf("watch event at %d, want %d", ev.Kv.ModRevision, next)
				}
				next++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("watch stalled at revision %d (want up to %d)", next, last)
		}
	}
	t.Logf("watcher on the reloaded instance received every event up to %d", last)
}

// TestRestartLoadsALayeredBase: compactions that change few keys store
// deltas after the first whole generation; an instance restarted, and a
// second one started on the root, load the layers and answer every read,
// the hash of the store and a watch from the compacted revision as the
// instance that wrote them did.
func TestRestartLoadsALayeredBase(t *testing.T) {
	// Bases from the first compaction on: the 300 keys below are all live,
	// which would leave the log as the generation.
	opts := embedtest.Options{Configure: func(c *embed.Config) { c.Engine.LogGenerationLimit = -1 }}
	in := embedtest.Start(t, []string{zkAddr(t)}, opts)
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	var rev int64
	put := func(k, v string) {
		t.Helper()
		resp, err := c.Put(ctx, k, v)
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	for i := 0; i < 300; i++ {
		put(fmt.Sprintf("k/%03d", i), fmt.Sprint("v", i))
	}
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	var compacted int64
	for round := 1; round <= 3; round++ {
		for i := 0; i < 5; i++ {
			put(fmt.Sprintf("k/%03d", round*20+i), fmt.Sprint("round", round))
		}
		resp, err := c.Delete(ctx, fmt.Sprintf("k/%03d", 200+round))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
		compacted = rev - 3
		if _, err := c.Compact(ctx, compacted, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	put("k/new", "after the last compaction")
	if n := baseDeltas(t, in.Root()); n != 3 {
		t.Fatalf("the base has %d deltas, want 3", n)
	}

	snapshotOf := func(c *clientv3.Client) string {
		t.Helper()
		all, err := c.Get(ctx, "", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		old, err := c.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(compacted))
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.HashKV(ctx, c.Endpoints()[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var events []string
		for resp := range c.Watch(wctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(compacted), clientv3.WithPrevKV()) {
			for _, ev := range resp.Events {
				events = append(events, fmt.Sprint(ev.Type, ev.Kv, ev.PrevKv))
			}
			if len(events) >= 4 {
				break
			}
		}
		return fmt.Sprint(all.Header.Revision, all.Kvs, old.Kvs, h.Hash, h.HashRevision, h.CompactRevision, events)
	}
	want := snapshotOf(c)
	opts.Root = in.Root()
	second := embedtest.Start(t, []string{zkAddr(t)}, opts)
	if got := snapshotOf(second.Client(t)); got != want {
		t.Fatalf("a second instance on the root:\n%s\nwant\n%s", got, want)
	}
	in.Restart()
	if got := snapshotOf(in.Client(t)); got != want {
		t.Fatalf("after a restart:\n%s\nwant\n%s", got, want)
	}

	// A view rebuilt from the generation can tell what changed since it:
	// the next compaction, whichever instance leads, is a fourth delta.
	second.Close()
	c = in.Client(t)
	put("k/010", "after the restart")
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if n := baseDeltas(t, in.Root()); n != 4 {
		t.Fatalf("the first compaction after a restart left %d deltas, want 4", n)
	}
}

// baseDeltas returns the number of deltas the root's current base
// generation has (0 for a whole one or none).
func baseDeltas(t *testing.T, root string) int {
	t.Helper()
	desc, _, err := rawZK(t).Get(root + "/compact")
	if err != nil {
		t.Fatal(err)
	}
	var base struct {
		Deltas []json.RawMessage `json:"deltas"`
	}
	if err := json.Unmarshal(desc, &base); err != nil {
		t.Fatalf("base description %s: %v", desc, err)
	}
	return len(base.Deltas)
}

// readDescription returns the root's base description.
func readDescription(t *testing.T, root string) zkstore.Base {
	t.Helper()
	desc, _, err := rawZK(t).Get(root + "/compact")
	if err != nil {
		t.Fatal(err)
	}
	var b zkstore.Base
	if err := json.Unmarshal(desc, &b); err != nil {
		t.Fatalf("base description %s: %v", desc, err)
	}
	return b
}

// TestCompactionOfAMostlyLiveLogWritesNoBase: after a bulk load, with a
// tenth of the keys written again, a physical compaction leaves the log as
// the generation (no base written, no entry deleted), and every instance,
// a restarted one included, serves the compacted state exactly as a base
// would have it; once superseded versions pass half the live data, the
// next compaction writes a whole base, and the one after it frees the log.
func TestCompactionOfAMostlyLiveLogWritesNoBase(t *testing.T) {
	var prepared atomic.Int64
	opts := embedtest.Options{Configure: func(c *embed.Config) {
		c.Engine.BeforeRecovery = func(data int64) func() {
			prepared.Store(data)
			return func() {}
		}
	}}
	in := embedtest.Start(t, []string{zkAddr(t)}, opts)
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	val := strings.Repeat("v", 200)
	var rev int64
	put := func(c *clientv3.Client, k string) {
		t.Helper()
		resp, err := c.Put(ctx, k, val)
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	for i := 0; i < 300; i++ {
		put(c, fmt.Sprintf("k/%03d", i))
	}
	for i := 0; i < 30; i++ {
		put(c, fmt.Sprintf("k/%03d", i*7))
	}
	if _, err := c.Delete(ctx, "k/299"); err != nil {
		t.Fatal(err)
	}
	compacted := rev - 5
	entries := countLogEntries(t, []string{zkAddr(t)}, in.Root())
	if _, err := c.Compact(ctx, compacted, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	desc := readDescription(t, in.Root())
	if desc.Gen != 0 || desc.Path != "" || desc.CompactRev != compacted || desc.Raw < 330*int64(len(val)) {
		t.Fatalf("description after compacting a mostly live log: %+v", desc)
	}
	if n := countLogEntries(t, []string{zkAddr(t)}, in.Root()); n != entries+1 {
		t.Fatalf("%d log entries after the compaction, %d before it: want its own added, none deleted", n, entries)
	}

	events := 6 // from the compacted revision to the delete
	state := func(c *clientv3.Client) string { return compactedState(t, ctx, c, compacted, events) }
	want := state(c)
	o2 := opts
	o2.Root = in.Root()
	second := embedtest.Start(t, []string{zkAddr(t)}, o2)
	if got := state(second.Client(t)); got != want {
		t.Fatalf("a second instance on the root:\n%s\nwant\n%s", got, want)
	}
	second.Close()
	prepared.Store(0)
	in.Restart()
	c = in.Client(t)
	if got := state(c); got != want {
		t.Fatalf("after a restart:\n%s\nwant\n%s", got, want)
	}
	if got := prepared.Load(); got != desc.Raw {
		t.Fatalf("the restart prepared for %d bytes, want the log generation's %d", got, desc.Raw)
	}

	// The keys written over and over: superseded versions pass half the
	// live data, and the next compaction writes a whole base.
	for round := 0; round < 3; round++ {
		for i := 0; i < 300; i += 2 {
			put(c, fmt.Sprintf("k/%03d", i))
		}
	}
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	first := readDescription(t, in.Root())
	if first.Gen == 0 || first.Path == "" || first.CompactRev != rev {
		t.Fatalf("description after compacting a mostly superseded log: %+v", first)
	}
	entries = countLogEntries(t, []string{zkAddr(t)}, in.Root())
	put(c, "k/after")
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the log below the first base generation deleted", func() bool {
		return countLogEntries(t, []string{zkAddr(t)}, in.Root()) < entries/2
	})
	compacted, events = rev, 1 // k/after
	want = state(c)
	in.Restart()
	if got := state(in.Client(t)); got != want {
		t.Fatalf("after a restart from the base:\n%s\nwant\n%s", got, want)
	}
}

// compactedState is what a client reads of a view compacted at compacted
// whose events since number events: reads below the compaction refused,
// the keys now and at the compacted revision, HashKV, and the watch from
// the compacted revision.
func compactedState(t *testing.T, ctx context.Context, c *clientv3.Client, compacted int64, events int) string {
	t.Helper()
	if _, err := c.Get(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(compacted-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the compacted revision: %v", err)
	}
	all, err := c.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	old, err := c.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(compacted))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.HashKV(ctx, c.Endpoints()[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var got []string
	for resp := range c.Watch(wctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(compacted), clientv3.WithPrevKV()) {
		for _, ev := range resp.Events {
			got = append(got, fmt.Sprint(ev.Type, ev.Kv, ev.PrevKv))
		}
		if len(got) >= events {
			break
		}
	}
	return fmt.Sprint(all.Header.Revision, len(all.Kvs), all.Kvs, old.Kvs, h.Hash, h.HashRevision, h.CompactRevision, got)
}
