package httpgw

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultHandshakeTimeout bounds a new connection's TLS handshake and the
// reading of its first request headers, when Config.HandshakeTimeout is 0.
const DefaultHandshakeTimeout = 20 * time.Second

// Config configures a Server.
type Config struct {
	// GRPC is the server with the etcd services. The Server runs its Serve
	// loop on the gRPC connections it classifies and on the in-process
	// gateway pipe; the caller stops it (after Close).
	GRPC *grpc.Server
	// TLS, if not nil, serves TLS on every listener; NextProtos is set to
	// h2 and http/1.1.
	TLS *tls.Config
	// HandshakeTimeout bounds the TLS handshake and the classification of
	// a connection (0: DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// MaxRequestBytes is etcd's --max-request-bytes; gateway bodies are
	// bounded to a multiple of it (see MaxBodyBytes).
	MaxRequestBytes int
	// MaxConcurrentStreams bounds the HTTP/2 streams of one HTTP (not
	// gRPC) connection (0: unbounded, as etcd).
	MaxConcurrentStreams uint32
	// Leader reports whether this instance can serve linearizably (nil
	// error) for /health; etcd's "no leader".
	Leader func() error
	// Read makes the read of the health checks: a one-key range,
	// serializable or linearizable. It must not be subject to auth.
	Read func(ctx context.Context, serializable bool) error
	// Alarms lists the active alarms for /health and /readyz (nil: none).
	Alarms func(ctx context.Context) ([]*pb.AlarmMember, error)
	// Warnings lists what the operator must fix that does not make the
	// instance unhealthy (a world-readable ZooKeeper root); /health shows
	// them (nil: none).
	Warnings func() []string
	// Metrics serves /metrics (nil: not served).
	Metrics http.Handler
	// Handlers are more HTTP routes (pattern to handler, as
	// http.ServeMux takes them), beside the gateway's.
	Handlers map[string]http.Handler
	// Debug, if not nil, serves /debug/ (the runtime profiles of
	// --enable-pprof).
	Debug http.Handler
	// Services, if not nil, registers more services on GRPC, built as
	// clients of it over conn (the in-process connection); it runs
	// before any Serve loop starts, as gRPC requires.
	Services func(conn *grpc.ClientConn)
	// Gateways registers more services' gateway handlers (v3lock,
	// v3election) next to etcd's six.
	Gateways []RegisterFunc
	// CORS lists the origins allowed cross-origin requests (etcd's
	// --cors; empty or "*": every origin).
	CORS []string
	// HostWhitelist lists the Host names accepted on connections without
	// TLS (etcd's --host-whitelist; empty or "*": every host).
	HostWhitelist []string
	// ReadTimeout bounds the reading of one HTTP request, headers and body
	// (0: DefaultReadTimeout); WriteTimeout each write of a response or of
	// a WebSocket message (0: DefaultWriteTimeout); IdleTimeout an idle
	// keep-alive or HTTP/2 connection (0: DefaultIdleTimeout).
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConnections bounds the connections of all the listeners given to
	// Serve, gRPC's included (0: DefaultMaxConnections; negative:
	// unbounded). Accept waits while it is reached, as etcd's.
	MaxConnections int
	// Registerer receives the server's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives structured logs.
	Logger *logrus.Entry
}

// Server serves etcd's client URLs: gRPC and HTTP on one port.
type Server struct {
	cfg   Config
	lg    *logrus.Entry
	tls   *tls.Config
	limit int64

	grpcL *chanListener // classified gRPC connections
	pipeL *chanListener // in-process gateway connections
	httpL *chanListener // HTTP/1.x connections
	conn  *grpc.ClientConn

	metrics *metrics
	conns   *connLimit
	closedC chan struct{} // closed by Close

	handler http.Handler
	http1   *http.Server
	//lint:ignore SA1019 net/http cannot serve one HTTP/2 connection handed over after sniffing (with its TLS state); ServeConn can.
	http2  *http2.Server
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	h2conns   map[net.Conn]struct{}
}

