package httpgw_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestCrossOriginPostAndWebSocketAreRefused: with --cors naming one
// origin, a page of another origin can neither write (a text/plain POST,
// which browsers send without a preflight) nor open a watch WebSocket;
// the allowed origin and clients without an Origin still can.
func TestCrossOriginPostAndWebSocketAreRefused(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.CORS = []string{"https://ui.example:443"}
	}})
	base := "http://" + in.Endpoint()
	post := func(origin, key string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/v3/kv/put", strings.NewReader(fmt.Sprintf(`{"key":%q,"value":"dg=="}`, key)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("https://evil.example:443", "ZXZpbA=="); code != http.StatusForbidden {
		t.Fatalf("POST from another origin: %d, want 403", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := in.Client(t).Get(ctx, "evil"); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the refused POST was applied: %v %v", r, err)
	}
	if code := post("https://ui.example:443", "dWk="); code != http.StatusOK {
		t.Fatalf("POST from the allowed origin: %d", code)
	}
	// As a browser sends that origin: without its scheme's default port.
	if code := post("https://ui.example", "dWky"); code != http.StatusOK {
		t.Fatalf("POST from the allowed origin as a browser names it: %d", code)
	}
	if code := post("", "Y3VybA=="); code != http.StatusOK {
		t.Fatalf("POST without an Origin (curl, etcdctl): %d", code)
	}

	dial := func(origin string) (*websocket.Conn, *http.Response, error) {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		return websocket.DefaultDialer.Dial("ws://"+in.Endpoint()+"/v3/watch", h)
	}
	if c, resp, err := dial("https://evil.example:443"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		if c != nil {
			c.Close()
		}
		t.Fatalf("WebSocket from another origin: %v %v, want 403", resp, err)
	}
	for _, origin := range []string{"https://ui.example:443", "https://ui.example", ""} {
		c, _, err := dial(origin)
		if err != nil {
			t.Fatalf("WebSocket from %q: %v", origin, err)
		}
		c.Close()
	}
}

// TestWebSocketMessagesAreBoundedLikeBodies: a watch WebSocket message
// above the body limit closes the connection with "message too big"
// before the server buffers it; the instance serves on.
func TestWebSocketMessagesAreBoundedLikeBodies(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{MaxRequestBytes: 64 << 10})
	c, _, err := websocket.DefaultDialer.Dial("ws://"+in.Endpoint()+"/v3/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := `{"create_request":{"key":"` + strings.Repeat("A", 4<<20) + `"}}`
	_ = c.WriteMessage(websocket.TextMessage, []byte(big))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
		t.Fatalf("after a 4 MiB message: %v, want close 1009 (message too big)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := in.Client(t).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
}

// TestSlowBodyAndIdleConnectionsAreClosed: a request whose body trickles
// in is cut at the read timeout, a keep-alive connection left idle is
// closed at the idle timeout, and a client that reads nothing of a stream
// is dropped at the write timeout.
// TestMetricsAddressesCloseSlowAndIdleConnections: the metrics addresses
// (/metrics, /health, /debug/ with --enable-pprof) bound a request's
// reading and an idle keep-alive connection as the client addresses do.
func TestMetricsAddressesCloseSlowAndIdleConnections(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.MetricsAddrs = []string{"127.0.0.1:0"}
		c.HTTPReadTimeout, c.HTTPIdleTimeout = time.Second, time.Second
	}})
	addr := in.Zketcd().MetricsAddrs()[0]
	slow := rawConn(t, addr)
	fmt.Fprintf(slow, "GET /metrics HTTP/1.1\r\nHost: x\r\n") // the headers never end
	if !closedWithin(slow, 8*time.Second) {
		t.Fatal("a request whose headers never end kept its connection on a metrics address")
	}
	idle := rawConn(t, addr)
	fmt.Fprintf(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedWithin(idle, 8*time.Second) {
		t.Fatal("an idle keep-alive connection stayed open on a metrics address")
	}
}

func TestSlowBodyAndIdleConnectionsAreClosed(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.HTTPReadTimeout, c.HTTPIdleTimeout, c.HTTPWriteTimeout = time.Second, time.Second, time.Second
	}})
	dial := func() net.Conn { return rawConn(t, in.Endpoint()) }

	slow := dial()
	fmt.Fprintf(slow, "POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	start := time.Now()
	stop := make(chan struct{})
	go func() { // a byte every 200 ms: never enough to finish in time
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				if _, err := slow.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	if !closedWithin(slow, 10*time.Second) {
		t.Fatal("a slow body kept its connection past the read timeout")
	}
	close(stop)
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("the slow body was cut after %v", d)
	}

	idle := dial()
	fmt.Fprintf(idle, "GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !closedWithin(idle, 10*time.Second) {
		t.Fatal("an idle keep-alive connection stayed open past the idle timeout")
	}

	// A watch over HTTP whose client never reads: once the socket buffers
	// fill, the server's write waits, and the write timeout ends it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stuck := dial()
	body := `{"create_request":{"key":"Zm9v","range_end":"Zm9w"}}`
	fmt.Fprintf(stuck, "POST /v3/watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	c := in.Client(t)
	value := strings.Repeat("v", 64<<10)
	for range 64 { // 4 MiB of events: more than the socket buffers hold
		if _, err := c.Put(ctx, "foo/x", value); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second) // past the write timeout, reading nothing
	// Reading now drains what the buffers hold; a server that kept the
	// stream would go on sending and never close it.
	if !closedWithin(stuck, 20*time.Second) {
		t.Fatal("a watch whose client read nothing was not dropped at the write timeout")
	}
}

// TestClientConnectionsAreCapped: beyond the connection bound a new
// connection waits (as etcd's listener makes it) until one closes.
func TestClientConnectionsAreCapped(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.MaxClientConnections = 3
	}})
	version := func(c net.Conn) error {
		fmt.Fprintf(c, "GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var held []net.Conn
	for range 3 {
		held = append(held, rawConn(t, in.Endpoint()))
	}
	extra := rawConn(t, in.Endpoint()) // the kernel completes it; the server does not accept it
	if err := version(extra); err == nil {
		t.Fatal("a connection beyond the bound was served")
	}
	held[0].Close()
	if err := version(extra); err != nil {
		t.Fatalf("after a slot freed: %v", err)
	}
}
