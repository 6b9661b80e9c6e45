package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/lossfile"
)

// runReplayLoss re-applies a loss file (written by an instance that found
// ZooKeeper's data older than its own) through the etcd API of a running
// zketcd: the last lost change of every key, as a new write, skipping keys
// written since (unless --force). The logic is in internal/lossfile.
func runReplayLoss(args []string) error {
	fs := flag.NewFlagSet("zketcd replay-loss", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "zketcd (etcd API) endpoints, comma separated")
	dryRun := fs.Bool("dry-run", false, "print what would be written and write nothing")
	force := fs.Bool("force", false, "also overwrite keys written after the fork (by default they are skipped)")
	user := fs.String("user", "", "etcd user[:password] when authentication is on")
	timeout := fs.Duration("command-timeout", 30*time.Second, "timeout of each request")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: zketcd replay-loss [--endpoints H:P] [--dry-run] [--force] FILE")
		fs.PrintDefaults()
	}
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		fs.Usage()
		return errors.New("give one loss file")
	}
	hdr, recs, err := readLossFile(files[0])
	if err != nil {
		return err
	}
	cfg := clientv3.Config{Endpoints: splitList(*endpoints), DialTimeout: *timeout}
	if *user != "" {
		cfg.Username, cfg.Password, _ = strings.Cut(*user, ":")
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	return replayLoss(os.Stdout, cli, hdr, recs, lossfile.ReplayOptions{DryRun: *dryRun, Force: *force}, *timeout)
}

func replayLoss(w io.Writer, kv clientv3.KV, hdr lossfile.Header, recs []lossfile.Record, opts lossfile.ReplayOptions, timeout time.Duration) error {
	fmt.Fprintf(w, "loss of cluster %s (root %s), written by %s at %s: revisions %d–%d lost (the instance had applied %d, ZooKeeper held %d)\n",
		hdr.ClusterID, hdr.Root, hdr.Member, hdr.Written, hdr.ForkRev+1, hdr.AppliedRev, hdr.AppliedRev, hdr.ZooKeeperRev)
	switch {
	case hdr.Compacted && hdr.DeletesUnknown:
		fmt.Fprintln(w, "note: the history was compacted; the file holds final values, and no deletions (ZooKeeper's state at the fork could not be read)")
	case hdr.Compacted:
		fmt.Fprintln(w, "note: the history was compacted; the file holds final values, and deletions without their revision")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout*time.Duration(2*len(recs)+1))
	defer cancel()
	acts, err := lossfile.Replay(ctx, kv, hdr, recs, opts)
	written, skipped := 0, 0
	for _, a := range acts {
		prefix := ""
		if opts.DryRun && a.Verb != "skip" {
			prefix = "would "
		}
		fmt.Fprintf(w, "%s%v\n", prefix, a)
		if a.Verb == "skip" {
			skipped++
		} else {
			written++
		}
	}
	verb := "written"
	if opts.DryRun {
		verb = "to write"
	}
	fmt.Fprintf(w, "%d keys %s, %d skipped\n", written, verb, skipped)
	return err
}

func readLossFile(path string) (lossfile.Header, []lossfile.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return lossfile.Header{}, nil, err
	}
	defer f.Close()
	hdr, recs, err := lossfile.Read(f)
	if err != nil {
		return lossfile.Header{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	return hdr, recs, nil
}
