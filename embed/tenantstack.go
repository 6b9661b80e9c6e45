package embed

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/grpcsrv"
	"github.com/zketcd/zketcd/internal/httpgw"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/tenant"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// tenantStack is one tenant served on this instance: its engine on the
// tenant's root, the etcd services over it, and the server the front
// hands the tenant's connections to. Nothing in it is shared with another
// tenant's stack but the process.
type tenantStack struct {
	name    string
	be      *engine.Engine
	srv     *grpc.Server
	fwdAuth *auth.Rules // checks the requests other instances forward here
	gw      *httpgw.Server
	closeLE func()
	// release gives back the stack's place on its ZooKeeper session.
	release func()
	adm     *tenant.Admission
	metrics *prometheus.Registry
	cancel  context.CancelFunc
	opened  time.Time
	used    atomic.Int64 // when a request was last admitted, in ns since opened
	closed  atomic.Bool
}

// tenantIdlePoll is the tenants' engine.Config.IdlePoll: an instance
// runs an engine per tenant, each polling ZooKeeper on its own, and a
// fleet's ensemble serves all of them. A tenant's view is reported stale
// (unhealthy, "no leader" to the watches that require one) after
// engine.DefaultStaleAfter past it.
const tenantIdlePoll = 5 * time.Second

// tenantStreamWorkers is how many goroutines each tenant's gRPC server
// keeps for its streams (beyond them, a goroutine per stream): an instance
// runs a server per tenant, most of them idle, so each keeps few rather
// than a single cluster's DefaultStreamWorkers.
const tenantStreamWorkers = 4

// startStack starts rec's tenant on this instance.
func (f *Fleet) startStack(ctx context.Context, rec zkstore.TenantRecord) (_ *tenantStack, err error) {
	limits := f.limitsOf(rec)
	lg := f.cfg.Logger.WithField("tenant", rec.Name)
	s := &tenantStack{name: rec.Name, metrics: prometheus.NewRegistry(), opened: time.Now()}
	defer func() {
		if err != nil {
			s.close(0)
		}
	}()
	ec := f.cfg.Engine
	place := rec.Place(f.cfg.Engine.Store.Root)
	ec.Store.Root = place.Root
	ec.Logger, ec.Store.Logger = lg, lg
	ec.Registerer = s.metrics
	ec.QuotaBackendBytes = engineQuota(limits)
	if f.fwd != nil {
		// The tenant's writes go to its leader instance, through the
		// internal endpoint every tenant of the fleet shares.
		ec.Forwarder = f.fwd.ForTenant(rec.Name)
	}
	ec.BeforeRecovery = nil // the heap preparation is for one cluster per process
	ec.IdlePoll = max(ec.IdlePoll, tenantIdlePoll)
	ec.StaleAfter = max(ec.StaleAfter, engine.DefaultStaleAfter+ec.IdlePoll)
	sess, release, err := f.session(ctx)
	if err != nil {
		return nil, err
	}
	s.release = release
	st, err := f.openTenantPlace(ctx, sess, ec.Store, place, lg)
	if err != nil {
		return nil, err
	}
	// A move of the tenant (zketcd tenant move) fences its root: the
	// engine then opens the destination, on the shared session when it is
	// on the fleet's ensemble, else on a session of its own there, and
	// waits for it with a watch (engine.WaitMovedStore).
	ec.OpenMoved = func(ctx context.Context, cur engine.Log, to revision.Move) (engine.Log, func(context.Context) (engine.Log, error), error) {
		dest := zkstore.TenantPlace{Root: to.Root}
		if cs, ok := cur.(*zkstore.Store); ok {
			dest.Servers = f.placeServers(zkstore.JoinServers(cs.Servers()))
		}
		if to.Servers != "" {
			dest.Servers = f.placeServers(to.Servers)
		}
		st, err := f.openPlace(ctx, sess, ec.Store, dest)
		if err != nil {
			return nil, nil, err
		}
		return st, inspector(dest.Config(ec.Store)), nil
	}
	ec.WaitMoved = engine.WaitMovedStore(ec.Store)
	if s.be, err = engine.NewInspected(ctx, ec, st, inspector(withRoot(ec.Store, st))); err != nil {
		return nil, err
	}
	s.adm = tenant.NewAdmission(limits, s.be.LeaseCount, nil)
	s.be.SetMaxWatchers(int(max(limits.Watchers, 0)))
	gc := f.cfg.GRPC
	gc.Registerer, gc.Logger = s.metrics, lg
	gc.Admission = usedAdmission{s}
	gc.StreamWorkers = tenantStreamWorkers
	gc.Creds, gc.TLS = httpgw.Creds(), f.cfg.TLS
	var srvCtx context.Context
	srvCtx, s.cancel = context.WithCancel(context.Background())
	if s.srv, s.fwdAuth, err = grpcsrv.NewWithForwardAuthorizer(srvCtx, gc, s.be); err != nil {
		return nil, err
	}
	tc := f.cfg
	tc.GRPC, tc.Logger = gc, lg
	gwCfg := gatewayConfig(tc, s.be, s.srv, promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}), &s.closeLE)
	gwCfg.MaxConnections = -1 // the front bounds the connections
	if s.gw, err = httpgw.New(gwCfg); err != nil {
		return nil, err
	}
	s.touch()
	lg.WithField("limits", limits).Info("serving the tenant on this instance")
	return s, nil
}

