package httpgw

import (
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// Bounds of the client URLs' HTTP side, when the Config fields are 0.
// etcd's client server bounds only the request headers (5 minutes) and,
// through its listener, the connections (the file descriptor limit less
// 150); zketcd also bounds the body, each write and idle keep-alive
// connections, so that a client that stops sending or reading cannot
// hold a connection, its goroutines and buffers for ever.
const (
	// DefaultReadTimeout bounds the reading of one request: its headers
	// and its whole body.
	DefaultReadTimeout = time.Minute
	// DefaultWriteTimeout bounds each write of a response (one message of
	// a stream: a watch stays open as long as its client reads).
	DefaultWriteTimeout = time.Minute
	// DefaultIdleTimeout closes a keep-alive connection (HTTP/1) or an
	// HTTP/2 connection without streams after this long idle.
	DefaultIdleTimeout = 2 * time.Minute
	// reservedFDs are the file descriptors left to everything but client
	// connections (etcd's reservedInternalFDNum).
	reservedFDs = 150
)

// DefaultMaxConnections is etcd's bound on a client URL's connections: the
// process's file descriptor limit less 150 (0 when it cannot be read:
// unbounded).
func DefaultMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur <= reservedFDs {
		return 0
	}
	return int(min(lim.Cur-reservedFDs, 1<<30))
}

// deadlines bounds the reading of a request (headers were bounded by the
// server) to readTimeout from its start, and each write of its response to
// writeTimeout, through http.ResponseController (per connection on
// HTTP/1, per stream on HTTP/2). A WebSocket upgrade keeps its writer
// (gorilla hijacks it by type assertion) and sets its own write deadlines.
func deadlines(readTimeout, writeTimeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if websocket.IsWebSocketUpgrade(r) {
			_ = rc.SetReadDeadline(time.Time{})
			next.ServeHTTP(w, r)
			return
		}
		_ = rc.SetReadDeadline(time.Now().Add(readTimeout))
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		next.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, timeout: writeTimeout}, r)
	})
}

// deadlineBody lifts the read deadline once the body is read whole, so
// that a response streamed after it (a watch) is not cut by it.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// deadlineWriter sets the write deadline before each write and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.ResponseWriter.Write(b)
}

func (w *deadlineWriter) Flush() {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// connLimit bounds the connections of every listener a Server serves, as
// etcd's LimitListener: Accept waits while the bound is reached (new
// connections wait in the kernel's backlog).
type connLimit struct {
	sem chan struct{} // nil: unbounded
	in  func(delta int)
}

func newConnLimit(n int, in func(delta int)) *connLimit {
	l := &connLimit{in: in}
	if n > 0 {
		l.sem = make(chan struct{}, n)
	}
	return l
}

// accept takes a slot (waiting for one, or until closed), then accepts.
func (l *connLimit) accept(ln net.Listener, closed <-chan struct{}) (net.Conn, error) {
	if l.sem != nil {
		select {
		case l.sem <- struct{}{}:
		case <-closed:
			return nil, net.ErrClosed
		}
	}
	c, err := ln.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	l.in(1)
	return &limitedConn{Conn: c, l: l}, nil
}

func (l *connLimit) release() {
	if l.sem != nil {
		<-l.sem
	}
}

// limitedConn gives its slot back when closed (once).
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.in(-1)
		c.l.release()
	})
	return err
}
