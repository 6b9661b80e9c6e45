package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/zketcd/zketcd/internal/move"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// runMove is `zketcd move --zk ... --zk-root SRC --to-root DST [--to-zk
// SERVERS]`: it moves the cluster of SRC, served as it is, into DST
// (package move); with --free-source, it deletes what is left of a moved
// SRC instead.
func runMove(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("zketcd move", flag.ContinueOnError)
	var f serveFlags
	f.registerZK(fs, "ZooKeeper servers of the source, comma separated host:port", "the root the cluster is served from")
	f.registerLog(fs)
	toRoot := fs.String("to-root", "", "the root to move the cluster into (new, or one this move started)")
	toZK := fs.String("to-zk", "", "ZooKeeper servers of the destination, comma separated host:port (default: the source's)")
	free := fs.Bool("free-source", false, "delete a moved source root's data, keeping the record that refuses it to instances")
	release := fs.Duration("release-timeout", 2*time.Minute, "how long to wait for every instance to leave the fenced source")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if f.zk == "" || (*toRoot == "" && !*free) {
		fs.Usage()
		return errors.New("--zk and --to-root (or --free-source) are required")
	}
	src, err := f.loggedStoreConfig()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *free {
		r, err := zkstore.FreeMovedSource(ctx, src)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "freed %s (moved to %s%s at log entry %d)\n", src.Root, serversPrefix(r.Servers), r.Root, r.FenceLSN)
		return nil
	}
	dst := src
	dst.Root = *toRoot
	if *toZK != "" {
		dst.Servers = splitList(*toZK)
	}
	res, err := move.Run(ctx, move.Config{Source: src, Dest: dst, Logger: src.Logger.WithField("cmd", "move"), ReleaseTimeout: *release})
	if err != nil {
		return err
	}
	if res.AlreadyMoved {
		fmt.Fprintf(out, "%s moved to %s already (log entry %d)\n", src.Root, *toRoot, res.FenceLSN)
		return nil
	}
	to := *toRoot // on the source's ensemble
	if *toZK != "" {
		to = serversPrefix(zkstore.JoinServers(dst.Servers)) + to
	}
	fmt.Fprintf(out, "moved %s to %s at log entry %d, revision %d (writes paused %v); free the source with --free-source once no configuration names it\n",
		src.Root, to, res.FenceLSN, res.Rev, res.Paused.Round(time.Millisecond))
	return nil
}

func serversPrefix(s string) string {
	if s == "" {
		return ""
	}
	return s + ":"
}
