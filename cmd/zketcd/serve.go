package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"

	"github.com/zketcd/zketcd/backend"
	"github.com/zketcd/zketcd/grpcsrv"
)

func runServe(args []string) error {
	var f serveFlags
	fs := flag.NewFlagSet("zketcd serve", flag.ContinueOnError)
	f.register(fs, true)
	if err := parseWithEnv(fs, args); err != nil {
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := backend.Config{
		Store:           f.storeConfig(lg),
		Name:            name,
		ClientURLs:      advertise,
		MaxTxnOps:       f.maxTxnOps,
		MaxRequestBytes: f.maxRequestBytes,
		Logger:          lg,
		Registerer:      reg,
	}
	openCtx, cancelOpen := context.WithTimeout(ctx, time.Minute)
	be, err := backend.Open(openCtx, cfg)
	cancelOpen()
	if err != nil {
		return err
	}
	defer be.Close()

	srvCtx, cancelSrv := context.WithCancel(ctx)
	defer cancelSrv()
	srv := grpcsrv.New(srvCtx, grpcsrv.Config{
		MaxRequestBytes:             f.maxRequestBytes,
		MaxTxnOps:                   f.maxTxnOps,
		TLS:                         tlsCfg,
		KeepaliveMinTime:            f.keepaliveMinTime,
		KeepaliveInterval:           f.keepaliveInterval,
		KeepaliveTimeout:            f.keepaliveTimeout,
		WatchProgressNotifyInterval: f.watchProgressInterval,
		Logger:                      lg,
		Registerer:                  reg,
	}, be)

	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for _, a := range listen {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		lns = append(lns, l)
	}
	metricsAddrs, _, err := listenAddrs(splitList(f.listenMetricsURLs))
	if err != nil {
		return fmt.Errorf("--listen-metrics-urls: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		if err := be.Health(); err != nil {
			http.Error(w, `{"health":"false","reason":"`+err.Error()+`"}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, `{"health":"true","reason":""}`)
	})
	var httpSrvs []*http.Server
	for _, a := range metricsAddrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		lns = append(lns, l)
		httpSrvs = append(httpSrvs, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second})
	}

	g, gctx := errgroup.WithContext(srvCtx)
	for _, l := range lns[:len(listen)] {
		g.Go(func() error { return srv.Serve(l) })
	}
	for i, hs := range httpSrvs {
		l := lns[len(listen)+i]
		g.Go(func() error {
			if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	lg.WithFields(logrus.Fields{
		"name": name, "member_id": fmt.Sprintf("%x", be.MemberID()), "cluster_id": fmt.Sprintf("%x", be.ClusterID()),
		"client_urls": f.listenClientURLs, "zk": f.zk, "zk_root": f.zkRoot,
	}).Info("zketcd is serving")
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	lg.Info("shutting down")
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	for _, hs := range httpSrvs {
		hs.Close()
	}
	err = g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}
