package main

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// serveReadLease runs "serve --read-lease --zk-session-timeout 10s" (and
// extra) on zk until the test ends, and returns its log and a client.
func serveReadLease(t *testing.T, zk, root string, extra ...string) (*embedtest.SyncBuffer, *clientv3.Client, string) {
	t.Helper()
	addr := embedtest.FreeAddr(t)
	// A ZooKeeper identity, as serve is meant to run: Status then lists
	// only what this test looks for.
	args := append([]string{"--zk", zk, "--zk-root", root, "--zk-auth", "digest:zketcd:readlease", "--listen-client-urls", "http://" + addr,
		"--internal-listen-url", "http://127.0.0.1:0", "--read-lease", "--zk-session-timeout", "10s", "--log-level", "info"}, extra...)
	f := parseServeFlags(t, args...)
	log := &embedtest.SyncBuffer{}
	f.logOutput = log
	serveUntilDone(t, f)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return log, c, addr
}

// waitLog waits until the log has a line with every one of subs.
func waitLog(t *testing.T, log *embedtest.SyncBuffer, subs ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, line := range strings.Split(log.String(), "\n") {
			all := true
			for _, s := range subs {
				all = all && strings.Contains(line, s)
			}
			if all {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in:\n%s", subs, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeReadLeaseOnAShorterGrantedTimeout runs "zketcd serve
// --read-lease" asking for a 10 s session of a ZooKeeper whose
// maxSessionTimeout is 2 s (tickTime 500 ms). Where the servers allow the
// conf four-letter word, the read lease is taken with the window the grant
// allows — (2 s − 2 s/3 − 250 ms)/2 — and the log names the granted and the
// requested timeouts and the window. Where they do not, the read lease is
// refused: the log and Status name both timeouts; a declared tick
// (--zk-tick-time) lets it be taken again.
func TestServeReadLeaseOnAShorterGrantedTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper (Java)")
	}
	start := func(t *testing.T, whitelist string) *zkserver.Server {
		opts := zkservertest.Options(t)
		opts.TickTime, opts.MaxSessionTimeout = 500*time.Millisecond, 2*time.Second
		if whitelist != "" {
			opts.ExtraConfig = map[string]string{"4lw.commands.whitelist": whitelist}
		}
		return zkservertest.StandaloneWith(t, opts)
	}
	status := func(t *testing.T, c *clientv3.Client, addr string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.Status(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		return st.Errors
	}
	const window = "window=541.666667ms"

	t.Run("conf allowed: the window narrows", func(t *testing.T) {
		zk := start(t, "")
		log, c, addr := serveReadLease(t, zk.Addr(), "/serve-grant")
		line := waitLog(t, log, "read lease taken", "granted_timeout=2s", "requested_timeout=10s", "tick=500ms", window)
		t.Log(line)
		t.Log(waitLog(t, log, "shorter session timeout than requested", "granted_timeout=2s", window))
		if errs := status(t, c, addr); len(errs) != 0 {
			t.Fatalf("Status errors %q", errs)
		}
	})
	t.Run("conf refused: the read lease is refused", func(t *testing.T) {
		zk := start(t, "srvr")
		log, c, addr := serveReadLease(t, zk.Addr(), "/serve-refused")
		line := waitLog(t, log, "read lease refused", "granted session timeout 2s (requested 10s)", "tickTime is unknown")
		t.Log(line)
		errs := status(t, c, addr)
		if len(errs) != 1 || !strings.Contains(errs[0], "--read-lease refused") || !strings.Contains(errs[0], "granted session timeout 2s (requested 10s)") {
			t.Fatalf("Status errors %q, want the refusal naming 2s and 10s", errs)
		}
		if strings.Contains(log.String(), "read lease taken") {
			t.Fatal("the read lease was taken without a tick")
		}
	})
	t.Run("conf refused, the tick declared: the window narrows", func(t *testing.T) {
		zk := start(t, "srvr")
		log, _, _ := serveReadLease(t, zk.Addr(), "/serve-declared", "--zk-tick-time", "500ms")
		t.Log(waitLog(t, log, "read lease taken", "granted_timeout=2s", "tick_from=declared", window))
	})
}
