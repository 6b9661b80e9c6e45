package kubelab

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func stepEventsTTL(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	a, kv := x.API, x.KV
	path := "/api/v1/namespaces/" + x.NS + "/events"
	key := "/registry/events/" + x.NS + "/ttl-probe"
	leasesBefore, _ := x.Zketcd.Metric(ctx, "zketcd_leases_expired_total")
	ev := map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata":       map[string]any{"name": "ttl-probe"},
		"involvedObject": map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "namespace": x.NS, "name": "w-2"},
		"reason":         "E2E", "message": "expires with --event-ttl", "type": "Normal", "count": 1,
		"source":         map[string]any{"component": "kubelab"},
		"firstTimestamp": time.Now().UTC().Format(time.RFC3339), "lastTimestamp": time.Now().UTC().Format(time.RFC3339),
	}
	created, err := a.Create(ctx, path, ev)
	if err != nil {
		return err
	}
	t0 := time.Now()
	resp, err := kv.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		return fmt.Errorf("%s: not in zketcd with a lease: %v", key, resp.Kvs)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	ttl, err := kv.TimeToLive(ctx, lease, clientv3.WithAttachedKeys())
	if err != nil {
		return err
	}
	say("POST event %s/ttl-probe -> resourceVersion %s; in zketcd with lease %x (granted TTL %ds, remaining %ds, %d attached keys)",
		x.NS, created.Metadata.ResourceVersion, int64(lease), ttl.GrantedTTL, ttl.TTL, len(ttl.Keys))

	var getGone, listGone, keyGone time.Duration
	err = waitFor(ctx, 60*time.Second, 200*time.Millisecond, "event expiry", func() (bool, error) {
		now := time.Since(t0)
		if keyGone == 0 {
			if r, err := kv.Get(ctx, key); err == nil && len(r.Kvs) == 0 {
				keyGone = now
			}
		}
		if getGone == 0 {
			if _, err := a.Get(ctx, path+"/ttl-probe"); HTTPCode(err) == 404 {
				getGone = now
			}
		}
		if listGone == 0 {
			if l, err := a.List(ctx, path); err == nil {
				found := false
				for _, it := range l.Items {
					found = found || it.Metadata.Name == "ttl-probe"
				}
				if !found {
					listGone = now
				}
			}
		}
		return keyGone > 0 && getGone > 0 && listGone > 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w (key gone after %v, GET 404 after %v, gone from LIST after %v)", err, keyGone, getGone, listGone)
	}
	after, err := kv.TimeToLive(ctx, lease)
	if err != nil {
		return err
	}
	leasesAfter, _ := x.Zketcd.Metric(ctx, "zketcd_leases_expired_total")
	say("after the create: key gone from zketcd after %s, GET 404 after %s, gone from LIST after %s; lease TTL now %d (-1: expired); zketcd_leases_expired_total %v -> %v",
		ms(keyGone), ms(getGone), ms(listGone), after.TTL, leasesBefore, leasesAfter)
	if after.TTL != -1 {
		return fmt.Errorf("lease %x still alive (TTL %d) after its keys were deleted", int64(lease), after.TTL)
	}
	if listGone < 5*time.Second {
		return fmt.Errorf("event gone after only %v with --event-ttl=10s", listGone)
	}
	x.Note("Event with --event-ttl=10s: lease granted %ds, gone from LIST %s after create", ttl.GrantedTTL, ms(listGone))
	return nil
}
