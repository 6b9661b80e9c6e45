package httpgw

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// connKind is where a classified connection goes.
type connKind int

const (
	kindHTTP1 connKind = iota // HTTP/1.x: the http.Server
	kindGRPC                  // HTTP/2, first request application/grpc: grpc.Server.Serve
	kindHTTP2                 // HTTP/2, anything else: the HTTP/2 server
)

// Bounds on what the classifier reads before it decides: the frames a
// client may send before its first request (SETTINGS, WINDOW_UPDATE,
// PRIORITY, PING) are few and small.
const (
	maxSniffFrames    = 32
	maxSniffBytes     = 1 << 20
	maxSniffHeaderLen = 64 << 10
)

var errSniff = errors.New("httpgw: not a valid HTTP/2 connection start")

// classify reads the start of c (already past any TLS handshake) and tells
// where it goes. It returns a connection that replays what was read. For
// TLS connections h2 is whether ALPN chose "h2": then the client must speak
// HTTP/2; one that negotiated anything else is HTTP/1.x and is returned
// untouched (so that net/http sees the *tls.Conn). For plaintext the HTTP/2
// connection preface decides.
//
// For HTTP/2 the classifier writes an empty SETTINGS frame (gRPC clients
// wait for the server's preface before sending their first request) and
// reads frames up to the first HEADERS. The client acknowledges that
// SETTINGS frame later; gRPC ignores acknowledgements, and for the HTTP/2
// server the replayed stream drops exactly that one acknowledgement.
func classify(c net.Conn, isTLS, h2 bool) (net.Conn, connKind, error) {
	if isTLS && !h2 {
		return c, kindHTTP1, nil
	}
	preface := []byte(http2.ClientPreface)
	buf := make([]byte, 0, len(preface))
	for len(buf) < len(preface) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if !bytes.HasPrefix(preface, buf) {
			if isTLS {
				return nil, 0, errSniff
			}
			return replay(c, io.MultiReader(bytes.NewReader(buf), c)), kindHTTP1, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read connection preface: %w", err)
		}
	}
	if _, err := c.Write(settingsFrame); err != nil {
		return nil, 0, fmt.Errorf("write settings: %w", err)
	}
	rec := &recorder{r: c, max: maxSniffBytes}
	fr := http2.NewFramer(io.Discard, rec)
	fr.SetMaxReadFrameSize(maxSniffBytes)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxSniffHeaderLen
	kind := kindHTTP2
	for i := 0; ; i++ {
		if i == maxSniffFrames {
			return nil, 0, errSniff
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, 0, fmt.Errorf("read frame: %w", err)
		}
		mh, ok := f.(*http2.MetaHeadersFrame)
		if !ok {
			continue
		}
		if isGRPC(mh) {
			kind = kindGRPC
		}
		break
	}
	var r io.Reader = io.MultiReader(bytes.NewReader(preface), bytes.NewReader(rec.buf.Bytes()), c)
	if kind == kindHTTP2 {
		r = &ackFilter{r: r, skip: len(preface)}
	}
	return replay(c, r), kind, nil
}

// isGRPC tells whether a request's content-type is gRPC's.
func isGRPC(mh *http2.MetaHeadersFrame) bool {
	for _, f := range mh.RegularFields() {
		if f.Name == "content-type" && strings.HasPrefix(f.Value, "application/grpc") {
			return true
		}
	}
	return false
}

// settingsFrame is the classifier's server preface: a SETTINGS frame with
// SETTINGS_NO_RFC7540_PRIORITIES=1 only. RFC 9218 forbids changing that
// setting after the first SETTINGS frame and the HTTP/2 server sends 1
// (curl hangs up on a change), gRPC's server does not send it at all;
// every other setting is left to the server that takes the connection.
var settingsFrame = []byte{0, 0, 6, byte(http2.FrameSettings), 0, 0, 0, 0, 0, 0, 0x9, 0, 0, 0, 1}

// recorder keeps what is read through it, up to max bytes.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
	max int
}

func (r *recorder) Read(p []byte) (int, error) {
	if r.buf.Len() >= r.max {
		return 0, errSniff
	}
	if room := r.max - r.buf.Len(); len(p) > room {
		p = p[:room]
	}
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// replayConn reads from r (what the classifier read, then the connection)
// and writes to the connection.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// tlsReplayConn is a replayConn over TLS: net/http2 and the gRPC
// credentials read its ConnectionState.
type tlsReplayConn struct {
	replayConn
	tc *tls.Conn
}

func (c *tlsReplayConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// connectionStater is a connection that knows its TLS state.
type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

// replay returns a connection reading r then c, keeping c's TLS state.
func replay(c net.Conn, r io.Reader) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return &tlsReplayConn{replayConn: replayConn{Conn: c, r: r}, tc: tc}
	}
	return &replayConn{Conn: c, r: r}
}

// ackFilter passes an HTTP/2 client stream through, except for the first
// SETTINGS acknowledgement, which answers the classifier's SETTINGS frame
// and would otherwise be a protocol error for the HTTP/2 server (it never
// sent that frame). skip bytes (the connection preface) pass unparsed.
type ackFilter struct {
	r       io.Reader
	skip    int
	pending []byte
	done    bool
}

func (a *ackFilter) Read(p []byte) (int, error) {
	for {
		if len(a.pending) > 0 {
			n := copy(p, a.pending)
			a.pending = a.pending[n:]
			return n, nil
		}
		if a.done {
			return a.r.Read(p)
		}
		if a.skip > 0 {
			if len(p) > a.skip {
				p = p[:a.skip]
			}
			n, err := a.r.Read(p)
			a.skip -= n
			return n, err
		}
		var hdr [9]byte
		if _, err := io.ReadFull(a.r, hdr[:]); err != nil {
			return 0, err
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		frame := make([]byte, 9+length)
		copy(frame, hdr[:])
		if _, err := io.ReadFull(a.r, frame[9:]); err != nil {
			return 0, err
		}
		if http2.FrameType(hdr[3]) == http2.FrameSettings && http2.Flags(hdr[4]).Has(http2.FlagSettingsAck) {
			a.done = true
			continue
		}
		a.pending = frame
	}
}

// handshake runs the TLS handshake of a new client connection and tells
// whether ALPN chose HTTP/2.
func handshake(c net.Conn, cfg *tls.Config) (*tls.Conn, bool, error) {
	tc := tls.Server(c, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, false, fmt.Errorf("tls handshake: %w", err)
	}
	return tc, tc.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS, nil
}
