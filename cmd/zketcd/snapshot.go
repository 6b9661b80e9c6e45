package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/zketcd/zketcd/internal/snaprestore"
)

// runSnapshot is `zketcd snapshot restore FILE --zk ... --zk-root ...`: it
// loads an etcd snapshot file into a fresh root (package snaprestore).
// Saving needs no command of zketcd's own: `etcdctl snapshot save` against
// a running zketcd does it.
func runSnapshot(args []string) error {
	if len(args) == 0 || args[0] != "restore" {
		fmt.Fprintln(os.Stderr, "usage: zketcd snapshot restore FILE --zk HOST:PORT[,...] --zk-root /ROOT [flags]")
		return errors.New(`unknown snapshot command (want "restore"; save with "etcdctl snapshot save")`)
	}
	fs := flag.NewFlagSet("zketcd snapshot restore", flag.ContinueOnError)
	var f serveFlags
	f.registerZK(fs, "ZooKeeper servers, comma separated host:port", "root znode to create; it must not exist or be empty")
	skipHash := fs.Bool("skip-hash-check", false, "accept a file without etcd's SHA-256 trailer (a database copied from a data directory)")
	f.registerLog(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: zketcd snapshot restore FILE --zk HOST:PORT[,...] --zk-root /ROOT [flags]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("give exactly one snapshot file")
	}
	if f.zk == "" {
		return errors.New("--zk is required")
	}
	sc, err := f.loggedStoreConfig()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := snaprestore.Restore(ctx, snaprestore.Config{File: pos[0], SkipHashCheck: *skipHash, Store: sc})
	if err != nil {
		return err
	}
	fmt.Printf("restored %s into %s: revision %d, compacted revision %d, %d keys (%d live), %d versions, %d leases\n",
		pos[0], f.zkRoot, res.Rev, res.CompactRev, res.Keys, res.Live, res.Versions, res.Leases)
	return nil
}
