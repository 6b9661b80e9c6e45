package bench

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// mixKeys is the number of preloaded objects of the mix.
const mixKeys = 1000

// mixSpec fills cs with the kube-apiserver-like mix.
func (s *workloadSet) mixSpec(cs *cellSpec, clients int) {
	cs.newWorker = func(i int, c *clientv3.Client) opFunc {
		cache := make(map[string]int64, len(s.mixRevs))
		for k, v := range s.mixRevs {
			cache[k] = v
		}
		var created []keyRev
		n := 0
		create := func(ctx context.Context, rec *recorder) error {
			rec.kind = "create"
			k := fmt.Sprintf("%sc%d/w%03d/%08d", mixNewPrefix, clients, i, n)
			n++
			r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, string(benchValue))).Commit()
			if err != nil {
				return err
			}
			if r.Succeeded {
				created = append(created, keyRev{k, r.Header.Revision})
			}
			return nil
		}
		return func(ctx context.Context, rec *recorder) error {
			if mrand.Float64() < 0.30 {
				w := mrand.Float64()
				switch {
				case w < 0.90:
					rec.kind = "update"
					k := mixKey(mrand.IntN(mixKeys))
					rev := cache[k]
					for attempt := 0; attempt < casRetries; attempt++ {
						r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
							Then(clientv3.OpPut(k, string(benchValue))).Else(clientv3.OpGet(k)).Commit()
						if err != nil {
							return err
						}
						if r.Succeeded {
							cache[k] = r.Header.Revision
							return nil
						}
						rec.add("conflicts", 1)
						kvs := r.Responses[0].GetResponseRange().Kvs
						if len(kvs) != 1 {
							return fmt.Errorf("update %s: key gone", k)
						}
						rev = kvs[0].ModRevision
						cache[k] = rev
					}
					return fmt.Errorf("update %s: %d conflicts in a row", k, casRetries)
				case w < 0.95 || len(created) == 0:
					return create(ctx, rec)
				default:
					rec.kind = "delete"
					kr := created[0]
					created = created[1:]
					_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(kr.key), "=", kr.rev)).
						Then(clientv3.OpDelete(kr.key)).Else(clientv3.OpGet(kr.key)).Commit()
					return err
				}
			}
			if mrand.Float64() < 0.90 {
				rec.kind = "get"
				_, err := c.Get(ctx, mixKey(mrand.IntN(mixKeys)))
				return err
			}
			rec.kind = "list"
			n, _, err := paginatedList(ctx, c, mixObjPrefix)
			if err == nil && n != mixKeys {
				err = fmt.Errorf("mix list: %d keys, want %d", n, mixKeys)
			}
			return err
		}
	}
}

// mixWatchers starts n prefix watchers (prev_kv, one stream each) on the
// mix prefix and returns a function that stops them and returns the number
// of events they received.
func mixWatchers(ctx context.Context, c *clientv3.Client, n int) (func() int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	var events atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wctx := metadata.AppendToOutgoingContext(ctx, "bench-mix-watcher", strconv.Itoa(i))
		wch := c.Watch(clientv3.WithRequireLeader(wctx), mixPrefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
		wr, ok := <-wch
		if !ok || !wr.Created {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("mix watcher %d: not created: %v", i, wr.Err())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wr := range wch {
				events.Add(int64(len(wr.Events)))
			}
		}()
	}
	return func() int64 {
		cancel()
		wg.Wait()
		return events.Load()
	}, nil
}
