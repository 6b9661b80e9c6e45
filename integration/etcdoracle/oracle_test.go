package etcdoracle_test

import (
	"context"
	"testing"
	"time"

	"github.com/zketcd/zketcd/integration/etcdoracle"
)

func TestStart(t *testing.T) {
	start := time.Now()
	o := etcdoracle.Start(t, etcdoracle.WithMaxTxnOps(7))
	t.Logf("started in %v at %s", time.Since(start), o.Endpoint())
	c := o.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != 2 {
		t.Fatalf("revision = %d, want 2", resp.Header.Revision)
	}
	if got := o.Etcd().Config().MaxTxnOps; got != 7 {
		t.Fatalf("MaxTxnOps = %d, want 7", got)
	}
}
