package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/internal/mirror"
)

// runMirror is `zketcd mirror --from URLS --zk ... --zk-root ...`: it
// copies a running etcd into a fresh root with the same revisions and
// follows it (package mirror) until interrupted or, with
// --until-caught-up, until it has copied everything.
func runMirror(args []string) error {
	fs := flag.NewFlagSet("zketcd mirror", flag.ContinueOnError)
	var f serveFlags
	from := fs.String("from", "", "client URLs of the etcd to copy, comma separated")
	untilCaughtUp := fs.Bool("until-caught-up", false, "exit once every revision the source has is copied")
	interval := fs.Duration("status-interval", 5*time.Second, "how often to log the position and sync leases")
	f.registerZK(fs, "ZooKeeper servers, comma separated host:port", "root znode to create; it must not exist or be empty")
	f.registerLog(fs)
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if *from == "" || f.zk == "" {
		fs.Usage()
		return errors.New("--from and --zk are required")
	}
	sc, err := f.loggedStoreConfig()
	if err != nil {
		return err
	}
	src, err := clientv3.New(clientv3.Config{Endpoints: splitList(*from), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *from, err)
	}
	defer src.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var last mirror.Status
	err = mirror.Run(ctx, mirror.Config{Source: src, Store: sc, UntilCaughtUp: *untilCaughtUp, StatusInterval: *interval},
		func(s mirror.Status) { last = s })
	if err != nil {
		return err
	}
	fmt.Printf("mirrored %s into %s up to revision %d (source at %d)\n", *from, f.zkRoot, last.Rev, last.SourceRev)
	return nil
}
