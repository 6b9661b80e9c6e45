package kubelab

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// writeOp is one write through kube-apiserver and what it answered.
type writeOp struct {
	verb string // create, patch, delete
	name string
	rv   int64 // resourceVersion answered (0 for a delete: the answer is a Status)
	// state is every object's resourceVersion after this write.
	state map[string]int64
}

var eventType = map[string]string{"create": "ADDED", "patch": "MODIFIED", "delete": "DELETED"}

func stepWatch(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	a, kv := x.API, x.KV
	path := "/api/v1/namespaces/" + x.NS + "/configmaps"
	prefix := "/registry/configmaps/" + x.NS + "/"
	start, err := a.List(ctx, path)
	if err != nil {
		return err
	}
	rv0 := start.RV()
	state := map[string]int64{}
	for _, it := range start.Items {
		state[it.Metadata.Name] = it.RV()
	}
	w, err := a.Watch(ctx, path+"?resourceVersion="+strconv.FormatInt(rv0, 10))
	if err != nil {
		return err
	}
	defer w.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	etcdEvents := kv.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rv0+1))
	say("LIST %s -> resourceVersion %d, %d items; WATCH from it through kube-apiserver, and with clientv3 on zketcd from revision %d",
		path, rv0, len(start.Items), rv0+1)

	script := []struct{ verb, name, v string }{
		{"create", "w-0", "0"}, {"create", "w-1", "0"}, {"create", "w-2", "0"}, {"create", "w-3", "0"}, {"create", "w-4", "0"},
		{"patch", "w-0", "1"}, {"patch", "w-1", "1"}, {"patch", "w-2", "1"}, {"patch", "w-2", "2"},
		{"delete", "w-3", ""}, {"delete", "w-1", ""}, {"create", "w-5", "0"}, {"delete", "w-0", ""}, {"patch", "w-4", "1"},
	}
	ops := []writeOp{{verb: "start", rv: rv0, state: copyState(state)}}
	for _, s := range script {
		var o *Object
		var err error
		switch s.verb {
		case "create":
			o, err = a.Create(ctx, path, ConfigMap(s.name, map[string]string{"v": s.v}))
		case "patch":
			o, err = a.MergePatch(ctx, path+"/"+s.name, map[string]any{"data": map[string]string{"v": s.v}})
		case "delete":
			_, err = a.Delete(ctx, path+"/"+s.name)
			o = &Object{}
		}
		if err != nil {
			return err
		}
		if s.verb == "delete" {
			delete(state, s.name)
		} else {
			state[s.name] = o.RV()
		}
		ops = append(ops, writeOp{verb: s.verb, name: s.name, rv: o.RV(), state: copyState(state)})
	}
	x.watchOps = ops
	writes := ops[1:]

	var got []WatchEvent
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < len(writes) && time.Now().Before(deadline) {
		ev, ok, ended := w.Next(time.Until(deadline))
		if ended {
			_, err := w.Ended()
			return fmt.Errorf("watch ended after %d of %d events: %v", len(got), len(writes), err)
		}
		if ok {
			got = append(got, ev)
		}
	}
	// Exactly once: nothing more may come.
	if ev, ok, _ := w.Next(2 * time.Second); ok {
		got = append(got, ev)
	}
	var etcdGot []*clientv3.Event
	edeadline := time.After(10 * time.Second)
	for len(etcdGot) < len(writes) {
		select {
		case wr := <-etcdEvents:
			if err := wr.Err(); err != nil {
				return err
			}
			etcdGot = append(etcdGot, wr.Events...)
		case <-edeadline:
			return fmt.Errorf("clientv3 watch on zketcd: %d of %d events", len(etcdGot), len(writes))
		}
	}

	var tbl strings.Builder
	fmt.Fprintf(&tbl, "%3s %-7s %-5s %12s   %-9s %-5s %9s   %-6s %13s\n", "#", "write", "name", "answered rv", "watch", "name", "event rv", "etcd", "etcd revision")
	var problems []string
	for i, op := range writes {
		var ev WatchEvent
		if i < len(got) {
			ev = got[i]
		}
		var ee *clientv3.Event
		if i < len(etcdGot) {
			ee = etcdGot[i]
		}
		erev, etype := int64(0), "-"
		if ee != nil {
			erev, etype = ee.Kv.ModRevision, ee.Type.String()
		}
		fmt.Fprintf(&tbl, "%3d %-7s %-5s %12s   %-9s %-5s %9s   %-6s %13d\n", i+1, op.verb, op.name, rvString(op.rv),
			ev.Type, ev.Object.Metadata.Name, ev.Object.Metadata.ResourceVersion, etype, erev)
		switch {
		case ev.Type != eventType[op.verb] || ev.Object.Metadata.Name != op.name:
			problems = append(problems, fmt.Sprintf("event %d: got %s, want %s %s", i+1, ev, eventType[op.verb], op.name))
		case op.rv != 0 && ev.Object.RV() != op.rv:
			problems = append(problems, fmt.Sprintf("event %d: resourceVersion %d, the write answered %d", i+1, ev.Object.RV(), op.rv))
		case ee == nil || ev.Object.RV() != erev:
			problems = append(problems, fmt.Sprintf("event %d: resourceVersion %d, zketcd's event revision %d", i+1, ev.Object.RV(), erev))
		case i > 0 && i-1 < len(got) && ev.Object.RV() <= got[i-1].Object.RV():
			problems = append(problems, fmt.Sprintf("event %d: resourceVersion %d not above the previous one", i+1, ev.Object.RV()))
		}
		if op.verb == "delete" && ee != nil {
			writes[i].rv = erev // the deletion's revision, for list-exact
		}
	}
	if len(got) != len(writes) {
		problems = append(problems, fmt.Sprintf("%d watch events for %d writes: %v", len(got), len(writes), got))
	}
	say("%d writes and the events they produced:\n%s", len(writes), indent(tbl.String(), "    "))
	if len(problems) > 0 {
		return fmt.Errorf("watch through kube-apiserver: %s", strings.Join(problems, "; "))
	}
	say("every write seen exactly once, in order, with the write's resourceVersion = zketcd's revision; no further event in 2s")
	x.Note("watch: %d/%d writes seen exactly once in order, resourceVersions = zketcd revisions", len(got), len(writes))
	return nil
}

