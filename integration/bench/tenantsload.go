package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/integration/kubedata"
)

// benchTenant is one tenant as the load and the churn see it: its client,
// its key prefix (empty on a fleet, where each tenant is a keyspace of its
// own; "/<tenant>" on a shared etcd, Kamaji's --etcd-prefix layout), its
// objects (integration/kubedata, a seed of its own) and what was written.
type benchTenant struct {
	name   string
	prefix string
	c      *clientv3.Client
	gen    *kubedata.Generator

	mu      sync.Mutex
	rev     map[string]int64 // live key -> its mod revision
	keys    []string         // live keys, for a random pick
	idx     map[string]int   // key -> its index in keys
	size    map[string]int   // live key -> bytes of key and value
	obj     map[string]int   // live key -> its object's index (its value regenerated)
	created []string         // keys the churn created, deletable
	next    int              // next object index a create takes
	bytes   int64            // bytes of the live keys and values
	writes  int64            // writes that changed the store (events a watch must see)
	lastRev int64            // the highest revision a write was answered at
	lease   clientv3.LeaseID // the lease the churn's events carry

	events   atomic.Int64 // events the tenant's watch received
	watchRev atomic.Int64 // the highest revision its watch saw
	watchErr atomic.Value // error: the watch's end
}

func newBenchTenant(name, prefix string, c *clientv3.Client, seed uint64) *benchTenant {
	return &benchTenant{name: name, prefix: prefix, c: c, gen: kubedata.New(seed),
		rev: map[string]int64{}, idx: map[string]int{}, size: map[string]int{}, obj: map[string]int{}}
}

// object returns object i of the tenant with its key under the prefix.
func (t *benchTenant) object(i int) kubedata.Object {
	o := t.gen.Object(i)
	o.Key = t.prefix + o.Key
	return o
}

// wrote records a write answered at rev that put key (size bytes; 0: a
// delete).
func (t *benchTenant) wrote(key string, size int, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writes++
	t.lastRev = max(t.lastRev, rev)
	old, had := t.size[key]
	if size == 0 {
		if had {
			t.bytes -= int64(old)
			delete(t.size, key)
			delete(t.rev, key)
			i := t.idx[key]
			last := t.keys[len(t.keys)-1]
			t.keys[i], t.idx[last] = last, i
			t.keys = t.keys[:len(t.keys)-1]
			delete(t.idx, key)
			delete(t.obj, key)
		}
		return
	}
	if !had {
		t.idx[key] = len(t.keys)
		t.keys = append(t.keys, key)
	}
	t.bytes += int64(size - old)
	t.size[key], t.rev[key] = size, rev
}

// liveBytes returns the bytes of the live keys and values, and their count.
func (t *benchTenant) liveBytes() (int64, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes, len(t.keys)
}

// loadTenants creates objects 0..n-1 of every tenant as kube-apiserver
// creates (a transaction putting the key if it does not exist), from
// clients goroutines interleaving the tenants. It returns the bytes of keys
// and values written.
func loadTenants(ctx context.Context, ts []*benchTenant, n, clients int) (int64, error) {
	var next, written atomic.Int64
	total := int64(len(ts) * n)
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= total {
					return
				}
				t, i := ts[k%int64(len(ts))], int(k/int64(len(ts)))
				size, err := t.create(ctx, i, t.object(i), 0)
				if err != nil {
					errc <- fmt.Errorf("%s object %d: %w", t.name, i, err)
					return
				}
				written.Add(int64(size))
			}
		}()
	}
	wg.Wait()
	for _, t := range ts {
		t.mu.Lock()
		t.next = max(t.next, n)
		t.mu.Unlock()
	}
	select {
	case err := <-errc:
		return written.Load(), err
	default:
	}
	return written.Load(), ctx.Err()
}

// create writes o, object i, if its key does not exist (kube-apiserver's
// create), with lease if not 0, retrying a refusal for room ("too many
// requests") and transient errors a few times. It returns the bytes
// written (0: the key existed).
func (t *benchTenant) create(ctx context.Context, i int, o kubedata.Object, lease clientv3.LeaseID) (int, error) {
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		var r *clientv3.TxnResponse
		r, err = t.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(o.Key), "=", 0)).
			Then(clientv3.OpPut(o.Key, string(o.Value), opts...)).Commit()
		cancel()
		if err == nil {
			if !r.Succeeded {
				return 0, nil // an earlier attempt landed
			}
			size := len(o.Key) + len(o.Value)
			t.wrote(o.Key, size, r.Header.Revision)
			t.mu.Lock()
			t.obj[o.Key] = i
			t.mu.Unlock()
			return size, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(time.Duration(100*(attempt+1)) * time.Millisecond)
	}
	return 0, err
}

