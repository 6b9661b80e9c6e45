package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/lossfile"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// lossWritten reports whether err is a rollback whose loss file is written
// (the instance halts first, then writes the file and names it).
func lossWritten(err error) bool {
	return errors.Is(err, engine.ErrRollback) && strings.Contains(err.Error(), "zketcd replay-loss")
}

// rangeStream reads keys under prefix through the RangeStream RPC and
// returns its error (etcd's form), nil once the stream ended normally.
func rangeStream(ctx context.Context, c *clientv3.Client, prefix string, serializable bool) error {
	s, err := pb.NewKVClient(c.ActiveConnection()).RangeStream(ctx, &pb.RangeRequest{
		Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)), Serializable: serializable,
	})
	if err != nil {
		return rpctypes.Error(err)
	}
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return rpctypes.Error(err)
		}
	}
}

// putRetry puts until it succeeds (ZooKeeper may be coming back).
func putRetry(t *testing.T, c *clientv3.Client, key, value string) *clientv3.PutResponse {
	t.Helper()
	var resp *clientv3.PutResponse
	var err error
	testutil.Eventually(t, 60*time.Second, "put "+key+" succeeds", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err = c.Put(ctx, key, value)
		if err != nil {
			t.Logf("put %s: %v", key, err)
		}
		return err == nil
	})
	return resp
}

// restartZooKeeper stops srv, runs between (if any) on its data directory,
// and starts it again.
func restartZooKeeper(t *testing.T, srv *zkserver.Server, between func(dataDir string)) {
	t.Helper()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between(filepath.Join(srv.Dir(), zkserver.DataDirName))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v: %s", from, to, err, out)
	}
}

// TestZooKeeperRestoredFromAnOlderBackupHaltsTheInstanceAndRecordsTheLoss is
// the operator's scenario: 20 puts, ZooKeeper stopped and its data directory
// copied, 20 more writes (revision 41), the old copy restored and ZooKeeper
// restarted. The running instance must say so once, serve no read from
// either history, refuse writes, report it in Status and health, and leave
// a loss file with exactly revisions 22–41, which replay-loss re-applies on
// the restarted instance (which adopted ZooKeeper's revision 21).
func TestZooKeeperRestoredFromAnOlderBackupHaltsTheInstanceAndRecordsTheLoss(t *testing.T) {
	srv := zkservertest.Standalone(t)
	lossDir := t.TempDir()
	logs := &embedtest.SyncBuffer{}
	in := embedtest.Start(t, []string{srv.Addr()}, embedtest.Options{
		SessionTimeout: 4 * time.Second,
		Configure: func(cfg *embed.Config) {
			cfg.Engine.LossDir = lossDir
			cfg.Engine.RollbackCheckAfter = time.Second
			lg := logrus.New()
			lg.SetOutput(logs)
			lg.SetLevel(logrus.WarnLevel)
			cfg.Logger = logrus.NewEntry(lg)
		},
	})
	c := in.Client(t)
	for i := 0; i < 20; i++ {
		putRetry(t, c, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i))
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch := c.Watch(wctx, "k", clientv3.WithPrefix())
	type watchEnd struct {
		events int
		err    error
	}
	watchDone := make(chan watchEnd, 1)
	go func() { // consumed as it comes: clientv3 drops what is buffered when a stream fails
		var end watchEnd
		for resp := range watch {
			end.events += len(resp.Events)
			if end.err = resp.Err(); end.err != nil {
				break
			}
		}
		watchDone <- end
	}()
	backup := filepath.Join(t.TempDir(), "backup")
	restartZooKeeper(t, srv, func(dataDir string) { copyDir(t, dataDir, backup) })
	for i := 20; i < 39; i++ {
		putRetry(t, c, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i))
	}
	ctx := testutil.Context(t, 30*time.Second)
	del, err := c.Delete(ctx, "k05")
	if err != nil || del.Header.Revision != 41 {
		t.Fatalf("delete: %v %v, want revision 41", del, err)
	}

	restartZooKeeper(t, srv, func(dataDir string) {
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
		copyDir(t, backup, dataDir)
	})
	restored := time.Now()

	// Until it is declared, a read is the instance's own history (41) or
	// fails; never ZooKeeper's 21 nor a mix.
	testutil.Eventually(t, 60*time.Second, "a rollback declared after the restore", func() bool {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		get, err := c.Get(rctx, "k", clientv3.WithPrefix(), clientv3.WithSerializable())
		cancel()
		if err == nil && (get.Header.Revision != 41 || len(get.Kvs) != 38) {
			t.Fatalf("serializable read mixes histories: revision %d, %d keys", get.Header.Revision, len(get.Kvs))
		}
		return lossWritten(in.Engine().Health())
	})
	declared := time.Since(restored)
	t.Logf("rollback declared %v after ZooKeeper came back with the old data: %v", declared.Round(time.Millisecond), in.Engine().Health())

	want := "revision 41 applied, ZooKeeper holds 21"
	if err := in.Engine().Health(); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "acknowledged revisions 22–41 are not in ZooKeeper") {
		t.Fatalf("health: %v", err)
	}
	st, err := c.Status(ctx, in.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(st.Errors, "\n"), want) {
		t.Fatalf("Status.Errors %q", st.Errors)
	}
	checkEveryRequestFails(t, ctx, c)
	// The watch saw revisions 22–41, then its stream ended with the error.
	select {
	case end := <-watchDone:
		if end.events != 20 || !errors.Is(end.err, rpctypes.ErrCorrupt) {
			t.Errorf("the watch saw %d events (want 20: revisions 22–41) and ended with %v (want %v)", end.events, end.err, rpctypes.ErrCorrupt)
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch stream did not end after the rollback")
	}
	for resp := range c.Watch(wctx, "k", clientv3.WithPrefix(), clientv3.WithRev(30)) {
		if resp.Err() == nil && len(resp.Events) > 0 {
			t.Fatalf("a new watch on the halted instance got %d events", len(resp.Events))
		}
		if resp.Err() != nil {
			break
		}
	}
	// A negative (no second declaration), so a bounded wait: two of the
	// rollback checks' periods.
	time.Sleep(2 * time.Second)
	if i := strings.Index(logs.String(), "ZooKeeper's data is older"); i >= 0 {
		t.Logf("logs from the declaration on:\n%s", logs.String()[i:])
	}
	if n := strings.Count(logs.String(), "ZooKeeper's data is older than this instance's"); n != 1 {
		t.Errorf("the rollback was logged %d times, want once; logs:\n%s", n, logs.String())
	}

	hdr, recs := checkRestoredLossFile(t, lossDir, in.Engine().Health())

	// Recovery: a restart adopts ZooKeeper's state; replay-loss re-applies.
	in.Restart()
	replayRestoredLoss(t, ctx, in.Client(t), hdr, recs)
}

