package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/gctune"
	"github.com/zketcd/zketcd/internal/grpcsrv"
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

// serve runs zketcd until ctx ends: it builds the configuration from the
// flags, validates it and runs it. ready, if not nil, is called once the
// client listeners are open.
func serve(ctx context.Context, f serveFlags, ready func()) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return run(ctx, cfg, !f.dev, ready)
}

// config builds the instance's configuration from the flags (and logs the
// warnings they deserve); it fails on the first flag that is invalid or
// contradicts another.
func (f serveFlags) config() (embed.Config, error) {
	root, err := f.logger()
	if err != nil {
		return embed.Config{}, err
	}
	lg := logrus.NewEntry(root)
	for _, w := range f.configWarnings {
		lg.WithField("config_file", f.configFile).Warn(w)
	}
	listen, secure, err := listenAddrs(splitList(f.listenClientURLs))
	if err != nil {
		return embed.Config{}, err
	}
	if len(listen) == 0 {
		return embed.Config{}, errors.New("--listen-client-urls is empty")
	}
	tlsCfg, err := f.tlsConfig()
	if err != nil {
		return embed.Config{}, err
	}
	if secure && tlsCfg == nil {
		return embed.Config{}, errors.New("https client URLs need --cert-file and --key-file")
	}
	if _, _, _, insecure, _ := f.tlsVersions(); len(insecure) > 0 && tlsCfg != nil {
		lg.WithField("cipher_suites", insecure).Warn("--cipher-suites names suites Go considers insecure")
	}
	metricsAddrs, _, err := listenAddrs(splitList(f.listenMetricsURLs))
	if err != nil {
		return embed.Config{}, fmt.Errorf("--listen-metrics-urls: %w", err)
	}
	cors, err := corsOrigins(splitList(f.cors))
	if err != nil {
		return embed.Config{}, err
	}
	engineCfg, err := f.engineConfig(lg, listen[0])
	if err != nil {
		return embed.Config{}, err
	}
	grpcCfg, err := f.grpcConfig()
	if err != nil {
		return embed.Config{}, err
	}
	cfg := embed.Config{
		Engine:        engineCfg,
		GRPC:          grpcCfg,
		ClientAddrs:   listen,
		TLS:           tlsCfg,
		MetricsAddrs:  metricsAddrs,
		EnablePprof:   f.enablePprof,
		CORS:          cors,
		HostWhitelist: splitList(f.hostWhitelist),
		Tenants:       f.tenants.config(),
		Logger:        lg,
	}
	if err := f.internalEndpoint(&cfg); err != nil {
		return embed.Config{}, err
	}
	return cfg, nil
}

// engineConfig is the engine's part of the configuration; the member name
// defaults to the host's name and the port of the first client address.
func (f serveFlags) engineConfig(lg *logrus.Entry, firstClient string) (engine.Config, error) {
	advertise := splitList(f.advertiseClientURLs)
	if len(advertise) == 0 {
		advertise = splitList(f.listenClientURLs)
	}
	name := f.name
	if name == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(firstClient)
		name = fmt.Sprintf("%s-%s", host, port)
	}
	storeCfg, err := f.storeConfig(lg)
	if err != nil {
		return engine.Config{}, err
	}
	if !f.dev {
		var id string
		if len(storeCfg.Auth) > 0 {
			id = storeCfg.Auth[0]
		}
		for _, w := range f.insecureChoices(id) {
			lg.Warn(w)
		}
	}
	autoCompaction, err := f.autoCompaction()
	if err != nil {
		return engine.Config{}, err
	}
	if f.commitLinger < 0 {
		return engine.Config{}, fmt.Errorf("--commit-linger %v is negative (0 turns it off)", f.commitLinger)
	}
	initialCorruptCheck, gateWarnings, err := f.features()
	if err != nil {
		return engine.Config{}, err
	}
	for _, w := range gateWarnings {
		lg.Warn(w)
	}
	lossDir := f.lossDirectory()
	if err := checkLossDir(lossDir); err != nil {
		lg.WithError(err).WithField("dir", lossDir).Warn("loss files (what ZooKeeper lost if its data goes back) cannot be written there: " +
			"set --rollback-loss-dir to a durable directory this user may write (the system's temporary directory is used meanwhile)")
	}
	return engine.Config{
		Store:              storeCfg,
		Name:               name,
		ClientURLs:         advertise,
		RelaxedReads:       f.relaxedReads,
		ForwardWrites:      f.forwardWrites,
		ReadLease:          f.readLease,
		CommitPipeline:     int(f.commitPipeline),
		CommitLinger:       commitLinger(f.commitLinger),
		AutoCompaction:     autoCompaction,
		LossDir:            lossDir,
		RollbackCheckAfter: f.rollbackCheckAfter,
		QuotaBackendBytes:  f.quotaBackendBytes,
		ZooKeeperHeapBytes: f.zkHeapBytes,
		// What a compaction released goes back to the system at once
		// rather than at the scavenger's pace.
		AfterCompaction:     debug.FreeOSMemory,
		CorruptCheckTime:    f.corruptCheckTime,
		InitialCorruptCheck: initialCorruptCheck,
		WorldReadableOK:     f.dev,
		OriginGeneration:    faultTagGeneration(lg),
	}, nil
}

// grpcConfig is the gRPC services' part of the configuration.
func (f serveFlags) grpcConfig() (grpcsrv.Config, error) {
	if f.handshakeTimeout <= 0 {
		return grpcsrv.Config{}, errors.New("--grpc-handshake-timeout must be positive")
	}
	authCfg, err := f.authConfig()
	if err != nil {
		return grpcsrv.Config{}, err
	}
	return grpcsrv.Config{
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
	}, nil
}

