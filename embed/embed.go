// Package embed starts a complete zketcd instance (engine, gRPC services,
// client and metrics listeners) inside a Go process. The zketcd command is a
// thin wrapper around it, and tests use it to run real instances in-process.
package embed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/forward"
	"github.com/zketcd/zketcd/internal/grpcsrv"
	"github.com/zketcd/zketcd/internal/httpgw"
)

// The engine is what runs behind the gRPC services.
var _ grpcsrv.Engine = (*engine.Engine)(nil)

// Zketcd is a running instance.
type Zketcd struct {
	be       *engine.Engine
	srv      *grpc.Server
	gw       *httpgw.Server
	closeLE  func()
	http     []*http.Server
	clients  []net.Listener
	metrics  []net.Listener
	internal net.Listener    // nil: no internal endpoint
	isrv     *grpc.Server    // serves internal
	fwd      *forward.Client // the engine's Forwarder, if forwarding
	registry *prometheus.Registry
	cancel   context.CancelFunc
	errc     chan error
	once     sync.Once
	lg       *logrus.Entry
}

// Start opens the engine (connecting to ZooKeeper and recovering the view
// within ctx) and starts serving. Errors: ZooKeeper unreachable, a bad
// configuration, a listen failure; whatever Start had opened by then is
// closed again.
func Start(ctx context.Context, cfg Config) (_ *Zketcd, err error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Engine.Registerer = reg
	cfg.GRPC.Registerer = reg
	if cfg.TLS != nil {
		// The client listeners' TLS handshake is httpgw's (gRPC and HTTP
		// share the port); grpcsrv still reads the TLS settings (client
		// certificate authentication).
		cfg.GRPC.Creds, cfg.GRPC.TLS = httpgw.Creds(), cfg.TLS
	}
	// The gateway shares the gRPC server's limits.
	cfg.GRPC = cfg.GRPC.WithDefaults()
	z := &Zketcd{registry: reg, errc: make(chan error, 1), lg: cfg.Logger}
	defer func() {
		if err != nil {
			z.abort()
		}
	}()
	if err := z.listen(cfg); err != nil {
		return nil, err
	}
	peerServerTLS, err := z.forwarding(&cfg)
	if err != nil {
		return nil, err
	}
	if z.be, err = engine.Open(ctx, cfg.Engine); err != nil {
		return nil, err
	}
	var srvCtx context.Context
	srvCtx, z.cancel = context.WithCancel(context.Background())
	srv, fwdAuth, err := grpcsrv.NewWithForwardAuthorizer(srvCtx, cfg.GRPC, z.be)
	if err != nil {
		return nil, err
	}
	z.srv = srv
	if z.internal != nil {
		z.isrv = forward.NewServer(z.be, forward.ServerConfig{
			TLS: peerServerTLS, MaxMessageBytes: cfg.GRPC.RecvMsgLimit(), Authorizer: fwdAuth,
			Logger: cfg.Logger, Registerer: reg,
		})
		go func() { z.report(z.isrv.Serve(z.internal)) }()
		cfg.Logger.WithFields(logrus.Fields{"addr": z.internal.Addr().String(), "advertised": cfg.Engine.InternalURL, "tls": peerServerTLS != nil}).
			Info("serving the internal endpoint (write forwarding to the leader instance)")
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	gwCfg := gatewayConfig(cfg, z.be, z.srv, metrics, &z.closeLE)
	if cfg.EnablePprof {
		gwCfg.Debug = pprofHandler()
	}
	if z.gw, err = httpgw.New(gwCfg); err != nil {
		return nil, err
	}
	z.serve(cfg, metrics, gwCfg.Debug)
	return z, nil
}

// listen opens the client and metrics listeners.
func (z *Zketcd) listen(cfg Config) error {
	for _, a := range cfg.ClientAddrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		z.clients = append(z.clients, l)
	}
	for _, a := range cfg.MetricsAddrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		z.metrics = append(z.metrics, l)
	}
	return nil
}

// forwarding, when the engine forwards writes, opens the internal endpoint's
// listener and the engine's forwarding client, and completes cfg.Engine
// with them (the advertised URL, the Forwarder). It returns the endpoint's
// server TLS configuration (nil: plaintext).
func (z *Zketcd) forwarding(cfg *Config) (*tls.Config, error) {
	if !cfg.Engine.ForwardWrites {
		return nil, nil
	}
	l, client, serverTLS, err := openInternal(cfg)
	if err != nil {
		return nil, err
	}
	z.internal, z.fwd = l, client
	cfg.Engine.Forwarder = client
	return serverTLS, nil
}

