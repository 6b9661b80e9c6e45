package faults

import (
	"context"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ProbePrefix is the probes' key space, outside the linearizability model
// (the probes' requests would make its search too long): ProbeKey's reads
// are checked against every write acknowledged before them instead
// (checker.realTime), and its content against the replayed store.
const (
	ProbePrefix = Prefix + "probe/"
	ProbeKey    = ProbePrefix + "k"
)

// probeWorkers is where the probes' worker IDs start: every probe request
// is a worker of its own (open loop), after the open-loop puts' IDs.
const probeWorkers = 2 << 20

// probes runs Config.ProbeEvery's probes through clients "A" and "B" until
// the workload stops: every ProbeEvery a linearizable read of ProbeKey
// through each and a put of it through each of the probe writers (both
// unless SetProbeWriters chose), each in a goroutine of its own, so that an
// instance whose requests stall (an old leader cut off from ZooKeeper) does
// not slow the probes of the other; and through each client a lease (TTL
// 2 s, a key) renewed by a keepalive every 5 ProbeEvery, granted anew once
// a keepalive finds it gone. realTime catches a read that misses a put
// acknowledged before the read began; the lease check a lease that expired
// less than its TTL after an acknowledged keepalive.
func (w *Workload) probes() {
	every := w.cfg.ProbeEvery
	names := []string{"A", "B"}
	for i, name := range names {
		c := w.cfg.Clients[name]
		if c == nil {
			continue
		}
		id := probeWorkers - 1 - i
		w.spawn(func() { w.keepAliveProbe(id, name, c, 5*every) })
	}
	w.every(every, func(n int) {
		writers := *w.probeWriters.Load()
		for i, name := range names {
			c := w.cfg.Clients[name]
			if c == nil {
				continue
			}
			read := &Op{Worker: probeWorkers + 4*n + 2*i, Client: name, Kind: KindRange, Key: ProbeKey}
			w.spawn(func() { w.do(read, func(ctx context.Context) error { return w.rangeReq(ctx, c, read) }) })
			if !slices.Contains(writers, name) {
				continue
			}
			put := &Op{Worker: probeWorkers + 4*n + 2*i + 1, Client: name, Kind: KindPut, Key: ProbeKey}
			put.Value = w.value(put.Worker)
			w.probePuts.Add(1)
			w.spawn(func() {
				defer w.probePuts.Add(-1)
				w.do(put, func(ctx context.Context) error {
					resp, err := c.Put(ctx, put.Key, put.Value)
					if err == nil {
						put.Header = resp.Header.Revision
					}
					return err
				})
			})
		}
	})
}

// SetProbeWriters chooses the clients the probes put through (none: the
// probes only read and renew). Safe to call at any time.
func (w *Workload) SetProbeWriters(names ...string) {
	w.probeWriters.Store(&names)
}

// ProbePutsIdle waits until no probe put is under way, or d passed; it
// reports whether none is.
func (w *Workload) ProbePutsIdle(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for w.probePuts.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// keepAliveProbe keeps a 2 s lease alive through c with a keepalive every
// period, one at a time; a keepalive answering TTL 0 (the lease expired)
// starts a new lease.
func (w *Workload) keepAliveProbe(id int, name string, c *clientv3.Client, period time.Duration) {
	var lease int64
	for w.pause(period) {
		if lease == 0 {
			l, _, err := w.grant(id, name, 2)
			if err != nil {
				continue
			}
			lease = l
		}
		op := &Op{Worker: id, Client: name, Kind: KindKeepAlive, Lease: lease}
		w.do(op, func(ctx context.Context) error { return keepAliveOnce(ctx, c, lease, op) })
		if op.OK() && op.RespTTL == 0 {
			lease = 0
		}
	}
}