// run starts the instance of cfg (giving it a minute to connect to
// ZooKeeper and recover) and serves until ctx ends or serving fails; the
// Go heap is tuned (gctune) while it runs. warnOpenGateway (every start
// but zketcd dev's) warns once started if every origin may use the HTTP
// gateway of an instance without authentication or client certificates.
func run(ctx context.Context, cfg embed.Config, warnOpenGateway bool, ready func()) error {
	if cfg.Tenants.Enabled {
		return runFleet(ctx, cfg, ready)
	}
	lg := cfg.Logger
	zk := logrus.Fields{"zk": cfg.Engine.Store.Servers, "zk_root": cfg.Engine.Store.Root}
	lg.WithFields(zk).Info("connecting to zookeeper")
	var gcGauge prometheus.Gauge
	if gctune.Enabled() {
		// Before the start: recovery builds the whole view.
		gcGauge = gctune.NewGauge()
		tuner := gctune.New(gctune.Config{Logger: lg.WithField("component", "gctune"), Gauge: gcGauge})
		tuneCtx, stopTune := context.WithCancel(ctx)
		defer stopTune()
		go tuner.Run(tuneCtx)
		cfg.Engine.BeforeRecovery = func(data int64) func() {
			// The view holds ~1.17 bytes per byte of data
			// (docs/architecture.md, "Memory").
			return tuner.Load(data + data/4)
		}
	}
	openCtx, cancelOpen := context.WithTimeout(ctx, time.Minute)
	z, err := embed.Start(openCtx, cfg)
	cancelOpen()
	if err != nil {
		return err
	}
	if gcGauge != nil {
		if err := z.Registry().Register(gcGauge); err != nil {
			lg.WithError(err).Warn("register zketcd_gc_percent")
		}
	}
	if warnOpenGateway {
		raw, _ := z.Engine().AuthState()
		st, err := auth.Decode(raw)
		enabled := err == nil && st != nil && st.Enabled
		clientCertAuth := cfg.TLS != nil && cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		if w := openGatewayWarning(cfg.CORS, clientCertAuth, enabled); w != "" {
			lg.Warn(w)
		}
	}
	lg.WithFields(zk).WithFields(logrus.Fields{
		"name": cfg.Engine.Name, "member_id": fmt.Sprintf("%x", z.Engine().MemberID()),
		"cluster_id": fmt.Sprintf("%x", z.Engine().ClusterID()), "client_addrs": z.ClientAddrs(),
	}).Info("zketcd is serving")
	notifySystemd(lg, daemon.SdNotifyReady+"\nSTATUS=serving")
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-z.Err():
	}
	lg.Info("shutting down")
	notifySystemd(lg, daemon.SdNotifyStopping+"\nSTATUS=shutting down")
	z.Close(5 * time.Second)
	return err
}

// corsOrigins checks --cors as etcd 3.7.3 parses it (its flag and its
// config file's cors: the same URL list) and returns the origins in
// etcd's form: "*", or URLs of scheme http or https with a host:port and
// no path (unix and unixs URLs are accepted too, as etcd accepts them,
// though no browser sends such an origin), each as url.URL.String() writes
// it (the scheme in lower case). etcd refuses an origin without a port,
// so zketcd does, saying which form to write: a browser's Origin without
// a port (its scheme's default) matches the listing with 80 or 443.
func corsOrigins(values []string) ([]string, error) {
	out := make([]string, 0, len(values))
	for _, v := range values {
		if v == "*" {
			out = append(out, v)
			continue
		}
		u, err := url.Parse(v)
		if err != nil {
			return nil, fmt.Errorf("--cors %q: %w", v, err)
		}
		switch u.Scheme {
		case "http", "https":
			if _, _, err := net.SplitHostPort(u.Host); err != nil {
				if u.Host == "" {
					return nil, fmt.Errorf("--cors %q: an origin must have the form scheme://host:port, as etcd requires", v)
				}
				port := "80"
				if u.Scheme == "https" {
					port = "443"
				}
				return nil, fmt.Errorf("--cors %q: an origin must have the form scheme://host:port, as etcd requires (%s://%s:%s: a browser's Origin %s://%s, without a port, matches it)",
					v, u.Scheme, u.Host, port, u.Scheme, u.Host)
			}
			if u.Path != "" {
				return nil, fmt.Errorf("--cors %q: an origin has no path", v)
			}
		case "unix", "unixs":
		default:
			return nil, fmt.Errorf("--cors %q: the scheme must be http or https", v)
		}
		out = append(out, u.String())
	}
	return out, nil
}

// faultTagGenerationEnv names the fault-injection hook that sets how many
// forwarded requests' tags one generation of the leader's tag index holds
// (engine.Config.OriginGeneration): the fault scenarios make it small to
// see what happens to a re-sent request the index no longer holds. Not a
// setting: unset in production.
const faultTagGenerationEnv = "ZKETCD_FAULT_TAG_GENERATION"

// faultTagGeneration reads faultTagGenerationEnv (0: unset or invalid).
func faultTagGeneration(lg *logrus.Entry) int {
	v := os.Getenv(faultTagGenerationEnv)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		lg.WithField(faultTagGenerationEnv, v).Warn("ignored: not a positive number")
		return 0
	}
	lg.WithField(faultTagGenerationEnv, n).Warn("fault injection: the forwarded-tag index keeps only this many tags per generation")
	return n
}

// commitLinger maps --commit-linger to engine.Config.CommitLinger, where 0
// means the default: the flag's 0 (never wait) is a negative value there.
func commitLinger(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
