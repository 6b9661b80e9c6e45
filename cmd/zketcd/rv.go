package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/rvmap"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// runRV prints, for each key, its revisions and the zxids of the ZooKeeper
// transactions that wrote them, and for each --revision the log entry and
// zxid that made it. It reads the log directly, not through a zketcd (the
// logic is in internal/rvmap).
func runRV(args []string) error {
	fs := flag.NewFlagSet("zketcd rv", flag.ContinueOnError)
	zkServers := fs.String("zk", "127.0.0.1:2181", "ZooKeeper servers, comma separated")
	root := fs.String("zk-root", "/zketcd", "zketcd's root znode")
	auth := fs.String("zk-auth", "", "ZooKeeper credentials scheme:credential")
	var revs revList
	fs.Var(&revs, "revision", "a revision to map to its zxid (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: zketcd rv [--zk H:P] [--zk-root /zketcd] [--revision N]... KEY...")
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
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	cfg := zkstore.Config{Servers: splitList(*zkServers), Root: *root, Logger: logrus.NewEntry(lg)}
	if *auth != "" {
		cfg.Auth = []string{*auth}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ix, err := rvmap.Open(ctx, cfg)
	if err != nil {
		return err
	}
	return ix.WriteTable(os.Stdout, keys, revs)
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