// maxTenantMoveHops bounds how many moved records openTenantPlace follows.
const maxTenantMoveHops = 8

// openTenantPlace opens the tenant's data at p, or, if it moved from
// there (zkstore.ErrMoved: an instance that read the registry's record
// before a move updated it), where it went.
func (f *Fleet) openTenantPlace(ctx context.Context, sess *zkstore.Session, cfg zkstore.Config, p zkstore.TenantPlace, lg *logrus.Entry) (*zkstore.Store, error) {
	for hop := 0; ; hop++ {
		st, err := f.openPlace(ctx, sess, cfg, p)
		var moved *zkstore.MovedError
		if !errors.As(err, &moved) || hop == maxTenantMoveHops {
			return st, err
		}
		next := zkstore.TenantPlace{Servers: p.Servers, Root: moved.To.Root}
		if moved.To.Servers != "" {
			next.Servers = f.placeServers(moved.To.Servers)
		}
		lg.WithFields(logrus.Fields{"from": p.String(), "to": next.String()}).Info("the tenant's data moved: serving it from where it went")
		p = next
	}
}

// openPlace opens the root of p: on sess when it is on the fleet's
// ensemble, else on a session of its own on p's ensemble (cfg's settings
// but its servers and root).
func (f *Fleet) openPlace(ctx context.Context, sess *zkstore.Session, cfg zkstore.Config, p zkstore.TenantPlace) (*zkstore.Store, error) {
	if p.Servers == "" {
		return sess.Open(ctx, p.Root)
	}
	return zkstore.Open(ctx, p.Config(cfg))
}

// placeServers is servers (comma separated) as a TenantPlace names them:
// "" for the fleet's own ensemble.
func (f *Fleet) placeServers(servers string) string {
	if servers == zkstore.JoinServers(f.cfg.Engine.Store.Servers) {
		return ""
	}
	return servers
}

