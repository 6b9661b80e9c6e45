package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/backend"
	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/grpcsrv"
)

func runServe(args []string) error {
	var f serveFlags
	fs := flag.NewFlagSet("zketcd serve", flag.ContinueOnError)
	f.register(fs, true)
	if err := f.parse(fs, args); err != nil {
		return err
	}
	if f.zk == "" {
		return errors.New("--zk is required (or use \"zketcd dev\" to start a local ZooKeeper)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, f, nil)
}

// serve runs zketcd until ctx ends. ready, if not nil, is called once the
// client listeners are open.
func serve(ctx context.Context, f serveFlags, ready func()) error {
	root, err := f.logger()
	if err != nil {
		return err
	}
	lg := logrus.NewEntry(root)
	for _, w := range f.configWarnings {
		lg.WithField("config_file", f.configFile).Warn(w)
	}
	listen, secure, err := listenAddrs(splitList(f.listenClientURLs))
	if err != nil {
		return err
	}
	if len(listen) == 0 {
		return errors.New("--listen-client-urls is empty")
	}
	tlsCfg, err := f.tlsConfig()
	if err != nil {
		return err
	}
	if secure && tlsCfg == nil {
		return errors.New("https client URLs need --cert-file and --key-file")
	}
	if _, _, _, insecure, _ := f.tlsVersions(); len(insecure) > 0 && tlsCfg != nil {
		lg.WithField("cipher_suites", insecure).Warn("--cipher-suites names suites Go considers insecure")
	}
	if f.handshakeTimeout <= 0 {
		return errors.New("--grpc-handshake-timeout must be positive")
	}
	metricsAddrs, _, err := listenAddrs(splitList(f.listenMetricsURLs))
	if err != nil {
		return fmt.Errorf("--listen-metrics-urls: %w", err)
	}
	advertise := splitList(f.advertiseClientURLs)
	if len(advertise) == 0 {
		advertise = splitList(f.listenClientURLs)
	}
	name := f.name
	if name == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(listen[0])
		name = fmt.Sprintf("%s-%s", host, port)
	}
	storeCfg, err := f.storeConfig(lg)
	if err != nil {
		return err
	}
	autoCompaction, err := f.autoCompaction()
	if err != nil {
		return err
	}
	authCfg, err := f.authConfig()
	if err != nil {
		return err
	}
	cfg := embed.Config{
		Backend: backend.Config{
			Store:              storeCfg,
			Name:               name,
			ClientURLs:         advertise,
			RelaxedReads:       f.relaxedReads,
			ForwardWrites:      f.forwardWrites,
			CommitPipeline:     f.commitPipeline,
			AutoCompaction:     autoCompaction,
			LossDir:            f.lossDir,
			RollbackCheckAfter: f.rollbackCheckAfter,
		},
		GRPC: grpcsrv.Config{
			MaxTxnOps:                   f.maxTxnOps,
			MaxRequestBytes:             f.maxRequestBytes,
			KeepaliveMinTime:            f.keepaliveMinTime,
			KeepaliveInterval:           f.keepaliveInterval,
			KeepaliveTimeout:            f.keepaliveTimeout,
			WatchProgressNotifyInterval: f.watchProgressInterval,
			MaxWatchersPerStream:        f.maxWatchersPerStream,
			MaxConcurrentStreams:        uint32(min(f.maxConcurrentStreams, 1<<32-1)),
			MaxConcurrentRequests:       f.maxConcurrentRequests,
			ConnectionTimeout:           f.handshakeTimeout,
			Auth:                        authCfg,
		},
		ClientAddrs:  listen,
		TLS:          tlsCfg,
		MetricsAddrs: metricsAddrs,
		Logger:       lg,
	}
	lg.WithFields(logrus.Fields{"zk": f.zk, "zk_root": f.zkRoot}).Info("connecting to zookeeper")
	if err := f.internalEndpoint(&cfg); err != nil {
		return err
	}
	openCtx, cancelOpen := context.WithTimeout(ctx, time.Minute)
	z, err := embed.Start(openCtx, cfg)
	cancelOpen()
	if err != nil {
		return err
	}
	lg.WithFields(logrus.Fields{
		"name": name, "member_id": fmt.Sprintf("%x", z.Backend().MemberID()),
		"cluster_id":  fmt.Sprintf("%x", z.Backend().ClusterID()),
		"client_urls": f.listenClientURLs, "zk": f.zk, "zk_root": f.zkRoot,
	}).Info("zketcd is serving")
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-z.Err():
	}
	lg.Info("shutting down")
	z.Close(5 * time.Second)
	return err
}
