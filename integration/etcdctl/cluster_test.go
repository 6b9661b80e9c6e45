package etcdctl

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zketcd/zketcd/embed/embedtest"
)

// watcher is an `etcdctl watch` running in the background.
type watcher struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *embedtest.SyncBuffer
	done           chan struct{}
}

func startWatch(ctx context.Context, t *testing.T, tg *target, args ...string) *watcher {
	t.Helper()
	w := &watcher{stdout: &embedtest.SyncBuffer{}, stderr: &embedtest.SyncBuffer{}, done: make(chan struct{})}
	w.cmd = exec.CommandContext(ctx, tg.etcdctl, append([]string{"--endpoints=" + tg.endpoint}, args...)...)
	w.cmd.Env = ctlEnv()
	w.cmd.Stdout, w.cmd.Stderr = w.stdout, w.stderr
	var err error
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(w.stop)
	return w
}

func (w *watcher) stop() {
	select {
	case <-w.done:
	default:
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// waitOutput waits until the watcher has printed want, then stops it and
// returns what it printed.
func (w *watcher) waitOutput(ctx context.Context, t *testing.T, name, want string) result {
	t.Helper()
	err := waitFor(ctx, 20*time.Second, name+" watch prints "+want, func() (bool, error) {
		return strings.Contains(w.stdout.String(), want), nil
	})
	w.stop()
	r := result{stdout: w.stdout.String(), stderr: w.stderr.String()}
	if err != nil {
		t.Fatalf("%v; printed:\n%s", err, r)
	}
	return r
}

// testWatch checks what `etcdctl watch` prints for live events (a watch
// synced by a progress request before the writes) and for a start
// revision in the past, and for a compacted start revision.
func testWatch(ctx context.Context, t *testing.T, z, e *target, run func(*testing.T, step)) {
	// Interactive mode (flags on the line): "watch w/" creates the watch and "progress" asks
	// for a progress notification on the same stream, which the server
	// sends only after the watch exists; its line tells the watch is live.
	var live [2]*watcher
	for i, tg := range []*target{z, e} {
		w := startWatch(ctx, t, tg, "watch", "-i")
		if _, err := io.WriteString(w.stdin, "watch w/ --prefix --prev-kv\nprogress\n"); err != nil {
			t.Fatal(err)
		}
		w.waitProgress(ctx, t, tg.name)
		live[i] = w
	}
	run(t, cmd("put", "w/1", "a"))           // rev 20
	run(t, cmd("put", "w/1", "b"))           // rev 21
	run(t, cmd("del", "w/1"))                // rev 22
	run(t, cmd("put", "x/1", "not watched")) // rev 23
	run(t, cmd("put", "w/2", "c"))           // rev 24
	var got [2]result
	for i, tg := range []*target{z, e} {
		got[i] = normalise(tg, live[i].waitOutput(ctx, t, tg.name, "w/2\nc\n"))
		got[i].stderr = "" // the killed process prints nothing we compare
	}
	record("etcdctl watch -i <<< 'watch w/ --prefix --prev-kv; progress' (live)", got)
	const wantLive = "progress notify: 19\nPUT\nw/1\na\nPUT\nw/1\na\nw/1\nb\nDELETE\nw/1\nb\nw/1\n\nPUT\nw/2\nc\n"
	for i, name := range []string{"zketcd", "etcd"} {
		if got[i].stdout != wantLive {
			t.Errorf("live watch on %s printed:\n%s\nwant:\n%s", name, got[i].stdout, wantLive)
		}
	}

	// A start revision in the past replays the same events.
	for i, tg := range []*target{z, e} {
		w := startWatch(ctx, t, tg, "watch", "--prefix", "w/", "--rev=20")
		got[i] = normalise(tg, w.waitOutput(ctx, t, tg.name, "w/2\nc\n"))
		got[i].stderr = ""
	}
	record("etcdctl watch --prefix w/ --rev=20 (past)", got)
	if got[0] != got[1] || got[1].stdout != "PUT\nw/1\na\nPUT\nw/1\nb\nDELETE\nw/1\n\nPUT\nw/2\nc\n" {
		t.Errorf("watch --rev=20 differs\n=== zketcd:\n%s=== etcd:\n%s", got[0], got[1])
	}

	// A compacted start revision: etcdctl prints the cancel reason and exits.
	run(t, step{args: []string{"watch", "foo", "--rev=5"}, check: func(t *testing.T, z, e result) {
		if !strings.Contains(e.stderr, "watch was canceled (etcdserver: mvcc: required revision has been compacted)") {
			t.Errorf("etcd: %s", e)
		}
	}})
}

// waitProgress waits for the watcher's first progress notification.
func (w *watcher) waitProgress(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	err := waitFor(ctx, 20*time.Second, name+" watch progress notification", func() (bool, error) {
		return strings.Contains(w.stdout.String(), "progress notify:"), nil
	})
	if err != nil {
		t.Fatalf("%v; printed:\n%s\n%s", err, w.stdout.String(), w.stderr.String())
	}
}

// epStatus is the part of `etcdctl endpoint status -w json` checked here.
type epStatus struct {
	Endpoint string
	Status   struct {
		Header struct {
			ClusterID uint64 `json:"cluster_id"`
			MemberID  uint64 `json:"member_id"`
			Revision  int64
		}
		Version        string
		DBSize         int64 `json:"dbSize"`
		DBSizeInUse    int64 `json:"dbSizeInUse"`
		DBSizeQuota    int64 `json:"dbSizeQuota"`
		Leader         uint64
		StorageVersion string `json:"storageVersion"`
		Errors         []string
	}
}

// replaceColumns replaces the given comma-separated columns of each
// non-empty line of s with placeholders.
func replaceColumns(s string, cols map[int]string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l == "" {
			continue
		}
		f := strings.Split(l, ", ")
		for c, v := range cols {
			if c < len(f) {
				f[c] = v
			}
		}
		lines[i] = strings.Join(f, ", ")
	}
	return strings.Join(lines, "\n")
}

// testEndpoint: endpoint status (-w json: same header revision, a 3.7.x
// version, a leader; the table with per-server sizes and raft positions
// replaced) and endpoint health.
func testEndpoint(ctx context.Context, t *testing.T, z, e *target, run func(*testing.T, step)) {
	var st [2]epStatus
	for i, tg := range []*target{z, e} {
		r, err := tg.ctl(ctx, "", "endpoint", "status", "-w", "json")
		if err != nil || r.code != 0 {
			t.Fatalf("%s: endpoint status -w json: %v %s", tg.name, err, r)
		}
		var list []epStatus
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 {
			t.Fatalf("%s: endpoint status -w json: %v: %s", tg.name, err, r.stdout)
		}
		st[i] = list[0]
		s := st[i].Status
		if !strings.HasPrefix(s.Version, "3.7.") || s.StorageVersion != "3.7.0" {
			t.Errorf("%s: version %q, storage version %q: want 3.7.x, 3.7.0", tg.name, s.Version, s.StorageVersion)
		}
		if s.DBSize <= 0 || s.DBSizeInUse <= 0 || s.DBSizeQuota != 2<<30 {
			t.Errorf("%s: db size %d, in use %d, quota %d", tg.name, s.DBSize, s.DBSizeInUse, s.DBSizeQuota)
		}
		if s.Leader == 0 || s.Leader != s.Header.MemberID || len(s.Errors) != 0 {
			t.Errorf("%s: leader %x, member %x, errors %q: want itself as leader", tg.name, s.Leader, s.Header.MemberID, s.Errors)
		}
		if st[i].Endpoint != tg.endpoint {
			t.Errorf("%s: endpoint %q", tg.name, st[i].Endpoint)
		}
	}
	if st[0].Status.Header.Revision != st[1].Status.Header.Revision {
		t.Errorf("header revision: zketcd %d, etcd %d", st[0].Status.Header.Revision, st[1].Status.Header.Revision)
	}
	run(t, endpointStatusTable)
	// How long the health check's read took is each server's own.
	run(t, step{args: []string{"endpoint", "health"}, norm: func(tg *target, r result) result {
		r.stdout = reTook.ReplaceAllString(r.stdout, "took = T")
		return r
	}, check: func(t *testing.T, z, e result) {
		if z.stdout != "ENDPOINT is healthy: successfully committed proposal: took = T\n" {
			t.Errorf("zketcd: endpoint health: %s", z)
		}
	}})
}

// endpointStatusTable runs `etcdctl endpoint status` (the table). The
// member ID, database sizes (bytes of ZooKeeper log entries against a bbolt
// file) and raft term and indexes (ZooKeeper's epoch and log positions) are
// each server's own. On a fresh zketcd it panicked in etcdctl (DbSize 0).
var endpointStatusTable = step{args: []string{"endpoint", "status"}, norm: func(tg *target, r result) result {
	r.stdout = replaceColumns(r.stdout, map[int]string{1: "ID", 4: "SIZE", 5: "SIZE", 6: "PCT", 10: "TERM", 11: "INDEX", 12: "INDEX"})
	return r
}, check: func(t *testing.T, z, e result) {
	if z.code != 0 || !strings.Contains(z.stdout, ", 3.7.3, 3.7.0, SIZE, SIZE, PCT, 2.1 GB, true, false,") {
		t.Errorf("zketcd: endpoint status: %s", z)
	}
}}

// memberList is the part of `etcdctl member list -w json` checked here.
type memberList struct {
	Members []struct {
		ID         uint64
		Name       string
		PeerURLs   []string `json:"peerURLs"`
		ClientURLs []string `json:"clientURLs"`
		IsLearner  bool     `json:"isLearner"`
	}
}

// testMember: member list shows one started member with the advertised
// client URL. Its ID and name are each server's own, and zketcd has no
// peer URLs (instances talk through ZooKeeper, not to each other).
func testMember(ctx context.Context, t *testing.T, z, e *target, run func(*testing.T, step)) {
	for _, tg := range []*target{z, e} {
		r, err := tg.ctl(ctx, "", "member", "list", "-w", "json")
		if err != nil || r.code != 0 {
			t.Fatalf("%s: member list -w json: %v %s", tg.name, err, r)
		}
		var ml memberList
		if err := json.Unmarshal([]byte(r.stdout), &ml); err != nil {
			t.Fatalf("%s: member list -w json: %v: %s", tg.name, err, r.stdout)
		}
		if len(ml.Members) != 1 {
			t.Fatalf("%s: %d members: %s", tg.name, len(ml.Members), r.stdout)
		}
		m := ml.Members[0]
		if m.ID == 0 || m.Name == "" || m.IsLearner || len(m.ClientURLs) != 1 || m.ClientURLs[0] != "http://"+tg.endpoint {
			t.Errorf("%s: member %+v: want one started member with client URL http://%s", tg.name, m, tg.endpoint)
		}
	}
	run(t, step{args: []string{"member", "list"}, norm: func(tg *target, r result) result {
		r.stdout = replaceColumns(r.stdout, map[int]string{0: "ID", 2: "NAME", 3: "PEERS"})
		return r
	}})
}
