package httpgw_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// BenchmarkNativeGRPCSerializableGet measures gRPC served on the shared
// client port (connections classified, then grpc.Server.Serve): a
// serializable get is answered from the view, so the server's own path is
// most of the time.
func BenchmarkNativeGRPCSerializableGet(b *testing.B) {
	zk := zkservertest.Standalone(b)
	in := embedtest.Start(b, []string{zk.Addr()}, embedtest.Options{})
	c := in.Client(b)
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Get(ctx, "k", clientv3.WithSerializable()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkNativeGRPCDialAndGet measures a new client connection and its
// first RPC: the classification happens once per connection.
func BenchmarkNativeGRPCDialAndGet(b *testing.B) {
	zk := zkservertest.Standalone(b)
	in := embedtest.Start(b, []string{zk.Addr()}, embedtest.Options{})
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{in.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Get(ctx, "k", clientv3.WithSerializable()); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
