package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/lossfile"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestReplayLossDryRunWritesNothingThenReplaySkipsKeysWrittenSinceTheFork
// runs the command's replay against a real instance: the dry run lists and
// writes nothing; the replay writes the lost keys and skips the one written
// after the fork, which --force then overwrites.
func TestReplayLossDryRunWritesNothingThenReplaySkipsKeysWrittenSinceTheFork(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{})
	c := in.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "gone", "old"); err != nil { // revision 2: before the fork
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "new", "since"); err != nil { // revision 3: after the fork at 2
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "loss.jsonl")
	hdr := lossfile.Header{ClusterID: "1", Root: in.Root(), Member: "a", AppliedRev: 5, ZooKeeperRev: 3, ForkRev: 2}
	recs := []lossfile.Record{
		lossfile.NewRecord(3, lossfile.OpPut, []byte("lost"), []byte("1")),
		lossfile.NewRecord(4, lossfile.OpPut, []byte("new"), []byte("mine")),
		lossfile.NewRecord(5, lossfile.OpDelete, []byte("gone"), nil),
	}
	if err := lossfile.Write(path, hdr, recs); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		_, recs, err := readLossFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		opts := lossfile.ReplayOptions{}
		for _, a := range args {
			opts.DryRun = opts.DryRun || a == "--dry-run"
			opts.Force = opts.Force || a == "--force"
		}
		if err := replayLoss(&out, c, hdr, recs, opts, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	out := run("--dry-run")
	for _, want := range []string{`would put    "lost"`, `skip   "new"`, `would delete "gone"`, "2 keys to write, 1 skipped"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if get, _ := c.Get(ctx, "lost"); len(get.Kvs) != 0 {
		t.Fatal("the dry run wrote")
	}
	out = run()
	if !strings.Contains(out, "2 keys written, 1 skipped") {
		t.Fatalf("replay output:\n%s", out)
	}
	if get, _ := c.Get(ctx, "lost"); len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "1" {
		t.Fatalf("lost key after replay: %v", get.Kvs)
	}
	if get, _ := c.Get(ctx, "gone"); len(get.Kvs) != 0 {
		t.Fatal("the lost delete was not replayed")
	}
	if get, _ := c.Get(ctx, "new"); string(get.Kvs[0].Value) != "since" {
		t.Fatal("a key written after the fork was overwritten without --force")
	}
	out = run("--force")
	if get, _ := c.Get(ctx, "new"); string(get.Kvs[0].Value) != "mine" || !strings.Contains(out, "1 keys written, 2 skipped") {
		t.Fatalf("--force: %s\n%s", get.Kvs[0].Value, out)
	}
}
