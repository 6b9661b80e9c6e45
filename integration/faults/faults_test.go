package faults

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/integration/faultproxy"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// Environment:
//
//	FAULTS_DURATION  workload time of each scenario (e.g. 40s). Unset: the
//	                 short variant that `make test` runs: the scenarios
//	                 marked short, shortDuration each.
//	FAULTS_REPORT    write the summary table as markdown to this file.
//	FAULTS_ARTIFACTS keep the operations and the porcupine visualization of
//	                 every scenario here (default: only of a failed one, in
//	                 a new temporary directory).
//	ZKETCD_BINARY    the zketcd binary (default: built from this tree).
//	FAULTS_ZKETCD_LOG_LEVEL  zketcd's --log-level (default info).
const (
	shortDuration  = 12 * time.Second
	sessionTimeout = 4 * time.Second
	// leaseBound is how late a lease may expire after it was due: a
	// leadership change (the old leader's session expiring) plus a loaded
	// machine's scheduling.
	leaseBound = sessionTimeout + 20*time.Second
)

var (
	zketcdBin string
	ports     = zkserver.NewPortAllocator()

	summaryMu sync.Mutex
	summary   []row
)

func TestMain(m *testing.M) {
	zketcdBin = os.Getenv("ZKETCD_BINARY")
	var tmp string
	if zketcdBin == "" {
		var err error
		tmp, err = os.MkdirTemp("", "zketcd-faults-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		zketcdBin, err = BuildZketcd(ctx, tmp)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(tmp)
			os.Exit(1)
		}
	}
	code := m.Run()
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	summaryMu.Lock()
	rows := append([]row(nil), summary...)
	summaryMu.Unlock()
	if len(rows) > 0 {
		fmt.Println()
		fmt.Print(textTable(rows))
		if path := os.Getenv("FAULTS_REPORT"); path != "" {
			if err := os.WriteFile(path, []byte(markdown(rows, durationSetting())+keptSections(path)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "write report:", err)
				code = 1
			} else {
				fmt.Println("summary written to", path)
			}
		}
	}
	os.Exit(code)
}

func durationSetting() string {
	if d := os.Getenv("FAULTS_DURATION"); d != "" {
		return d
	}
	return shortDuration.String() + " (short variant)"
}

// cluster is a 3-member ensemble, zketcd A (reaching ZooKeeper through one
// fault proxy per member) and zketcd B (direct, or with clusterOptions.links
// or proxyB through proxies of its own), and clients.
type cluster struct {
	t       *testing.T
	dir     string
	ens     *zkserver.Ensemble
	proxies []*faultproxy.Proxy // A's, one per member in index order
	// bProxies are B's, one per member, with clusterOptions.links or
	// proxyB (else nil: B reaches the members directly).
	bProxies []*faultproxy.Proxy
	// links are the fault proxies on the members' links to each other
	// (key: the link without its address), with clusterOptions.links.
	links map[zkserver.PeerLink]*faultproxy.Proxy
	// internal are the fault proxies in front of A's and B's internal
	// endpoints: the addresses each advertises to the other.
	internal map[*Zketcd]*faultproxy.Proxy
	a, b     *Zketcd
	clients  map[string]*clientv3.Client
	// w is the scenario's workload, once started.
	w *Workload
	// zkOpts are the ensemble's options; notes are measurements a
	// scenario adds to its report.
	zkOpts zkserver.Options
	notes  []string
	// sessionTimeout is the instances' --zk-session-timeout.
	sessionTimeout time.Duration
	// root is the instances' --zk-root; moved is where a move scenario
	// moved the cluster last ("": nowhere), moves how many it made.
	root, moved string
	moves       int
	// tenant, if set, is the fleet tenant the workload runs on: the
	// instances serve the fleet root root (--tenants) and the clients
	// reach the tenant with a certificate whose CN names it.
	tenant string
}

// clusterOptions shape a cluster.
type clusterOptions struct {
	// zk, if not nil, adjusts the ensemble's options first.
	zk func(*testing.T, *zkserver.Options)
	// links routes every member-to-member link of the ensemble through a
	// fault proxy (cluster.links) and puts zketcd B behind proxies of its
	// own (cluster.bProxies), so that a member can be partitioned from
	// the others and either instance kept off chosen members.
	links bool
	// readLease runs both instances with --read-lease.
	readLease bool
	// sessionTimeout is the instances' --zk-session-timeout (0: the
	// package's sessionTimeout).
	sessionTimeout time.Duration
	// env is added to both instances' environment.
	env []string
	// args are added to both instances' serve flags.
	args []string
	// proxyB puts zketcd B behind fault proxies of its own
	// (cluster.bProxies), one per member, without the member links' ones.
	proxyB bool
	// tenant, if set, serves the cluster as this tenant of a fleet
	// (cluster.tenant).
	tenant string
}

