package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/watchcheck"
)

// Key spaces, all under Prefix: kube-like objects, etcd-like keys, the
// compare-and-swap workers' keys (one of each worker's own), and
// lease-attached keys (outside the linearizability model: their deletions
// by lease expiry happen at times no client chooses).
const (
	Prefix      = "f/"
	KubePrefix  = Prefix + "kv/"
	EtcdPrefix  = Prefix + "e/"
	LeasePrefix = Prefix + "ls/"
	CASPrefix   = Prefix + "cas/"

	kubeKeys = 24
	etcdKeys = 8
	casKeys  = 1 // per CAS worker: each request follows the one before on its key
	pageSize = 7
)

// Config describes a workload.
type Config struct {
	// Clients by name ("A", "B", "AB"). B must exist: it makes the final
	// read and its archive watch bounds compaction.
	Clients map[string]*clientv3.Client
	// KubeWorkers and EtcdWorkers name the client of each worker.
	KubeWorkers, EtcdWorkers []string
	// CASWorkers adds compare-and-swap workers, each on keys of its own
	// under CASPrefix, sending each request to the other instance (client
	// "A" or "B") than the one before: a create, an update on the mod
	// revision last seen, or a delete of a key that may be absent, each a
	// Txn whose failed compare reads the key (Else get). The request after
	// an acknowledged write thus reaches the instance that did not make it,
	// which must answer from a state that holds it: a failed compare with
	// the value before it, or deleted=0 after a create, is stale.
	CASWorkers int
	// CASLead, if not 0, makes each CAS worker start a put through A,
	// without waiting for it, between CASLead and 1.25 times that before
	// each of its requests through B: when A's requests take about CASLead
	// to reach ZooKeeper and more than that to be answered, that put has
	// landed and A has not heard so yet when B commits the worker's
	// request, and the worker's next request reaches A while A still waits
	// for the put's answer.
	CASLead time.Duration
	// PutRate, if not 0, adds blind puts of etcd-like keys sent at this
	// rate (per second) through A and B in turn, each without waiting for
	// the ones before it (an open-loop load: how many wait on a commit
	// grows with its latency). Each is recorded as a worker of its own.
	PutRate float64
	// LeaseClient makes the lease requests ("" for none).
	LeaseClient string
	// CompactEvery is the compactor's interval (0: no compaction).
	CompactEvery time.Duration
	// RequestTimeout bounds each request; negative: clients without
	// deadlines (a request waits for its answer, bounded only by
	// noDeadlineBackstop so that a hung server cannot hang the test).
	RequestTimeout time.Duration
	// Seed makes the random choices repeatable (with the timing).
	Seed uint64
	// WatchChurn, if not 0, opens kube-like watches (from the current
	// revision, through each client in turn) and closes them after
	// WatchChurn, over and over, as kube-apiserver's watchers come and go;
	// the closed watches are checked up to what they observed.
	WatchChurn time.Duration
	// ProbeEvery, if not 0, probes instances A and B (clients "A" and "B")
	// every ProbeEvery: a linearizable read and a put of ProbeKey through
	// each, open loop, and a lease kept alive through each (probe.go).
	ProbeEvery time.Duration
}

// Workload runs the workers and records everything.
type Workload struct {
	cfg   Config
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
	seq   atomic.Int64

	mu     sync.Mutex
	ops    []*Op
	faults []Fault

	recs     []*watchcheck.Recorder
	archiveB *watchcheck.Recorder
	kubeRecs []*watchcheck.Recorder
	closed   []*watchcheck.Watch // churned watches, closed
	leases   atomic.Int64        // live lease goroutines

	leadPuts     atomic.Int64             // CAS workers' puts through A so far
	probeWriters atomic.Pointer[[]string] // the clients probes put through
	probePuts    atomic.Int64             // probe puts under way
	firstRev     int64                    // the store's revision at Start
}

