package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkserver"
)

// runDev serves zketcd on a local ZooKeeper it starts itself (data kept in
// --data-dir, so a second "zketcd dev" finds the same keys), unless --zk
// names one.
func runDev(args []string) error {
	var f serveFlags
	fs := flag.NewFlagSet("zketcd dev", flag.ContinueOnError)
	f.register(fs, false)
	dataDir := fs.String("data-dir", "zketcd-dev", "directory for the local ZooKeeper's data")
	zkPort := fs.Int("zk-port", 0, "client port of the local ZooKeeper (0: a free one)")
	if err := f.parse(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.zk == "" {
		root, err := f.logger()
		if err != nil {
			return err
		}
		dir, err := filepath.Abs(filepath.Join(*dataDir, "zookeeper"))
		if err != nil {
			return err
		}
		// The JVM flags of zkserver's defaults (serial collector, C1) and
		// the Netty connection factory: what cost a local ZooKeeper the
		// least CPU per request (docs/operations.md, "ZooKeeper settings").
		opts := zkserver.Options{Dir: dir, ClientPort: *zkPort, Logger: logrus.NewEntry(root),
			SystemProps: zkserver.LowCPUSystemProps(nil)}
		if err := zkserver.Preflight(opts); err != nil {
			return fmt.Errorf("%w\n(install ZooKeeper with \"apt-get install -y zookeeper\", or run \"make run\" which does)", err)
		}
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		zk, err := zkserver.StartStandalone(startCtx, opts)
		cancel()
		if err != nil {
			return fmt.Errorf("start local zookeeper: %w", err)
		}
		defer func() {
			if err := zk.Stop(); err != nil {
				root.WithError(err).Warn("stop local zookeeper")
			}
		}()
		root.WithFields(logrus.Fields{"addr": zk.Addr(), "dir": dir, "log": zk.LogPath()}).Info("started local zookeeper")
		f.zk = zk.Addr()
	}
	if f.name == "" {
		f.name = "dev"
	}
	var err error
	f.dev = true
	if f.lossDir == "" {
		if f.lossDir, err = filepath.Abs(filepath.Join(*dataDir, "loss")); err != nil {
			return err
		}
	}
	err = serve(ctx, f, nil)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
