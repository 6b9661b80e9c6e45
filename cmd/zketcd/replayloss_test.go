package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/lossfile"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
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
	hdr := lossfile.Header{ClusterID: fmt.Sprintf("%x", in.Engine().ClusterID()), Root: in.Root(), Member: "a", AppliedRev: 5, ZooKeeperRev: 3, ForkRev: 2}
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

// TestReplayLossChecksTheClusterAndKeepsThePasswordOutOfArgv runs the
// command against an instance serving TLS with client certificates and
// authentication on: etcdctl's TLS flags reach it, the password comes from
// $ZKETCD_PASSWORD (never the command line), and a loss file of another
// cluster is refused before anything is written.
func TestReplayLossChecksTheClusterAndKeepsThePasswordOutOfArgv(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	certs := testcerts.New(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{TLS: certs.ServerTLS(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{in.Endpoint()}, TLS: certs.ClientTLS(t, true), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "s3cret-pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil && !strings.Contains(err.Error(), "role name not found") {
			t.Fatal(err)
		}
	}
	write := func(cluster string) string {
		p := filepath.Join(t.TempDir(), "loss.jsonl")
		hdr := lossfile.Header{ClusterID: cluster, Root: in.Root(), Member: "a", AppliedRev: 3, ZooKeeperRev: 1, ForkRev: 1}
		if err := lossfile.Write(p, hdr, []lossfile.Record{lossfile.NewRecord(2, lossfile.OpPut, []byte("lost"), []byte("1"))}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv(passwordEnv, "s3cret-pw")
	args := func(file string, extra ...string) []string {
		return append([]string{"--endpoints", "https://" + in.Endpoint(), "--user", "root",
			"--cacert", certs.CAFile, "--cert", certs.ClientCert, "--key", certs.ClientKey}, append(extra, file)...)
	}
	other := write("1")
	if err := runReplayLoss(args(other)); !errors.Is(err, lossfile.ErrOtherCluster) {
		t.Fatalf("a loss file of another cluster: %v, want it refused", err)
	}
	mine := write(fmt.Sprintf("%x", in.Engine().ClusterID()))
	argv := args(mine)
	if strings.Contains(strings.Join(argv, " "), "s3cret-pw") {
		t.Fatal("the test put the password on the command line")
	}
	if err := runReplayLoss(argv); err != nil {
		t.Fatalf("replay with the password from the environment: %v", err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{in.Endpoint()}, TLS: certs.ClientTLS(t, true),
		Username: "root", Password: "s3cret-pw", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if get, err := root.Get(ctx, "lost"); err != nil || len(get.Kvs) != 1 {
		t.Fatalf("the replayed key: %v %v", get, err)
	}
	// Without any password source and no terminal: an error saying what
	// to give, never a password read from a pipe.
	t.Setenv(passwordEnv, "")
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	if _, _, err := credentials("root", "", devnull, io.Discard); err == nil || !strings.Contains(err.Error(), "--password-file") {
		t.Fatalf("no password source: %v", err)
	}
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, pw, err := credentials("root", pwFile, devnull, io.Discard); err != nil || pw != "from-file" {
		t.Fatalf("--password-file: %q %v", pw, err)
	}
}