// History is everything a run recorded.
type History struct {
	Ops     []*Op
	Watches []*watchcheck.Watch
	Faults  []Fault
	// Final is the revision of the final linearizable read, made after
	// every worker stopped.
	Final int64
	Start time.Time
	// Elapsed is how long the workload ran.
	Elapsed time.Duration
	// WatchErrors lists watches that did not catch up with Final.
	WatchErrors []string
	// FirstRev is the store's revision before the workload wrote
	// anything: revisions up to it were made by the scenario's setup (the
	// ballast), outside Prefix.
	FirstRev int64
}

// Start starts the watches and the workers.
func Start(cfg Config) (*Workload, error) {
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 4 * time.Second
	}
	w := &Workload{cfg: cfg, start: time.Now(), stop: make(chan struct{})}
	b := cfg.Clients["B"]
	if b == nil {
		return nil, errors.New("faults: the workload needs a client \"B\"")
	}
	// The store's revision before anything is written.
	op := &Op{Worker: -1, Client: "B", Kind: KindRange, Key: Prefix, End: clientv3.GetPrefixRangeEnd(Prefix)}
	w.do(op, func(ctx context.Context) error { return w.rangeReq(ctx, b, op) })
	if op.Err != nil {
		return nil, fmt.Errorf("faults: initial read: %w", op.Err)
	}
	now := op.Header
	w.firstRev = now
	all := watchcheck.Spec{Key: Prefix, End: clientv3.GetPrefixRangeEnd(Prefix), PrevKV: true}
	kube := watchcheck.Spec{Key: KubePrefix, End: clientv3.GetPrefixRangeEnd(KubePrefix), PrevKV: true}
	for _, name := range sortedNames(cfg.Clients) {
		c := cfg.Clients[name]
		s := all
		s.Name = "archive-" + name
		r := watchcheck.Record(c, s, 2, watchcheck.RecordOptions{})
		w.recs = append(w.recs, r)
		if name == "B" {
			w.archiveB = r
		}
		if name == "AB" {
			ks := watchcheck.Spec{Name: "key-AB", Key: KubePrefix + "3", PrevKV: true}
			w.recs = append(w.recs, watchcheck.Record(c, ks, 2, watchcheck.RecordOptions{}))
			continue
		}
		// kube-apiserver's watch cache: from the LIST revision, progress
		// notifications, WithRequireLeader.
		s = kube
		s.Name = "kube-" + name
		kr := watchcheck.Record(c, s, now+1, watchcheck.RecordOptions{ProgressNotify: true, RequireLeader: true})
		w.recs = append(w.recs, kr)
		w.kubeRecs = append(w.kubeRecs, kr)
	}
	next := 0
	newID := func() int { next++; return next - 1 }
	for _, name := range cfg.KubeWorkers {
		id := newID()
		w.spawn(func() { w.kubeWorker(id, name) })
	}
	for _, name := range cfg.EtcdWorkers {
		id := newID()
		w.spawn(func() { w.etcdWorker(id, name) })
	}
	for range cfg.CASWorkers {
		id := newID()
		w.spawn(func() { w.casWorker(id) })
	}
	if cfg.PutRate > 0 {
		w.spawn(w.openLoopPuts)
	}
	if cfg.LeaseClient != "" {
		id := newID()
		w.spawn(func() { w.leaseWorker(id, cfg.LeaseClient) })
	}
	if cfg.CompactEvery > 0 {
		id := newID()
		w.spawn(func() { w.compactor(id) })
	}
	if cfg.WatchChurn > 0 {
		id := newID()
		w.spawn(func() { w.watchChurn(id) })
	}
	if cfg.ProbeEvery > 0 {
		w.SetProbeWriters("A", "B")
		w.spawn(w.probes)
	}
	w.spawn(w.askProgress)
	return w, nil
}

