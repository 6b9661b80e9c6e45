package embed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/forward"
	"github.com/zketcd/zketcd/internal/httpgw"
	"github.com/zketcd/zketcd/internal/tenant"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TenantsConfig configures a fleet: one instance serving the many tenants
// of a fleet root (Config.Tenants). Each tenant is a whole etcd cluster of
// its own (its own root under the fleet root); a client connection is
// bound to one tenant by the CN of its verified client certificate.
type TenantsConfig struct {
	// Enabled serves the tenants of the fleet root Engine.Store.Root
	// instead of one cluster (--tenants). It needs TLS on the client URLs
	// with verified client certificates.
	Enabled bool
	// AdminCNs are the client certificate CNs of the fleet's
	// administrators (--tenant-admin-cn): their connections reach the
	// fleet's administration, never a tenant's data. A CN here is never
	// a tenant's.
	AdminCNs []string
	// Defaults are the limits of a tenant whose record sets none (a zero
	// field: tenant.DefaultLimits' value for it).
	Defaults tenant.Limits
	// Sessions is how many ZooKeeper sessions this instance's tenants share
	// (0: DefaultTenantSessions): each tenant's root is opened on one of
	// them, the one with the fewest tenants when it starts.
	Sessions int
	// IdleTimeout is how long a tenant's engine runs on this instance
	// with no request and no watcher before it stops (0:
	// DefaultTenantIdleTimeout; negative: never). Its next connection
	// starts it again.
	IdleTimeout time.Duration
	// BalanceInterval is how often this instance looks whether it leads
	// more than its share of the tenants it runs with other instances, and
	// hands the excess to them (0: DefaultTenantBalanceInterval; negative:
	// never).
	BalanceInterval time.Duration
}

// DefaultTenantIdleTimeout is TenantsConfig.IdleTimeout's default.
const DefaultTenantIdleTimeout = 10 * time.Minute

// DefaultTenantSessions is TenantsConfig.Sessions' default: a few
// sessions, so that one tenant's slow request holds up few others
// (ZooKeeper answers each session's requests in order), well inside
// ZooKeeper's default of 60 connections per client host.
const DefaultTenantSessions = 4

// tenantStartTimeout bounds a tenant engine's start (connecting, recovering
// its view).
const tenantStartTimeout = time.Minute

// Fleet is a running instance of a fleet: it serves every tenant of the
// fleet root on the same client URLs, each tenant's engine started on
// this instance when a connection for it first arrives and stopped when
// it has been idle for TenantsConfig.IdleTimeout or its tenant is deleted.
// Its methods are safe for concurrent use.
type Fleet struct {
	cfg      Config
	lg       *logrus.Entry
	reg      *zkstore.Registry
	sessions []*zkstore.Session   // opened on first use
	registry *prometheus.Registry // the fleet's own series; tenants' are gathered with a tenant label
	front    *httpgw.Front
	refuse   *refusal
	admin    *adminServer
	internal net.Listener    // the internal endpoint (nil: no forwarding)
	isrv     *grpc.Server    // serves internal for every tenant running here
	fwd      *forward.Client // dials the other instances' endpoints
	clients  []net.Listener
	metricsL []net.Listener
	http     []*http.Server
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	errc     chan error
	once     sync.Once

	mu       sync.Mutex
	records  map[string]zkstore.TenantRecord
	byCN     map[string]string
	admins   map[string]bool
	stacks   map[string]*tenantStack
	starting map[string]*pendingStack
	deleting map[string]bool // deletes this instance is completing
	// sessionUse counts the tenants placed on each of sessions, from
	// their choice of it to their stack's close.
	sessionUse []int
	stopped    bool
}

// pendingStack is a tenant stack being started: the connections that
// wait for it wait on done.
type pendingStack struct {
	done  chan struct{}
	stack *tenantStack
	err   error
}

