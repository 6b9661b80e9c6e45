package kubelab

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"time"

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
}

// StartEtcd starts etcd with its data in the lab directory, without fsync
// (as ZooKeeper's forceSync=no) and a fast single-node election.
func (l *Lab) StartEtcd(ctx context.Context) (*Etcd, error) {
	dir, err := l.subdir("etcd")
	if err != nil {
		return nil, err
	}
	ports, err := l.ports.PickN(2)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcd"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	l.addLog(cfg.LogOutputs[0])
	curl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[0]))
	purl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "kubelab"
	cfg.TickMs, cfg.ElectionMs = 10, 50
	cfg.UnsafeNoFsync = true
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
	et := &Etcd{lab: l, e: e, Addr: curl.Host}
	l.Defer(et.Stop)
	return et, nil
}

// URL is the endpoint URL, as given to --etcd-servers.
func (e *Etcd) URL() string { return "http://" + e.Addr }

// Client returns a clientv3 client, closed at the lab's Close.
func (e *Etcd) Client() (*clientv3.Client, error) { return e.lab.client(e.Addr, nil) }

// Stop stops etcd (idempotent).
func (e *Etcd) Stop() { e.once.Do(e.e.Close) }