// churnKinds are the churn's operations and their weights (per 100): what
// a kube-apiserver sends an idle-to-busy cluster's store, in shape.
var churnKinds = []struct {
	name   string
	weight int
}{
	{"create", 25}, {"update", 40}, {"delete", 20}, {"get", 10}, {"list", 5},
}

// churnStats is what a churn measured.
type churnStats struct {
	mu     sync.Mutex
	lat    map[string][]float64 // ms per operation kind
	errs   map[string]int
	late   int // operations the schedule could not start on time (workers all busy)
	sample []string
}

func newChurnStats() *churnStats {
	return &churnStats{lat: map[string][]float64{}, errs: map[string]int{}}
}

func (s *churnStats) add(kind string, d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs[kind]++
		if len(s.sample) < 5 {
			s.sample = append(s.sample, kind+": "+err.Error())
		}
		return
	}
	s.lat[kind] = append(s.lat[kind], float64(d)/float64(time.Millisecond))
}

// ChurnResult summarizes a churn in the report.
type ChurnResult struct {
	Seconds float64 `json:"seconds"`
	// Rate is the operations a second asked for, over all tenants.
	Rate float64            `json:"rate"`
	Ops  map[string]OpStats `json:"ops"`
	// Late counts operations started late (every worker busy).
	Late int `json:"late,omitempty"`
	// Writes and Events: the writes that changed a store, and the events
	// the tenants' watches received (equal when nothing was lost).
	Writes int64 `json:"writes"`
	Events int64 `json:"events"`
	// WatchErrors names tenants whose watch ended or fell behind.
	WatchErrors []string `json:"watch_errors,omitempty"`
	ErrorSample []string `json:"error_sample,omitempty"`
}