// StartFleet opens the fleet root (creating its layout if it is empty)
// and serves its tenants on cfg's client URLs. Errors: a configuration
// without client certificate verification, ZooKeeper unreachable, a root
// that holds a single cluster, a listen failure.
func StartFleet(ctx context.Context, cfg Config) (_ *Fleet, err error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TLS == nil || cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return nil, errors.New("--tenants binds each connection to its tenant by the CN of its verified client certificate: " +
			"serve https client URLs with --cert-file, --key-file, --trusted-ca-file and --client-cert-auth")
	}
	for _, cn := range cfg.Tenants.AdminCNs {
		if err := tenant.ValidCN(cn); err != nil {
			return nil, fmt.Errorf("--tenant-admin-cn: %w", err)
		}
	}
	if cfg.Tenants.IdleTimeout == 0 {
		cfg.Tenants.IdleTimeout = DefaultTenantIdleTimeout
	}
	if cfg.Tenants.Sessions <= 0 {
		cfg.Tenants.Sessions = DefaultTenantSessions
	}
	if cfg.Tenants.BalanceInterval == 0 {
		cfg.Tenants.BalanceInterval = DefaultTenantBalanceInterval
	}
	cfg.Tenants.Defaults = cfg.Tenants.Defaults.Effective(tenant.DefaultLimits())
	f := &Fleet{
		cfg: cfg, lg: cfg.Logger.WithField("component", "fleet"), errc: make(chan error, 1),
		records: map[string]zkstore.TenantRecord{}, byCN: map[string]string{}, admins: map[string]bool{},
		stacks: map[string]*tenantStack{}, starting: map[string]*pendingStack{}, deleting: map[string]bool{},
		sessions: make([]*zkstore.Session, cfg.Tenants.Sessions), sessionUse: make([]int, cfg.Tenants.Sessions),
		registry: prometheus.NewRegistry(),
	}
	for _, cn := range cfg.Tenants.AdminCNs {
		f.admins[cn] = true
	}
	f.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f.ctx, f.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			f.Close(0)
		}
	}()
	if f.reg, err = zkstore.OpenRegistry(ctx, cfg.Engine.Store); err != nil {
		return nil, err
	}
	recs, _, _, err := f.reg.Tenants(false)
	if err != nil {
		return nil, err
	}
	f.apply(recs)
	if f.refuse, err = newRefusal(cfg.Logger); err != nil {
		return nil, err
	}
	if f.admin, err = newAdminServer(f); err != nil {
		return nil, err
	}
	if f.front, err = httpgw.NewFront(httpgw.FrontConfig{
		TLS: cfg.TLS, Route: f.route, HandshakeTimeout: cfg.GRPC.ConnectionTimeout,
		MaxConnections: cfg.MaxClientConnections, Registerer: f.registry, Logger: cfg.Logger,
	}); err != nil {
		return nil, err
	}
	if err := f.listen(); err != nil {
		return nil, err
	}
	if err := f.forwarding(); err != nil {
		return nil, err
	}
	f.registerMetrics()
	f.serve()
	f.wg.Add(3)
	go f.follow()
	go f.reapIdle()
	go f.balance()
	f.lg.WithFields(logrus.Fields{"root": cfg.Engine.Store.Root, "tenants": len(recs), "admins": cfg.Tenants.AdminCNs}).Info("serving a fleet of tenants")
	return f, nil
}

// listen opens the client and metrics listeners.
func (f *Fleet) listen() error {
	for _, a := range f.cfg.ClientAddrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		f.clients = append(f.clients, l)
	}
	for _, a := range f.cfg.MetricsAddrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		f.metricsL = append(f.metricsL, l)
	}
	return nil
}

// serve starts the front on the client listeners and /metrics and
// /health on the metrics ones, with Go's runtime profiles under /debug/
// when EnablePprof is set: on the metrics URLs only, the operators' side,
// since the process's profiles show every tenant's work (a tenant's
// connection is never served them).
func (f *Fleet) serve() {
	for _, l := range f.clients {
		go func() { f.report(f.front.Serve(l)) }()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{f.registry, tenantGatherer{f}}, promhttp.HandlerOpts{}))
	mux.HandleFunc("/health", f.serveHealth)
	if f.cfg.EnablePprof {
		mux.Handle("/debug/", pprofHandler())
	}
	for _, l := range f.metricsL {
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: or(f.cfg.HTTPReadTimeout, httpgw.DefaultReadTimeout),
			ReadTimeout: or(f.cfg.HTTPReadTimeout, httpgw.DefaultReadTimeout), IdleTimeout: or(f.cfg.HTTPIdleTimeout, httpgw.DefaultIdleTimeout)}
		f.http = append(f.http, hs)
		go func() {
			if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				f.report(err)
			}
		}()
	}
}