// checkRestoredLossFile checks the loss file in lossDir of the instance
// whose health is health after the restore: named in the error, revisions
// 22–41 of 41 lost past the fork at 21 (puts of k20–k38, the delete of
// k05); it returns its header and records.
func checkRestoredLossFile(t *testing.T, lossDir string, health error) (lossfile.Header, []lossfile.Record) {
	t.Helper()
	path, hdr, recs, err := readLossFile(t, lossDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(health.Error(), path) {
		t.Errorf("the error does not name the loss file %s", path)
	}
	if hdr.AppliedRev != 41 || hdr.ZooKeeperRev != 21 || hdr.ForkRev != 21 || hdr.Diverged || hdr.Compacted {
		t.Fatalf("loss header %+v", hdr)
	}
	if len(recs) != 20 {
		t.Fatalf("%d lost records, want 20 (revisions 22–41)", len(recs))
	}
	for i, r := range recs {
		rev := int64(22 + i)
		if r.Rev != rev {
			t.Fatalf("record %d has revision %d, want %d", i, r.Rev, rev)
		}
		if rev < 41 && (r.Op != lossfile.OpPut || r.KeyText != fmt.Sprintf("k%02d", 20+i) || string(r.Value) != fmt.Sprintf("v%d", 20+i)) {
			t.Fatalf("record %+v", r)
		}
	}
	if last := recs[19]; last.Op != lossfile.OpDelete || last.KeyText != "k05" {
		t.Fatalf("last record %+v, want the delete of k05", last)
	}
	return hdr, recs
}

// checkEveryRequestFails checks that every read and write through c fails
// with etcd's corrupt-cluster error, serializable reads included.
func checkEveryRequestFails(t *testing.T, ctx context.Context, c *clientv3.Client) {
	t.Helper()
	for name, read := range map[string]func() error{
		"serializable get": func() error { _, err := c.Get(ctx, "k00", clientv3.WithSerializable()); return err },
		"linearizable get": func() error { _, err := c.Get(ctx, "k00"); return err },
		"put":              func() error { _, err := c.Put(ctx, "k00", "x"); return err },
		"txn": func() error {
			_, err := c.Txn(ctx).Then(clientv3.OpGet("k00", clientv3.WithSerializable())).Commit()
			return err
		},
		"serializable range stream": func() error { return rangeStream(ctx, c, "k", true) },
		"linearizable range stream": func() error { return rangeStream(ctx, c, "k", false) },
	} {
		if err := read(); !errors.Is(err, rpctypes.ErrCorrupt) {
			t.Errorf("%s after the rollback: %v, want %v", name, err, rpctypes.ErrCorrupt)
		}
	}
}

// replayRestoredLoss checks, through c2 on an instance restarted after the
// restore, that it adopted ZooKeeper's state (revision 21, 20 keys), that
// the loss file's dry run writes nothing, that its replay writes every
// lost change back (38 keys, k05 deleted), and that a second replay skips
// them all.
func replayRestoredLoss(t *testing.T, ctx context.Context, c2 *clientv3.Client, hdr lossfile.Header, recs []lossfile.Record) {
	t.Helper()
	get, err := c2.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil || get.Header.Revision != 21 || len(get.Kvs) != 20 {
		t.Fatalf("after restart: %v %v, want ZooKeeper's revision 21 with 20 keys", get, err)
	}
	dry, err := lossfile.Replay(ctx, c2, hdr, recs, lossfile.ReplayOptions{DryRun: true})
	if err != nil || len(dry) != 20 {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	if again, _ := c2.Get(ctx, "k", clientv3.WithPrefix()); again.Header.Revision != 21 {
		t.Fatalf("the dry run wrote: revision %d", again.Header.Revision)
	}
	done, err := lossfile.Replay(ctx, c2, hdr, recs, lossfile.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range done {
		if a.Verb == "skip" {
			t.Errorf("replay skipped %v", a)
		}
	}
	get, err = c2.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil || len(get.Kvs) != 38 {
		t.Fatalf("after replay: %v %v, want 38 keys", get, err)
	}
	for _, kv := range get.Kvs {
		if string(kv.Key) == "k05" || string(kv.Value) != "v"+strings.TrimPrefix(strings.TrimPrefix(string(kv.Key), "k"), "0") {
			t.Fatalf("after replay: %s=%s", kv.Key, kv.Value)
		}
	}
	twice, err := lossfile.Replay(ctx, c2, hdr, recs, lossfile.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range twice {
		if a.Verb != "skip" {
			t.Errorf("a second replay wrote %v", a)
		}
	}
}

// TestInstanceRefusesToContinueOnAHistoryWrittenAfterARestore: ZooKeeper is
// restored to revision 21 under instance A (which applied 41 and does not
// probe), and instance B, started on the restored data, writes revisions
// 22–61 of another history, which lets A's session back in (A may notice
// at any point of B's writes past its zxid). A must not
// apply B's entries on top of its own, nor commit on top of them: it halts
// with the fork at revision 21 and a loss file of its revisions 22–41.
func TestInstanceRefusesToContinueOnAHistoryWrittenAfterARestore(t *testing.T) {
	srv := zkservertest.Standalone(t)
	lossDir := t.TempDir()
	root := fmt.Sprintf("/zketcd-test/diverged-%d", time.Now().UnixNano()%1e6)
	a := embedtest.Start(t, []string{srv.Addr()}, embedtest.Options{
		Root: root, Name: "a", SessionTimeout: 4 * time.Second,
		Configure: func(cfg *embed.Config) {
			cfg.Engine.LossDir = lossDir
			cfg.Engine.RollbackCheckAfter = -1 // only the check on a new connection
		},
	})
	ca := a.Client(t)
	for i := 0; i < 20; i++ {
		putRetry(t, ca, fmt.Sprintf("k%02d", i), "a")
	}
	backup := filepath.Join(t.TempDir(), "backup")
	restartZooKeeper(t, srv, func(dataDir string) { copyDir(t, dataDir, backup) })
	for i := 20; i < 40; i++ {
		putRetry(t, ca, fmt.Sprintf("k%02d", i), "a")
	}
	restartZooKeeper(t, srv, func(dataDir string) {
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
		copyDir(t, backup, dataDir)
	})

	stop := make(chan struct{})
	mixed := make(chan string, 1)
	go func() { // A's reads never show B's history
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			get, err := ca.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable())
			cancel()
			if err == nil {
				for _, kv := range get.Kvs {
					if strings.HasPrefix(string(kv.Key), "n") || get.Header.Revision != 41 {
						select {
						case mixed <- fmt.Sprintf("revision %d, key %s", get.Header.Revision, kv.Key):
						default:
						}
					}
				}
			}
			time.Sleep(20 * time.Millisecond) // a reader's pace, not a wait
		}
	}()
	defer close(stop)

	b := embedtest.Start(t, []string{srv.Addr()}, embedtest.Options{Root: root, Name: "b"})
	cb := b.Client(t)
	for i := 0; i < 40; i++ {
		putRetry(t, cb, fmt.Sprintf("n%02d", i), "b")
	}
	wrote := time.Now()
	waitLossWritten(t, a, "A did not notice B's history")
	select {
	case m := <-mixed:
		t.Fatalf("A served a mixed read: %s", m)
	default:
	}
	err := a.Engine().Health()
	t.Logf("A halted %v after B's 40th put: %v", time.Since(wrote).Round(time.Millisecond), err)
	var rbe *engine.RollbackError
	if !errors.As(err, &rbe) || !rbe.Diverged || rbe.Fork.Rev != 21 || rbe.Applied.Rev != 41 || rbe.ZooKeeper.Rev <= 21 {
		t.Fatalf("rollback %+v", rbe)
	}
	if got := a.Engine().State().Rev; got != 41 {
		t.Fatalf("A's view moved to revision %d", got)
	}
	_, hdr, recs, err := readLossFile(t, lossDir)
	if err != nil || !hdr.Diverged || hdr.ForkRev != 21 || len(recs) != 20 || recs[0].Rev != 22 || recs[19].Rev != 41 {
		t.Fatalf("loss file %+v, %d records, %v", hdr, len(recs), err)
	}
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := ca.Put(ctx, "k00", "late"); !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("a put on A: %v", err)
	}
	// Replaying A's loss through B skips nothing (B never wrote k20–k39).
	acts, err := lossfile.Replay(ctx, cb, hdr, recs, lossfile.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, act := range acts {
		if act.Verb == "skip" {
			t.Errorf("replay skipped %v", act)
		}
	}
	if get, err := cb.Get(ctx, "k", clientv3.WithPrefix()); err != nil || len(get.Kvs) != 40 {
		t.Fatalf("B after the replay: %v %v", get, err)
	}
}

// TestZooKeeperWipedUnderAnInstanceHaltsItAndRecordsEverything: ZooKeeper
// restarted on an empty data directory holds no root at all; the instance
// says so and its loss file holds every change it had.
func TestZooKeeperWipedUnderAnInstanceHaltsItAndRecordsEverything(t *testing.T) {
	srv := zkservertest.Standalone(t)
	lossDir := t.TempDir()
	in := startWithLossDir(t, srv.Addr(), lossDir)
	c := in.Client(t)
	for i := 0; i < 10; i++ {
		putRetry(t, c, fmt.Sprintf("k%02d", i), "v")
	}
	restartZooKeeper(t, srv, func(dataDir string) {
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
	})
	wiped := time.Now()
	waitLossWritten(t, in, "no rollback declared")
	err := in.Engine().Health()
	t.Logf("declared %v after ZooKeeper served the empty data: %v", time.Since(wiped).Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "ZooKeeper holds none of this instance's data: revision 11 applied") ||
		!strings.Contains(err.Error(), "acknowledged revisions 2–11 are not in ZooKeeper") {
		t.Fatalf("health: %v", err)
	}
	_, hdr, recs, err := readLossFile(t, lossDir)
	if err != nil || hdr.ForkRev != 1 || len(recs) != 10 || recs[0].Rev != 2 || recs[9].Rev != 11 {
		t.Fatalf("loss file %+v, %d records, %v", hdr, len(recs), err)
	}
}

// TestLossFileOfACompactedHistoryListsFinalValuesAndDeletes: the lost
// revisions were compacted on the instance (as kube-apiserver compacts every
// 5 minutes), so the loss file holds the final value of every key changed
// after the fork and, from ZooKeeper's state at the fork, the keys deleted
// since; replaying it leaves ZooKeeper as the instance had it.
func TestLossFileOfACompactedHistoryListsFinalValuesAndDeletes(t *testing.T) {
	srv := zkservertest.Standalone(t)
	lossDir := t.TempDir()
	in := startWithLossDir(t, srv.Addr(), lossDir)
	c := in.Client(t)
	for i := 0; i < 20; i++ {
		putRetry(t, c, fmt.Sprintf("k%02d", i), "v")
	}
	backup := filepath.Join(t.TempDir(), "backup")
	restartZooKeeper(t, srv, func(dataDir string) { copyDir(t, dataDir, backup) })
	for i := 20; i < 30; i++ {
		putRetry(t, c, fmt.Sprintf("k%02d", i), "v")
	}
	ctx := testutil.Context(t, 30*time.Second)
	putRetry(t, c, "k20", "x")
	for _, k := range []string{"k05", "k21"} {
		if _, err := c.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	want, err := c.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil || want.Header.Revision != 34 {
		t.Fatalf("before the restore: %v %v", want, err)
	}
	if _, err := c.Compact(ctx, 34); err != nil {
		t.Fatal(err)
	}
	restartZooKeeper(t, srv, func(dataDir string) {
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
		copyDir(t, backup, dataDir)
	})
	waitLossWritten(t, in, "no rollback declared")
	_, hdr, recs, err := readLossFile(t, lossDir)
	if err != nil || !hdr.Compacted || hdr.DeletesUnknown || hdr.ForkRev != 21 {
		t.Fatalf("loss header %+v (%v)", hdr, err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s %s@%d=%s", r.Op, r.KeyText, r.Rev, r.Value))
	}
	wantRecs := "put k20@32=x put k22@24=v put k23@25=v put k24@26=v put k25@27=v put k26@28=v put k27@29=v put k28@30=v put k29@31=v delete k05@0="
	if strings.Join(got, " ") != wantRecs {
		t.Fatalf("records\n got %s\nwant %s", strings.Join(got, " "), wantRecs)
	}
	in.Restart()
	c2 := in.Client(t)
	if _, err := lossfile.Replay(ctx, c2, hdr, recs, lossfile.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	after, err := c2.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	str := func(r *clientv3.GetResponse) string {
		var s []string
		for _, kv := range r.Kvs {
			s = append(s, string(kv.Key)+"="+string(kv.Value))
		}
		return strings.Join(s, " ")
	}
	if str(after) != str(want) {
		t.Fatalf("after the replay:\n%s\nwant (the instance's state before the restore):\n%s", str(after), str(want))
	}
}

// startWithLossDir starts an instance on zk that writes loss files to
// lossDir and checks for a rollback after 1 s without a session.
func startWithLossDir(t *testing.T, zk, lossDir string) *embedtest.Instance {
	return embedtest.Start(t, []string{zk}, embedtest.Options{
		SessionTimeout: 4 * time.Second,
		Configure: func(cfg *embed.Config) {
			cfg.Engine.LossDir = lossDir
			cfg.Engine.RollbackCheckAfter = time.Second
		},
	})
}

// waitLossWritten waits up to 60 s for in to have halted and written its
// loss file; it fails t with what, and in's health, if it does not.
func waitLossWritten(t *testing.T, in *embedtest.Instance, what string) {
	t.Helper()
	last := ""
	testutil.Eventually(t, 60*time.Second, what, func() bool {
		err := in.Engine().Health()
		if s := fmt.Sprint(err); s != last {
			last = s
			t.Logf("health: %v", err) // the trail, should it never come
		}
		return lossWritten(err)
	})
}

// readLossFile reads the one loss file in lossDir (failing t if there is
// not exactly one) and returns its path and its contents.
func readLossFile(t *testing.T, lossDir string) (string, lossfile.Header, []lossfile.Record, error) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(lossDir, "zketcd-lost-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("loss files %v, want one", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdr, recs, err := lossfile.Read(f)
	return files[0], hdr, recs, err
}
