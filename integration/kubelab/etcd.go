package kubelab

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is an embedded single-member etcd 3.7.3, for comparison.
type Etcd struct {
	lab  *Lab
	e    *embed.Etcd
	once sync.Once
	// Addr is the client address.
	Addr string
	// TLSAddr is the https client address (EtcdOptions.TLS), else "".
	TLSAddr string
}

// EtcdOptions are the choices of [Lab.StartEtcdWith].
type EtcdOptions struct {
	// Name is the member name and the lab subdirectory's suffix ("etcd"
	// if empty).
	Name string
	// TLS adds an https client listener (TLSAddr) with the lab's
	// [Security]: its server certificate (valid for 127.0.0.1), clients
	// verified against its CA, as zketcd's secure shape. The http
	// listener (Addr) stays.
	TLS bool
	// DataDir, if set, is an existing data directory to serve (one
	// `etcdutl snapshot restore --name Name` wrote, with PeerURL as its
	// peer URL), instead of a new one in the lab directory.
	DataDir, PeerURL string
	// WatchProgressNotifyInterval is etcd's
	// --watch-progress-notify-interval (0: etcd's default, 10 min).
	WatchProgressNotifyInterval time.Duration
}

// StartEtcd starts etcd with its data in the lab directory, without fsync
// (as ZooKeeper's forceSync=no) and a fast single-node election.
func (l *Lab) StartEtcd(ctx context.Context) (*Etcd, error) {
	return l.StartEtcdWith(ctx, EtcdOptions{})
}

// StartEtcdWith starts etcd as [Lab.StartEtcd] does, with opts.
func (l *Lab) StartEtcdWith(ctx context.Context, opts EtcdOptions) (*Etcd, error) {
	name := opts.Name
	if name == "" {
		name = "etcd"
	}
	dir, err := l.subdir(name)
	if err != nil {
		return nil, err
	}
	ports, err := l.ports.PickN(3)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = filepath.Join(dir, "data")
	if opts.DataDir != "" {
		cfg.Dir = opts.DataDir
	}
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	l.addLog(cfg.LogOutputs[0])
	curl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[0]))
	purl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	if opts.PeerURL != "" {
		if purl, err = url.Parse(opts.PeerURL); err != nil {
			return nil, fmt.Errorf("etcd peer URL: %w", err)
		}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	var tlsAddr string
	if opts.TLS {
		sec, err := l.Security()
		if err != nil {
			return nil, err
		}
		tlsAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
		turl, _ := url.Parse("https://" + tlsAddr)
		cfg.ListenClientUrls = append(cfg.ListenClientUrls, *turl)
		cfg.AdvertiseClientUrls = append(cfg.AdvertiseClientUrls, *turl)
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: sec.ServerCert, KeyFile: sec.ServerKey, TrustedCAFile: sec.CAFile, ClientCertAuth: true}
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "kubelab"
	cfg.TickMs, cfg.ElectionMs = 10, 50
	cfg.UnsafeNoFsync = true
	if opts.WatchProgressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = opts.WatchProgressNotifyInterval
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after 30s")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	et := &Etcd{lab: l, e: e, Addr: curl.Host, TLSAddr: tlsAddr}
	l.Defer(et.Stop)
	return et, nil
}

// URL is the endpoint URL, as given to --etcd-servers.
func (e *Etcd) URL() string { return "http://" + e.Addr }

// TLSURL is the https endpoint URL (EtcdOptions.TLS), else "".
func (e *Etcd) TLSURL() string {
	if e.TLSAddr == "" {
		return ""
	}
	return "https://" + e.TLSAddr
}

// Client returns a clientv3 client, closed at the lab's Close.
func (e *Etcd) Client() (*clientv3.Client, error) { return e.lab.client(e.Addr, nil) }

// Stop stops etcd (idempotent).
func (e *Etcd) Stop() { e.once.Do(e.e.Close) }