func sortedNames(m map[string]*clientv3.Client) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (w *Workload) spawn(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

// Since is the offset of now from the run's start.
func (w *Workload) Since() time.Duration { return time.Since(w.start) }

func (w *Workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// pause sleeps d or until the workload stops.
func (w *Workload) pause(d time.Duration) bool {
	select {
	case <-w.stop:
		return false
	case <-time.After(d):
		return true
	}
}

// value returns a value never written before.
func (w *Workload) value(worker int) string {
	return fmt.Sprintf("w%d-%d", worker, w.seq.Add(1))
}

// noDeadlineBackstop bounds a request of a client without deadlines
// (Config.RequestTimeout negative): far longer than any fault.
const noDeadlineBackstop = 5 * time.Minute

// timeout is the deadline of one request.
func (w *Workload) timeout() time.Duration {
	if w.cfg.RequestTimeout < 0 {
		return noDeadlineBackstop
	}
	return w.cfg.RequestTimeout
}

// do runs f under the request timeout and records op with its times.
func (w *Workload) do(op *Op, f func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout())
	defer cancel()
	op.Call = time.Since(w.start)
	op.Err = f(ctx)
	op.Return = time.Since(w.start)
	w.mu.Lock()
	op.ID = len(w.ops)
	w.ops = append(w.ops, op)
	w.mu.Unlock()
}

func kvsOf(in []*mvccpb.KeyValue) []KV {
	out := make([]KV, len(in))
	for i, kv := range in {
		out[i] = KV{Key: string(kv.Key), Value: string(kv.Value), Create: kv.CreateRevision, Mod: kv.ModRevision,
			Ver: kv.Version, Lse: kv.Lease}
	}
	return out
}

func (w *Workload) rangeReq(ctx context.Context, c *clientv3.Client, op *Op) error {
	var opts []clientv3.OpOption
	if op.End != "" {
		opts = append(opts, clientv3.WithRange(op.End))
	}
	if op.Limit > 0 {
		opts = append(opts, clientv3.WithLimit(op.Limit))
	}
	if op.Rev > 0 {
		opts = append(opts, clientv3.WithRev(op.Rev))
	}
	resp, err := c.Get(ctx, op.Key, opts...)
	if err != nil {
		return err
	}
	op.Header, op.KVs, op.More, op.Count = resp.Header.Revision, kvsOf(resp.Kvs), resp.More, resp.Count
	return nil
}

func (w *Workload) txnReq(ctx context.Context, c *clientv3.Client, op *Op) error {
	var cmps []clientv3.Cmp
	for _, cm := range op.Cmps {
		switch cm.Target {
		case "mod":
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(cm.Key), cm.Op, cm.Value))
		case "version":
			cmps = append(cmps, clientv3.Compare(clientv3.Version(cm.Key), cm.Op, cm.Value))
		}
	}
	toOps := func(subs []Sub) []clientv3.Op {
		out := make([]clientv3.Op, len(subs))
		for i, s := range subs {
			switch s.Kind {
			case "put":
				out[i] = clientv3.OpPut(s.Key, s.Value)
			case "del":
				out[i] = clientv3.OpDelete(s.Key)
			case "get":
				out[i] = clientv3.OpGet(s.Key)
			}
		}
		return out
	}
	resp, err := c.Txn(ctx).If(cmps...).Then(toOps(op.Then)...).Else(toOps(op.Else)...).Commit()
	if err != nil {
		return err
	}
	op.Header, op.Succeeded = resp.Header.Revision, resp.Succeeded
	branch := op.Branch()
	if len(resp.Responses) != len(branch) {
		return fmt.Errorf("faults: txn answered %d responses for %d ops", len(resp.Responses), len(branch))
	}
	op.Results = make([]SubResult, len(branch))
	for i, r := range resp.Responses {
		switch x := r.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			op.Results[i].KVs = kvsOf(x.ResponseRange.Kvs)
		case *pb.ResponseOp_ResponseDeleteRange:
			op.Results[i].Deleted = x.ResponseDeleteRange.Deleted
		}
	}
	return nil
}

