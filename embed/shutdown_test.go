package embed_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestShutdownDoesNotWaitForStreams: open watch and keepalive streams never
// end on their own; a graceful stop must still return at once.
func TestShutdownDoesNotWaitForStreams(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = c.Watch(ctx, "k")
	grant, err := c.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeepAlive(ctx, grant.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", "v", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the watch stream open", func() bool {
		st := in.Engine().WatchStats()
		return st.Synced+st.Unsynced > 0
	})
	start := time.Now()
	in.Zketcd().Close(5 * time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("shutdown took %s with open streams", took)
	} else {
		t.Logf("shutdown took %s", took)
	}
}
