package kubelab

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// Experiment is the state shared by the steps of one run: the main stack
// (standalone ZooKeeper, zketcd, kube-apiserver) and what earlier steps
// created and measured.
type Experiment struct {
	Lab *Lab

	ZK     *zkserver.Server
	Zketcd *Zketcd
	// Root, if set, is the ZooKeeper root of the cluster KV and API use
	// when it is not Zketcd.Root: a fleet tenant's root (Zketcd is then
	// one of the fleet's instances).
	Root string
	KV   *clientv3.Client // clientv3 on Zketcd
	API  *APIServer       // kube-apiserver on Zketcd

	// NS is the namespace of the CRUD, watch and TTL steps, PagesNS the
	// pagination step's.
	NS, PagesNS string
	watchOps    []writeOp

	mu      sync.Mutex
	summary []string
}

// Step is one scenario. Run reports through say and returns an error when
// a check fails; later steps may need what earlier ones set up.
type Step struct {
	Name  string
	Title string
	Run   func(ctx context.Context, x *Experiment, say func(format string, args ...any)) error
}

// Steps returns the scenarios in the order they run.
func Steps() []Step {
	return []Step{
		{"ready-zketcd", "kube-apiserver on standalone ZooKeeper through zketcd: /readyz and /livez", stepReadyZketcd},
		{"ready-etcd", "the same kube-apiserver flags on embedded etcd 3.7.3, for comparison", stepReadyEtcd},
		{"crud", "CRUD through REST; resourceVersion = etcd revision = ZooKeeper zxid", stepCRUD},
		{"watch", "a watch through kube-apiserver sees every change exactly once, in order", stepWatch},
		{"list-exact", "LIST with resourceVersionMatch=Exact at past resourceVersions", stepListExact},
		{"pagination", "paginated LIST (limit/continue) under concurrent writes", stepPagination},
		{"events-ttl", "Events expire with --event-ttl=10s (zketcd lease expiry)", stepEventsTTL},
		{"restart-zketcd", "restart zketcd under a running kube-apiserver", stepRestartZketcd},
		{"restart-apiserver", "restart kube-apiserver: same objects, same resourceVersions", stepRestartAPIServer},
		{"compaction", "kube-apiserver's compaction (--etcd-compaction-interval=5s) on zketcd", stepCompaction},
		{"ensemble-leader-kill", "3-member ZooKeeper ensemble: kill the ZooKeeper leader under write traffic", stepEnsemble},
		{"seed-failure", "the seed failure: kube-apiserver pointed at ZooKeeper's client port", stepSeedFailure},
	}
}

// NewExperiment returns an experiment in lab.
func NewExperiment(lab *Lab) *Experiment {
	return &Experiment{Lab: lab, NS: "e2e", PagesNS: "e2e-pages"}
}

// Note records a headline number for the summary.
func (x *Experiment) Note(format string, args ...any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.summary = append(x.summary, fmt.Sprintf(format, args...))
}

// Summary returns the headline numbers in the order they were noted.
func (x *Experiment) Summary() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.summary...)
}

// root is the ZooKeeper root of the cluster the steps use.
func (x *Experiment) root() string {
	if x.Root != "" {
		return x.Root
	}
	return x.Zketcd.Root
}

func (x *Experiment) needMain() error {
	if x.API == nil || x.Zketcd == nil || x.KV == nil {
		return fmt.Errorf("needs the main stack (step ready-zketcd failed)")
	}
	return nil
}

// readyzProbe polls /readyz every interval in the background and records
// the window in which it was not 200.
type readyzProbe struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu          sync.Mutex
	probes      int
	failures    int
	firstFail   time.Time
	lastFail    time.Time
	lastFailMsg string
}

func startReadyzProbe(ctx context.Context, a *APIServer, interval time.Duration) *readyzProbe {
	p := &readyzProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			now := time.Now() // a failure counts from when its request started
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, body, err := a.Do(rctx, "GET", "/readyz", nil, "")
			cancel()
			p.mu.Lock()
			p.probes++
			if err != nil || st != 200 {
				p.failures++
				if p.firstFail.IsZero() {
					p.firstFail = now
				}
				p.lastFail = now
				if err != nil {
					p.lastFailMsg = err.Error()
				} else {
					p.lastFailMsg = fmt.Sprintf("HTTP %d %s", st, failingChecks(body))
				}
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return p
}

func (p *readyzProbe) finish() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

// window describes the not-ready window, relative to t0.
func (p *readyzProbe) window(t0 time.Time) (string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures == 0 {
		return fmt.Sprintf("/readyz ok on all %d probes", p.probes), 0
	}
	w := p.lastFail.Sub(p.firstFail)
	return fmt.Sprintf("/readyz not ok on %d of %d probes (every 100-200ms, 2s timeout), sent from +%s to +%s after the fault (last: %s)",
		p.failures, p.probes, ms(p.firstFail.Sub(t0)), ms(p.lastFail.Sub(t0)), p.lastFailMsg), w
}

// failingChecks returns the "[-]" lines of a verbose health answer (or the
// answer itself if it has none).
func failingChecks(body []byte) string {
	var bad []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "[-]") {
			bad = append(bad, strings.TrimSpace(l))
		}
	}
	if len(bad) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(bad, "; ")
}

// registryKinds counts the keys under /registry/ by their first path
// segment.
func registryKinds(ctx context.Context, c *clientv3.Client) (int, map[string]int, error) {
	resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, nil, err
	}
	kinds := map[string]int{}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), "/registry/")
		kind, _, _ := strings.Cut(rest, "/")
		kinds[kind]++
	}
	return len(resp.Kvs), kinds, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