// kubeWorker behaves like kube-apiserver's storage layer: GuaranteedUpdate
// (a CAS on the mod revision it last saw, reading the object back when the
// CAS fails), Create (CAS on mod revision 0), Delete (CAS on the mod
// revision), Get, and paginated LISTs whose pages after the first are read
// at the first page's revision.
func (w *Workload) kubeWorker(id int, name string) {
	c := w.cfg.Clients[name]
	r := rand.New(rand.NewPCG(w.cfg.Seed, uint64(id)))
	seen := map[string]int64{} // key -> mod revision last seen (0: absent)
	learn := func(key string, kvs []KV) {
		if len(kvs) == 0 {
			seen[key] = 0
		} else {
			seen[key] = kvs[0].Mod
		}
	}
	get := func(key string) {
		op := &Op{Worker: id, Client: name, Kind: KindRange, Key: key}
		w.do(op, func(ctx context.Context) error { return w.rangeReq(ctx, c, op) })
		if op.OK() {
			learn(key, op.KVs)
		}
	}
	cas := func(key string, mod int64, then Sub) {
		op := &Op{Worker: id, Client: name, Kind: KindTxn,
			Cmps: []Cmp{{Key: key, Target: "mod", Op: "=", Value: mod}},
			Then: []Sub{then}, Else: []Sub{{Kind: "get", Key: key}}}
		w.do(op, func(ctx context.Context) error { return w.txnReq(ctx, c, op) })
		switch {
		case !op.OK():
			delete(seen, key)
		case op.Succeeded && then.Kind == "put":
			seen[key] = op.Header
		case op.Succeeded:
			seen[key] = 0
		default:
			learn(key, op.Results[0].KVs)
		}
	}
	for !w.stopped() {
		key := fmt.Sprintf("%s%02d", KubePrefix, r.IntN(kubeKeys))
		mod, known := seen[key]
		switch p := r.IntN(100); {
		case p < 40: // update
			switch {
			case !known:
				get(key)
			case mod == 0:
				cas(key, 0, Sub{Kind: "put", Key: key, Value: w.value(id)})
			default:
				cas(key, mod, Sub{Kind: "put", Key: key, Value: w.value(id)})
			}
		case p < 52: // create
			cas(key, 0, Sub{Kind: "put", Key: key, Value: w.value(id)})
		case p < 60: // delete
			if !known || mod == 0 {
				get(key)
			} else {
				cas(key, mod, Sub{Kind: "del", Key: key})
			}
		case p < 75:
			get(key)
		default:
			w.list(id, name, c)
		}
	}
}

