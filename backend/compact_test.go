package backend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/zketcdtest"
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
	in := zketcdtest.Start(t, []string{zkAddr}, zketcdtest.Options{})
	c := in.Client(t)
	ctx := ctxT(t)
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
	before := countLogEntries(t, []string{zkAddr}, in.Root())
	if _, err := c.Compact(ctx, r2-10, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// The second cycle deletes the entries below the first generation.
	deadline := time.Now().Add(10 * time.Second)
	var after int
	for {
		after = countLogEntries(t, []string{zkAddr}, in.Root())
		if after < before || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if after >= before {
		t.Fatalf("log did not shrink: %d entries before, %d after two compactions", before, after)
	}
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
	in := zketcdtest.Start(t, []string{zkAddr}, zketcdtest.Options{})
	other := zketcdtest.Start(t, []string{zkAddr}, zketcdtest.Options{Root: in.Root()})
	c := in.Client(t)
	ctx := ctxT(t)
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
