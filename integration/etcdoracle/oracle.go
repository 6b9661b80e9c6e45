// Package etcdoracle starts an embedded, single-member etcd server for tests.
//
// The embedded etcd is the reference implementation ("oracle") that
// differential tests compare other etcd-API servers against. Every server
// listens on loopback only, keeps its data in t.TempDir() and is shut down by
// t.Cleanup.
package etcdoracle

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// startTimeout bounds how long Start waits for the server to become ready.
const startTimeout = 30 * time.Second

// Option customises the embedded etcd configuration.
type Option func(*embed.Config)

// WithMaxRequestBytes sets the maximum client request size in bytes
// (etcd flag --max-request-bytes). It also bounds the chunk size of
// RangeStream responses.
func WithMaxRequestBytes(n uint) Option {
	return func(c *embed.Config) { c.MaxRequestBytes = n }
}

// WithMaxTxnOps sets the maximum number of operations per transaction branch
// (etcd flag --max-txn-ops, default 128).
func WithMaxTxnOps(n uint) Option {
	return func(c *embed.Config) { c.MaxTxnOps = n }
}

// WithWatchProgressNotifyInterval sets the period of server-initiated watch
// progress notifications (etcd flag --watch-progress-notify-interval).
func WithWatchProgressNotifyInterval(d time.Duration) Option {
	return func(c *embed.Config) { c.WatchProgressNotifyInterval = d }
}

// WithConfig applies an arbitrary change to the embed configuration. It runs
// after the defaults set by Start, so it can override any of them.
func WithConfig(f func(*embed.Config)) Option {
	return func(c *embed.Config) { f(c) }
}

// Oracle is a running embedded etcd server.
type Oracle struct {
	etcd     *embed.Etcd
	endpoint string
	closed   atomic.Bool
}

// Start starts a fresh single-member etcd on free loopback ports with its data
// directory under t.TempDir(), waits until it serves requests and registers a
// cleanup that stops it. It fails the test if the server does not start.
//
// The server runs with a 10 ms heartbeat and a 50 ms election timeout for a
// fast start, and without fsync. One visible consequence: the minimum lease
// TTL is 1 s (etcd's defaults give 2 s); use WithConfig to restore
// TickMs=100 and ElectionMs=1000 where that matters.
func Start(t testing.TB, opts ...Option) *Oracle {
	t.Helper()

	cfg := embed.NewConfig()
	cfg.Name = "oracle"
	cfg.Dir = t.TempDir()
	o := &Oracle{}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newLogger(&o.closed))

	// Port 0: the kernel picks free ports, so parallel tests never race for
	// them. A single-member cluster never dials its own peer URL.
	lpurl := mustURL("http://127.0.0.1:0")
	lcurl := mustURL("http://127.0.0.1:0")
	cfg.ListenPeerUrls = []url.URL{lpurl}
	cfg.AdvertisePeerUrls = []url.URL{lpurl}
	cfg.ListenClientUrls = []url.URL{lcurl}
	cfg.AdvertiseClientUrls = []url.URL{lcurl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "etcdoracle"
	cfg.ListenMetricsUrls = nil // metrics stay on the loopback client listener
	cfg.EnableGRPCGateway = false

	// Fast single-node election and no fsync: this is a throwaway test server.
	cfg.TickMs = 10
	cfg.ElectionMs = 50
	cfg.UnsafeNoFsync = true
	cfg.BcryptCost = 4 // bcrypt's cheapest (the tests log in often; -race makes the default cost take seconds)

	for _, opt := range opts {
		opt(cfg)
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcdoracle: start embedded etcd: %v", err)
	}
	o.etcd = e
	t.Cleanup(o.Close)

	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcdoracle: embedded etcd failed: %v", err)
	case <-time.After(startTimeout):
		t.Fatalf("etcdoracle: embedded etcd not ready after %v", startTimeout)
	}
	if len(e.Clients) == 0 {
		t.Fatalf("etcdoracle: embedded etcd has no client listener")
	}
	o.endpoint = e.Clients[0].Addr().String()
	return o
}

// Name identifies the server in differential test reports.
func (o *Oracle) Name() string { return "etcd" }

// Endpoint returns the client endpoint as host:port.
func (o *Oracle) Endpoint() string { return o.endpoint }

// Etcd returns the underlying embedded server, for tests that need to reach
// into it (for example to read its configuration).
func (o *Oracle) Etcd() *embed.Etcd { return o.etcd }

// Client returns a new client connected to the server; t.Cleanup closes it.
func (o *Oracle) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return NewClient(t, o.endpoint)
}

// Close stops the server. It is safe to call more than once.
func (o *Oracle) Close() {
	if o.closed.CompareAndSwap(false, true) {
		o.etcd.Close()
	}
}

// NewClient dials an etcd-API endpoint (host:port) with a quiet logger and
// registers a cleanup closing the client. It is shared by every target that
// speaks the etcd v3 API.
func NewClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdoracle: dial %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newLogger returns a zap logger that reports errors on stderr until closed
// is set: the errors etcd logs while shutting down are expected noise.
func newLogger(closed *atomic.Bool) *zap.Logger {
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zapcore.ErrorLevel)
	return zap.New(&quietCore{Core: core, closed: closed})
}

// quietCore drops every entry once the server is being closed, and the
// known-benign startup race "failed to update storage version" (the version
// monitor runs before the first raft term reaches the backend).
type quietCore struct {
	zapcore.Core
	closed *atomic.Bool
}

func (c *quietCore) With(fields []zapcore.Field) zapcore.Core {
	return &quietCore{Core: c.Core.With(fields), closed: c.closed}
}

func (c *quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.closed.Load() || !c.Enabled(e.Level) || e.Message == "failed to update storage version" {
		return ce
	}
	return ce.AddCore(e, c)
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(fmt.Sprintf("etcdoracle: bad URL %q: %v", s, err))
	}
	return *u
}

// FreePort returns a currently unused loopback TCP port. The port is only
// reserved until the function returns, so prefer listeners on port 0 where
// the server supports them.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdoracle: find free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