// New starts the gRPC Serve loops on the internal listeners and connects
// the gateway. It serves nothing until Serve is called with a listener.
func New(cfg Config) (*Server, error) {
	if cfg.GRPC == nil || cfg.Read == nil || cfg.Leader == nil {
		return nil, errors.New("httpgw: GRPC, Read and Leader are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections()
	}
	m := newMetrics(cfg.Registerer, cfg.MaxConnections)
	s := &Server{
		cfg:     cfg,
		metrics: m,
		conns:   newConnLimit(cfg.MaxConnections, func(d int) { m.connections.Add(float64(d)) }),
		closedC: make(chan struct{}),
		lg:      cfg.Logger.WithField("component", "http"),
		limit:   MaxBodyBytes(cfg.MaxRequestBytes),
		grpcL:   newChanListener(pipeAddr{}),
		pipeL:   newChanListener(pipeAddr{}),
		httpL:   newChanListener(pipeAddr{}),
		h2conns: map[net.Conn]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.TLS != nil {
		s.tls = cfg.TLS.Clone()
		s.tls.NextProtos = []string{http2.NextProtoTLS, "http/1.1"}
	}
	conn, err := grpc.NewClient("passthrough:///zketcd-in-process",
		grpc.WithContextDialer(dialPipe(s.pipeL)),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("httpgw: connect the gateway: %w", err)
	}
	s.conn = conn
	if cfg.Services != nil {
		cfg.Services(conn)
	}
	for _, l := range []*chanListener{s.grpcL, s.pipeL} {
		go func() {
			if err := cfg.GRPC.Serve(l); err != nil && !errors.Is(err, errListenerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				s.lg.WithError(err).Error("grpc serve loop ended")
			}
		}()
	}
	gw, err := newGateway(s.ctx, conn, cfg.Gateways)
	if err != nil {
		s.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v3/", s.gatewayHandler(gw))
	s.HandleHealth(mux)
	mux.HandleFunc("/version", serveVersion)
	if cfg.Metrics != nil {
		mux.Handle("/metrics", cfg.Metrics)
	}
	for pattern, h := range cfg.Handlers {
		mux.Handle(pattern, h)
	}
	if cfg.Debug != nil {
		mux.Handle("/debug/", cfg.Debug)
	}
	s.handler = &accessControl{cors: newAllowList(cfg.CORS), hosts: newAllowList(cfg.HostWhitelist), lg: s.lg, refused: m.refused,
		next: deadlines(cfg.ReadTimeout, cfg.WriteTimeout, mux)}
	quiet := log.New(io.Discard, "", 0) // client mistakes are not server errors
	s.http1 = &http.Server{Handler: s.handler, ReadHeaderTimeout: cfg.ReadTimeout, IdleTimeout: cfg.IdleTimeout, ErrorLog: quiet}
	streams := cfg.MaxConcurrentStreams
	if streams == 0 || streams > math.MaxInt32 {
		streams = math.MaxInt32
	}
	//lint:ignore SA1019 see the http2 field.
	s.http2 = &http2.Server{MaxConcurrentStreams: streams, IdleTimeout: cfg.IdleTimeout}
	go func() {
		if err := s.http1.Serve(s.httpL); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, errListenerClosed) {
			s.lg.WithError(err).Error("http serve loop ended")
		}
	}()
	return s, nil
}

// Conn is the in-process gRPC connection to the server's own services
// (for services built as clients of the others, such as v3lock). It stays
// open until Close.
func (s *Server) Conn() *grpc.ClientConn { return s.conn }

// Handler is the HTTP handler of the client URLs (gateway, health,
// version, metrics).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve accepts connections on l and dispatches each to gRPC or HTTP
// until l fails or Close; it returns nil after Close and the accept error
// otherwise.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.listeners = append(s.listeners, l)
	s.mu.Unlock()
	for {
		c, err := s.conns.accept(l, s.closedC)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if s.isClosed() {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", l.Addr(), err)
		}
		go s.dispatch(c)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// dispatch classifies c within the handshake timeout and hands it on; a
// connection that fails the handshake or the classification is closed.
func (s *Server) dispatch(raw net.Conn) {
	raw.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	c, h2, secure := raw, false, s.tls != nil
	if secure {
		tc, isH2, err := handshake(raw, s.tls)
		if err != nil {
			s.lg.WithError(err).WithField("remote", raw.RemoteAddr().String()).Debug("client connection refused")
			raw.Close()
			return
		}
		c, h2 = tc, isH2
	}
	s.serveClassified(raw, c, secure, h2)
}

// ServeTLSConn serves a connection whose TLS handshake another party (a
// Front) completed, as Serve serves the connections it accepts. It returns
// once the connection is handed to its server, or, for HTTP/2 other than
// gRPC, served. raw is the connection under the TLS one: its deadline
// bounds the classification (the handshake timeout), then it is cleared.
func (s *Server) ServeTLSConn(raw net.Conn, c *tls.Conn) {
	raw.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	s.serveClassified(raw, c, true, c.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS)
}

// serveClassified classifies c (past any TLS handshake) and hands it on.
func (s *Server) serveClassified(raw, c net.Conn, secure, h2 bool) {
	c, kind, err := classify(c, secure, h2)
	if err != nil {
		s.lg.WithError(err).WithField("remote", raw.RemoteAddr().String()).Debug("client connection refused")
		raw.Close()
		return
	}
	raw.SetDeadline(time.Time{})
	switch kind {
	case kindGRPC:
		s.grpcL.hand(c)
	case kindHTTP1:
		s.httpL.hand(c)
	case kindHTTP2:
		if !s.track(c) {
			c.Close()
			return
		}
		defer s.untrack(c)
		//lint:ignore SA1019 see the http2 field.
		s.http2.ServeConn(c, &http2.ServeConnOpts{Context: s.ctx, BaseConfig: s.http1, Handler: s.handler})
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.h2conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.h2conns, c)
	s.mu.Unlock()
}

// Close stops accepting on every listener given to Serve, closes the HTTP
// connections and the gateway's connection. gRPC connections already
// handed to the grpc.Server are the caller's to stop (GracefulStop).
// Safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.closedC)
	ls := slices.Clone(s.listeners)
	var h2 []net.Conn
	for c := range s.h2conns {
		h2 = append(h2, c)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	s.cancel()
	if s.http1 != nil {
		s.http1.Close()
	}
	for _, c := range h2 {
		c.Close()
	}
	if s.conn != nil {
		s.conn.Close()
	}
	s.httpL.Close()
}