// newCluster starts the cluster.
func newCluster(t *testing.T, co clusterOptions) *cluster {
	dir := t.TempDir()
	if a := os.Getenv("FAULTS_ARTIFACTS"); a != "" {
		// Keep the zketcd processes' logs with the scenario's artifacts.
		dir = filepath.Join(a, path.Base(t.Name()), "procs")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := zkservertest.Options(t)
	opts.Ports = ports
	opts.TickTime = 500 * time.Millisecond // session timeouts from 1 s
	opts.ExtraConfig = map[string]string{"forceSync": "no"}
	if co.zk != nil {
		co.zk(t, &opts)
	}
	cl := &cluster{t: t, dir: dir, clients: map[string]*clientv3.Client{}}
	if co.links {
		cl.links = map[zkserver.PeerLink]*faultproxy.Proxy{}
		opts.RoutePeer = func(l zkserver.PeerLink) (string, error) {
			p, err := faultproxy.Start(l.Addr)
			if err != nil {
				return "", err
			}
			t.Cleanup(func() { p.Close() })
			l.Addr = "" // a start retried on new ports replaces the proxy
			cl.links[l] = p
			return p.Addr(), nil
		}
	}
	cl.ens, cl.zkOpts = zkservertest.EnsembleWith(t, 3, opts), opts
	memberProxies := func() (ps []*faultproxy.Proxy, addrs []string) {
		for _, addr := range cl.ens.Addrs() {
			p, err := faultproxy.Start(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ps, addrs = append(ps, p), append(addrs, p.Addr())
		}
		return ps, addrs
	}
	var viaProxy []string
	cl.proxies, viaProxy = memberProxies()
	bZK := cl.ens.Addrs()
	if co.links || co.proxyB {
		cl.bProxies, bZK = memberProxies()
	}
	root := "/faults-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	cl.root = root
	var clientTLS *tls.Config
	if co.tenant != "" {
		var args []string
		args, clientTLS = cl.fleet(t, co.tenant)
		co.args = append(args, co.args...)
	}
	cl.internal = map[*Zketcd]*faultproxy.Proxy{}
	st := co.sessionTimeout
	if st == 0 {
		st = sessionTimeout
	}
	cl.sessionTimeout = st
	mk := func(name string, zk []string) *Zketcd {
		pp, err := ports.PickN(3)
		if err != nil {
			t.Fatal(err)
		}
		p1, p2, p3 := pp[0], pp[1], pp[2]
		internal := fmt.Sprintf("127.0.0.1:%d", p3)
		ip, err := faultproxy.Start(internal)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ip.Close() })
		args := co.args
		if co.tenant != "" {
			args = append([]string{"--listen-client-urls", fmt.Sprintf("https://127.0.0.1:%d", p1)}, args...)
		}
		z := NewZketcd(ZketcdConfig{Bin: zketcdBin, Name: name, Root: root, Dir: dir, ZK: zk,
			Addr: fmt.Sprintf("127.0.0.1:%d", p1), Metrics: fmt.Sprintf("127.0.0.1:%d", p2),
			Internal: internal, AdvertiseInternal: ip.Addr(), ReadLease: co.readLease, Env: co.env, Args: args,
			SessionTimeout: st, ProgressInterval: time.Second, LogLevel: os.Getenv("FAULTS_ZKETCD_LOG_LEVEL")})
		cl.internal[z] = ip
		t.Cleanup(func() {
			if err := z.Kill(); err != nil {
				t.Error(err)
			}
		})
		return z
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// start starts an instance on ports picked for it. A picked port is
	// free when picked, but the kernel may hand it to another connection's
	// source port before zketcd binds it (every outbound connection draws
	// from the same range): such a start is tried again on other ports.
	start := func(name string, zk []string) *Zketcd {
		for attempt := 1; ; attempt++ {
			z := mk(name, zk)
			err := z.Start(ctx)
			if err == nil {
				return z
			}
			if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
				t.Fatal(err)
			}
			t.Logf("zketcd %s: a port was taken between picking and binding, trying other ports: %v", name, err)
			delete(cl.internal, z)
		}
	}
	cl.a = start("a", viaProxy)
	cl.b = start("b", bZK)
	for name, eps := range map[string][]string{"A": {cl.a.Addr}, "B": {cl.b.Addr}, "AB": {cl.a.Addr, cl.b.Addr}} {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second, TLS: clientTLS})
		if err != nil {
			t.Fatal(err)
		}
		// Closed before the servers are killed (cleanups run last first).
		t.Cleanup(func() { c.Close() })
		cl.clients[name] = c
	}
	return cl
}

