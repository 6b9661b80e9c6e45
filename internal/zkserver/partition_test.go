package zkserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// gate forwards TCP connections to one target and can drop everything in
// both directions (connections stay open, as when packets are dropped);
// reopening it closes the connections that were dropped, so the peers
// reconnect. It stands in for a network link between two members.
type gate struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	closed  bool
	forward int64             // bytes forwarded
	conns   map[net.Conn]bool // open connections (both sides); true: blocked meanwhile
	blocked bool
}

func startGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go g.serve()
	t.Cleanup(g.close)
	return g
}

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		go g.handle(c)
	}
}

// track registers c; it reports false (and closes c) after close.
func (g *gate) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		_ = c.Close()
		return false
	}
	g.conns[c] = g.blocked
	return true
}

func (g *gate) handle(c net.Conn) {
	if !g.track(c) {
		return
	}
	s, err := net.DialTimeout("tcp", g.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !g.track(s) {
		_ = c.Close()
		return
	}
	go g.pipe(s, c)
	g.pipe(c, s)
}

// pipe copies src to dst, dropping what arrives while the gate is blocked;
// when either side fails it closes both.
func (g *gate) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		g.mu.Lock()
		delete(g.conns, dst)
		delete(g.conns, src)
		g.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		g.mu.Lock()
		blocked := g.blocked
		if !blocked {
			g.forward += int64(n)
		}
		g.mu.Unlock()
		if n > 0 && !blocked {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setBlocked blocks or reopens the gate; reopening closes every connection
// that was open while it was blocked.
func (g *gate) setBlocked(b bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.blocked = b
	for c, was := range g.conns {
		switch {
		case b:
			g.conns[c] = true
		case was:
			_ = c.Close()
		}
	}
}

func (g *gate) forwarded() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.forward
}

func (g *gate) close() {
	_ = g.ln.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for c := range g.conns {
		_ = c.Close()
	}
}

// TestEnsembleRoutedPartition routes every member-to-member link through a
// gate (Options.RoutePeer), cuts one follower off from the other two
// members and checks that it leaves the quorum while the others keep it and
// serve writes, and that reopening the links brings it back in sync.
func TestEnsembleRoutedPartition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	opts := zkservertest.Options(t)
	opts.TickTime = 200 * time.Millisecond
	opts.SyncLimit = 5 // a cut-off follower notices within 1 s
	var mu sync.Mutex
	gates := map[zkserver.PeerLink]*gate{}
	opts.RoutePeer = func(l zkserver.PeerLink) (string, error) {
		g := startGate(t, l.Addr)
		mu.Lock()
		defer mu.Unlock()
		l.Addr = "" // a retried start (a port was taken) replaces the gate
		gates[l] = g
		return g.ln.Addr().String(), nil
	}
	e := zkservertest.EnsembleWith(t, 3, opts)
	mu.Lock()
	if len(gates) != 12 {
		t.Fatalf("%d links routed; want 12", len(gates))
	}
	mu.Unlock()

	// Every member's zoo.cfg lists itself at its own ports and the others
	// at gates.
	for i := range e.Size() {
		b, err := os.ReadFile(filepath.Join(e.Member(i).Dir(), zkserver.ConfigFileName))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\nserver."); n != 3 {
			t.Fatalf("member %d's zoo.cfg has %d server lines:\n%s", i+1, n, b)
		}
	}

	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitSyncedFollowers(ctx, t, e, leader, 2)
	follower := (leader + 1) % 3
	other := 3 - leader - follower
	// The follower follows the leader through the gate.
	toLeader := gateOf(t, &mu, gates, follower+1, leader+1, zkserver.QuorumPort)
	if toLeader.forwarded() == 0 {
		t.Fatalf("no byte went through the gate from member %d to the leader's quorum port", follower+1)
	}

	cut := func(block bool) {
		mu.Lock()
		defer mu.Unlock()
		for l, g := range gates {
			if l.From == follower+1 || l.To == follower+1 {
				g.setBlocked(block)
			}
		}
	}
	cut(true)
	began := time.Now()
	// The cut-off follower stops serving (it answers srvr, but not as a
	// follower); the leader keeps its quorum with one synced follower.
	testutil.Eventually(t, 20*time.Second, "the cut-off member stops serving", func() error {
		mode, err := e.Member(follower).Mode(ctx)
		if err == nil {
			return fmt.Errorf("cut-off member %d still serves as %s", follower+1, mode)
		}
		if !errors.Is(err, zkserver.ErrNotServing) {
			return err
		}
		return nil
	})
	t.Logf("cut-off member %d stopped serving %s after the cut", follower+1, time.Since(began).Round(time.Millisecond))
	waitSyncedFollowers(ctx, t, e, leader, 1)
	if mode, err := e.Member(other).Mode(ctx); err != nil || mode != zkserver.ModeFollower {
		t.Fatalf("member %d Mode() = %q, %v during the partition; want follower", other+1, mode, err)
	}
	conn := connect(t, e.Member(other).Addr())
	if _, err := conn.Create("/during", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("write through member %d during the partition: %v", other+1, err)
	}
	// It stays out: several sync limits later it still does not serve (a
	// negative, so a bounded wait).
	time.Sleep(5 * opts.TickTime * time.Duration(opts.SyncLimit))
	if mode, err := e.Member(follower).Mode(ctx); err == nil {
		t.Fatalf("cut-off member %d serves as %s %s into the partition", follower+1, mode, time.Since(began).Round(time.Millisecond))
	}

	cut(false)
	healed := time.Now()
	waitSyncedFollowers(ctx, t, e, leader, 2)
	if err := e.WaitQuorum(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("member %d back in sync %s after the heal", follower+1, time.Since(healed).Round(time.Millisecond))
	fconn := connect(t, e.Member(follower).Addr())
	if got, err := getData(fconn, "/during"); err != nil || got != "x" {
		t.Fatalf("healed member %d: get /during = %q, %v; want x", follower+1, got, err)
	}
}

func gateOf(t *testing.T, mu *sync.Mutex, gates map[zkserver.PeerLink]*gate, from, to int, port zkserver.PeerPort) *gate {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	g := gates[zkserver.PeerLink{From: from, To: to, Port: port}]
	if g == nil {
		t.Fatalf("no gate from member %d to member %d's %s port", from, to, port)
	}
	return g
}

// waitSyncedFollowers waits until member leader leads with exactly n synced
// followers (mntr).
func waitSyncedFollowers(ctx context.Context, t *testing.T, e *zkserver.Ensemble, leader, n int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("member %d leads with %d synced followers", leader+1, n), func() error {
		m, err := e.Member(leader).Monitor(ctx)
		if err != nil {
			return err
		}
		if m["zk_server_state"] != zkserver.ModeLeader || m["zk_synced_followers"] != strconv.Itoa(n) {
			return fmt.Errorf("member %d: %s, %s synced followers", leader+1, m["zk_server_state"], m["zk_synced_followers"])
		}
		return nil
	})
}
