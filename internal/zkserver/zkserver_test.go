package zkserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// connect opens a ZooKeeper session to addrs and closes it at cleanup.
func connect(t *testing.T, addrs ...string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(addrs, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zk.Connect(%v): %v", addrs, err)
	}
	t.Cleanup(conn.Close)
	return conn
}

func getData(conn *zk.Conn, path string) (string, error) {
	if _, err := conn.Sync(path); err != nil {
		return "", fmt.Errorf("sync %s: %w", path, err)
	}
	b, _, err := conn.Get(path)
	if err != nil {
		return "", fmt.Errorf("get %s: %w", path, err)
	}
	return string(b), nil
}

func TestStandaloneKillRestartKeepsData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := zkservertest.Standalone(t)

	if mode, err := s.Mode(ctx); err != nil || mode != zkserver.ModeStandalone {
		t.Fatalf("Mode() = %q, %v; want %q", mode, err, zkserver.ModeStandalone)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.PID() == 0 || !s.Running() {
		t.Fatalf("Addr()=%q PID()=%d Running()=%v", s.Addr(), s.PID(), s.Running())
	}

	conn := connect(t, s.Addr())
	if _, err := conn.Create("/survivor", []byte("hello"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, err := getData(conn, "/survivor"); err != nil || got != "hello" {
		t.Fatalf("get = %q, %v; want hello", got, err)
	}
	conn.Close()

	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if s.Running() || s.PID() != 0 {
		t.Fatalf("after Kill: Running()=%v PID()=%d", s.Running(), s.PID())
	}
	if _, err := s.Mode(ctx); err == nil {
		t.Fatal("Mode() after Kill succeeded")
	}

	start := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start after Kill: %v", err)
	}
	t.Logf("restart after kill took %s", time.Since(start))
	if err := s.Start(ctx); !errors.Is(err, zkserver.ErrRunning) {
		t.Fatalf("second Start = %v; want ErrRunning", err)
	}

	conn = connect(t, s.Addr())
	if got, err := getData(conn, "/survivor"); err != nil || got != "hello" {
		t.Fatalf("after restart: get = %q, %v; want hello", got, err)
	}

	// Pause: the server stops answering; Resume: it answers again.
	if err := s.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if !s.Paused() {
		t.Fatal("Paused() = false after Pause")
	}
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := s.Mode(pctx)
	cancel()
	if err == nil {
		t.Fatal("Mode() of a paused server succeeded")
	}
	if err := s.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if mode, err := s.Mode(ctx); err != nil || mode != zkserver.ModeStandalone {
		t.Fatalf("Mode() after Resume = %q, %v", mode, err)
	}

	// A graceful stop and start keeps the data too.
	conn.Close()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Pause(); !errors.Is(err, zkserver.ErrNotRunning) {
		t.Fatalf("Pause of stopped server = %v; want ErrNotRunning", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	conn = connect(t, s.Addr())
	if got, err := getData(conn, "/survivor"); err != nil || got != "hello" {
		t.Fatalf("after stop/start: get = %q, %v; want hello", got, err)
	}
}

func TestConcurrentStopAndKill(t *testing.T) {
	t.Parallel()
	s := zkservertest.Standalone(t)
	if err := s.Pause(); err != nil { // Stop must also work on a paused server
		t.Fatalf("Pause: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 3 {
		wg.Go(func() { errs <- s.Stop() })
		wg.Go(func() { errs <- s.Kill() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Stop/Kill: %v", err)
		}
	}
	if s.Running() {
		t.Fatal("still running after Stop and Kill")
	}
}

func TestEnsembleLeaderFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := zkservertest.Ensemble(t, 3)
	if got := len(e.Addrs()); got != 3 || e.Size() != 3 {
		t.Fatalf("Addrs() has %d entries, Size() = %d; want 3", got, e.Size())
	}
	if cs := e.ConnectString(); strings.Count(cs, ",") != 2 {
		t.Fatalf("ConnectString() = %q", cs)
	}

	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	for i := range e.Size() {
		want := zkserver.ModeFollower
		if i == leader {
			want = zkserver.ModeLeader
		}
		if mode, err := e.Member(i).Mode(ctx); err != nil || mode != want {
			t.Fatalf("member %d Mode() = %q, %v; want %q", i, mode, err, want)
		}
	}

	conn := connect(t, e.Addrs()...)
	if _, err := conn.Create("/before", []byte("v1"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create /before: %v", err)
	}
	conn.Close()

	if err := e.Member(leader).Kill(); err != nil {
		t.Fatalf("Kill leader %d: %v", leader, err)
	}
	killed := time.Now()

	var newLeader int
	testutil.Eventually(t, 15*time.Second, fmt.Sprintf("a new leader after killing %d", leader), func() error {
		l, err := e.Leader(ctx)
		if err == nil && l == leader {
			err = fmt.Errorf("killed member %d still reported as leader", l)
		}
		newLeader = l
		return err
	})
	t.Logf("new leader %d elected %s after killing leader %d", newLeader, time.Since(killed), leader)

	// Write through a surviving member that is not the new leader.
	other := 3 - leader - newLeader
	oconn := connect(t, e.Member(other).Addr())
	testutil.Eventually(t, 15*time.Second, fmt.Sprintf("a write through member %d after failover", other), func() error {
		_, err := oconn.Create("/after", []byte("v2"), 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return nil // an earlier attempt succeeded but its answer got lost
		}
		return err
	})
	t.Logf("write through member %d succeeded %s after the kill", other, time.Since(killed))
	if got, err := getData(oconn, "/before"); err != nil || got != "v1" {
		t.Fatalf("get /before = %q, %v; want v1", got, err)
	}

	// Restart the killed member: it rejoins as a follower and catches up.
	start := time.Now()
	if err := e.Member(leader).Start(ctx); err != nil {
		t.Fatalf("restart member %d: %v", leader, err)
	}
	t.Logf("killed member %d rejoined in %s", leader, time.Since(start))
	if err := e.WaitQuorum(ctx); err != nil {
		t.Fatalf("WaitQuorum after restart: %v", err)
	}
	if mode, err := e.Member(leader).Mode(ctx); err != nil || mode != zkserver.ModeFollower {
		t.Fatalf("restarted member Mode() = %q, %v; want follower", mode, err)
	}
	rconn := connect(t, e.Member(leader).Addr())
	if got, err := getData(rconn, "/after"); err != nil || got != "v2" {
		t.Fatalf("restarted member: get /after = %q, %v; want v2", got, err)
	}
}

func TestEnsembleRestartAfterQuorumLoss(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := zkservertest.Ensemble(t, 3)
	// Losing two of three members loses the quorum; Ensemble.Start brings
	// them back together.
	if err := errors.Join(e.Member(0).Kill(), e.Member(1).Stop()); err != nil {
		t.Fatalf("kill/stop: %v", err)
	}
	// The survivor may still call itself leader until it notices that its
	// followers are gone.
	testutil.Eventually(t, 15*time.Second, "no leader without a quorum", func() error {
		if _, err := e.Leader(ctx); !errors.Is(err, zkserver.ErrNoLeader) {
			return fmt.Errorf("Leader() without quorum = %v; want ErrNoLeader", err)
		}
		return nil
	})
	if err := e.Start(ctx); err != nil {
		t.Fatalf("Ensemble.Start: %v", err)
	}
	if _, err := e.Leader(ctx); err != nil {
		t.Fatalf("Leader after Start: %v", err)
	}
}

func TestStartFailureReportsLogTail(t *testing.T) {
	t.Parallel()
	opts := zkservertest.Options(t)
	opts.JVMFlags = []string{"-XX:+NoSuchFlagForZkserverTest"}
	_, err := zkserver.StartStandalone(t.Context(), opts)
	if err == nil {
		t.Fatal("StartStandalone with a bad JVM flag succeeded")
	}
	if !errors.Is(err, zkserver.ErrExited) || !strings.Contains(err.Error(), "NoSuchFlagForZkserverTest") {
		t.Fatalf("error does not wrap ErrExited or lacks the log tail: %v", err)
	}
}

func TestPreflightMissingJar(t *testing.T) {
	t.Parallel()
	err := zkserver.Preflight(zkserver.Options{ClassPath: []string{"/nonexistent/zookeeper.jar"}})
	if !errors.Is(err, zkserver.ErrPrerequisites) || !strings.Contains(err.Error(), "/nonexistent/zookeeper.jar") {
		t.Fatalf("Preflight = %v; want ErrPrerequisites naming the jar", err)
	}
	zkservertest.SkipShort(t) // the defaults need Java and the jars
	if err := zkserver.Preflight(zkserver.Options{}); err != nil {
		t.Fatalf("Preflight with defaults: %v", err)
	}
}

func TestPortAllocatorNeverRepeats(t *testing.T) {
	t.Parallel()
	a := zkserver.NewPortAllocator()
	seen := map[int]bool{}
	for range 5 {
		ports, err := a.PickN(10)
		if err != nil {
			t.Fatalf("PickN: %v", err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	if a.Reserve(1234) != true || a.Reserve(1234) != false {
		t.Fatal("Reserve does not report prior use")
	}
}

func TestStartOnTakenPortReportsAddrInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	opts := zkservertest.Options(t)
	opts.ClientPort = l.Addr().(*net.TCPAddr).Port
	_, err = zkserver.StartStandalone(t.Context(), opts)
	if !errors.Is(err, zkserver.ErrAddrInUse) {
		t.Fatalf("StartStandalone on a taken port = %v; want ErrAddrInUse", err)
	}
}