// inspector opens fresh inspector sessions on cfg's root (the engine's
// rollback checks).
func inspector(cfg zkstore.Config) func(context.Context) (engine.Log, error) {
	return func(ctx context.Context) (engine.Log, error) {
		in, err := zkstore.OpenInspector(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return in, nil
	}
}

// withRoot is cfg for st's root, on st's ensemble.
func withRoot(cfg zkstore.Config, st *zkstore.Store) zkstore.Config {
	cfg.Root, cfg.Servers = st.Root(), st.Servers()
	return cfg
}

// setLimits applies limits that changed in the registry to the running
// tenant: its rates and counts, and its space quota from the next write.
func (s *tenantStack) setLimits(l tenant.Limits) {
	if s.adm.Limits() == l {
		return
	}
	s.adm.SetLimits(l)
	s.be.SetMaxWatchers(int(max(l.Watchers, 0)))
	s.be.SetQuotaBackendBytes(engineQuota(l))
}

// engineQuota is a tenant's space quota as the engine's
// --quota-backend-bytes: a tenant's 0 (after its defaults) means no limit,
// the engine's 0 etcd's default.
func engineQuota(l tenant.Limits) int64 {
	if l.QuotaBackendBytes == 0 {
		return -1
	}
	return l.QuotaBackendBytes
}

func (s *tenantStack) touch() { s.used.Store(int64(time.Since(s.opened))) }

// idleFor is how long no request was admitted.
func (s *tenantStack) idleFor() time.Duration {
	return time.Since(s.opened) - time.Duration(s.used.Load())
}

// watchers counts the stack's watchers.
func (s *tenantStack) watchers() int {
	st := s.be.WatchStats()
	return st.Synced + st.Unsynced + st.Victims
}

// close stops the stack: its RPCs get up to grace to finish, then the
// engine ends (its ZooKeeper session, its member znode). Safe to call
// more than once, and on a stack whose start failed midway.
func (s *tenantStack) close(grace time.Duration) {
	if s.closed.Swap(true) {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.closeLE != nil {
		s.closeLE()
	}
	if s.gw != nil {
		s.gw.Close()
	}
	if s.srv != nil {
		stopped := make(chan struct{})
		go func() { s.srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(grace):
			s.srv.Stop()
		}
	}
	if s.be != nil {
		s.be.Close()
	}
	if s.release != nil {
		s.release()
	}
}

// usedAdmission is the stack's admission, and the clock of its idleness.
type usedAdmission struct{ s *tenantStack }

func (u usedAdmission) Admit(ctx context.Context, writeBytes int) error {
	u.s.touch()
	return u.s.adm.Admit(ctx, writeBytes)
}

func (u usedAdmission) AdmitLease() error { return u.s.adm.AdmitLease() }

// tenantGatherer gathers every running tenant's series, each with a
// tenant label: the label's values are bounded by the tenants that run
// on this instance.
type tenantGatherer struct{ f *Fleet }

func (g tenantGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.f.mu.Lock()
	stacks := make([]*tenantStack, 0, len(g.f.stacks))
	for _, s := range g.f.stacks {
		stacks = append(stacks, s)
	}
	g.f.mu.Unlock()
	byName := map[string]*dto.MetricFamily{}
	var order []string
	for _, s := range stacks {
		mfs, err := s.metrics.Gather()
		if err != nil {
			return nil, err
		}
		label := &dto.LabelPair{Name: proto.String("tenant"), Value: proto.String(s.name)}
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				m.Label = append(m.Label, label)
			}
			if have := byName[mf.GetName()]; have != nil {
				have.Metric = append(have.Metric, mf.Metric...)
				continue
			}
			byName[mf.GetName()] = mf
			order = append(order, mf.GetName())
		}
	}
	out := make([]*dto.MetricFamily, len(order))
	for i, n := range order {
		out[i] = byName[n]
	}
	return out, nil
}

// registerMetrics registers the fleet's own gauges.
func (f *Fleet) registerMetrics() {
	count := func(all bool) func() float64 {
		return func() float64 {
			f.mu.Lock()
			defer f.mu.Unlock()
			if all {
				return float64(len(f.records))
			}
			return float64(len(f.stacks))
		}
	}
	f.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "zketcd_fleet_tenants", Help: "Tenants in the fleet's registry."}, count(true)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "zketcd_fleet_tenants_running", Help: "Tenants whose engine runs on this instance."}, count(false)),
	)
}
