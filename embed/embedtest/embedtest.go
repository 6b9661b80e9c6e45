// Package zketcdtest runs real zketcd instances in-process for tests, on
// free 127.0.0.1 ports, against a ZooKeeper the test started.
package embedtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/compactor"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Options tune an instance; zero values take zketcd's defaults.
type Options struct {
	// Root is the ZooKeeper root (default: a root unique to the test).
	Root string
	// Name is the member name (default: "test-<n>").
	Name string
	// MaxTxnOps and MaxRequestBytes are etcd's limits.
	MaxTxnOps       int
	MaxRequestBytes int
	// MaxEntryBytes is the log entry byte budget.
	MaxEntryBytes int
	// ProgressNotifyInterval is the watch progress interval.
	ProgressNotifyInterval time.Duration
	// SessionTimeout is the ZooKeeper session timeout.
	SessionTimeout time.Duration
	// LogLevel defaults to warn.
	LogLevel logrus.Level
	// CompactionHook is engine.Config.CompactionHook (fault injection).
	CompactionHook func(step string) error
	// CommitPipeline is engine.Config.CommitPipeline.
	CommitPipeline int
	// AutoCompaction is engine.Config.AutoCompaction.
	AutoCompaction compactor.Config
	// TLS serves the etcd API with TLS.
	TLS *tls.Config
	// ZKTLS is zkstore.Config.TLS.
	ZKTLS *tls.Config
	// ZKAuth is zkstore.Config.Auth ("digest:user:pass").
	ZKAuth []string
	// ForwardWrites is engine.Config.ForwardWrites: only the leader
	// instance commits, the others forward to its internal endpoint.
	ForwardWrites bool
	// StrictZooKeeper treats a world-readable root as zketcd serve does
	// (a warning in Status and /health, AuthEnable refused); by default
	// an instance accepts it, as zketcd dev does.
	StrictZooKeeper bool
	// Configure, if set, edits the instance's configuration last (limits,
	// the logger); it is called again on Restart.
	Configure func(*embed.Config)
}

var counter atomic.Int64

// Instance is a running zketcd.
type Instance struct {
	t    testing.TB
	zk   []string
	opts Options
	addr string
	z    *embed.Zketcd
}

// Start starts an instance on the ZooKeeper servers zk and registers its
// Close with t.Cleanup.
func Start(t testing.TB, zk []string, opts Options) *Instance {
	t.Helper()
	n := counter.Add(1)
	if opts.Root == "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		opts.Root = fmt.Sprintf("/zketcd-test/%s-%d-%d", name, time.Now().UnixNano()%1e6, n)
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("test-%d", n)
	}
	if opts.LogLevel == 0 {
		opts.LogLevel = logrus.WarnLevel
	}
	in := &Instance{t: t, zk: zk, opts: opts, addr: "127.0.0.1:0"}
	in.start()
	t.Cleanup(in.Close)
	return in
}

func (in *Instance) start() {
	in.t.Helper()
	lg := logrus.New()
	lg.SetLevel(in.opts.LogLevel)
	lg.SetOutput(tbWriter{in.t})
	entry := logrus.NewEntry(lg).WithField("member", in.opts.Name)
	cfg := embed.Config{
		Engine: engine.Config{
			Store: zkstore.Config{
				Servers: in.zk, Root: in.opts.Root, Auth: in.opts.ZKAuth, TLS: in.opts.ZKTLS,
				SessionTimeout: in.opts.SessionTimeout, MaxEntryBytes: in.opts.MaxEntryBytes,
			},
			Name:            in.opts.Name,
			ClientURLs:      []string{"http://" + in.addr},
			CompactionHook:  in.opts.CompactionHook,
			CommitPipeline:  in.opts.CommitPipeline,
			AutoCompaction:  in.opts.AutoCompaction,
			ForwardWrites:   in.opts.ForwardWrites,
			WorldReadableOK: !in.opts.StrictZooKeeper,
		},
		ClientAddrs: []string{in.addr},
		TLS:         in.opts.TLS,
		Logger:      entry,
	}
	cfg.GRPC.WatchProgressNotifyInterval = in.opts.ProgressNotifyInterval
	cfg.GRPC.MaxTxnOps, cfg.GRPC.MaxRequestBytes = in.opts.MaxTxnOps, in.opts.MaxRequestBytes
	if in.opts.Configure != nil {
		in.opts.Configure(&cfg)
	}
	if cfg.GRPC.Auth.BcryptCost == 0 {
		// bcrypt's cheapest cost unless the test chose one: the tests log in
		// many times, and under -race on a loaded machine the default cost
		// takes seconds a login.
		cfg.GRPC.Auth.BcryptCost = bcrypt.MinCost
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var z *embed.Zketcd
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		z, err = embed.Start(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond) // a restart on the same port
	}
	if err != nil {
		in.t.Fatalf("zketcdtest: start: %v", err)
	}
	in.z = z
	in.addr = z.ClientAddrs()[0]
}

// Endpoint returns the host:port clients connect to (kept across Restart).
func (in *Instance) Endpoint() string { return in.addr }

// Root returns the instance's ZooKeeper root.
func (in *Instance) Root() string { return in.opts.Root }

// Zketcd returns the running instance.
func (in *Instance) Zketcd() *embed.Zketcd { return in.z }

// Engine returns the running instance's engine.
func (in *Instance) Engine() *engine.Engine { return in.z.Engine() }

// Close stops the instance (idempotent).
func (in *Instance) Close() {
	if in.z != nil {
		in.z.Close(2 * time.Second)
	}
}

// Restart stops the instance and starts it again on the same root, name and
// address.
func (in *Instance) Restart() {
	in.t.Helper()
	in.Close()
	in.z = nil
	in.start()
}

// Client returns a clientv3 client for the instance (closed at cleanup).
func (in *Instance) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return NewClient(t, in.Endpoint())
}

// NewClient returns a quiet clientv3 client for endpoints, closed at cleanup.
func NewClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{},
	})
	if err != nil {
		t.Fatalf("zketcdtest: client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
