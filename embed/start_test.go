package embed_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// freeAddr returns a 127.0.0.1 address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestAFailedStartClosesWhatItOpened: Start fails at each of its steps —
// a listener that cannot be opened, the engine that cannot reach
// ZooKeeper — and leaves none of the listeners it had opened (they can be
// listened on again at once). Needs no ZooKeeper.
func TestAFailedStartClosesWhatItOpened(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name     string
		metrics  func(client string) string // the metrics address
		internal bool                       // forward writes (an internal listener)
	}{
		{"the metrics address is taken", func(string) string { return taken.Addr().String() }, false},
		{"the metrics address is the client one", func(client string) string { return client }, false},
		{"ZooKeeper is unreachable", func(string) string { return freeAddr(t) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg := testutil.Logger(logrus.FatalLevel)
			client, internal := freeAddr(t), freeAddr(t)
			cfg := embed.Config{
				Engine: engine.Config{
					Store:         zkstore.Config{Servers: []string{freeAddr(t)}, Root: "/start-test"},
					Name:          "a",
					ForwardWrites: tc.internal,
				},
				ClientAddrs:  []string{client},
				MetricsAddrs: []string{tc.metrics(client)},
				InternalAddr: internal,
				Logger:       lg,
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if z, err := embed.Start(ctx, cfg); err == nil {
				z.Close(time.Second)
				t.Fatal("Start succeeded")
			}
			addrs := append([]string{client}, cfg.MetricsAddrs...)
			if tc.internal {
				addrs = append(addrs, internal)
			}
			for _, a := range addrs {
				if a == taken.Addr().String() {
					continue
				}
				l, err := net.Listen("tcp", a)
				if err != nil {
					t.Fatalf("%s still taken after the failed start: %v", a, err)
				}
				l.Close()
			}
		})
	}
}
