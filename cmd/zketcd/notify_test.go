package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestServeNotifiesSystemdOnceServingAndWhenStopping: under a Type=notify
// unit, systemd's $NOTIFY_SOCKET gets READY=1 once the instance serves (a
// client's write succeeds the moment it arrives, so `systemctl start`
// returns only then), and STOPPING=1 when it shuts down.
func TestServeNotifiesSystemdOnceServingAndWhenStopping(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)

	addr := embedtest.FreeAddr(t)
	f := parseServeFlags(t, "--zk", zkSrv.Addr(), "--zk-root", "/serve-notify",
		"--listen-client-urls", "http://"+addr, "--log-level", "warn")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, f, nil) }()

	read := func(what string) string {
		t.Helper()
		buf := make([]byte, 4096)
		if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %s on $NOTIFY_SOCKET: %v", what, err)
		}
		return string(buf[:n])
	}
	ready := read("READY=1")
	if !hasNotifyLine(ready, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", ready)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if _, err := c.Put(pctx, "notified", "serving"); err != nil {
		t.Fatalf("a write right after READY=1 (%q): %v", ready, err)
	}

	cancel()
	if stopping := read("STOPPING=1"); !hasNotifyLine(stopping, "STOPPING=1") {
		t.Fatalf("notification at shutdown %q, want STOPPING=1", stopping)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// hasNotifyLine tells whether an sd_notify datagram (newline-separated
// assignments) holds line.
func hasNotifyLine(datagram, line string) bool {
	for _, l := range strings.Split(datagram, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
