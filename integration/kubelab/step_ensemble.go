package kubelab

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func stepEnsemble(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	l := x.Lab
	start := time.Now()
	ens, err := l.Ensemble(ctx, 3)
	if err != nil {
		return err
	}
	say("3-member ZooKeeper ensemble %s (tickTime 2s, forceSync=no): quorum after %s", ens.ConnectString(), ms(time.Since(start)))
	z, err := l.StartZketcd(ctx, "ensemble", ens.Addrs(), ZketcdRoot)
	if err != nil {
		return err
	}
	defer z.Stop()
	a, err := l.StartAPIServer(APIServerOptions{Name: "ensemble", EtcdServers: z.URL()})
	if err != nil {
		return err
	}
	defer a.Stop()
	d, err := a.WaitReady(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	say("zketcd on the ensemble, kube-apiserver on that zketcd: /readyz 200 after %s", ms(d))
	x.Note("time to /readyz, kube-apiserver on zketcd on a fresh 3-member ensemble: %s", ms(d))
	ns := "e2e-ha"
	if _, err := a.Create(ctx, "/api/v1/namespaces", Namespace(ns)); err != nil {
		return err
	}
	path := "/api/v1/namespaces/" + ns + "/configmaps"

	// One writer: create ha-N (v=0), then update it to v=1 and v=2; every
	// write retried until acknowledged (a create answered 409 was
	// acknowledged by an earlier attempt).
	type ack struct {
		v  int
		rv int64
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	var ackTimes []time.Time
	var failed int
	var failSamples []string
	stop := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				werr <- nil
				return
			default:
			}
			name := fmt.Sprintf("ha-%04d", i)
			for v := 0; v <= 2; v++ {
				deadline := time.Now().Add(90 * time.Second)
				for {
					var o *Object
					var err error
					if v == 0 {
						o, err = a.Create(ctx, path, ConfigMap(name, map[string]string{"v": "0"}))
						if HTTPCode(err) == 409 {
							o, err = a.Get(ctx, path+"/"+name)
						}
					} else {
						o, err = a.MergePatch(ctx, path+"/"+name, map[string]any{"data": map[string]string{"v": strconv.Itoa(v)}})
					}
					mu.Lock()
					if err == nil {
						acked[name] = ack{v: v, rv: o.RV()}
						ackTimes = append(ackTimes, time.Now())
					} else {
						failed++
						if len(failSamples) < 3 {
							failSamples = append(failSamples, err.Error())
						}
					}
					mu.Unlock()
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						werr <- fmt.Errorf("%s v=%d not acknowledged in 90s: %w", name, v, err)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}
	}()
	probe := startReadyzProbe(ctx, a, 200*time.Millisecond)
	defer probe.finish()

	time.Sleep(6 * time.Second)
	leader, err := ens.Leader(ctx)
	if err != nil {
		close(stop)
		<-werr
		return err
	}
	mu.Lock()
	before := len(ackTimes)
	mu.Unlock()
	killAt := time.Now()
	if err := ens.Member(leader).Kill(); err != nil {
		close(stop)
		<-werr
		return err
	}
	say("%d writes acknowledged; killed (SIGKILL) the ZooKeeper leader, member %d (%s)", before, leader, ens.Member(leader).Addr())
	var newLeader = -1
	_ = waitFor(ctx, 60*time.Second, 200*time.Millisecond, "a new ZooKeeper leader", func() (bool, error) {
		i, err := ens.Leader(ctx)
		newLeader = i
		return err == nil && i != leader, nil
	})
	elected := time.Since(killAt)
	time.Sleep(20 * time.Second) // traffic goes on
	close(stop)
	if err := <-werr; err != nil {
		return err
	}
	err = waitFor(ctx, 60*time.Second, 200*time.Millisecond, "/readyz after the leader kill", func() (bool, error) {
		st, _, err := a.Do(ctx, "GET", "/readyz", nil, "")
		return err == nil && st == 200, err
	})
	if err != nil {
		return err
	}
	probe.finish()
	desc, _ := probe.window(killAt)

	mu.Lock()
	total := len(ackTimes)
	var maxGap time.Duration
	var gapAt time.Time
	for i := 1; i < len(ackTimes); i++ {
		if g := ackTimes[i].Sub(ackTimes[i-1]); g > maxGap {
			maxGap, gapAt = g, ackTimes[i-1]
		}
	}
	mu.Unlock()
	say("new ZooKeeper leader: member %d, %s after the kill; %d writes acknowledged in all (%d failed attempts, retried%s); longest pause between acknowledgements %s, starting %s after the kill",
		newLeader, ms(elected), total, failed, sampleSuffix(failSamples), ms(maxGap), ms(gapAt.Sub(killAt)))
	say("%s", desc)

	// Every acknowledged write is there, and nothing else.
	list, err := a.List(ctx, path)
	if err != nil {
		return err
	}
	got := map[string]Object{}
	for _, it := range list.Items {
		got[it.Metadata.Name] = it
	}
	var bad []string
	for name, ak := range acked {
		o, ok := got[name]
		switch {
		case !ok:
			bad = append(bad, name+" missing")
		case o.Data["v"] != strconv.Itoa(ak.v) || o.RV() != ak.rv:
			bad = append(bad, fmt.Sprintf("%s: v=%s at %d, acknowledged v=%d at %d", name, o.Data["v"], o.RV(), ak.v, ak.rv))
		}
	}
	for name := range got {
		if _, ok := acked[name]; !ok {
			bad = append(bad, name+" present but never acknowledged")
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return fmt.Errorf("after the leader kill: %s", strings.Join(bad, "; "))
	}
	say("all %d objects present with the acknowledged data and resourceVersion (LIST at %s)", len(acked), list.Metadata.ResourceVersion)
	if lines := z.Grep(regexp.MustCompile(`(?i)session|disconnect|reconnect|expired`), 0); len(lines) > 0 {
		say("zketcd's log about its ZooKeeper session (%d lines), last: %s", len(lines), lastLine(lines))
	}
	if err := checkHealth(ctx, a, say); err != nil {
		return err
	}
	x.Note("ZooKeeper leader kill: %d acknowledged writes all present; new leader after %s; longest write pause %s; %s",
		total, ms(elected), ms(maxGap), desc)
	return nil
}

func sampleSuffix(samples []string) string {
	if len(samples) == 0 {
		return ""
	}
	return "; e.g. " + samples[0]
}
