// Package memserver serves the etcd API of a zketcd engine on an
// in-memory log (memlog) over a real gRPC server on 127.0.0.1, for tests
// of what sits on the gRPC layer (its error mapping, the lock and election
// services) without ZooKeeper or a JVM.
package memserver

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/grpcsrv"
	"github.com/zketcd/zketcd/internal/testutil"
)

// Options tune a server; the zero value serves the core services.
type Options struct {
	// GRPC configures the services (Logger is filled in).
	GRPC grpcsrv.Config
	// Services, if set, registers more services on the server before it
	// serves, built on conn (a connection to the server itself); the
	// function it returns runs at cleanup.
	Services func(srv *grpc.Server, conn *grpc.ClientConn) (closeFn func())
}

// Server is a running server. Its fields are for the test to read.
type Server struct {
	// Store is the log the engine runs on (its fault hooks are the test's).
	Store *memlog.Store
	// Engine is the engine behind the services.
	Engine *engine.Engine
	// Addr is the address the services listen on; Conn a connection to it.
	Addr string
	Conn *grpc.ClientConn
}

// Start starts a server and registers its stop with t.Cleanup. It waits
// until the engine leads (it is the log's only instance).
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	lg := logrus.New()
	lg.SetLevel(logrus.ErrorLevel)
	lg.SetOutput(testWriter{t})
	st := memlog.New(memlog.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := engine.New(ctx, engine.Config{Name: "mem", Logger: logrus.NewEntry(lg)}, st.Client())
	if err != nil {
		t.Fatalf("memserver: engine: %v", err)
	}
	t.Cleanup(be.Close)
	testutil.Eventually(t, 10*time.Second, "memserver: the engine leads", func() bool { l, _ := be.Leader(); return l })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("memserver: %v", err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("memserver: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	cfg := opts.GRPC
	cfg.Logger = logrus.NewEntry(lg)
	srvCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	srv, err := grpcsrv.New(srvCtx, cfg, be)
	if err != nil {
		t.Fatalf("memserver: grpc server: %v", err)
	}
	t.Cleanup(srv.Stop) // before the engine closes (cleanups run last first)
	if opts.Services != nil {
		if closeFn := opts.Services(srv, conn); closeFn != nil {
			t.Cleanup(closeFn)
		}
	}
	go func() { _ = srv.Serve(lis) }()
	return &Server{Store: st, Engine: be, Addr: lis.Addr().String(), Conn: conn}
}

// Client returns an etcd client of the server, closed at cleanup.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("memserver: client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testWriter sends the server's logs to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