// serveHealth answers /health of the metrics URLs: healthy while the
// registry's ZooKeeper session is live (each tenant's own health is its
// engine's, on its connections).
func (f *Fleet) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if _, ok := f.reg.Store().Session(); !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"health":"false","reason":"no zookeeper session"}`)
		return
	}
	fmt.Fprint(w, `{"health":"true","reason":""}`)
}

// route binds a connection to the server of its certificate's CN: a
// tenant's (started here if it is not yet), the refusal's for a CN that
// names no tenant (etcd's "permission denied" to every call).
func (f *Fleet) route(st tls.ConnectionState) (*httpgw.Server, error) {
	cn := verifiedCN(st)
	f.mu.Lock()
	name, ok := f.byCN[cn]
	admin := f.admins[cn]
	f.mu.Unlock()
	switch {
	case cn == "":
		f.lg.Info("a client certificate without a CN: no tenant")
		return f.refuse.gw, nil
	case admin:
		return f.admin.gw, nil
	case !ok:
		f.lg.WithField("cn", cn).Info("a client certificate whose CN names no tenant")
		return f.refuse.gw, nil
	}
	s, err := f.stack(name)
	if err != nil {
		f.lg.WithError(err).WithField("tenant", name).Warn("start a tenant's engine")
		return nil, err
	}
	return s.gw, nil
}

// verifiedCN is the CN of the leaf of the first verified chain ("": none).
func verifiedCN(st tls.ConnectionState) string {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return ""
	}
	return st.VerifiedChains[0][0].Subject.CommonName
}

// stack returns tenant name's running stack, starting it if needed; the
// callers that ask while it starts share the start.
func (f *Fleet) stack(name string) (*tenantStack, error) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil, errors.New("the fleet is stopping")
	}
	if s := f.stacks[name]; s != nil {
		f.mu.Unlock()
		return s, nil
	}
	if p := f.starting[name]; p != nil {
		f.mu.Unlock()
		<-p.done
		return p.stack, p.err
	}
	rec, ok := f.records[name]
	if !ok || rec.State != zkstore.TenantActive {
		f.mu.Unlock()
		return nil, fmt.Errorf("tenant %s is not active", name)
	}
	p := &pendingStack{done: make(chan struct{})}
	f.starting[name] = p
	f.mu.Unlock()

	ctx, cancel := context.WithTimeout(f.ctx, tenantStartTimeout)
	p.stack, p.err = f.startStack(ctx, rec)
	cancel()

	f.mu.Lock()
	delete(f.starting, name)
	if p.err == nil {
		// A delete that arrived meanwhile wins: the stack stops at once.
		if cur, ok := f.records[name]; !ok || cur.State != zkstore.TenantActive || f.stopped {
			f.mu.Unlock()
			p.stack.close(0)
			p.stack, p.err = nil, fmt.Errorf("tenant %s was deleted while it started", name)
			close(p.done)
			return nil, p.err
		}
		f.stacks[name] = p.stack
	}
	f.mu.Unlock()
	close(p.done)
	return p.stack, p.err
}

// limitsOf resolves a record's limits over the fleet's defaults; limits
// that do not decode are the defaults (logged).
func (f *Fleet) limitsOf(rec zkstore.TenantRecord) tenant.Limits {
	l, err := tenant.DecodeLimits(rec.Limits)
	if err != nil {
		f.lg.WithError(err).WithField("tenant", rec.Name).Error("the tenant's limits do not decode: the fleet's defaults apply")
	}
	return l.Effective(f.cfg.Tenants.Defaults)
}

// apply takes the registry's records: the CN index, limits of running
// stacks, and the stop of stacks whose tenant is gone or being deleted.
func (f *Fleet) apply(recs []zkstore.TenantRecord) {
	records, byCN := map[string]zkstore.TenantRecord{}, map[string]string{}
	for _, r := range recs {
		records[r.Name] = r
		if r.State != zkstore.TenantActive {
			continue
		}
		for _, cn := range r.CNs {
			if f.admins[cn] {
				f.lg.WithFields(logrus.Fields{"tenant": r.Name, "cn": cn}).Error("a tenant's CN is an administrator's: the tenant is not served to it")
				continue
			}
			byCN[cn] = r.Name
		}
	}
	for _, r := range recs {
		if r.State == zkstore.TenantDeleting {
			f.finishDelete(r.Name)
		}
	}
	var gone []*tenantStack
	f.mu.Lock()
	f.records, f.byCN = records, byCN
	for name, s := range f.stacks {
		r, ok := records[name]
		if !ok || r.State != zkstore.TenantActive {
			delete(f.stacks, name)
			gone = append(gone, s)
			continue
		}
		s.setLimits(f.limitsOf(r))
	}
	f.mu.Unlock()
	for _, s := range gone {
		f.lg.WithField("tenant", s.name).Info("the tenant was deleted: stopping its engine here")
		go s.close(0)
	}
}

// follow keeps the fleet in step with the registry until Close.
func (f *Fleet) follow() {
	defer f.wg.Done()
	for {
		recs, _, watch, err := f.reg.Tenants(true)
		if err != nil {
			f.lg.WithError(err).Warn("read the tenant registry")
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		f.apply(recs)
		select {
		case <-f.ctx.Done():
			return
		case <-watch:
		}
	}
}

// reapIdle stops the engines of tenants idle on this instance.
func (f *Fleet) reapIdle() {
	defer f.wg.Done()
	idle := f.cfg.Tenants.IdleTimeout
	if idle < 0 {
		<-f.ctx.Done()
		return
	}
	t := time.NewTicker(min(max(idle/4, 10*time.Millisecond), 30*time.Second))
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		var stale []*tenantStack
		f.mu.Lock()
		for name, s := range f.stacks {
			if s.idleFor() >= idle && s.watchers() == 0 {
				delete(f.stacks, name)
				stale = append(stale, s)
			}
		}
		f.mu.Unlock()
		for _, s := range stale {
			f.lg.WithFields(logrus.Fields{"tenant": s.name, "idle": idle}).Info("stopping an idle tenant's engine")
			s.close(5 * time.Second)
		}
	}
}

func (f *Fleet) report(err error) { reportTo(f.errc, err) }

// Err returns a channel that receives a serving error (a listener failing).
func (f *Fleet) Err() <-chan error { return f.errc }

// ClientAddrs returns the addresses the tenants are served on.
func (f *Fleet) ClientAddrs() []string { return addrs(f.clients) }

// MetricsAddrs returns the addresses /metrics is served on.
func (f *Fleet) MetricsAddrs() []string { return addrs(f.metricsL) }

// Registry returns the fleet's own Prometheus registry (the tenants'
// series are gathered beside it on /metrics).
func (f *Fleet) Registry() *prometheus.Registry { return f.registry }

// TenantGatherer gathers the series of the tenants running here, each
// with its tenant label (what /metrics serves beside Registry's).
func (f *Fleet) TenantGatherer() prometheus.Gatherer { return tenantGatherer{f} }

// Tenant returns the engine of tenant name on this instance (nil: not
// running here).
func (f *Fleet) Tenant(name string) *engine.Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.stacks[name]; s != nil {
		return s.be
	}
	return nil
}

// Running lists the tenants whose engines run on this instance, sorted.
func (f *Fleet) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.stacks))
	for n := range f.stacks {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Close stops serving: every tenant's engine (RPCs in flight given up to
// grace), the front, the registry's session. Safe to call more than once.
func (f *Fleet) Close(grace time.Duration) {
	f.once.Do(func() {
		f.mu.Lock()
		f.stopped = true
		stacks := make([]*tenantStack, 0, len(f.stacks))
		for _, s := range f.stacks {
			stacks = append(stacks, s)
		}
		f.stacks = map[string]*tenantStack{}
		f.mu.Unlock()
		if f.front != nil {
			f.front.Close()
		}
		for _, l := range slices.Concat(f.clients, f.metricsL) {
			l.Close()
		}
		if f.internal != nil {
			f.internal.Close()
		}
		f.cancel()
		var wg sync.WaitGroup
		for _, s := range stacks {
			wg.Add(1)
			go func() { defer wg.Done(); s.close(grace) }()
		}
		wg.Wait()
		if f.isrv != nil {
			f.isrv.Stop()
		}
		if f.fwd != nil {
			f.fwd.Close()
		}
		if f.refuse != nil {
			f.refuse.close()
		}
		if f.admin != nil {
			f.admin.close()
		}
		for _, hs := range f.http {
			hs.Close()
		}
		f.wg.Wait()
		f.mu.Lock()
		sessions := f.sessions
		f.sessions = nil
		f.mu.Unlock()
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
		if f.reg != nil {
			f.reg.Close()
		}
	})
}

// refusal serves the connections bound to no tenant: every call is
// answered with etcd's "permission denied", over gRPC and the gateway.
type refusal struct {
	srv *grpc.Server
	gw  *httpgw.Server
}

func newRefusal(lg *logrus.Entry) (*refusal, error) {
	srv := grpc.NewServer(grpc.Creds(httpgw.Creds()), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return rpctypes.ErrGRPCPermissionDenied
	}))
	denied := func() error { return rpctypes.ErrGRPCPermissionDenied }
	gw, err := httpgw.New(httpgw.Config{
		GRPC: srv, Leader: denied, Read: func(context.Context, bool) error { return denied() },
		Logger: lg.WithField("component", "refusal"),
	})
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return &refusal{srv: srv, gw: gw}, nil
}

func (r *refusal) close() {
	r.gw.Close()
	r.srv.Stop()
}

// session returns the least used of the tenants' ZooKeeper sessions,
// opening it if it is not yet, and reserves a place on it for one tenant
// until release is called. A place counts from the choice, not from the
// tenant's Store opening on the session, so that tenants starting at the
// same moment spread over the sessions instead of all choosing the one
// that looked least used before any of them had opened.
func (f *Fleet) session(ctx context.Context) (_ *zkstore.Session, release func(), err error) {
	f.mu.Lock()
	best := -1
	for i := range f.sessions {
		if best < 0 || f.sessionUse[i] < f.sessionUse[best] {
			best = i
		}
	}
	if best < 0 {
		f.mu.Unlock()
		return nil, nil, errors.New("the fleet is stopping")
	}
	f.sessionUse[best]++
	var once sync.Once
	release = func() {
		once.Do(func() {
			f.mu.Lock()
			if best < len(f.sessionUse) {
				f.sessionUse[best]--
			}
			f.mu.Unlock()
		})
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	if s := f.sessions[best]; s != nil {
		f.mu.Unlock()
		return s, release, nil
	}
	f.mu.Unlock()
	s, err := zkstore.OpenSession(ctx, f.cfg.Engine.Store)
	if err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped || len(f.sessions) == 0 {
		s.Close()
		return nil, nil, errors.New("the fleet is stopping")
	}
	if cur := f.sessions[best]; cur != nil {
		s.Close() // opened meanwhile by another start
		return cur, release, nil
	}
	f.sessions[best] = s
	return s, release, nil
}

// forwarding, when the tenants' engines forward writes (--forward-writes),
// opens the internal endpoint all of them share: each tenant's calls name
// it, and are served by that tenant's engine if it runs here, or refused.
func (f *Fleet) forwarding() error {
	if !f.cfg.Engine.ForwardWrites {
		return nil
	}
	cfg := f.cfg
	l, client, serverTLS, err := openInternal(&cfg)
	if err != nil {
		return err
	}
	f.internal, f.fwd = l, client
	f.cfg.Engine.InternalURL = cfg.Engine.InternalURL
	f.isrv = forward.NewServer(nil, forward.ServerConfig{
		TLS: serverTLS, MaxMessageBytes: f.cfg.GRPC.RecvMsgLimit(), Route: f.routeForward,
		Logger: f.cfg.Logger, Registerer: f.registry,
	})
	go func() { f.report(f.isrv.Serve(l)) }()
	f.lg.WithFields(logrus.Fields{"addr": l.Addr().String(), "advertised": f.cfg.Engine.InternalURL, "tls": serverTLS != nil}).
		Info("serving the internal endpoint (write forwarding to each tenant's leader instance)")
	return nil
}

// routeForward is the internal endpoint's Route: the engine and the
// forward authorizer of a tenant running on this instance.
func (f *Fleet) routeForward(name string) (forward.Leader, forward.Authorizer, bool) {
	f.mu.Lock()
	s := f.stacks[name]
	f.mu.Unlock()
	if s == nil {
		return nil, nil, false
	}
	s.touch() // a tenant led here for others is in use
	return s.be, s.fwdAuth, true
}
