package embed_test

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/tenant"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// fleetFixture is a ZooKeeper, a CA and a fleet root with tenants, and the
// instances started on it.
type fleetFixture struct {
	t     *testing.T
	zk    string
	root  string
	certs *testcerts.Set
	reg   *zkstore.Registry
	lg    *logrus.Entry
}

func newFleetFixture(t *testing.T, tenants ...string) *fleetFixture {
	t.Helper()
	srv := zkservertest.Standalone(t)
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	fx := &fleetFixture{t: t, zk: srv.Addr(), root: "/fleet", certs: testcerts.New(t), lg: logrus.NewEntry(lg)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := zkstore.OpenRegistry(ctx, fx.storeConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	fx.reg = reg
	for _, n := range tenants {
		fx.create(n, tenant.Limits{})
	}
	return fx
}

func (fx *fleetFixture) storeConfig() zkstore.Config {
	return zkstore.Config{Servers: []string{fx.zk}, Root: fx.root, SessionTimeout: 4 * time.Second, Logger: fx.lg}
}

func (fx *fleetFixture) create(name string, l tenant.Limits) {
	fx.t.Helper()
	if _, err := fx.reg.CreateTenant(zkstore.TenantRecord{Name: name, CNs: []string{name}, Limits: l.Encode()}); err != nil {
		fx.t.Fatal(err)
	}
}

// start runs an instance of the fleet; mod may change its configuration.
func (fx *fleetFixture) start(name string, mod func(*embed.Config)) *embed.Fleet {
	fx.t.Helper()
	cfg := embed.Config{
		Engine:      engine.Config{Store: fx.storeConfig(), Name: name, WorldReadableOK: true},
		ClientAddrs: []string{"127.0.0.1:0"},
		TLS:         fx.certs.ServerTLS(fx.t),
		Tenants:     embed.TenantsConfig{Enabled: true, AdminCNs: []string{"fleet-admin"}},
		Logger:      fx.lg.WithField("instance", name),
	}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := embed.StartFleet(ctx, cfg)
	if err != nil {
		fx.t.Fatal(err)
	}
	fx.t.Cleanup(func() { f.Close(time.Second) })
	return f
}

// client connects to f with a certificate whose CN is cn.
func (fx *fleetFixture) client(f *embed.Fleet, cn string) *clientv3.Client {
	fx.t.Helper()
	tlsCfg := fx.certs.ClientTLS(fx.t, false)
	tlsCfg.Certificates = []tls.Certificate{fx.certs.ClientWithSubject(fx.t, pkix.Name{CommonName: cn})}
	c, err := clientv3.New(clientv3.Config{Endpoints: f.ClientAddrs(), TLS: tlsCfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fx.t.Fatal(err)
	}
	fx.t.Cleanup(func() { c.Close() })
	return c
}

// TestFleetTenantsAreIndependentClusters: two tenants on one fleet each
// see only their own keys, revisions and leases, numbered from 1 as a
// fresh etcd's.
func TestFleetTenantsAreIndependentClusters(t *testing.T) {
	fx := newFleetFixture(t, "alpha", "beta")
	f := fx.start("i1", nil)
	ctx := testutil.Context(t, 30*time.Second)
	a, b := fx.client(f, "alpha"), fx.client(f, "beta")
	for i := range 3 {
		if _, err := a.Put(ctx, "/registry/k", string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	pb, err := b.Put(ctx, "/registry/k", "beta")
	if err != nil {
		t.Fatal(err)
	}
	if pb.Header.Revision != 2 {
		t.Fatalf("beta's first put at revision %d: a fresh cluster's first write is revision 2", pb.Header.Revision)
	}
	ga, err := a.Get(ctx, "/registry/k")
	if err != nil {
		t.Fatal(err)
	}
	if string(ga.Kvs[0].Value) != "c" || ga.Header.Revision != 4 || ga.Kvs[0].Version != 3 {
		t.Fatalf("alpha reads %q at revision %d, version %d", ga.Kvs[0].Value, ga.Header.Revision, ga.Kvs[0].Version)
	}
	if ga.Header.ClusterId == pb.Header.ClusterId {
		t.Fatal("two tenants share a cluster ID")
	}
	gb, err := b.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(gb.Kvs) != 1 || string(gb.Kvs[0].Value) != "beta" {
		t.Fatalf("beta sees %v", gb.Kvs)
	}
}

// TestFleetRefusesACertificateThatNamesNoTenant: an unknown CN and an
// administrator's CN reach no tenant's data: every call is refused with
// etcd's "permission denied".
func TestFleetRefusesACertificateThatNamesNoTenant(t *testing.T) {
	fx := newFleetFixture(t, "alpha")
	f := fx.start("i1", nil)
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := fx.client(f, "alpha").Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	for _, cn := range []string{"stranger", "fleet-admin", "alph", ""} {
		c := fx.client(f, cn)
		_, err := c.Get(ctx, "k")
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("CN %q: Get = %v, want permission denied", cn, err)
		}
		if _, err := c.Put(ctx, "k", "forged"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("CN %q: Put = %v, want permission denied", cn, err)
		}
	}
	got, err := fx.client(f, "alpha").Get(ctx, "k")
	if err != nil || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("alpha's key after the refused writes: %v %v", got, err)
	}
}

// TestFleetStopsADeletedTenantAndAnIdleOne: deleting a tenant stops its
// engine on every instance and frees its root; an idle tenant's engine
// stops and starts again at its next connection with its data.
func TestFleetStopsADeletedTenantAndAnIdleOne(t *testing.T) {
	fx := newFleetFixture(t, "alpha", "beta")
	f := fx.start("i1", func(c *embed.Config) { c.Tenants.IdleTimeout = 300 * time.Millisecond })
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := fx.client(f, "alpha").Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	b := fx.client(f, "beta")
	if _, err := b.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "alpha's idle engine stopped", func() bool { return f.Tenant("alpha") == nil })
	got, err := fx.client(f, "alpha").Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("alpha after its engine restarted: %v %v", got, err)
	}
	if err := fx.reg.DeleteTenant(ctx, "beta", 20*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if f.Tenant("beta") != nil {
		t.Fatal("beta's engine still runs after its delete")
	}
	if _, err := b.Get(ctx, "k"); err == nil {
		t.Fatal("beta's connection still reads after its delete")
	}
}

// TestFleetRefusesToStartWithoutClientCertificates: a fleet binds
// connections by certificate, so it needs verified client certificates.
func TestFleetRefusesToStartWithoutClientCertificates(t *testing.T) {
	fx := newFleetFixture(t)
	for _, tc := range []struct {
		name string
		tls  *tls.Config
	}{
		{"plaintext", nil},
		{"no client certificates", &tls.Config{Certificates: fx.certs.ServerTLS(t).Certificates}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := embed.StartFleet(ctx, embed.Config{
			Engine: engine.Config{Store: fx.storeConfig(), Name: "i1"}, ClientAddrs: []string{"127.0.0.1:0"},
			TLS: tc.tls, Tenants: embed.TenantsConfig{Enabled: true}, Logger: fx.lg,
		})
		cancel()
		if err == nil {
			t.Fatalf("%s: the fleet started", tc.name)
		}
	}
}

// TestFleetForwardsEachTenantsWritesToItsLeader: two instances, two
// tenants led by different instances; a client of each tenant on the
// instance that does not lead it writes through the shared internal
// endpoint, routed to its own tenant's leader, and reads its writes back
// on both instances.
func TestFleetForwardsEachTenantsWritesToItsLeader(t *testing.T) {
	fx := newFleetFixture(t, "alpha", "beta")
	fwd := func(c *embed.Config) { c.Engine.ForwardWrites = true }
	i1, i2 := fx.start("i1", fwd), fx.start("i2", fwd)
	ctx := testutil.Context(t, 30*time.Second)
	// alpha first reaches i1 and beta i2: each leads one.
	if _, err := fx.client(i1, "alpha").Put(ctx, "seed", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.client(i2, "beta").Put(ctx, "seed", "1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant         string
		leader, follow *embed.Fleet
	}{{"alpha", i1, i2}, {"beta", i2, i1}} {
		c := fx.client(tc.follow, tc.tenant)
		if _, err := c.Get(ctx, "seed"); err != nil { // starts the tenant on the follower
			t.Fatal(err)
		}
		if lead, _ := tc.follow.Tenant(tc.tenant).Leader(); lead {
			t.Fatalf("%s: the second instance leads", tc.tenant)
		}
		for i := range 5 {
			if _, err := c.Put(ctx, "k", fmt.Sprint(i)); err != nil {
				t.Fatalf("%s through its follower: %v", tc.tenant, err)
			}
		}
		for _, f := range []*embed.Fleet{tc.leader, tc.follow} {
			g, err := fx.client(f, tc.tenant).Get(ctx, "k")
			if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "4" || g.Kvs[0].Version != 5 {
				t.Fatalf("%s read back: %v, %v", tc.tenant, g, err)
			}
		}
		forwarded := counterValue(t, tc.follow, "zketcd_forward_requests_total", tc.tenant)
		if forwarded < 5 {
			t.Fatalf("%s: %v writes forwarded by its follower, want 5", tc.tenant, forwarded)
		}
	}
}

// counterValue sums the samples of a counter family with tenant's label
// on f's metrics.
func counterValue(t *testing.T, f *embed.Fleet, name, tenantName string) float64 {
	t.Helper()
	mfs, err := prometheus.Gatherers{f.Registry(), f.TenantGatherer()}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "tenant" && l.GetValue() == tenantName {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestFleetServesProfilesToOperatorsOnly: with EnablePprof (etcd's
// --enable-pprof) a fleet serves Go's runtime profiles on its metrics
// URLs, the operators' side, as a single cluster does; a tenant's
// connection on the client URLs is not served them (the process's
// profiles show every tenant's work). Without it the metrics URLs serve
// none either.
func TestFleetServesProfilesToOperatorsOnly(t *testing.T) {
	fx := newFleetFixture(t, "alpha")
	for _, enable := range []bool{true, false} {
		f := fx.start(fmt.Sprintf("i-%v", enable), func(c *embed.Config) {
			c.EnablePprof = enable
			c.MetricsAddrs = []string{"127.0.0.1:0"}
		})
		get := func(hc *http.Client, url string) (int, string) {
			t.Helper()
			resp, err := hc.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		st, body := get(http.DefaultClient, "http://"+f.MetricsAddrs()[0]+"/debug/pprof/goroutine?debug=1")
		if served := st == http.StatusOK && strings.Contains(body, "goroutine profile:"); served != enable {
			t.Errorf("EnablePprof=%v: the metrics URL answered %d, profile served %v", enable, st, served)
		}
		tlsCfg := fx.certs.ClientTLS(t, false)
		tlsCfg.Certificates = []tls.Certificate{fx.certs.ClientWithSubject(t, pkix.Name{CommonName: "alpha"})}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
		if st, body := get(hc, "https://"+f.ClientAddrs()[0]+"/debug/pprof/goroutine?debug=1"); strings.Contains(body, "goroutine profile:") {
			t.Errorf("EnablePprof=%v: a tenant's connection was served the profile (status %d)", enable, st)
		}
		f.Close(time.Second)
	}
}

// TestFleetSpreadsTenantsStartedAtOnceOverItsSessions: tenants whose
// engines start at the same moment (every kube-apiserver reconnecting after
// an instance restart) are spread over the instance's ZooKeeper sessions,
// each on the least used one counting the starts still under way, rather
// than piling onto one session whose in-order queue they would then share.
func TestFleetSpreadsTenantsStartedAtOnceOverItsSessions(t *testing.T) {
	const sessions, tenants = 4, 8
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
	}
	fx := newFleetFixture(t, names...)
	f := fx.start("i1", func(c *embed.Config) { c.Tenants.Sessions = sessions })
	ctx := testutil.Context(t, 30*time.Second)
	errc := make(chan error, tenants)
	for _, n := range names {
		c := fx.client(f, n)
		go func() {
			_, err := c.Get(ctx, "k")
			errc <- err
		}()
	}
	for range names {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	perSession := map[int64][]string{}
	for _, n := range names {
		be := f.Tenant(n)
		if be == nil {
			t.Fatalf("tenant %s does not run", n)
		}
		id, ok := be.Session()
		if !ok {
			t.Fatalf("tenant %s has no session", n)
		}
		perSession[id] = append(perSession[id], n)
	}
	if len(perSession) != sessions {
		t.Fatalf("%d tenants started at once share %d of %d sessions: %v", tenants, len(perSession), sessions, perSession)
	}
	for id, ns := range perSession {
		if len(ns) != tenants/sessions {
			t.Errorf("session %x holds %v, want %d tenants each", id, ns, tenants/sessions)
		}
	}
}

// TestFleetIdleTenantCostsFewGoroutines: a tenant started on an instance
// and left idle holds few goroutines (its engine's loops, its server's
// few stream workers), not the many stream workers a single cluster's
// server keeps for its one busy client port: a fleet runs an engine and a
// server per tenant. The count includes the test's own client of each
// tenant.
func TestFleetIdleTenantCostsFewGoroutines(t *testing.T) {
	const tenants = 10
	names := []string{"warm"}
	for i := range tenants {
		names = append(names, fmt.Sprintf("idle-%d", i))
	}
	fx := newFleetFixture(t, names...)
	f := fx.start("i1", nil)
	ctx := testutil.Context(t, 30*time.Second)
	start := func(n string) {
		if _, err := fx.client(f, n).Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	start("warm") // the shared session, the front's first connection
	time.Sleep(500 * time.Millisecond)
	before := runtime.NumGoroutine()
	for _, n := range names[1:] {
		start(n)
	}
	time.Sleep(500 * time.Millisecond)
	per := float64(runtime.NumGoroutine()-before) / tenants
	t.Logf("%.1f goroutines per idle tenant (its client's included)", per)
	if per > 60 {
		t.Fatalf("%.1f goroutines per idle tenant (its client's included), want at most 60", per)
	}
}

// TestFleetSpreadsLeadershipOverItsInstances: tenants whose clients all
// reached one instance first (kube-apiservers given the same
// --etcd-servers) are all led by it at first; once the other instance runs
// them too, the first hands over the excess and each instance leads half,
// every tenant still writable through both instances.
func TestFleetSpreadsLeadershipOverItsInstances(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	fx := newFleetFixture(t, names...)
	cfg := func(c *embed.Config) {
		c.Engine.ForwardWrites = true
		c.Tenants.BalanceInterval = 100 * time.Millisecond
	}
	i1, i2 := fx.start("i1", cfg), fx.start("i2", cfg)
	ctx := testutil.Context(t, 30*time.Second)
	for _, n := range names {
		if _, err := fx.client(i1, n).Put(ctx, "k", "1"); err != nil {
			t.Fatal(err)
		}
		if lead, _ := i1.Tenant(n).Leader(); !lead {
			t.Fatalf("%s: the first instance it reached does not lead it", n)
		}
	}
	for _, n := range names {
		if _, err := fx.client(i2, n).Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	leads := func(f *embed.Fleet) int {
		n := 0
		for _, name := range names {
			if be := f.Tenant(name); be != nil {
				if lead, _ := be.Leader(); lead {
					n++
				}
			}
		}
		return n
	}
	testutil.Eventually(t, 20*time.Second, "each instance leads two tenants", func() bool {
		return leads(i1) == 2 && leads(i2) == 2
	})
	time.Sleep(500 * time.Millisecond) // several looks: nothing moves any more
	if leads(i1) != 2 || leads(i2) != 2 {
		t.Fatalf("leaders moved on: %d on i1, %d on i2", leads(i1), leads(i2))
	}
	for _, n := range names {
		for i, f := range []*embed.Fleet{i1, i2} {
			if _, err := fx.client(f, n).Put(ctx, "k", fmt.Sprint(i)); err != nil {
				t.Fatalf("%s through instance %d after the handover: %v", n, i+1, err)
			}
		}
	}
}

// TestFleetIdleTenantAsksZooKeeperLittle: a tenant started on two
// instances and left idle sends ZooKeeper few requests a second in all:
// each tenant's engine on each instance polls, and a fleet runs hundreds
// of them against one ensemble. Its polls for the other instances'
// corruption-check requests and its compactor's rounds are slower than a
// single cluster's (a tenant on two instances sent ~11 requests a second before).
func TestFleetIdleTenantAsksZooKeeperLittle(t *testing.T) {
	const tenants = 8
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("idle-%d", i)
	}
	fx := newFleetFixture(t, names...)
	fwd := func(c *embed.Config) { c.Engine.ForwardWrites = true }
	i1, i2 := fx.start("i1", fwd), fx.start("i2", fwd)
	ctx := testutil.Context(t, 30*time.Second)
	for _, n := range names {
		for _, f := range []*embed.Fleet{i1, i2} {
			if _, err := fx.client(f, n).Get(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(3 * time.Second)
	before := zkPacketsReceived(t, fx.zk)
	const window = 10 * time.Second
	time.Sleep(window)
	rate := (zkPacketsReceived(t, fx.zk) - before) / window.Seconds() / tenants
	t.Logf("%.2f ZooKeeper requests a second per idle tenant on two instances", rate)
	if rate > 5 {
		t.Fatalf("%.2f ZooKeeper requests a second per idle tenant on two instances, want at most 5", rate)
	}
}

// zkPacketsReceived reads zk_packets_received from the ZooKeeper server
// at addr (mntr).
func zkPacketsReceived(t *testing.T, addr string) float64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("mntr")); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "zk_packets_received" {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("mntr of %s has no zk_packets_received:\n%s", addr, out)
	return 0
}