func copyState(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func rvString(rv int64) string {
	if rv == 0 {
		return "(Status)"
	}
	return strconv.FormatInt(rv, 10)
}

func stateString(m map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s@%d", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func listState(l *List) map[string]int64 {
	m := map[string]int64{}
	for _, it := range l.Items {
		m[it.Metadata.Name] = it.RV()
	}
	return m
}

func stepListExact(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	if len(x.watchOps) < 10 {
		return fmt.Errorf("needs the writes of the watch step")
	}
	path := "/api/v1/namespaces/" + x.NS + "/configmaps"
	var checked int
	for _, i := range []int{0, 5, 9, 11, len(x.watchOps) - 1} {
		op := x.watchOps[i]
		rv := op.rv
		if rv == 0 {
			continue
		}
		l, err := x.API.List(ctx, path+"?resourceVersion="+strconv.FormatInt(rv, 10)+"&resourceVersionMatch=Exact")
		if err != nil {
			return err
		}
		got := listState(l)
		when := fmt.Sprintf("after write %d, %s %s", i, op.verb, op.name)
		if i == 0 {
			when = "the LIST before the writes"
		}
		say("LIST ?resourceVersion=%d&resourceVersionMatch=Exact (%s) -> resourceVersion %s, %s",
			rv, when, l.Metadata.ResourceVersion, stateString(got))
		if l.RV() != rv || stateString(got) != stateString(op.state) {
			return fmt.Errorf("LIST at exact resourceVersion %d: got rv %d %s, want %s", rv, l.RV(), stateString(got), stateString(op.state))
		}
		checked++
	}
	x.Note("LIST resourceVersionMatch=Exact: %d past resourceVersions, each the exact state after that write", checked)
	return nil
}

func stepPagination(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	a := x.API
	const objects, limit = 60, 7
	if _, err := a.Create(ctx, "/api/v1/namespaces", Namespace(x.PagesNS)); err != nil {
		return err
	}
	path := "/api/v1/namespaces/" + x.PagesNS + "/configmaps"
	for i := 0; i < objects; i++ {
		if _, err := a.Create(ctx, path, ConfigMap(fmt.Sprintf("p-%03d", i), map[string]string{"v": "0"})); err != nil {
			return err
		}
	}

	// Concurrent writer: creates, updates and deletes in the listed namespace.
	var writes atomic.Int64
	var werr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			switch i % 3 {
			case 0:
				_, err = a.Create(ctx, path, ConfigMap(fmt.Sprintf("x-%04d", i), map[string]string{"v": "0"}))
			case 1:
				_, err = a.MergePatch(ctx, fmt.Sprintf("%s/p-%03d", path, i%objects), map[string]any{"data": map[string]string{"v": strconv.Itoa(i)}})
			case 2:
				if i >= 6 {
					_, err = a.Delete(ctx, fmt.Sprintf("%s/x-%04d", path, i-5))
				}
			}
			if err != nil {
				werr = err
				return
			}
			writes.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	stopWriter := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopWriter()
	time.Sleep(300 * time.Millisecond)

	var pages []*List
	seen := map[string]int64{}
	var dups []string
	startWrites := writes.Load()
	cont := ""
	for {
		q := "?limit=" + strconv.Itoa(limit)
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		l, err := a.List(ctx, path+q)
		if err != nil {
			return err
		}
		pages = append(pages, l)
		for _, it := range l.Items {
			if _, ok := seen[it.Metadata.Name]; ok {
				dups = append(dups, it.Metadata.Name)
			}
			seen[it.Metadata.Name] = it.RV()
		}
		if cont = l.Metadata.Continue; cont == "" {
			break
		}
		time.Sleep(100 * time.Millisecond) // let the writer interleave
	}
	during := writes.Load() - startWrites
	stopWriter()
	if werr != nil {
		return fmt.Errorf("concurrent writer: %w", werr)
	}
	rv := pages[0].RV()
	var pageRVs []string
	sameRV := true
	for _, p := range pages {
		pageRVs = append(pageRVs, p.Metadata.ResourceVersion)
		if p.RV() != rv {
			sameRV = false
		}
	}
	first := pages[0].Metadata.RemainingItemCount
	remaining := "-"
	if first != nil {
		remaining = strconv.FormatInt(*first, 10)
	}
	say("%d pages of limit=%d while a writer made %d writes (creates/updates/deletes in the same namespace); page resourceVersions %v; first page remainingItemCount %s",
		len(pages), limit, during, strings.Join(pageRVs, ","), remaining)
	if !sameRV {
		return fmt.Errorf("pages at different resourceVersions: %v", pageRVs)
	}
	if len(dups) > 0 {
		return fmt.Errorf("duplicates across pages: %v", dups)
	}
	if during == 0 {
		return fmt.Errorf("no concurrent write happened during the pagination")
	}
	exact, err := a.List(ctx, path+"?resourceVersion="+strconv.FormatInt(rv, 10)+"&resourceVersionMatch=Exact")
	if err != nil {
		return err
	}
	want := listState(exact)
	if stateString(seen) != stateString(want) {
		var missing, extra []string
		for k, v := range want {
			if seen[k] != v {
				missing = append(missing, fmt.Sprintf("%s@%d", k, v))
			}
		}
		for k, v := range seen {
			if want[k] != v {
				extra = append(extra, fmt.Sprintf("%s@%d", k, v))
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		return fmt.Errorf("pages differ from the LIST at resourceVersion %d: missing/different %v, extra %v", rv, missing, extra)
	}
	now, err := a.List(ctx, path)
	if err != nil {
		return err
	}
	say("union of the pages = LIST at resourceVersion=%d&resourceVersionMatch=Exact: %d objects, same names and resourceVersions; no duplicates or gaps (a LIST now: %d objects at %s)",
		rv, len(seen), len(now.Items), now.Metadata.ResourceVersion)
	x.Note("paginated LIST: %d pages at one resourceVersion under %d concurrent writes, = the Exact LIST at it (%d objects)", len(pages), during, len(seen))
	return nil
}