// waitHealthy waits until both instances report healthy.
func (cl *cluster) waitHealthy(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok := cl.a.Healthy(ctx) && cl.b.Healthy(ctx)
		cancel()
		if ok {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// scenario is one fault, injected repeatedly under the workload.
type scenario struct {
	name string
	// short: part of the short variant that `make test` runs.
	short bool
	// expiresSession: the fault must expire zketcd A's ZooKeeper session.
	expiresSession bool
	// inject injects the fault and returns what was done and how to heal
	// it; hold is how long the fault lasts before heal is called.
	inject func(t *testing.T, cl *cluster) (what string, heal func())
	hold   time.Duration
	// zk, if not nil, adjusts the ensemble's options (slowDisk).
	zk func(t *testing.T, o *zkserver.Options)
	// links: the cluster's member links and B's ZooKeeper connections go
	// through fault proxies (clusterOptions.links).
	links bool
	// readLease: both instances run with --read-lease.
	readLease bool
	// putRate adds open-loop blind puts at this rate (Config.PutRate), so
	// that how many writes wait on a commit follows its latency.
	putRate float64
	// probe adds reads, puts and keepalives through both instances every
	// 10 ms (Config.ProbeEvery); probeOnly leaves every other worker out
	// (the watches stay), so that nothing but the probes writes.
	probe, probeOnly bool
	// sessionTimeout is the instances' --zk-session-timeout (0: the
	// package's sessionTimeout).
	sessionTimeout time.Duration
	// noDeadline: the clients send every request without a deadline
	// (Config.RequestTimeout negative).
	noDeadline bool
	// tagGeneration, if not 0, is how many forwarded requests' tags one
	// generation of the leader's tag index holds (the instances' fault
	// hook ZKETCD_FAULT_TAG_GENERATION).
	tagGeneration int
	// args are added to both instances' serve flags (e.g. --commit-pipeline).
	args []string
	// proxyB: zketcd B reaches ZooKeeper through fault proxies of its own
	// (clusterOptions.proxyB), so that a fault can slow B's links too.
	proxyB bool
	// etcdWorkers, if not 0, runs this many etcd-like workers, through A
	// and B in turn, instead of one through each: more writes waiting on
	// the committer at once.
	etcdWorkers int
	// casWorkers adds compare-and-swap workers that send each request to
	// the other instance than the one before (Config.CASWorkers); casOnly
	// leaves the kube-like, etcd-like and lease workers out (the
	// compactor, the watches and the faults' probe leases stay).
	casWorkers int
	casOnly    bool
	// casLeases keeps the lease worker with casOnly.
	casLeases bool
	// liveBallast leaves out the ballast's superseded part (preloadBallast):
	// the log then holds mostly live data, and every physical compaction of
	// the run keeps it as the generation (no base written), which recovery
	// and restarts replay from its first entry.
	liveBallast bool
	// casLead is the CAS workers' Config.CASLead.
	casLead time.Duration
	// tenant: the workload runs on a tenant of a fleet served by both
	// instances (clusterOptions.tenant).
	tenant bool
	// flights notes, for each instance, how many commits it had in flight
	// on average before the first fault and from each fault to its heal
	// (flightNote).
	flights bool
}

// zketcdLeader returns the zketcd instance that is the leader (the one
// committing every write while the other forwards to it): the one whose
// commit count grows, or, if neither commits meanwhile, the one Status
// names (which, right after a restart, may still be the killed process's
// session). It notes both instances' commits and forwards so far.
func zketcdLeader(t *testing.T, cl *cluster) (victim *Zketcd, name string) {
	commits := func(z *Zketcd) float64 {
		m, _ := scrapeMetrics(z.Metrics)
		return m["zketcd_commit_duration_seconds_count"]
	}
	deadline := time.Now().Add(20 * time.Second)
	for victim == nil && time.Now().Before(deadline) {
		a0, b0 := commits(cl.a), commits(cl.b)
		time.Sleep(300 * time.Millisecond)
		switch da, db := commits(cl.a)-a0, commits(cl.b)-b0; {
		case da > db:
			victim, name = cl.a, "A"
		case db > da:
			victim, name = cl.b, "B"
		}
	}
	if victim == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := cl.clients["A"].Status(ctx, cl.a.Addr)
		if err != nil {
			t.Fatalf("no zketcd leader: %v", err)
		}
		victim, name = cl.b, "B"
		if st.Leader == st.Header.MemberId {
			victim, name = cl.a, "A"
		}
	}
	other, otherName := cl.a, "A"
	if victim == cl.a {
		other, otherName = cl.b, "B"
	}
	lm, _ := scrapeMetrics(victim.Metrics)
	fm, _ := scrapeMetrics(other.Metrics)
	note := fmt.Sprintf("before the fault on %s (leader): it made %.0f commits and served %.0f forwarded requests (since its start); %s made %.0f commits, forwarded %.0f requests (%.0f sent again after an unknown outcome)",
		name, lm["zketcd_commit_duration_seconds_count"], lm["zketcd_forward_served_total"],
		otherName, fm["zketcd_commit_duration_seconds_count"], fm["zketcd_forward_requests_total"], fm["zketcd_forward_resends_total"])
	t.Log(note)
	cl.notes = append(cl.notes, note)
	return victim, name
}

// killZketcdLeader kills -9 the zketcd leader under writes and restarts
// it: writes in flight through the other instance have an unknown outcome
// there and are resolved by their tags.
func killZketcdLeader(t *testing.T, cl *cluster) (string, func()) {
	victim, name := zketcdLeader(t, cl)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("kill -9 the zketcd leader (%s) under forwarded writes, restart it", name), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := victim.Start(ctx); err != nil {
			t.Fatalf("restart zketcd %s: %v", name, err)
		}
	}
}

