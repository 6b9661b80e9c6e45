package kubelab

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// Fleet is the instances of `zketcd serve --tenants` on one fleet root
// (docs/tenants.md), each in the lab's secure shape: client TLS with
// client certificates required, the lab's ZooKeeper identity, and the
// lab's root certificate as the fleet's administrator (--tenant-admin-cn
// root). Each tenant is reached with a client certificate whose common
// name names it.
type Fleet struct {
	lab *Lab
	// Root is the fleet root; ZK the ZooKeeper servers.
	Root string
	ZK   []string
	// Instances are the fleet's processes; each serves every tenant.
	Instances []*Zketcd
}

// FleetAdminCN is the --tenant-admin-cn of the lab's fleets: the common
// name of the lab's root certificate.
const FleetAdminCN = "root"

// StartFleet starts instances processes of `zketcd serve --tenants` on zk
// under root (names fleet-1, fleet-2, ...) with [ZketcdFlags], --tenants,
// --tenant-admin-cn and extra, and waits until each one's /health is ok.
func (l *Lab) StartFleet(ctx context.Context, zk []string, root string, instances int, extra ...string) (*Fleet, error) {
	sec, err := l.Security()
	if err != nil {
		return nil, err
	}
	f := &Fleet{lab: l, Root: root, ZK: zk}
	for i := 1; i <= instances; i++ {
		name := fmt.Sprintf("fleet-%d", i)
		dir, err := l.subdir("zketcd-" + name)
		if err != nil {
			return nil, err
		}
		ports, err := l.ports.PickN(2)
		if err != nil {
			return nil, err
		}
		z := &Zketcd{lab: l, sec: sec, Name: name, Root: root, ZK: zk,
			Addr:        fmt.Sprintf("127.0.0.1:%d", ports[0]),
			MetricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
			logPath:     filepath.Join(dir, "zketcd.log"),
		}
		cert, key := sec.ServingPair(name)
		z.args = append(ZketcdFlags(ZketcdSite{
			ZK: strings.Join(zk, ","), ZKAuthFile: sec.ZKAuthFile, Name: name,
			ListenClientURLs: z.URL(), AdvertiseClientURLs: z.URL(),
			ListenMetricsURLs: "http://" + z.MetricsAddr,
			CertFile:          cert, KeyFile: key, TrustedCAFile: sec.CAFile,
		}, root), append([]string{"--tenants", "--tenant-admin-cn=" + FleetAdminCN}, extra...)...)
		l.addLog(z.logPath)
		if err := z.start(ctx); err != nil {
			return nil, err
		}
		l.Defer(func() { z.Stop() })
		f.Instances = append(f.Instances, z)
	}
	return f, nil
}

// EtcdServers is the instances' URLs, comma separated (kube-apiserver's
// --etcd-servers).
func (f *Fleet) EtcdServers() string {
	urls := make([]string, len(f.Instances))
	for i, z := range f.Instances {
		urls[i] = z.URL()
	}
	return strings.Join(urls, ",")
}

// Tenant is one tenant of a fleet and the client certificate it is
// reached with.
type Tenant struct {
	fleet *Fleet
	// Name is the tenant's name and its certificate's common name.
	Name string
	// Root is the tenant's own root under the fleet root.
	Root string
	// Cert and Key are its client certificate (--etcd-certfile,
	// --etcd-keyfile).
	Cert, Key string
}

// CreateTenant registers tenant name with `zketcd tenant create` as
// docs/operations.md does (args are more flags, e.g. limits) and issues its
// client certificate.
func (f *Fleet) CreateTenant(ctx context.Context, name string, args ...string) (*Tenant, error) {
	sec, err := f.lab.Security()
	if err != nil {
		return nil, err
	}
	cmdArgs := append([]string{"tenant", "create", name, "--zk", strings.Join(f.ZK, ","), "--zk-root", f.Root,
		"--zk-auth-file", sec.ZKAuthFile}, args...)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(cctx, f.lab.Zketcd, cmdArgs...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("zketcd %s: %v\n%s", strings.Join(cmdArgs, " "), err, out)
	}
	cert, key, err := sec.IssueClient(name)
	if err != nil {
		return nil, err
	}
	return &Tenant{fleet: f, Name: name, Root: zkstore.TenantRoot(f.Root, name), Cert: cert, Key: key}, nil
}

// Client returns a clientv3 client of the tenant on every instance,
// closed at the lab's Close.
func (t *Tenant) Client() (*clientv3.Client, error) {
	return t.ClientOn(t.fleet.Instances...)
}

// ClientOn returns a clientv3 client of the tenant on the given
// instances, closed at the lab's Close.
func (t *Tenant) ClientOn(instances ...*Zketcd) (*clientv3.Client, error) {
	sec, err := t.fleet.lab.Security()
	if err != nil {
		return nil, err
	}
	cfg, err := sec.ClientTLS(t.Cert, t.Key)
	if err != nil {
		return nil, err
	}
	eps := make([]string, len(instances))
	for i, z := range instances {
		eps[i] = z.Addr
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	t.fleet.lab.Defer(func() { c.Close() })
	return c, nil
}