// OpStats is one operation kind's count and latencies.
type OpStats struct {
	N      int     `json:"n"`
	Errors int     `json:"errors,omitempty"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func opStats(ms []float64, errs int) OpStats {
	s := slices.Clone(ms)
	sort.Float64s(s)
	st := OpStats{N: len(s), Errors: errs}
	if len(s) > 0 {
		st.P50Ms, st.P99Ms, st.MaxMs = Percentile(s, 50), Percentile(s, 99), s[len(s)-1]
	}
	return st
}

// startWatches opens a watch per tenant on its keys from the revision
// after its last write, counting events.
func startWatches(ctx context.Context, ts []*benchTenant) {
	for _, t := range ts {
		t.mu.Lock()
		from := t.lastRev + 1
		t.mu.Unlock()
		key := t.prefix + "/registry/"
		wch := t.c.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithPrefix(), clientv3.WithRev(from))
		go func() {
			for wr := range wch {
				if err := wr.Err(); err != nil {
					t.watchErr.Store(err)
					return
				}
				for _, ev := range wr.Events {
					t.events.Add(1)
					t.watchRev.Store(max(t.watchRev.Load(), ev.Kv.ModRevision))
				}
			}
			if ctx.Err() == nil {
				t.watchErr.Store(errors.New("the watch channel closed"))
			}
		}()
	}
}

// churn runs kube-like operations on the tenants for d at rate operations
// a second in all (the tenants in turn), from workers goroutines: creates
// of new objects (events carry the tenant's lease), updates and deletes by
// the revision last written (kube-apiserver's guarded transactions), gets,
// and now and then a paginated LIST of one resource.
func churn(ctx context.Context, ts []*benchTenant, d time.Duration, rate float64, workers int, seed uint64) *churnStats {
	st := newChurnStats()
	type job struct {
		t    *benchTenant
		kind string
		r    uint64
	}
	jobs := make(chan job, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				j.t.churnOp(ctx, j.kind, rand.New(rand.NewPCG(seed, j.r)), st)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	interval := time.Duration(float64(time.Second) / rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.After(d)
	var n uint64
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case <-tick.C:
		}
		t := ts[n%uint64(len(ts))]
		n++
		pick, kind := rng.IntN(100), ""
		for _, k := range churnKinds {
			if pick < k.weight {
				kind = k.name
				break
			}
			pick -= k.weight
		}
		select {
		case jobs <- job{t: t, kind: kind, r: n}:
		default:
			st.mu.Lock()
			st.late++
			st.mu.Unlock()
		}
	}
	close(jobs)
	wg.Wait()
	return st
}

// churnOp runs one operation of kind on t.
func (t *benchTenant) churnOp(ctx context.Context, kind string, r *rand.Rand, st *churnStats) {
	t.mu.Lock()
	var key string
	var rev int64
	switch kind {
	case "delete":
		if len(t.created) == 0 {
			kind = "create"
			break
		}
		i := r.IntN(len(t.created))
		key = t.created[i]
		t.created[i] = t.created[len(t.created)-1]
		t.created = t.created[:len(t.created)-1]
		rev = t.rev[key]
	case "update", "get":
		if len(t.keys) == 0 {
			kind = "create"
			break
		}
		key = t.keys[r.IntN(len(t.keys))]
		rev = t.rev[key]
	}
	keyObj := t.obj[key]
	idx := t.next
	if kind == "create" {
		t.next++
	}
	lease := t.lease
	t.mu.Unlock()

	var o kubedata.Object
	switch kind {
	case "create":
		o = t.object(idx)
		if o.Kind != "event" {
			lease = 0
		}
	case "update":
		// The same bytes again: kube-apiserver's objects stay decodable
		// (the store keeps a version per write all the same).
		o = t.object(keyObj)
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	start := time.Now()
	var err error
	switch kind {
	case "create":
		_, err = t.create(octx, idx, o, lease)
		if err == nil {
			t.mu.Lock()
			t.created = append(t.created, o.Key)
			t.mu.Unlock()
		}
	case "update":
		var resp *clientv3.TxnResponse
		resp, err = t.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(o.Value), clientv3.WithIgnoreLease())).Else(clientv3.OpGet(key)).Commit()
		if err == nil {
			t.afterGuarded(key, len(key)+len(o.Value), resp)
		}
	case "delete":
		var resp *clientv3.TxnResponse
		resp, err = t.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
		if err == nil {
			t.afterGuarded(key, 0, resp)
		}
	case "get":
		_, err = t.c.Get(octx, key)
	case "list":
		res := kubedata.Mix[r.IntN(len(kubedata.Mix))].Resource
		_, _, err = listPrefix(octx, t.c, t.prefix+"/registry/"+res+"/")
	}
	st.add(kind, time.Since(start), err)
}

// afterGuarded records a guarded update (size > 0) or delete (size 0): on
// success the write; on a failed compare (another write came first) the
// revision the else branch read.
func (t *benchTenant) afterGuarded(key string, size int, resp *clientv3.TxnResponse) {
	if resp.Succeeded {
		t.wrote(key, size, resp.Header.Revision)
		return
	}
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) == 1 {
		t.mu.Lock()
		if _, ok := t.rev[key]; ok {
			t.rev[key] = rr.Kvs[0].ModRevision
		}
		t.mu.Unlock()
	}
}

// listPrefix lists prefix in pages of kubeListPage at the first page's
// revision (kube-apiserver's paginated LIST).
func listPrefix(ctx context.Context, c *clientv3.Client, prefix string) (items, pages int, err error) {
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(kubeListPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		r, err := c.Get(ctx, key, opts...)
		if err != nil {
			return items, pages, err
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		pages++
		items += len(r.Kvs)
		if !r.More || len(r.Kvs) == 0 {
			return items, pages, nil
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// grantTenantLeases grants each tenant the one-hour lease its churned events
// carry (kube-apiserver's --event-ttl).
func grantTenantLeases(ctx context.Context, ts []*benchTenant) error {
	for _, t := range ts {
		lctx, cancel := context.WithTimeout(ctx, opTimeout)
		l, err := t.c.Grant(lctx, 3600)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: lease grant: %w", t.name, err)
		}
		t.mu.Lock()
		t.lease = l.ID
		t.mu.Unlock()
	}
	return nil
}

// settleWatches waits (up to limit) until every tenant's watch has seen
// its last write, and sums up the churn.
func settleWatches(ts []*benchTenant, st *churnStats, d time.Duration, rate float64, limit time.Duration) ChurnResult {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		behind := 0
		for _, t := range ts {
			t.mu.Lock()
			last := t.lastRev
			t.mu.Unlock()
			if t.watchErr.Load() == nil && t.watchRev.Load() < last {
				behind++
			}
		}
		if behind == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res := ChurnResult{Seconds: d.Seconds(), Rate: rate, Ops: map[string]OpStats{}, Late: st.late, ErrorSample: st.sample}
	st.mu.Lock()
	for _, k := range churnKinds {
		res.Ops[k.name] = opStats(st.lat[k.name], st.errs[k.name])
	}
	st.mu.Unlock()
	for _, t := range ts {
		t.mu.Lock()
		res.Writes += t.writes
		last := t.lastRev
		t.mu.Unlock()
		res.Events += t.events.Load()
		if err, _ := t.watchErr.Load().(error); err != nil {
			res.WatchErrors = append(res.WatchErrors, t.name+": "+err.Error())
		} else if t.watchRev.Load() < last {
			res.WatchErrors = append(res.WatchErrors, fmt.Sprintf("%s: at revision %d, last write %d", t.name, t.watchRev.Load(), last))
		}
	}
	return res
}

// resetWriteCounts starts counting writes and events afresh (the load's
// writes are not the churn's).
func resetWriteCounts(ts []*benchTenant) {
	for _, t := range ts {
		t.mu.Lock()
		t.writes = 0
		t.mu.Unlock()
		t.events.Store(0)
	}
}