// pauseZketcdLeader SIGSTOPs the zketcd leader past its session's expiry:
// the other instance takes over and re-sends what it had in flight; the
// old leader resumes with requests it had queued, whose commits its fence
// refuses.
func pauseZketcdLeader(t *testing.T, cl *cluster) (string, func()) {
	victim, name := zketcdLeader(t, cl)
	if err := victim.Pause(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("SIGSTOP the zketcd leader (%s) for %v (session timeout %v), SIGCONT", name, 2*sessionTimeout+time.Second, sessionTimeout), func() {
		if err := victim.Resume(); err != nil {
			t.Fatal(err)
		}
	}
}

// forwardPartition blackholes the zketcd leader's internal endpoint (the
// proxy the other instance reaches it through) while both keep ZooKeeper:
// the follower's forwards and read-position requests time out, with
// unknown outcomes for those in flight; it must resolve them from the log,
// never acknowledge one that did not commit, and serve again once healed.
func forwardPartition(t *testing.T, cl *cluster) (string, func()) {
	return forwardPartitionFor(2*sessionTimeout+time.Second)(t, cl)
}

// forwardPartitionFor is forwardPartition held for hold (the description
// says so; the scenario's hold is what holds it).
func forwardPartitionFor(hold time.Duration) func(t *testing.T, cl *cluster) (string, func()) {
	return func(t *testing.T, cl *cluster) (string, func()) {
		victim, name := zketcdLeader(t, cl)
		p := cl.internal[victim]
		p.Blackhole()
		return fmt.Sprintf("blackhole the follower -> leader (%s) internal endpoint for %v, ZooKeeper reachable, heal", name, hold), p.Heal
	}
}

// forwardLongHold outlasts the 10 s the leader keeps the answers of the
// forwarded requests it served, and stays within the 16 s a forward of
// unknown outcome is re-sent for at forwardLongSession (twice the session
// timeout): a request re-sent after the heal is resolved by the tag index
// alone, whose generations forwardLongTagGeneration makes small.
const (
	forwardLongHold          = 13 * time.Second
	forwardLongSession       = 8 * time.Second
	forwardLongTagGeneration = 8
)

func killZKMember(leader bool) func(t *testing.T, cl *cluster) (string, func()) {
	return func(t *testing.T, cl *cluster) (string, func()) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var li int
		for {
			var err error
			if li, err = cl.ens.Leader(ctx); err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("no ZooKeeper leader: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		victim, what := li, "kill -9 ZooKeeper leader"
		if !leader {
			victim, what = (li+1)%cl.ens.Size(), "kill -9 ZooKeeper follower"
		}
		m := cl.ens.Member(victim)
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s (member %d)", what, victim+1), func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := m.Start(ctx); err != nil {
				t.Fatalf("restart ZooKeeper member %d: %v", victim+1, err)
			}
		}
	}
}