// casWorker makes compare-and-swap requests on keys of its own, each
// through the other of clients "A" and "B" than the one before (see
// Config.CASWorkers): if mod(k) = m then put(k) else get(k), with m the mod
// revision it last saw (0 for a create), and deletes of k alone, which may
// find it absent. After a request that changed the key it sends one that
// writes nothing only on the state before that change, as kube-apiserver
// does: an update on the revision just written, a create after a delete, a
// delete after a create.
func (w *Workload) casWorker(id int) {
	clients := []string{"A", "B"}
	r := rand.New(rand.NewPCG(w.cfg.Seed, uint64(id)))
	seen := map[string]int64{} // key -> mod revision last seen (0: absent; missing: unknown)
	// wrote: the request before changed the key (through the other
	// instance than this one); created: it created it.
	var wrote, created bool
	for n := 0; !w.stopped(); n++ {
		name := clients[n%2]
		c := w.cfg.Clients[name]
		key := fmt.Sprintf("%s%d-%d", CASPrefix, id, r.IntN(casKeys))
		mod, known := seen[key]
		op := &Op{Worker: id, Client: name, Kind: KindTxn}
		cas := func(m int64) {
			op.Cmps = []Cmp{{Key: key, Target: "mod", Op: "=", Value: m}}
			op.Then = []Sub{{Kind: "put", Key: key, Value: w.value(id)}}
			op.Else = []Sub{{Kind: "get", Key: key}}
		}
		p := r.IntN(100)
		switch {
		case !known:
			cas(0) // a create, which reads the key if present
		case wrote && mod != 0 && created && p < 35:
			// A delete right after the create: deleted=0 only if answered
			// from the state before it.
			op.Then = []Sub{{Kind: "del", Key: key}}
		case wrote && mod != 0 && p < 80:
			cas(mod) // an update on the revision just written: fails only on an older state
		case wrote:
			cas(0) // a create after the delete, or on an existing key: reads the key
		case mod != 0 && p < 55:
			cas(mod) // an update
		case mod != 0 && p < 80, mod == 0 && p < 30:
			op.Then = []Sub{{Kind: "del", Key: key}} // a delete, deleted=0 if absent
		default:
			cas(0) // a create, which fails and reads the key if present
		}
		if name == "B" && w.cfg.CASLead > 0 {
			w.leadPut(r)
			if !w.pause(w.cfg.CASLead + time.Duration(r.Int64N(int64(w.cfg.CASLead)/4+1))) {
				return
			}
		}
		w.do(op, func(ctx context.Context) error { return w.txnReq(ctx, c, op) })
		wrote, created = op.OK() && writesSomething(op), false
		switch {
		case !op.OK():
			delete(seen, key)
		case op.Succeeded && op.Then[0].Kind == "put":
			created = len(op.Cmps) == 1 && op.Cmps[0].Value == 0
			seen[key] = op.Header
		case op.Succeeded: // a delete: gone, or absent already
			seen[key] = 0
		case len(op.Results[0].KVs) == 0:
			seen[key] = 0
		default:
			seen[key] = op.Results[0].KVs[0].Mod
		}
	}
}

// leadPut starts a blind put of an etcd-like key through A, recorded as a
// worker of its own (Config.CASLead).
func (w *Workload) leadPut(r *rand.Rand) {
	w.blindPut(1<<21+int(w.leadPuts.Add(1)), "A", r)
}

// blindPut starts a put of a random etcd-like key through the named
// client, recorded as worker id, on a goroutine of its own.
func (w *Workload) blindPut(id int, name string, r *rand.Rand) {
	c := w.cfg.Clients[name]
	op := &Op{Worker: id, Client: name, Kind: KindPut, Key: fmt.Sprintf("%s%d", EtcdPrefix, r.IntN(etcdKeys)), Value: w.value(id)}
	w.spawn(func() {
		w.do(op, func(ctx context.Context) error {
			resp, err := c.Put(ctx, op.Key, op.Value)
			if err == nil {
				op.Header = resp.Header.Revision
			}
			return err
		})
	})
}

// list reads KubePrefix in pages of pageSize: the first page is a
// linearizable read, the others are read at its revision.
func (w *Workload) list(id int, name string, c *clientv3.Client) {
	end := clientv3.GetPrefixRangeEnd(KubePrefix)
	op := &Op{Worker: id, Client: name, Kind: KindRange, Key: KubePrefix, End: end, Limit: pageSize}
	w.do(op, func(ctx context.Context) error { return w.rangeReq(ctx, c, op) })
	if !op.OK() {
		return
	}
	rev, more, last := op.Header, op.More, op.KVs
	for more && len(last) > 0 && !w.stopped() {
		next := &Op{Worker: id, Client: name, Kind: KindPinned, Key: last[len(last)-1].Key + "\x00", End: end,
			Limit: pageSize, Rev: rev}
		w.do(next, func(ctx context.Context) error { return w.rangeReq(ctx, c, next) })
		if !next.OK() {
			return // compacted (kube-apiserver relists) or unavailable
		}
		more, last = next.More, next.KVs
	}
}

// openLoopPuts sends PutRate blind puts a second, each from a goroutine
// (and a worker ID) of its own.
func (w *Workload) openLoopPuts() {
	r := rand.New(rand.NewPCG(w.cfg.Seed, 1<<20))
	w.every(time.Duration(float64(time.Second)/w.cfg.PutRate), func(n int) {
		w.blindPut(1<<20+n, []string{"A", "B"}[n%2], r)
	})
}

