package zkstore

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestHandshakeConnBoundsOnlyTheConnectResponse drives a handshakeConn the
// way go-zookeeper does: deadlines asked for during the connect exchange
// are cut to the handshake deadline, and once the whole length-prefixed
// connect response has been read the connection is left alone.
func TestHandshakeConnBoundsOnlyTheConnectResponse(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	deadline := time.Now().Add(200 * time.Millisecond)
	c := newHandshakeConn(client, deadline)
	defer c.Close()

	if got := c.bound(time.Now().Add(time.Hour)); !got.Equal(deadline) {
		t.Fatalf("a far deadline during the handshake became %v, want %v", got, deadline)
	}
	if got := c.bound(time.Time{}); !got.Equal(deadline) {
		t.Fatalf("no deadline during the handshake became %v, want %v", got, deadline)
	}
	near := time.Now().Add(time.Millisecond)
	if got := c.bound(near); !got.Equal(near) {
		t.Fatalf("a nearer deadline became %v, want it kept", got)
	}

	// The response arrives in pieces: the prefix split, then the body.
	body := []byte("connect-response")
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = append(frame, body...)
	go func() {
		for _, piece := range [][]byte{frame[:2], frame[2:7], frame[7:]} {
			if _, err := server.Write(piece); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, len(frame))
	if _, err := io.ReadFull(c, buf[:4]); err != nil {
		t.Fatal(err)
	}
	if c.bound(time.Time{}).IsZero() {
		t.Fatal("handshake over after the length prefix alone")
	}
	if _, err := io.ReadFull(c, buf[4:]); err != nil {
		t.Fatal(err)
	}
	if got := c.bound(time.Time{}); !got.IsZero() {
		t.Fatalf("after the connect response, no deadline became %v", got)
	}
	far := time.Now().Add(time.Hour)
	if got := c.bound(far); !got.Equal(far) {
		t.Fatalf("after the connect response, a far deadline became %v", got)
	}
	// The bound set at dial time was lifted: a read now waits past it (the
	// deadline passing, in real time, is what is under test).
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	go func() { _, _ = server.Write([]byte{1}) }()
	if _, err := c.Read(buf[:1]); err != nil {
		t.Fatalf("read after the handshake deadline passed: %v", err)
	}
}

// TestOpenMovesPastAPausedZooKeeperMember pauses (SIGSTOP) one follower of a
// 3-member ensemble. Its kernel still accepts TCP connections, so a client
// that picks it waits for a connect response that never comes; go-zookeeper
// alone would wait 20/3 of the session timeout (40 s here) before trying
// another server. Every Open must instead get a session within a few
// handshake bounds, and the session must then survive idle periods longer
// than the bound.
func TestOpenMovesPastAPausedZooKeeperMember(t *testing.T) {
	ens := zkservertest.Ensemble(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	paused := -1
	for i, m := range ens.Members() {
		if mode, err := m.Mode(ctx); err == nil && mode == "follower" {
			paused = i
			break
		}
	}
	if paused < 0 {
		t.Fatal("no follower found")
	}
	if err := ens.Member(paused).Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ens.Member(paused).Resume() }()
	// The paused member first: go-zookeeper shuffles the list, so about a
	// third of the opens try it first.
	addrs := ens.Addrs()
	servers := []string{addrs[paused]}
	for i, a := range addrs {
		if i != paused {
			servers = append(servers, a)
		}
	}
	const session = 6 * time.Second
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	if testing.Verbose() {
		lg.SetOutput(os.Stderr)
	}
	for i := 0; i < 5; i++ {
		start := time.Now()
		// Two paused-member handshakes (2 s each) at most, plus slack.
		octx, ocancel := context.WithTimeout(ctx, 12*time.Second)
		st, err := Open(octx, Config{Servers: servers, Root: "/dial", SessionTimeout: session, Logger: logrus.NewEntry(lg)})
		ocancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("open %d: no session after %v with member %d paused: %v", i, time.Since(start).Round(time.Millisecond), paused, err)
			}
			t.Fatalf("open %d: %v", i, err)
		}
		t.Logf("open %d: session after %v", i, time.Since(start).Round(time.Millisecond))
		if i == 0 {
			// Idle past the 2 s handshake bound (the experiment itself).
			time.Sleep(3 * time.Second)
			if _, err := st.Head(); err != nil {
				t.Fatalf("read after an idle period longer than the handshake bound: %v", err)
			}
		}
		st.Close()
	}
}