var scenarios = []scenario{
	{name: "ZKLeaderKill", short: true, hold: 3 * time.Second, inject: killZKMember(true)},
	{name: "ZKFollowerKill", hold: 3 * time.Second, inject: killZKMember(false)},
	{name: "ZKEnsembleRestart", hold: 2 * time.Second, inject: func(t *testing.T, cl *cluster) (string, func()) {
		if err := cl.ens.Kill(); err != nil {
			t.Fatal(err)
		}
		return "kill -9 all 3 ZooKeeper members, start them again", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := cl.ens.Start(ctx); err != nil {
				t.Fatalf("restart ensemble: %v", err)
			}
		}
	}},
	{name: "ZketcdSigstop", short: true, expiresSession: true, hold: 2*sessionTimeout + time.Second, inject: func(t *testing.T, cl *cluster) (string, func()) {
		if err := cl.a.Pause(); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("SIGSTOP zketcd A for %v (session timeout %v), SIGCONT", 2*sessionTimeout+time.Second, sessionTimeout), func() {
			if err := cl.a.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}},
	// The log kept as the generation (liveBallast): the leader killed
	// while it compacts every second, the killed instance replaying the
	// whole log on its restart; a ZooKeeper leader killed meanwhile.
	{name: "LogGenerationLeaderKill", liveBallast: true, hold: time.Second, inject: killZketcdLeader},
	{name: "LogGenerationZKLeaderKill", liveBallast: true, hold: 3 * time.Second, inject: killZKMember(true)},
	{name: "ZketcdKill", hold: time.Second, inject: func(t *testing.T, cl *cluster) (string, func()) {
		if err := cl.a.Kill(); err != nil {
			t.Fatal(err)
		}
		return "kill -9 zketcd A under writes, restart it", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := cl.a.Start(ctx); err != nil {
				t.Fatalf("restart zketcd A: %v", err)
			}
		}
	}},
	{name: "ForwardLeaderKill", hold: time.Second, inject: killZketcdLeader},
	{name: "ForwardLeaderSigstop", hold: 2*sessionTimeout + time.Second, inject: pauseZketcdLeader},
	{name: "ForwardPartition", hold: 2*sessionTimeout + time.Second, inject: forwardPartition},
	// The same partition for longer than the leader remembers answered
	// forwards, with clients that set no deadline, open-loop puts, and a
	// tag index of 8 tags a generation: re-sends after the heal meet a
	// leader whose index no longer holds the tags of requests it
	// committed before the partition.
	{name: "ForwardLongPartition", hold: forwardLongHold, inject: forwardPartitionFor(forwardLongHold), putRate: 50,
		noDeadline: true, tagGeneration: forwardLongTagGeneration, sessionTimeout: forwardLongSession},
	{name: "ZketcdPartition", expiresSession: true, hold: 2*sessionTimeout + time.Second, inject: func(t *testing.T, cl *cluster) (string, func()) {
		for _, p := range cl.proxies {
			p.Blackhole()
		}
		return fmt.Sprintf("blackhole zketcd A <-> ZooKeeper for %v (session timeout %v), heal", 2*sessionTimeout+time.Second, sessionTimeout), func() {
			for _, p := range cl.proxies {
				p.Heal()
			}
		}
	}},
	{name: "ZKRollingRestart", inject: rollingRestart},
	{name: "ZKConnectStringChange", hold: 2 * time.Second, inject: changeConnectString},
	{name: "ZKSlowDisk", hold: slowHold, zk: slowDisk, inject: slowFsync, putRate: 30},
	{name: "ZKFollowerPartition", links: true, hold: followerPartitionHold, zk: longSyncLimit, inject: zkFollowerPartition},
	// The same leader faults with --read-lease: the leader answers
	// linearizable reads from memory within a third of the session timeout
	// of a landed transaction, and no other instance can commit meanwhile.
	{name: "ReadLeaseLeaderKill", readLease: true, hold: time.Second, inject: killZketcdLeader},
	{name: "ReadLeaseLeaderSigstop", readLease: true, hold: 2*sessionTimeout + time.Second, inject: pauseZketcdLeader},
	{name: "ReadLeaseZKLeaderKill", readLease: true, hold: 3 * time.Second, inject: killZKMember(true)},
	{name: "ReadLeaseForwardPartition", readLease: true, hold: 2*sessionTimeout + time.Second, inject: forwardPartition},
	{name: "ReadLeaseZKFollowerPartition", readLease: true, links: true, hold: followerPartitionHold, zk: longSyncLimit, inject: zkFollowerPartition},
	// The read lease on a ZooKeeper that grants a tenth of the session
	// timeout zketcd asks for (its default, 10 s), under the same follower
	// partition, with nothing but probes every 10 ms through both
	// instances, which stop writing from before the cut until the other
	// instance leads.
	{name: "ReadLeaseGrantedTimeout", readLease: true, links: true, probe: true, probeOnly: true, sessionTimeout: 10 * time.Second,
		hold: followerPartitionHold, zk: shortGrant, inject: quietFollowerPartition},
	// The leader and ZooKeeper faults and a slow ZooKeeper link with every
	// instance keeping up to 8 log entries in flight, under more writers
	// (closed and open loop) than one commit at a time serves
	// (pipeline_test.go).
	{name: "PipelineLeaderKill", args: pipelineArgs, etcdWorkers: pipelineEtcdWorkers, putRate: pipelinePutRate, flights: true,
		hold: time.Second, inject: killZketcdLeader},
	{name: "PipelineLeaderSigstop", args: pipelineArgs, etcdWorkers: pipelineEtcdWorkers, putRate: pipelinePutRate, flights: true,
		hold: 2*sessionTimeout + time.Second, inject: pauseZketcdLeader},
	{name: "PipelineZKLeaderKill", args: pipelineArgs, etcdWorkers: pipelineEtcdWorkers, putRate: pipelinePutRate, flights: true,
		hold: 3 * time.Second, inject: killZKMember(true)},
	{name: "PipelineSlowLink", args: pipelineArgs, etcdWorkers: pipelineEtcdWorkers, putRate: pipelinePutRate, flights: true,
		proxyB: true, hold: slowLinkHold, inject: slowZKLink(slowLinkDelay)},
	// Both instances commit (--forward-writes=false) with 4 entries in
	// flight while A's ZooKeeper link is slow, under compare-and-swap
	// workers that send each request to the other instance than the one
	// before: a request that writes nothing must not be answered by one of
	// A's flights that landed before it arrived, missing what B committed
	// since.
	{name: "TwoCommittersSlowLink", args: twoCommittersArgs, casWorkers: casWorkers, casOnly: true, casLead: 2 * twoCommittersDelay, flights: true,
		hold: slowLinkHold, inject: slowALink},
	// Both instances commit with 4 entries in flight while A's ZooKeeper
	// links are reset for 50-200 ms at a time: A's commits in flight lose
	// their answers, are sent again and resolved by their writer tags,
	// while B takes positions. A flight chained on a marker version
	// guessed from a resolved commit would land on a position B took,
	// evaluated on a batch that never landed ("cannot apply log entry", or
	// a history that is not linearizable); re-sends out of the pipeline's
	// order would leave writes of unknown outcome.
	{name: "TwoCommittersZKBlip", args: twoCommittersArgs, casWorkers: casWorkers, casOnly: true, casLeases: true,
		casLead: 2 * twoCommittersDelay, putRate: blipPutRate, flights: true, hold: blipHold, inject: blipALinks},
	// The cluster moved to another root of the ensemble while it serves
	// (`zketcd move`, move_test.go), once a fault: the mover killed
	// mid-copy and run again, zketcd A killed at the fence, the ZooKeeper
	// leader killed mid-move.
	{name: "MoveMoverKill", hold: time.Second, inject: moveMoverKill},
	{name: "MoveZketcdKill", hold: time.Second, inject: moveZketcdKill},
	{name: "MoveZKLeaderKill", hold: 3 * time.Second, inject: moveZKLeaderKill},
	// The workload's cluster is a tenant of a fleet both instances serve,
	// moved to another root while it serves (`zketcd tenant move`), the
	// mover killed mid-copy or after its fence and run again, or zketcd A
	// killed at the fence and restarted (its registry may still name the
	// source: it follows the fence or the moved record).
	{name: "TenantMoveMoverKill", tenant: true, hold: time.Second, inject: moveMoverKill},
	{name: "TenantMoveZketcdKill", tenant: true, hold: time.Second, inject: moveZketcdKill},
}

