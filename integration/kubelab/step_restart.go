package kubelab

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

func stepRestartZketcd(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	a := x.API
	path := "/api/v1/namespaces/" + x.NS + "/configmaps"
	l, err := a.List(ctx, path)
	if err != nil {
		return err
	}
	w, err := a.Watch(ctx, path+"?resourceVersion="+l.Metadata.ResourceVersion)
	if err != nil {
		return err
	}
	defer w.Close()
	zkAddrRe := regexp.MustCompile(regexp.QuoteMeta(x.Zketcd.Addr))
	logBefore := len(a.Grep(zkAddrRe, 0))
	probe := startReadyzProbe(ctx, a, 100*time.Millisecond)
	defer probe.finish()

	t0 := time.Now()
	stopped, down, err := x.Zketcd.Restart(ctx)
	if err != nil {
		return err
	}
	say("WATCH opened at resourceVersion %s; zketcd stopped (SIGTERM; it exited after %s, its graceful stop waits up to 5s for open streams) and healthy again on %s %s after the SIGTERM",
		l.Metadata.ResourceVersion, ms(stopped), x.Zketcd.Addr, ms(down))

	var obj *Object
	var attempts int
	err = waitFor(ctx, 60*time.Second, 100*time.Millisecond, "a create after the zketcd restart", func() (bool, error) {
		attempts++
		o, err := a.Create(ctx, path, ConfigMap("after-restart", map[string]string{"v": "0"}))
		if HTTPCode(err) == 409 { // an earlier attempt went through
			o, err = a.Get(ctx, path+"/after-restart")
		}
		if err != nil {
			return false, err
		}
		obj = o
		return true, nil
	})
	if err != nil {
		return err
	}
	firstWrite := time.Since(t0)
	say("first create through kube-apiserver succeeded %s after the restart began (%d attempts), resourceVersion %s",
		ms(firstWrite), attempts, obj.Metadata.ResourceVersion)

	// The watch opened before the restart: does it deliver the create?
	continued := false
	var endedAt time.Time
	var endErr error
	for !continued {
		ev, ok, ended := w.Next(15 * time.Second)
		if ended {
			endedAt, endErr = w.Ended()
			break
		}
		if !ok {
			return fmt.Errorf("the watch opened before the restart neither ended nor delivered the create within 15s")
		}
		if ev.Type == "ERROR" {
			say("the watch opened before the restart delivered %s", ev)
			continue
		}
		if ev.Type != "ADDED" || ev.Object.Metadata.Name != "after-restart" || ev.Object.RV() != obj.RV() {
			return fmt.Errorf("the watch opened before the restart delivered an unexpected event %s", ev)
		}
		continued = true
	}
	var watchNote string
	if continued {
		watchNote = "delivered the create: it survived the restart"
	} else {
		// Resume the way a client (reflector) does: from the last
		// resourceVersion it saw.
		w2, err := a.Watch(ctx, path+"?resourceVersion="+l.Metadata.ResourceVersion)
		if err != nil {
			return fmt.Errorf("re-watch from %s after the watch ended: %w", l.Metadata.ResourceVersion, err)
		}
		defer w2.Close()
		ev, ok, _ := w2.Next(15 * time.Second)
		if !ok || ev.Type != "ADDED" || ev.Object.Metadata.Name != "after-restart" || ev.Object.RV() != obj.RV() {
			return fmt.Errorf("re-watch from %s: got %v (ok %v), want ADDED after-restart at %d", l.Metadata.ResourceVersion, ev, ok, obj.RV())
		}
		watchNote = fmt.Sprintf("ended %s after the restart began (%v); a new WATCH from its last resourceVersion %s delivered the create",
			ms(endedAt.Sub(t0)), endErr, l.Metadata.ResourceVersion)
	}
	say("the WATCH opened before the restart %s", watchNote)

	err = waitFor(ctx, 60*time.Second, 100*time.Millisecond, "/readyz after the zketcd restart", func() (bool, error) {
		st, _, err := a.Do(ctx, "GET", "/readyz", nil, "")
		return err == nil && st == 200, err
	})
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // keep probing a little after
	probe.finish()
	desc, _ := probe.window(t0)
	say("%s", desc)
	l2, err := a.List(ctx, path)
	if err != nil {
		return err
	}
	if _, ok := listState(l2)["after-restart"]; !ok {
		return fmt.Errorf("LIST after the restart does not show after-restart")
	}
	if err := checkHealth(ctx, a, say); err != nil {
		return err
	}
	lines := a.Grep(zkAddrRe, 0)
	say("kube-apiserver logged %d lines naming zketcd's address during the restart; last: %s", len(lines)-logBefore, lastLine(lines[logBefore:]))
	x.Note("zketcd restart: down %s, first write ok %s after, %s; watch %s", ms(down), ms(firstWrite), desc, map[bool]string{true: "continued", false: "ended, resumed from its resourceVersion"}[continued])
	return nil
}

func lastLine(lines []string) string {
	if len(lines) == 0 {
		return "(none)"
	}
	s := lines[len(lines)-1]
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func stepRestartAPIServer(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	a := x.API
	snapshot := func() (map[string]int64, error) {
		out := map[string]int64{}
		nss, err := a.List(ctx, "/api/v1/namespaces")
		if err != nil {
			return nil, err
		}
		for _, it := range nss.Items {
			out["namespace/"+it.Metadata.Name] = it.RV()
		}
		for _, ns := range []string{x.NS, x.PagesNS} {
			l, err := a.List(ctx, "/api/v1/namespaces/"+ns+"/configmaps")
			if err != nil {
				return nil, err
			}
			for _, it := range l.Items {
				out["configmap/"+ns+"/"+it.Metadata.Name] = it.RV()
			}
		}
		return out, nil
	}
	before, err := snapshot()
	if err != nil {
		return err
	}
	one, err := a.Get(ctx, "/api/v1/namespaces/"+x.NS+"/configmaps/w-2")
	if err != nil {
		return err
	}
	stopTook := a.Stop()
	if err := a.Start(); err != nil {
		return err
	}
	d, err := a.WaitReady(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	say("kube-apiserver stopped (SIGTERM, exited in %s), started again with the same flags: /readyz 200 after %s", ms(stopTook), ms(d))
	after, err := snapshot()
	if err != nil {
		return err
	}
	var diffs []string
	for k, v := range before {
		if after[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %d before, %d after", k, v, after[k]))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: new at %d", k, v))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("objects changed across the kube-apiserver restart: %v", diffs)
	}
	again, err := a.Get(ctx, "/api/v1/namespaces/"+x.NS+"/configmaps/w-2")
	if err != nil {
		return err
	}
	if again.RV() != one.RV() || again.Metadata.UID != one.Metadata.UID {
		return fmt.Errorf("configmap w-2: resourceVersion %d uid %s before, %d %s after", one.RV(), one.Metadata.UID, again.RV(), again.Metadata.UID)
	}
	say("%d namespaces and configmaps with the same resourceVersions before and after (e.g. %s/w-2 at %s, uid %s)",
		len(before), x.NS, strconv.FormatInt(again.RV(), 10), again.Metadata.UID)
	if err := checkHealth(ctx, a, say); err != nil {
		return err
	}
	x.Note("kube-apiserver restart: ready again in %s, %d objects with unchanged resourceVersions", ms(d), len(before))
	return nil
}
