package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Key layout. Every workload has its own prefix.
const (
	valueSize      = 256
	kvPrefix       = "/bench/kv/"  // preloaded: gets, CAS updates, LIST, count
	seqPrefix      = "/bench/seq/" // sequential puts
	randPrefix     = "/bench/rand/"
	objPrefix      = "/bench/obj/" // creates, then deletes
	mixPrefix      = "/bench/mix/"
	mixObjPrefix   = "/bench/mix/obj/"
	mixNewPrefix   = "/bench/mix/new/"
	watchPrefix    = "/bench/watch/"
	recoveryPrefix = "/registry/recovery/"
	listPageLimit  = 500
	casRetries     = 5
)

var benchValue = func() []byte {
	b := make([]byte, valueSize)
	_, _ = rand.Read(b)
	return b
}()

func kvKey(i int) string  { return fmt.Sprintf("%s%08d", kvPrefix, i) }
func mixKey(i int) string { return fmt.Sprintf("%s%06d", mixObjPrefix, i) }

// prefixEnd is clientv3.GetPrefixRangeEnd.
func prefixEnd(p string) string { return clientv3.GetPrefixRangeEnd(p) }

// Workload names, in the order of the report.
const (
	WPutSeq  = "put-seq"
	WPutRand = "put-rand"
	WCreate  = "create"
	WDelete  = "delete"
	WUpdate  = "update-cas"
	WGetLin  = "get-lin"
	WGetSer  = "get-ser"
	WList    = "list-10k"
	WCount   = "count-10k"
	WMix     = "kube-mix"
	WWatch   = "watch-latency"
)

// AllWorkloads lists the client-count workloads in report order.
var AllWorkloads = []string{WPutSeq, WPutRand, WCreate, WDelete, WUpdate, WGetLin, WGetSer, WList, WCount, WMix}

// WorkloadDoc describes each workload for the report.
var WorkloadDoc = map[string]string{
	WPutSeq:  "Put of a 256 B value, sequential keys (`/bench/seq/%012d`)",
	WPutRand: "Put of a 256 B value, random keys over a 100,000-key space",
	WCreate:  "kube-apiserver create: `Txn(mod(k)==0 → Put)` on fresh keys",
	WDelete:  "kube-apiserver delete: `Txn(mod(k)==R → DeleteRange | else Range)` on the keys the create cell made (the cell ends early if they run out)",
	WUpdate:  "kube-apiserver update without a cache: linearizable `Get(k)` for its mod revision R, then `Txn(mod(k)==R → Put | else Range)`; one op = both requests; random keys over 10,000",
	WGetLin:  "linearizable `Get` of one random key of 10,000",
	WGetSer:  "serializable `Get` of one random key of 10,000",
	WList:    "LIST of 10,000 keys (256 B values) in pages of 500: continue key = last+\"\\x00\", revision pinned at the first page; one op = the whole list (20 requests)",
	WCount:   "count-only `Get` of the 10,000-key prefix",
	WMix:     "kube-apiserver-like mix: 30% writes (90% CAS update with a cached revision, re-read on conflict; 5% create; 5% delete), 70% reads (90% linearizable get, 10% paginated list of 1,000 keys); 10 prefix watchers with prev_kv consume every event",
	WWatch:   "commit-to-event latency: one writer puts at a fixed rate; N watchers (one gRPC stream each) on the prefix; from the Put call's start to the event's receipt",
}

// workloadSet holds the state workloads share on one server (pools of
// created keys for the delete cells, the mix's revisions).
type workloadSet struct {
	seq atomic.Int64
	mu  sync.Mutex
	// created[clients][worker] are the keys a create cell made, with their
	// mod revisions.
	created map[int][][]keyRev
	kvKeys  int
	mixRevs map[string]int64
}

type keyRev struct {
	key string
	rev int64
}

func newWorkloadSet(kvKeys int) *workloadSet {
	return &workloadSet{created: map[int][][]keyRev{}, kvKeys: kvKeys}
}

