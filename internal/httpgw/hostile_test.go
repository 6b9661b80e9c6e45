package httpgw_test

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// closedWithin tells whether the server closes c within d (reading and
// discarding whatever it sends).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// rawConn opens a TCP connection to addr, closed when the test ends.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConnectionsThatNeverStartARequestAreClosed(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.GRPC.ConnectionTimeout = 500 * time.Millisecond
	}})
	dial := func() net.Conn { return rawConn(t, in.Endpoint()) }
	// Silent, half a preface, a preface and then only PINGs: all closed
	// once the handshake timeout has passed.
	silent := dial()
	half := dial()
	io.WriteString(half, http2.ClientPreface[:10])
	pings := dial()
	io.WriteString(pings, http2.ClientPreface)
	fr := http2.NewFramer(pings, nil)
	for i := 0; i < 10; i++ {
		fr.WritePing(false, [8]byte{byte(i)})
	}
	for name, c := range map[string]net.Conn{"silent": silent, "half a preface": half, "a preface and pings": pings} {
		if !closedWithin(c, 5*time.Second) {
			t.Errorf("%s connection still open", name)
		}
	}
	// A flood of frames before any request is cut off at once.
	flood := dial()
	io.WriteString(flood, http2.ClientPreface)
	fr = http2.NewFramer(flood, nil)
	for i := 0; i < 100; i++ {
		if err := fr.WriteWindowUpdate(0, 1); err != nil {
			break
		}
	}
	if !closedWithin(flood, 400*time.Millisecond) {
		t.Error("a connection sending frames but no request stayed open")
	}
	// Garbage is HTTP/1's to answer: 400, then closed.
	junk := dial()
	io.WriteString(junk, "\x16\x03\x01garbage\r\n\r\n")
	junk.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(junk).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 400") {
		t.Errorf("garbage got %q, want HTTP/1.1 400", line)
	}
	// The instance still serves.
	if _, err := in.Client(t).Get(t.Context(), "k"); err != nil {
		t.Fatalf("get after hostile connections: %v", err)
	}
}