// openInternal opens the internal endpoint's listener and the forwarding
// client that dials the other instances' endpoints, and sets
// cfg.Engine.InternalURL to what the endpoint advertises. It returns the
// endpoint's server TLS configuration (nil: plaintext).
func openInternal(cfg *Config) (net.Listener, *forward.Client, *tls.Config, error) {
	l, err := net.Listen("tcp", cfg.InternalAddr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listen on %s (internal endpoint): %w", cfg.InternalAddr, err)
	}
	scheme := "http://"
	if cfg.Peer.Enabled() {
		scheme = "https://"
	}
	if cfg.Engine.InternalURL = cfg.InternalURL; cfg.Engine.InternalURL == "" {
		cfg.Engine.InternalURL = scheme + l.Addr().String()
	}
	client := forward.NewClient()
	var serverTLS *tls.Config
	if cfg.Peer.Enabled() {
		var clientTLS *tls.Config
		if serverTLS, clientTLS, err = cfg.Peer.configs(internalHosts(l.Addr(), cfg.Engine.InternalURL)); err != nil {
			l.Close()
			return nil, nil, nil, err
		}
		client.TLS = clientTLS
	}
	warnInternalSecurity(*cfg, l.Addr().String())
	return l, client, serverTLS, nil
}

// serve starts serving the etcd API on the client listeners and /metrics
// (with the health endpoints and, if debug is set, /debug/) on the metrics
// ones, with cfg's HTTP timeouts.
func (z *Zketcd) serve(cfg Config, metrics, debug http.Handler) {
	for _, l := range z.clients {
		go func() { z.report(z.gw.Serve(l)) }()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	if debug != nil {
		mux.Handle("/debug/", debug)
	}
	z.gw.HandleHealth(mux)
	for _, l := range z.metrics {
		// Bounded as the client addresses' HTTP side is (but for writes:
		// a CPU profile or a trace writes after as long as it was asked
		// to run).
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: or(cfg.HTTPReadTimeout, httpgw.DefaultReadTimeout),
			ReadTimeout: or(cfg.HTTPReadTimeout, httpgw.DefaultReadTimeout), IdleTimeout: or(cfg.HTTPIdleTimeout, httpgw.DefaultIdleTimeout)}
		z.http = append(z.http, hs)
		go func() {
			if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				z.report(err)
			}
		}()
	}
}

// abort undoes a Start that failed midway: it closes whatever Start opened,
// the last first.
func (z *Zketcd) abort() {
	if z.closeLE != nil {
		z.closeLE()
	}
	if z.srv != nil {
		z.srv.Stop()
	}
	if z.cancel != nil {
		z.cancel()
	}
	if z.isrv != nil {
		z.isrv.Stop()
	}
	if z.be != nil {
		z.be.Close()
	}
	for _, l := range append(z.clients, z.metrics...) {
		l.Close()
	}
	if z.internal != nil {
		z.internal.Close()
	}
	if z.fwd != nil {
		z.fwd.Close()
	}
}

func (z *Zketcd) report(err error) { reportTo(z.errc, err) }

// reportTo hands a serving error to errc (which holds one; later ones are
// dropped), but for a stopped server's.
func reportTo(errc chan error, err error) {
	if err == nil || errors.Is(err, grpc.ErrServerStopped) {
		return
	}
	select {
	case errc <- err:
	default:
	}
}

// Err returns a channel that receives a serving error (a listener failing).
func (z *Zketcd) Err() <-chan error { return z.errc }

// ClientAddrs returns the addresses the etcd API is served on.
func (z *Zketcd) ClientAddrs() []string { return addrs(z.clients) }

// addrs lists the addresses of ls.
func addrs(ls []net.Listener) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Addr().String()
	}
	return out
}

// MetricsAddrs returns the addresses /metrics is served on.
func (z *Zketcd) MetricsAddrs() []string { return addrs(z.metrics) }

// InternalAddr returns the address of the internal endpoint ("": none).
func (z *Zketcd) InternalAddr() string {
	if z.internal == nil {
		return ""
	}
	return z.internal.Addr().String()
}

// Engine returns the instance's engine.
func (z *Zketcd) Engine() *engine.Engine { return z.be }

// Registry returns the instance's Prometheus registry.
func (z *Zketcd) Registry() *prometheus.Registry { return z.registry }

// Close stops serving (letting RPCs in flight finish for up to grace) and
// ends the ZooKeeper session. Safe to call more than once.
func (z *Zketcd) Close(grace time.Duration) {
	z.once.Do(func() {
		z.cancel()
		if z.closeLE != nil {
			z.closeLE()
		}
		z.gw.Close()
		stopped := make(chan struct{})
		go func() { z.srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(grace):
			z.srv.Stop()
		}
		for _, hs := range z.http {
			hs.Close()
		}
		if z.isrv != nil {
			// In-flight forwarded requests end with the engine (ErrStopped):
			// their origins resolve them through their tags.
			go z.isrv.GracefulStop()
		}
		z.be.Close()
		if z.isrv != nil {
			z.isrv.Stop()
		}
		if z.fwd != nil {
			z.fwd.Close()
		}
	})
}

// or is d, or def when d is 0.
func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
