package zkstore

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync/atomic"
	"time"
)

// handshakeTimeout bounds a ZooKeeper connect handshake (the connect
// request and its response) for the given session timeout.
//
// go-zookeeper waits up to ten receive timeouts (20/3 of the session
// timeout, 66 s for a 10 s session) for the connect response, and reads
// its body with no deadline at all. A server that accepts TCP connections
// but does not answer (a paused or hung JVM: the kernel still completes the
// TCP handshake) would hold the client that long, past its session's
// expiry, instead of letting it move on to the next server. A third of the
// session timeout leaves time to try two more servers before the session
// expires; a healthy server answers in milliseconds.
func handshakeTimeout(session time.Duration) time.Duration {
	return max(session/3, time.Second)
}

// dialer returns go-zookeeper's dial function: TCP, or TLS when tlsCfg is
// not nil, with the connect handshake bounded by handshake, and SASL
// DIGEST-MD5 run on each connection when sasl is not nil (sasl.go).
// connected, if not nil, is told each connection's session and granted
// timeout, as the connect response has them, before go-zookeeper sees the
// end of it.
func dialer(tlsCfg *tls.Config, handshake time.Duration, sasl *saslState, connected func(session int64, timeout time.Duration)) func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		d := &net.Dialer{Timeout: timeout}
		var (
			c   net.Conn
			err error
		)
		if tlsCfg != nil {
			c, err = tls.DialWithDialer(d, network, address, tlsCfg)
		} else {
			c, err = d.Dial(network, address)
		}
		if err != nil {
			return nil, err
		}
		if sasl != nil {
			c = &saslConn{Conn: c, st: sasl}
		}
		hc := newHandshakeConn(c, time.Now().Add(handshake))
		hc.connected = connected
		return hc, nil
	}
}

// handshakeConn holds every deadline of a new connection to at most
// deadline until the connect response (the first length-prefixed frame the
// server sends) has been read whole; from then on it is the plain
// connection. It is used as go-zookeeper uses a connection: one reader and
// one writer goroutine; after the handshake each call costs one atomic load.
//
// The connect response is jute's ConnectResponse: protocolVersion (int32),
// timeOut (int32, the session timeout the server granted, in
// milliseconds), sessionId (int64), passwd, and readOnly. Its first 16
// bytes are kept, and connected is told the session and the timeout when
// the response is whole (a session ID of 0 means the session expired).
type handshakeConn struct {
	net.Conn
	deadline  time.Time
	done      atomic.Bool
	connected func(session int64, timeout time.Duration)

	// Touched by the reader only.
	hdr  [4 + connectHead]byte
	read int // bytes of the connect response read so far
}

// connectHead is how much of the connect response's body is kept: its
// protocol version, timeout and session ID.
const connectHead = 16

func newHandshakeConn(c net.Conn, deadline time.Time) *handshakeConn {
	// Until go-zookeeper sets its own deadlines, the bound holds.
	_ = c.SetDeadline(deadline)
	return &handshakeConn{Conn: c, deadline: deadline}
}

// bound returns t limited to the handshake deadline while the handshake
// lasts, and t unchanged after it.
func (c *handshakeConn) bound(t time.Time) time.Time {
	if c.done.Load() || (!t.IsZero() && t.Before(c.deadline)) {
		return t
	}
	return c.deadline
}

func (c *handshakeConn) SetDeadline(t time.Time) error {
	return c.Conn.SetDeadline(c.bound(t))
}

func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.bound(t))
}

func (c *handshakeConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.bound(t))
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 0 || c.done.Load() {
		return n, err
	}
	for _, b := range p[:n] {
		if c.read < len(c.hdr) {
			c.hdr[c.read] = b
		}
		c.read++
	}
	if c.read >= 4 && c.read >= 4+int(binary.BigEndian.Uint32(c.hdr[:4])) {
		// The connect response is in: go-zookeeper's deadlines apply
		// unchanged from now on, and it had asked for none at this point.
		if body := int(binary.BigEndian.Uint32(c.hdr[:4])); c.connected != nil && body >= connectHead {
			timeout := time.Duration(int32(binary.BigEndian.Uint32(c.hdr[8:12]))) * time.Millisecond
			c.connected(int64(binary.BigEndian.Uint64(c.hdr[12:20])), timeout)
		}
		c.done.Store(true)
		_ = c.Conn.SetDeadline(time.Time{})
	}
	return n, err
}