func TestFaults(t *testing.T) {
	duration := shortDuration
	full := false
	if d := os.Getenv("FAULTS_DURATION"); d != "" {
		var err error
		if duration, err = time.ParseDuration(d); err != nil {
			t.Fatalf("FAULTS_DURATION: %v", err)
		}
		full = true
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if !full && !sc.short {
				t.Skip("not in the short variant: run make faults (FAULTS_DURATION=...)")
			}
			runScenario(t, sc, duration)
		})
	}
}

func runScenario(t *testing.T, sc scenario, duration time.Duration) {
	co := clusterOptions{zk: sc.zk, links: sc.links, readLease: sc.readLease, sessionTimeout: sc.sessionTimeout,
		args: sc.args, proxyB: sc.proxyB}
	if sc.tenant {
		co.tenant = "workload"
	}
	if sc.tagGeneration > 0 {
		co.env = []string{fmt.Sprintf("ZKETCD_FAULT_TAG_GENERATION=%d", sc.tagGeneration)}
	}
	cl := newCluster(t, co)
	var probeEvery time.Duration
	if sc.probe {
		probeEvery = 10 * time.Millisecond
	}
	wc := Config{
		Clients:        cl.clients,
		KubeWorkers:    []string{"A", "B", "AB", "AB"},
		EtcdWorkers:    []string{"A", "B"},
		PutRate:        sc.putRate,
		ProbeEvery:     probeEvery,
		LeaseClient:    "AB",
		CompactEvery:   time.Second,
		RequestTimeout: 4 * time.Second,
		Seed:           uint64(time.Now().UnixNano()),
	}
	if sc.noDeadline {
		wc.RequestTimeout = -1
	}
	if sc.etcdWorkers > 0 {
		wc.EtcdWorkers = nil
		for i := range sc.etcdWorkers {
			wc.EtcdWorkers = append(wc.EtcdWorkers, []string{"A", "B"}[i%2])
		}
	}
	wc.CASWorkers, wc.CASLead = sc.casWorkers, sc.casLead
	if sc.casOnly {
		wc.KubeWorkers, wc.EtcdWorkers = nil, nil
		if !sc.casLeases {
			wc.LeaseClient = ""
		}
	}
	if sc.probeOnly {
		wc.KubeWorkers, wc.EtcdWorkers, wc.LeaseClient, wc.CompactEvery = nil, nil, "", 0
	}
	preloadBallast(t, cl.clients["B"], !sc.liveBallast)
	w, err := Start(wc)
	if err != nil {
		t.Fatal(err)
	}
	cl.w = w
	began := time.Now()
	const warmup, settle = 3 * time.Second, 3 * time.Second
	var fl flightSample
	if sc.flights {
		time.Sleep(time.Second)
		fl = sampleFlights(cl)
		time.Sleep(warmup - time.Second)
		cl.flightNote(fl, "in the 2 s before the first fault")
	} else {
		time.Sleep(warmup)
	}
	var whats []string
	for n := 0; n == 0 || time.Since(began)+sc.hold+settle < duration; n++ {
		i, err := w.Probe(sc.name, 3)
		if err != nil {
			t.Fatal(err)
		}
		if sc.flights {
			// Before the fault and after its heal: a paused instance
			// does not answer.
			fl = sampleFlights(cl)
		}
		what, heal := sc.inject(t, cl)
		t.Logf("%.1fs: fault %d: %s", w.Since().Seconds(), n+1, what)
		time.Sleep(sc.hold)
		heal()
		if sc.flights {
			cl.flightNote(fl, fmt.Sprintf("from fault %d to its heal", n+1))
		}
		w.Healed(i)
		t.Logf("%.1fs: healed", w.Since().Seconds())
		if !cl.waitHealthy(60 * time.Second) {
			t.Errorf("instances not healthy 60s after fault %d healed", n+1)
		}
		time.Sleep(settle)
		whats = append(whats, what)
	}
	if rest := duration - time.Since(began); rest > 0 {
		time.Sleep(rest)
	}
	w.WaitProbes(leaseBound)
	h := w.Stop()
	cl.notes = append(cl.notes, compactionNote(cl))
	t.Logf("workload ran %.1fs; checking %d operations and %d watches", h.Elapsed.Seconds(), len(h.Ops), len(h.Watches))

	artifacts := os.Getenv("FAULTS_ARTIFACTS")
	if artifacts != "" {
		artifacts = filepath.Join(artifacts, sc.name)
		if err := os.MkdirAll(artifacts, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		artifacts = t.TempDir()
	}
	res := Check(h, CheckOptions{LeaseBound: leaseBound, Takeover: cl.sessionTimeout, ArtifactDir: artifacts})
	// An entry an instance cannot apply stops it for good, and every
	// instance (and every restart, replaying into it) meets it.
	for _, z := range []struct {
		name string
		z    *Zketcd
	}{{"A", cl.a}, {"B", cl.b}} {
		if n := z.z.Grep("cannot apply log entry"); n > 0 {
			res.Violations = append(res.Violations, fmt.Sprintf("zketcd %s logged %d times that it cannot apply a log entry", z.name, n))
		}
	}
	expired := cl.a.Grep("the previous one expired")
	t.Logf("zketcd A got a new ZooKeeper session after an expiry %d times, B %d times", expired, cl.b.Grep("the previous one expired"))
	if sc.expiresSession && expired < len(h.Faults) {
		t.Errorf("zketcd A's session expired %d times in %d faults meant to expire it", expired, len(h.Faults))
	}
	report(t, sc, h, res, whats, cl.notes)
	if len(res.Violations) > 0 {
		keep := artifacts
		if os.Getenv("FAULTS_ARTIFACTS") == "" {
			if d, err := os.MkdirTemp("", "zketcd-faults-"+sc.name+"-"); err == nil {
				keep = d
				if res.VisualizationPath != "" {
					if b, err := os.ReadFile(res.VisualizationPath); err == nil {
						_ = os.WriteFile(filepath.Join(keep, "linearizability.html"), b, 0o644)
					}
				}
			}
		}
		for _, z := range []*Zketcd{cl.a, cl.b} {
			if b, err := os.ReadFile(z.LogPath()); err == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(z.LogPath())), b, 0o644)
			}
		}
		if err := WriteOps(h, filepath.Join(keep, "ops.txt")); err == nil {
			t.Logf("operations, watch events, logs and visualization kept in %s", keep)
		}
		for _, v := range res.Violations {
			t.Errorf("VIOLATION: %s", v)
		}
	} else if os.Getenv("FAULTS_ARTIFACTS") != "" {
		_ = WriteOps(h, filepath.Join(artifacts, "ops.txt"))
	}
}