// spec returns the cell for workload w at clients concurrency.
func (s *workloadSet) spec(w string, clients int) (cellSpec, bool) {
	cs := cellSpec{workload: w, clients: clients}
	switch w {
	case WPutSeq:
		cs.newWorker = func(_ int, c *clientv3.Client) opFunc {
			return func(ctx context.Context, _ *recorder) error {
				_, err := c.Put(ctx, fmt.Sprintf("%s%012d", seqPrefix, s.seq.Add(1)), string(benchValue))
				return err
			}
		}
	case WPutRand:
		cs.newWorker = func(_ int, c *clientv3.Client) opFunc {
			return func(ctx context.Context, _ *recorder) error {
				_, err := c.Put(ctx, fmt.Sprintf("%s%08d", randPrefix, mrand.IntN(100000)), string(benchValue))
				return err
			}
		}
	case WCreate:
		s.mu.Lock()
		pools := make([][]keyRev, clients)
		s.created[clients] = pools
		s.mu.Unlock()
		cs.newWorker = func(i int, c *clientv3.Client) opFunc {
			n := 0
			return func(ctx context.Context, _ *recorder) error {
				k := fmt.Sprintf("%sc%d/w%03d/%08d", objPrefix, clients, i, n)
				n++
				r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
					Then(clientv3.OpPut(k, string(benchValue))).Commit()
				if err != nil {
					return err
				}
				if !r.Succeeded {
					return fmt.Errorf("create %s: key exists", k)
				}
				pools[i] = append(pools[i], keyRev{k, r.Header.Revision})
				return nil
			}
		}
	case WDelete:
		s.mu.Lock()
		pools := s.created[clients]
		s.mu.Unlock()
		if len(pools) != clients {
			return cs, false
		}
		cs.newWorker = func(i int, c *clientv3.Client) opFunc {
			keys := pools[i]
			return func(ctx context.Context, rec *recorder) error {
				if len(keys) == 0 {
					return errExhausted
				}
				kr := keys[0]
				keys = keys[1:]
				r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(kr.key), "=", kr.rev)).
					Then(clientv3.OpDelete(kr.key)).Else(clientv3.OpGet(kr.key)).Commit()
				if err != nil {
					return err
				}
				if !r.Succeeded {
					rec.add("conflicts", 1)
				}
				return nil
			}
		}
	case WUpdate:
		cs.newWorker = func(_ int, c *clientv3.Client) opFunc {
			return func(ctx context.Context, rec *recorder) error {
				k := kvKey(mrand.IntN(s.kvKeys))
				g, err := c.Get(ctx, k)
				if err != nil {
					return err
				}
				if len(g.Kvs) != 1 {
					return fmt.Errorf("get %s: %d kvs", k, len(g.Kvs))
				}
				r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", g.Kvs[0].ModRevision)).
					Then(clientv3.OpPut(k, string(benchValue))).Else(clientv3.OpGet(k)).Commit()
				if err != nil {
					return err
				}
				if !r.Succeeded {
					rec.add("conflicts", 1)
				}
				return nil
			}
		}
	case WGetLin, WGetSer:
		var opts []clientv3.OpOption
		if w == WGetSer {
			opts = append(opts, clientv3.WithSerializable())
		}
		cs.newWorker = func(_ int, c *clientv3.Client) opFunc {
			return func(ctx context.Context, _ *recorder) error {
				r, err := c.Get(ctx, kvKey(mrand.IntN(s.kvKeys)), opts...)
				if err == nil && len(r.Kvs) != 1 {
					return fmt.Errorf("get: %d kvs", len(r.Kvs))
				}
				return err
			}
		}
	case WList:
		cs.newWorker = func(_ int, c *clientv3.Client) opFunc {
			return func(ctx context.Context, rec *recorder) error {
				n, pages, err := paginatedList(ctx, c, kvPrefix)
				if err != nil {
					return err
				}
				if n != s.kvKeys {
					return fmt.Errorf("list: %d keys, want %d", n, s.kvKeys)
				}
				rec.add("pages", float64(pages))
				rec.add("keys", float64(n))
				return nil
			}
		}
	case WCount:
		cs.newWorker = func(_ int, c *clientv3.Client) opFunc {
			return func(ctx context.Context, _ *recorder) error {
				r, err := c.Get(ctx, kvPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err == nil && r.Count != int64(s.kvKeys) {
					return fmt.Errorf("count %d, want %d", r.Count, s.kvKeys)
				}
				return err
			}
		}
	case WMix:
		s.mixSpec(&cs, clients)
	default:
		return cs, false
	}
	return cs, true
}

// paginatedList lists prefix as kube-apiserver does: limit 500, continue
// at last+"\x00", the revision of the first page pinned for the others.
func paginatedList(ctx context.Context, c *clientv3.Client, prefix string) (keys, pages int, err error) {
	end := prefixEnd(prefix)
	key := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPageLimit)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		r, err := c.Get(ctx, key, opts...)
		if err != nil {
			return keys, pages, err
		}
		pages++
		if rev == 0 {
			rev = r.Header.Revision
		}
		keys += len(r.Kvs)
		if !r.More || len(r.Kvs) == 0 {
			return keys, pages, nil
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// preload creates n keys named by name(i) with create transactions from
// conc workers (kube's create shape, which every server supports) and
// returns their mod revisions.
func preload(ctx context.Context, p *pool, n, conc int, name func(int) string) (map[string]int64, error) {
	revs := make(map[string]int64, n)
	var mu sync.Mutex
	err := p.eachIndex(ctx, n, conc, func(c *clientv3.Client, i int) error {
		k := name(i)
		var r *clientv3.TxnResponse
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			r, err = c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, string(benchValue))).Commit()
			if err == nil && !r.Succeeded { // left by an earlier attempt
				var g *clientv3.GetResponse
				if g, err = c.Get(octx, k); err == nil && len(g.Kvs) == 1 {
					r.Header.Revision = g.Kvs[0].ModRevision
				} else if err == nil {
					// The create failed its compare, yet the key is
					// not there: not created, try again.
					err = fmt.Errorf("create of %s failed (key exists) but a get finds no key", k)
				}
			}
			cancel()
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("preload %s: %w", k, err)
		}
		mu.Lock()
		revs[k] = r.Header.Revision
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return revs, nil
}
