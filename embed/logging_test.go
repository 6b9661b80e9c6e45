package embed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestValuesAndCredentialsNeverReachTheLog runs an instance logging at
// debug level with a ZooKeeper digest password, drives writes, reads,
// watches, leases, compaction, failing requests and a restart with a
// marker in every key and value, and checks that no marker and not the
// password appears in any log line.
func TestValuesAndCredentialsNeverReachTheLog(t *testing.T) {
	const marker = "VALUE-MARKER-7f3c9a1e"
	const password = "PASSWORD-MARKER-b24d8e60"
	const k = "KEY-MARKER-d1e5/" // every key starts with it
	var out embedtest.SyncBuffer
	lg := logrus.New()
	lg.SetLevel(logrus.DebugLevel)
	lg.SetOutput(&out)
	lg.SetFormatter(&logrus.JSONFormatter{})
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{
		ZKAuth: []string{"digest:zketcd:" + password},
		Configure: func(c *embed.Config) {
			c.Logger = logrus.NewEntry(lg)
			c.GRPC.MaxConcurrentRequests = 1000
		},
	})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	wch := c.Watch(ctx, k, clientv3.WithPrefix(), clientv3.WithPrevKV())
	lease, err := c.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, k+"k1", marker, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Put(ctx, k+"k2", marker+"-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value(k+"k2"), "=", marker)).
		Then(clientv3.OpPut(k+"k3", marker)).Else(clientv3.OpPut(k+"k4", marker), clientv3.OpGet(k, clientv3.WithPrefix())).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, k+"k2", marker+"-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, k, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	// Failing requests: too large, and a compacted revision.
	if _, err := c.Put(ctx, k+"big", marker+strings.Repeat("x", 1600<<10)); err != rpctypes.ErrRequestTooLarge {
		t.Fatalf("a 1.6 MiB put: %v, want %v", err, rpctypes.ErrRequestTooLarge)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision+1, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, k+"k2", clientv3.WithRev(resp.Header.Revision)); err != rpctypes.ErrCompacted {
		t.Fatalf("read below the compaction: %v", err)
	}
	if _, err := c.Delete(ctx, k, clientv3.WithPrefix(), clientv3.WithPrevKV()); err != nil {
		t.Fatal(err)
	}
	events := 0
	for events < 5 {
		select {
		case wr := <-wch:
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			events += len(wr.Events)
		case <-ctx.Done():
			t.Fatalf("watch saw %d events", events)
		}
	}
	in.Restart()
	if _, err := in.Client(t).Get(ctx, k, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	in.Close()

	logged := out.String()
	if !strings.Contains(logged, `"level":"debug"`) {
		t.Fatalf("no debug lines captured; the test proves nothing:\n%s", logged)
	}
	for _, line := range strings.Split(logged, "\n") {
		if strings.Contains(line, marker) {
			t.Errorf("a value reached the log: %s", line)
		}
		if strings.Contains(line, k) {
			t.Errorf("a key reached the log: %s", line)
		}
		if strings.Contains(line, password) {
			t.Errorf("the ZooKeeper password reached the log: %s", line)
		}
	}
	t.Logf("%d log lines at debug level, none with a value or the password", strings.Count(logged, "\n"))
}