// allBefore tells whether every probe lease expired before its fault's heal.
func allBefore(fs []FaultStats) bool {
	for _, f := range fs {
		if !f.ProbeExpired || f.ProbeExpiry >= 0 {
			return false
		}
	}
	return len(fs) > 0
}

// compactionNote says which generations the physical compactions of the
// run left (zketcd_physical_compactions_total of both instances, counted
// since each one's last start): the log kept as it is while it holds
// mostly live data (the ballast), then whole bases and deltas.
func compactionNote(cl *cluster) string {
	a, _ := scrapeMetrics(cl.a.Metrics)
	b, _ := scrapeMetrics(cl.b.Metrics)
	n := func(kind string) float64 {
		k := `zketcd_physical_compactions_total{generation="` + kind + `"}`
		return a[k] + b[k]
	}
	return fmt.Sprintf("physical compactions published (both instances, since each one's last start): %.0f kept the log, %.0f wrote a whole base, %.0f a delta",
		n("log"), n("whole"), n("delta"))
}

func report(t *testing.T, sc scenario, h *History, res *Result, whats, notes []string) {
	t.Logf("operations: %d (%d ok, %d failed: %v, %d refused as compacted); %d successful writes, %d reads, %d compactions",
		res.Ops, res.OK, res.Failed, res.ErrorsByClassCount, res.Compacted, res.Writes, res.Reads, res.Compactions)
	t.Logf("unknown-outcome writes: %d found applied, %d not applied; %d revisions, %d external (lease keys); %d watch events",
		res.Resolved, res.Dropped, res.Revisions, res.External, res.WatchEvents)
	t.Logf("linearizability: %s (%d operations, %v); watches: %s", res.Linearizable, res.PorcupineOps,
		res.PorcupineTook.Round(time.Millisecond), res.WatchReport)
	t.Logf("leases: %d checked, %d expired, latest %.1fs after due", res.LeasesChecked, res.LeasesExpired, res.MaxLeaseLateness.Seconds())
	if res.StaleNoOps > 0 {
		t.Logf("stale no-ops: %d transactions that wrote nothing answered below a write acknowledged before they were sent", res.StaleNoOps)
	}
	var details []string
	for i, f := range res.FaultStats {
		probe := "never"
		switch {
		case f.ProbeExpired && f.ProbeExpiry >= 0:
			probe = fmt.Sprintf("%.1f s after the heal%s", f.ProbeExpiry.Seconds(), laterHeal(f, i))
		case f.ProbeExpired:
			probe = fmt.Sprintf("%.1f s before the heal%s", -f.ProbeExpiry.Seconds(), laterHeal(f, i))
		}
		d := fmt.Sprintf("%s: injected at %.1f s (%d writes in flight), healed at %.1f s: %d failed requests over %.1f s, the last %.1f s after the heal; probe lease (TTL %d s) expired %s",
			whats[min(i, len(whats)-1)], f.Inject.Seconds(), f.InFlight, f.Heal.Seconds(), f.Errors, f.ErrorWindow.Seconds(),
			f.Recovery.Seconds(), f.ProbeTTL, probe)
		details = append(details, d)
		t.Logf("fault %d: %s", i+1, d)
	}
	details = append(details, notes...)
	if res.StaleNoOps > 0 {
		details = append(details, fmt.Sprintf("%d stale no-ops: transactions that wrote nothing (a failed compare, a delete of nothing) answered below a write acknowledged before they were sent", res.StaleNoOps))
	}
	if os.Getenv("FAULTS_DURATION") != "" {
		// Streamed by make faults (go test in local directory mode).
		stale := ""
		if res.StaleNoOps > 0 {
			stale = fmt.Sprintf(" (%d stale no-ops)", res.StaleNoOps)
		}
		fmt.Printf("%s: %d operations, %d faults, %d violations%s, linearizable: %s\n", sc.name, res.Ops, len(h.Faults), len(res.Violations), stale, res.Linearizable)
	}
	what := ""
	if len(whats) > 0 {
		what = whats[0]
	}
	summaryMu.Lock()
	defer summaryMu.Unlock()
	summary = append(summary, row{
		Scenario: sc.name, Fault: what, Faults: len(h.Faults), Duration: h.Elapsed,
		Ops: res.Ops, Failed: res.Failed, Resolved: res.Resolved, Dropped: res.Dropped,
		WatchEvents: res.WatchEvents, Compactions: res.Compactions, Leases: res.LeasesChecked,
		Violations: len(res.Violations), Linearizable: string(res.Linearizable), PorcupineOps: res.PorcupineOps,
		ErrorWindow: res.MaxErrorWindow, Recovery: res.MaxRecovery, ProbeAfterHeal: res.MaxProbeAfterHeal,
		Details: details, Problems: res.Violations,
		Extra: fmt.Sprintf("%d successful writes, %d reads, %d list pages refused as compacted; %d revisions (%d by lease keys); errors by kind %v; porcupine took %v",
			res.Writes, res.Reads, res.Compacted, res.Revisions, res.External, res.ErrorsByClassCount, res.PorcupineTook.Round(time.Millisecond)),
		ProbeDuring: allBefore(res.FaultStats),
	})
}

