package httpgw

import (
	"context"
	"errors"
	"net"
	"sync"
)

// errListenerClosed is what Accept returns once a chanListener is closed.
var errListenerClosed = errors.New("httpgw: listener closed")

// chanListener is a net.Listener fed by the classifier (or by dial, for the
// in-process pipe): a server's Serve loop accepts the connections that were
// sent to it.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept waits for the next connection handed to the listener.
func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, errListenerClosed
	}
}

// hand gives c to the listener's Serve loop; it closes c if the listener is
// closed first.
func (l *chanListener) hand(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

// Close stops Accept; connections already handed out stay open.
func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// pipeAddr names the in-process pipe.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-process" }

// dialPipe returns a dialer that connects to l through an in-memory pipe.
func dialPipe(l *chanListener) func(ctx context.Context, _ string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		select {
		case l.conns <- server:
			return client, nil
		case <-l.closed:
			client.Close()
			server.Close()
			return nil, errListenerClosed
		case <-ctx.Done():
			client.Close()
			server.Close()
			return nil, ctx.Err()
		}
	}
}
