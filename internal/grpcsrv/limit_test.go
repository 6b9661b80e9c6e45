package grpcsrv

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

func TestRequestLimiterFailsFastWhenFullAndExemptsHealth(t *testing.T) {
	l := newRequestLimiter(2, prometheus.NewRegistry())
	block := make(chan struct{})
	started := make(chan struct{}, 2)
	done := make(chan error, 2)
	blocking := func(ctx context.Context, req any) (any, error) {
		started <- struct{}{}
		<-block
		return "ok", nil
	}
	rangeInfo := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Range"}
	for range 2 {
		go func() {
			_, err := l.unary(context.Background(), nil, rangeInfo, blocking)
			done <- err
		}()
	}
	<-started
	<-started

	called := false
	quick := func(ctx context.Context, req any) (any, error) { called = true; return "ok", nil }
	if _, err := l.unary(context.Background(), nil, rangeInfo, quick); !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) || called {
		t.Fatalf("third request: %v (handler called: %v), want %v", err, called, rpctypes.ErrGRPCRequestTooManyRequests)
	}
	streamInfo := &grpc.StreamServerInfo{FullMethod: "/etcdserverpb.KV/RangeStream", IsServerStream: true}
	if err := l.stream(nil, nil, streamInfo, func(any, grpc.ServerStream) error { return nil }); !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) {
		t.Fatalf("RangeStream when full: %v", err)
	}
	// Health checks and bidirectional streams (Watch, LeaseKeepAlive) are not counted.
	health := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	if _, err := l.unary(context.Background(), nil, health, quick); err != nil || !called {
		t.Fatalf("health check when full: %v", err)
	}
	healthWatch := &grpc.StreamServerInfo{FullMethod: "/grpc.health.v1.Health/Watch", IsServerStream: true}
	watch := &grpc.StreamServerInfo{FullMethod: "/etcdserverpb.Watch/Watch", IsClientStream: true, IsServerStream: true}
	for _, info := range []*grpc.StreamServerInfo{healthWatch, watch} {
		if err := l.stream(nil, nil, info, func(any, grpc.ServerStream) error { return nil }); err != nil {
			t.Fatalf("%s when full: %v", info.FullMethod, err)
		}
	}

	close(block)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	called = false
	if _, err := l.unary(context.Background(), nil, rangeInfo, quick); err != nil || !called {
		t.Fatalf("after the slots freed: %v", err)
	}
	if newRequestLimiter(0, nil) != nil {
		t.Fatal("a limit of 0 must mean no limiter")
	}
}