// every calls f(n), n = 0, 1, ..., every d until the workload stops.
func (w *Workload) every(d time.Duration, f func(n int)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		f(n)
	}
}

// etcdWorker makes etcd-style requests: blind puts, multi-key
// transactions, a conditional transaction with a delete, and range reads.
func (w *Workload) etcdWorker(id int, name string) {
	c := w.cfg.Clients[name]
	r := rand.New(rand.NewPCG(w.cfg.Seed, uint64(id)))
	key := func() string { return fmt.Sprintf("%s%d", EtcdPrefix, r.IntN(etcdKeys)) }
	for !w.stopped() {
		switch p := r.IntN(100); {
		case p < 45:
			op := &Op{Worker: id, Client: name, Kind: KindPut, Key: key(), Value: w.value(id)}
			w.do(op, func(ctx context.Context) error {
				resp, err := c.Put(ctx, op.Key, op.Value)
				if err == nil {
					op.Header = resp.Header.Revision
				}
				return err
			})
		case p < 70:
			ks := map[string]bool{}
			for len(ks) < 2+r.IntN(2) {
				ks[key()] = true
			}
			op := &Op{Worker: id, Client: name, Kind: KindTxn}
			for k := range ks {
				op.Then = append(op.Then, Sub{Kind: "put", Key: k, Value: w.value(id)})
			}
			w.do(op, func(ctx context.Context) error { return w.txnReq(ctx, c, op) })
		case p < 85:
			a, b := key(), key()
			for b == a {
				b = key()
			}
			op := &Op{Worker: id, Client: name, Kind: KindTxn,
				Cmps: []Cmp{{Key: a, Target: "version", Op: ">", Value: 0}},
				Then: []Sub{{Kind: "put", Key: b, Value: w.value(id)}, {Kind: "del", Key: a}},
				Else: []Sub{{Kind: "put", Key: a, Value: w.value(id)}}}
			w.do(op, func(ctx context.Context) error { return w.txnReq(ctx, c, op) })
		default:
			op := &Op{Worker: id, Client: name, Kind: KindRange, Key: EtcdPrefix, End: clientv3.GetPrefixRangeEnd(EtcdPrefix)}
			w.do(op, func(ctx context.Context) error { return w.rangeReq(ctx, c, op) })
		}
	}
}

// grant grants a lease and attaches a key with a unique value to it.
func (w *Workload) grant(id int, name string, ttl int64) (lease int64, key string, err error) {
	c := w.cfg.Clients[name]
	g := &Op{Worker: id, Client: name, Kind: KindGrant, TTL: ttl}
	w.do(g, func(ctx context.Context) error {
		resp, err := c.Grant(ctx, ttl)
		if err == nil {
			g.Header, g.Lease, g.RespTTL = resp.Revision, int64(resp.ID), resp.TTL
		}
		return err
	})
	if !g.OK() {
		return 0, "", g.Err
	}
	key = fmt.Sprintf("%s%x", LeasePrefix, g.Lease)
	p := &Op{Worker: id, Client: name, Kind: KindPut, Key: key, Value: w.value(id), Lease: g.Lease}
	w.do(p, func(ctx context.Context) error {
		resp, err := c.Put(ctx, p.Key, p.Value, clientv3.WithLease(clientv3.LeaseID(g.Lease)))
		if err == nil {
			p.Header = resp.Header.Revision
		}
		return err
	})
	return g.Lease, key, p.Err
}

