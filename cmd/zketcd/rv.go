package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/zketcd/zketcd/internal/rvmap"
)

// runRV prints, for each key, its revisions and the zxids of the ZooKeeper
// transactions that wrote them, and for each --revision the log entry and
// zxid that made it. It reads the log directly, not through a zketcd (the
// logic is in internal/rvmap).
func runRV(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return rv(ctx, args, os.Stdout)
}

// defaultRVZK is where `zketcd rv` looks for ZooKeeper without --zk.
const defaultRVZK = "127.0.0.1:2181"

// rv is runRV writing its table to out. It reaches ZooKeeper with serve's
// flags (registerZK): the identity from --zk-auth-file or ZKETCD_ZK_AUTH
// rather than the command line, and TLS to the secure client port.
func rv(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("zketcd rv", flag.ContinueOnError)
	var f serveFlags
	f.registerZK(fs, "ZooKeeper servers, comma separated host:port (default "+defaultRVZK+")", "zketcd's root znode")
	f.registerLog(fs)
	f.logLevel = "warn"
	var revs revList
	fs.Var(&revs, "revision", "a revision to map to its zxid (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: zketcd rv [--zk H:P] [--zk-root /zketcd] [--zk-auth-file FILE] [--zk-tls-ca-file CA] [--revision N]... KEY...")
		fs.PrintDefaults()
	}
	keys, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(keys) == 0 && len(revs) == 0 {
		fs.Usage()
		return errors.New("give at least one key or --revision")
	}
	if f.zk == "" {
		f.zk = defaultRVZK
	}
	cfg, err := f.loggedStoreConfig()
	if err != nil {
		return err
	}
	ix, err := rvmap.Open(ctx, cfg)
	if err != nil {
		return err
	}
	return ix.WriteTable(out, keys, revs)
}

type revList []int64

func (r *revList) String() string { return fmt.Sprint([]int64(*r)) }

func (r *revList) Set(s string) error {
	var v int64
	if _, err := fmt.Sscanf(s, "%d", &v); err != nil || v < 1 {
		return fmt.Errorf("revision %q: want a positive integer", s)
	}
	*r = append(*r, v)
	return nil
}
