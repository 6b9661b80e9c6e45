package kubelab

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func stepCompaction(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if x.ZK == nil {
		return fmt.Errorf("needs ZooKeeper (step ready-zketcd failed)")
	}
	l := x.Lab
	z, err := l.StartZketcd(ctx, "compaction", []string{x.ZK.Addr()}, ZketcdRoot+"-compaction")
	if err != nil {
		return err
	}
	defer z.Stop()
	kv, err := z.Client()
	if err != nil {
		return err
	}
	c, err := l.StartAPIServer(APIServerOptions{Name: "compaction", EtcdServers: z.URL(), Extra: ExtraCompaction})
	if err != nil {
		return err
	}
	defer c.Stop()
	d, err := c.WaitReady(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	readyAt := time.Now()
	say("a second zketcd (root %s) and kube-apiserver with %s: /readyz 200 after %s", z.Root, strings.Join(ExtraCompaction, " "), ms(d))
	x.Note("time to /readyz, kube-apiserver on a fresh zketcd root, ZooKeeper's JVM warm: %s", ms(d))

	ns := "e2e-compact"
	if _, err := c.Create(ctx, "/api/v1/namespaces", Namespace(ns)); err != nil {
		return err
	}
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	key := "/registry/configmaps/" + ns + "/c"
	old, err := c.Create(ctx, path, ConfigMap("c", map[string]string{"v": "0"}))
	if err != nil {
		return err
	}
	var last *Object
	for i := 1; i <= 3; i++ {
		if last, err = c.MergePatch(ctx, path+"/c", map[string]any{"data": map[string]string{"v": strconv.Itoa(i)}}); err != nil {
			return err
		}
	}
	say("configmap %s/c created at resourceVersion %d, updated to %d", ns, old.RV(), last.RV())

	// kube-apiserver compacts to the revision it saw one interval earlier.
	t0 := time.Now()
	err = waitFor(ctx, 90*time.Second, 250*time.Millisecond, "compaction past resourceVersion "+old.Metadata.ResourceVersion, func() (bool, error) {
		_, err := kv.Get(ctx, key, clientv3.WithRev(old.RV()))
		return errors.Is(err, rpctypes.ErrCompacted), nil
	})
	if err != nil {
		return err
	}
	compacted := time.Since(t0)
	ck, err := kv.Get(ctx, "compact_rev_key")
	if err != nil {
		return err
	}
	ckDesc := "(absent)"
	if len(ck.Kvs) == 1 {
		ckDesc = fmt.Sprintf("value %s, version %d", ck.Kvs[0].Value, ck.Kvs[0].Version)
	}
	say("zketcd compacted past %d %s after the write (%s after /readyz): clientv3 Get at revision %d -> %q; kube-apiserver's compact_rev_key: %s",
		old.RV(), ms(compacted), ms(time.Since(readyAt)), old.RV(), rpctypes.ErrCompacted.Error(), ckDesc)

	// Through kube-apiserver: a watch and an exact LIST at the old resourceVersion.
	var watchResult string
	w, err := c.Watch(ctx, path+"?resourceVersion="+old.Metadata.ResourceVersion)
	switch {
	case HTTPCode(err) == 410:
		watchResult = "HTTP 410: " + err.(*APIError).Status.Message
	case err != nil:
		return err
	default:
		ev, ok, _ := w.Next(10 * time.Second)
		w.Close()
		if !ok || ev.Type != "ERROR" || ev.Status.Code != 410 {
			return fmt.Errorf("WATCH at compacted resourceVersion %d: got %v (ok %v), want an ERROR event with code 410", old.RV(), ev, ok)
		}
		watchResult = fmt.Sprintf("HTTP 200 then an ERROR event: code %d, reason %s, %q", ev.Status.Code, ev.Status.Reason, ev.Status.Message)
	}
	say("WATCH ?resourceVersion=%d -> %s", old.RV(), watchResult)
	_, err = c.List(ctx, path+"?resourceVersion="+old.Metadata.ResourceVersion+"&resourceVersionMatch=Exact")
	if HTTPCode(err) != 410 {
		return fmt.Errorf("LIST at compacted resourceVersion %d: want HTTP 410, got %v", old.RV(), err)
	}
	say("LIST ?resourceVersion=%d&resourceVersionMatch=Exact -> HTTP 410: %s", old.RV(), err.(*APIError).Status.Message)

	// A watch from a current resourceVersion still works.
	now, err := c.List(ctx, path)
	if err != nil {
		return err
	}
	w2, err := c.Watch(ctx, path+"?resourceVersion="+now.Metadata.ResourceVersion)
	if err != nil {
		return err
	}
	defer w2.Close()
	upd, err := c.MergePatch(ctx, path+"/c", map[string]any{"data": map[string]string{"v": "after"}})
	if err != nil {
		return err
	}
	if ev, ok, _ := w2.Next(10 * time.Second); !ok || ev.Type != "MODIFIED" || ev.Object.RV() != upd.RV() {
		return fmt.Errorf("WATCH from the current resourceVersion %s after compaction: got %v, want MODIFIED at %d", now.Metadata.ResourceVersion, ev, upd.RV())
	}
	say("WATCH from the current resourceVersion %s after the compaction delivers the next update (MODIFIED at %d)", now.Metadata.ResourceVersion, upd.RV())

	// zketcd's side: the Compact RPCs and the physical compaction.
	n, err := z.Metric(ctx, "grpc_server_handled_total", `grpc_method="Compact"`, `grpc_code="OK"`)
	if err != nil {
		return err
	}
	// The leader's compactor turns a compaction into a new base generation
	// (and deletes log entries) within a few seconds: wait for the one that
	// covers the old resourceVersion.
	re := regexp.MustCompile(`physical compaction.* compacted=(\d+)`)
	var lines []string
	physical := waitFor(ctx, 30*time.Second, 250*time.Millisecond, "physical compaction log line", func() (bool, error) {
		lines = z.Grep(re, 0)
		for _, l := range lines {
			if m := re.FindStringSubmatch(l); m != nil {
				if rev, _ := strconv.ParseInt(m[1], 10, 64); rev > old.RV() {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if n < 1 || physical != nil {
		return fmt.Errorf("zketcd shows no compaction past %d: grpc_server_handled_total{grpc_method=\"Compact\",grpc_code=\"OK\"} %v, physical compaction log lines %q", old.RV(), n, lines)
	}
	say("zketcd /metrics: grpc_server_handled_total{grpc_method=\"Compact\",grpc_code=\"OK\"} %v; %d \"physical compaction\" log lines, last:\n    %s", n, len(lines), lastLine(lines))
	x.Note("compaction: zketcd compacted %s after the write (interval 5s); old-resourceVersion WATCH -> %s; Exact LIST -> 410; %v Compact RPCs, %d physical compactions",
		ms(compacted), strings.SplitN(watchResult, ":", 2)[0], n, len(lines))
	return nil
}