// leaseWorker grants short leases with a key each; some are kept alive for
// a while, some get one keepalive around the time they are due (it may
// race with their expiry: it renews them or gets TTL 0), some are
// revoked, the rest left to expire.
func (w *Workload) leaseWorker(id int, name string) {
	c := w.cfg.Clients[name]
	r := rand.New(rand.NewPCG(w.cfg.Seed, uint64(id)))
	sub := 1000 * (id + 1)
	for w.pause(300 * time.Millisecond) {
		if w.leases.Load() >= 8 {
			continue
		}
		ttl := 2 + r.Int64N(2)
		lease, _, err := w.grant(id, name, ttl)
		if err != nil || lease == 0 {
			continue
		}
		granted := time.Now()
		fate, rounds := r.IntN(10), 2+r.IntN(5)
		late := time.Duration(ttl)*time.Second + time.Duration(r.IntN(900)-100)*time.Millisecond
		sub++
		wid := sub
		w.leases.Add(1)
		w.spawn(func() {
			defer w.leases.Add(-1)
			switch {
			case fate < 5: // kept alive for a while, then left to expire
				for i := 0; i < rounds && w.pause(700*time.Millisecond); i++ {
					op := &Op{Worker: wid, Client: name, Kind: KindKeepAlive, Lease: lease}
					w.do(op, func(ctx context.Context) error {
						return keepAliveOnce(ctx, c, lease, op)
					})
				}
			case fate < 7: // one keepalive around the time the lease is due
				if w.pause(time.Until(granted.Add(late))) {
					op := &Op{Worker: wid, Client: name, Kind: KindKeepAlive, Lease: lease}
					w.do(op, func(ctx context.Context) error {
						return keepAliveOnce(ctx, c, lease, op)
					})
				}
			case fate < 8: // revoked
				if w.pause(time.Second) {
					op := &Op{Worker: wid, Client: name, Kind: KindRevoke, Lease: lease}
					w.do(op, func(ctx context.Context) error {
						resp, err := c.Revoke(ctx, clientv3.LeaseID(lease))
						if err == nil {
							op.Header = resp.Header.Revision
						}
						return err
					})
				}
			}
		})
	}
}

// compactor compacts (physically) every CompactEvery to the revision it
// read two intervals earlier, as kube-apiserver does, but never past what
// instance B's archive watch has observed (so that one watch sees every
// revision and unknown outcomes can be resolved).
func (w *Workload) compactor(id int) {
	c := w.cfg.Clients["B"]
	var seen []int64
	var last int64
	for w.pause(w.cfg.CompactEvery) {
		op := &Op{Worker: id, Client: "B", Kind: KindRange, Key: Prefix + "compactor"}
		w.do(op, func(ctx context.Context) error { return w.rangeReq(ctx, c, op) })
		if !op.OK() {
			continue
		}
		seen = append(seen, op.Header)
		if len(seen) < 3 {
			continue
		}
		target := min(seen[len(seen)-3], w.archiveB.Observed())
		if target <= last {
			continue
		}
		cop := &Op{Worker: id, Client: "B", Kind: KindCompact, Rev: target}
		w.do(cop, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 3*w.timeout())
			defer cancel()
			resp, err := c.Compact(ctx, target, clientv3.WithCompactPhysical())
			if err == nil {
				cop.Header = resp.Header.Revision
			}
			return err
		})
		if cop.OK() {
			last = target
		}
	}
}

// watchChurn opens two watches at a time on the kube prefix, through the
// clients in turn, from the revision after a read, and closes them after
// WatchChurn.
func (w *Workload) watchChurn(id int) {
	names := sortedNames(w.cfg.Clients)
	b := w.cfg.Clients["B"]
	for n := 0; ; n++ {
		op := &Op{Worker: id, Client: "B", Kind: KindRange, Key: Prefix + "churn"}
		w.do(op, func(ctx context.Context) error { return w.rangeReq(ctx, b, op) })
		if !op.OK() {
			if !w.pause(time.Second) {
				return
			}
			continue
		}
		var recs []*watchcheck.Recorder
		for i := range 2 {
			name := names[(2*n+i)%len(names)]
			s := watchcheck.Spec{Name: fmt.Sprintf("churn-%d-%s", 2*n+i, name), Key: KubePrefix,
				End: clientv3.GetPrefixRangeEnd(KubePrefix), PrevKV: true}
			recs = append(recs, watchcheck.Record(w.cfg.Clients[name], s, op.Header+1, watchcheck.RecordOptions{RequireLeader: true}))
		}
		more := w.pause(w.cfg.WatchChurn)
		w.mu.Lock()
		for _, r := range recs {
			w.closed = append(w.closed, r.Stop())
		}
		w.mu.Unlock()
		if !more {
			return
		}
	}
}

