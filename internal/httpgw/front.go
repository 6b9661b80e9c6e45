package httpgw

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"golang.org/x/net/http2"
)

// Route picks the Server that serves a connection, from its completed TLS
// handshake (the verified client certificate chains): a nil Server with
// an error closes the connection unserved. It must not block on the
// network; it may take as long as a Server needs to start.
type Route func(st tls.ConnectionState) (*Server, error)

// FrontConfig configures a Front.
type FrontConfig struct {
	// TLS serves every connection with TLS (required); NextProtos is set
	// to h2 and http/1.1. Route sees what its handshake verified.
	TLS *tls.Config
	// Route picks each connection's Server (required).
	Route Route
	// HandshakeTimeout bounds the TLS handshake and Route (0:
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// MaxConnections bounds the connections accepted by all the listeners
	// given to Serve (0: DefaultMaxConnections; negative: unbounded).
	MaxConnections int
	// Registerer receives the front's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives structured logs (required).
	Logger *logrus.Entry
}

// Front serves client URLs shared by several Servers: it accepts each
// connection, completes its TLS handshake, and hands it to the Server its
// Route picks, which classifies and serves it as its own. A connection
// never reaches a Server before its handshake completed and Route chose,
// so what a client sends is only ever decoded by the Server it was bound
// to. It is safe for concurrent use.
type Front struct {
	cfg     FrontConfig
	tls     *tls.Config
	lg      *logrus.Entry
	conns   *connLimit
	refused prometheus.Counter
	closedC chan struct{}

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
}

// NewFront returns a Front; it serves nothing until Serve.
func NewFront(cfg FrontConfig) (*Front, error) {
	if cfg.TLS == nil || cfg.Route == nil || cfg.Logger == nil {
		return nil, errors.New("httpgw: a front needs TLS, a Route and a Logger")
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections()
	}
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "zketcd_front_connections", Help: "Client connections open on the fleet's shared client URLs.",
	})
	f := &Front{
		cfg:     cfg,
		lg:      cfg.Logger.WithField("component", "front"),
		closedC: make(chan struct{}),
		conns:   newConnLimit(cfg.MaxConnections, func(d int) { open.Add(float64(d)) }),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zketcd_front_connections_refused_total", Help: "Client connections closed before a tenant served them (failed handshake, unknown certificate).",
		}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(open, f.refused)
	}
	f.tls = cfg.TLS.Clone()
	f.tls.NextProtos = []string{http2.NextProtoTLS, "http/1.1"}
	return f, nil
}

// Serve accepts connections on l until l fails or Close; it returns nil
// after Close and the accept error otherwise.
func (f *Front) Serve(l net.Listener) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		l.Close()
		return nil
	}
	f.listeners = append(f.listeners, l)
	f.mu.Unlock()
	for {
		c, err := f.conns.accept(l, f.closedC)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			select {
			case <-f.closedC:
				return nil
			default:
			}
			return fmt.Errorf("accept on %s: %w", l.Addr(), err)
		}
		go f.dispatch(c)
	}
}

// dispatch completes c's handshake and routes it, within the handshake
// timeout.
func (f *Front) dispatch(raw net.Conn) {
	raw.SetDeadline(time.Now().Add(f.cfg.HandshakeTimeout))
	lg := f.lg.WithField("remote", raw.RemoteAddr().String())
	tc := tls.Server(raw, f.tls)
	if err := tc.Handshake(); err != nil {
		lg.WithError(err).Debug("client connection refused: tls handshake")
		f.refused.Inc()
		raw.Close()
		return
	}
	srv, err := f.cfg.Route(tc.ConnectionState())
	if err != nil || srv == nil {
		lg.WithError(err).Info("client connection refused")
		f.refused.Inc()
		tc.Close()
		return
	}
	srv.ServeTLSConn(raw, tc)
}

// Close stops accepting on every listener given to Serve. Connections
// already handed to a Server are that Server's to close.
func (f *Front) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	close(f.closedC)
	ls := slices.Clone(f.listeners)
	f.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
}