// laterHeal names the later fault a probe's expiry is measured from, if any.
func laterHeal(f FaultStats, i int) string {
	if f.ProbeFrom == i {
		return ""
	}
	return fmt.Sprintf(" of fault %d (injected before the probe expired, it restarted the lease's clock)", f.ProbeFrom+1)
}

// Ballast: keys outside the workload's Prefix that no worker touches, so
// that each compaction changes a small share of the keys and physical
// compaction stores deltas after a whole generation (zkstore's layered
// bases) — what recovery, reloads and restarts in every scenario load.
// Unless the scenario wants the log kept as the generation
// (scenario.liveBallast), the ballast ends with supersededKeys values of
// supersededBytes written and deleted: more than half the live data
// superseded, so the first compaction writes a whole base.
const (
	BallastPrefix   = "ballast/"
	ballastKeys     = 20000
	supersededKeys  = 256
	supersededBytes = 8 << 10
)

// preloadBallast writes the ballast through c, 32 puts at a time, and,
// with superseded, the superseded values in transactions of 64.
func preloadBallast(t *testing.T, c *clientv3.Client, superseded bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < ballastKeys; i += 32 {
				if _, err := c.Put(ctx, fmt.Sprintf("%s%05d", BallastPrefix, i), strings.Repeat("b", 64)); err != nil {
					errs <- fmt.Errorf("ballast key %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if superseded {
		const scratch = BallastPrefix + "superseded/"
		for i := 0; i < supersededKeys; i += 64 {
			var ops []clientv3.Op
			for j := i; j < i+64; j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%03d", scratch, j), strings.Repeat("s", supersededBytes)))
			}
			if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatalf("superseded ballast: %v", err)
			}
		}
		if _, err := c.Delete(ctx, scratch, clientv3.WithPrefix()); err != nil {
			t.Fatalf("superseded ballast: %v", err)
		}
	}
	t.Logf("ballast: %d keys outside %s in %v (superseded values: %v)", ballastKeys, Prefix, time.Since(start).Round(time.Millisecond), superseded)
}