// askProgress asks the kube watches for progress notifications, so that
// they interleave with events (the bookmarkable guarantee is checked on
// them).
func (w *Workload) askProgress() {
	for w.pause(500 * time.Millisecond) {
		for _, r := range w.kubeRecs {
			_ = r.RequestProgress()
		}
	}
}

// keepAliveOnce renews lease once. A lease that is gone answers TTL 0 (which
// clientv3 turns into ErrLeaseNotFound): recorded as a success with TTL 0.
func keepAliveOnce(ctx context.Context, c *clientv3.Client, lease int64, op *Op) error {
	resp, err := c.KeepAliveOnce(ctx, clientv3.LeaseID(lease))
	switch {
	case err == nil:
		op.Header, op.RespTTL = resp.Revision, resp.TTL
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		op.RespTTL, err = 0, nil
	}
	return err
}

// Probe grants a lease of ttl seconds with a key and no keepalives just
// before a fault; the fault is recorded with it. Call Healed with the
// returned index when the fault is healed.
func (w *Workload) Probe(name string, ttl int64) (int, error) {
	var lease int64
	var key string
	var err error
	for range 20 {
		if lease, key, err = w.grant(-1, "B", ttl); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return -1, fmt.Errorf("probe lease: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults = append(w.faults, Fault{Name: name, Inject: time.Since(w.start), ProbeLease: lease, ProbeKey: key, ProbeTTL: ttl})
	return len(w.faults) - 1, nil
}

// Healed records that fault i was healed now.
func (w *Workload) Healed(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults[i].Heal = time.Since(w.start)
}

// WaitProbes waits until the keys of every probe lease are gone (read
// through B), or until bound after the last heal.
func (w *Workload) WaitProbes(bound time.Duration) {
	w.mu.Lock()
	faults := append([]Fault(nil), w.faults...)
	w.mu.Unlock()
	c := w.cfg.Clients["B"]
	for _, f := range faults {
		deadline := w.start.Add(f.Heal + time.Duration(f.ProbeTTL)*time.Second + bound)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := c.Get(ctx, f.ProbeKey)
			cancel()
			if err == nil && resp.Count == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// Stop stops the workers, makes the final read through B, waits until
// every watch observed it and returns the history.
func (w *Workload) Stop() *History {
	close(w.stop)
	w.wg.Wait()
	h := &History{Start: w.start, Elapsed: time.Since(w.start), FirstRev: w.firstRev}
	c := w.cfg.Clients["B"]
	deadline := time.Now().Add(90 * time.Second)
	for {
		op := &Op{Worker: -1, Client: "B", Kind: KindRange, Key: Prefix, End: clientv3.GetPrefixRangeEnd(Prefix)}
		w.do(op, func(ctx context.Context) error { return w.rangeReq(ctx, c, op) })
		if op.OK() {
			h.Final = op.Header
			break
		}
		if time.Now().After(deadline) {
			h.WatchErrors = append(h.WatchErrors, fmt.Sprintf("final read failed for 90s: %v", op.Err))
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, r := range w.recs {
		if h.Final == 0 {
			break
		}
		if err := r.WaitObserved(ctx, h.Final); err != nil {
			h.WatchErrors = append(h.WatchErrors, err.Error())
		}
	}
	for _, r := range w.recs {
		h.Watches = append(h.Watches, r.Stop())
	}
	w.mu.Lock()
	h.Ops = append([]*Op(nil), w.ops...)
	h.Faults = append([]Fault(nil), w.faults...)
	h.Watches = append(h.Watches, w.closed...)
	w.mu.Unlock()
	return h
}
