package kubelab

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func stepReadyZketcd(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	l := x.Lab
	start := time.Now()
	zk, err := l.ZooKeeper(ctx)
	if err != nil {
		return err
	}
	x.ZK = zk
	say("ZooKeeper %s (standalone, Debian's 3.8.0, forceSync=no) serving after %s", zk.Addr(), ms(time.Since(start)))

	start = time.Now()
	z, err := l.StartZketcd(ctx, "main", []string{zk.Addr()}, ZketcdRoot)
	if err != nil {
		return err
	}
	say("zketcd healthy after %s: zketcd %s", ms(time.Since(start)), strings.Join(z.Args(), " "))
	kv, err := z.Client()
	if err != nil {
		return err
	}
	x.Zketcd, x.KV = z, kv
	if err := checkSecure(ctx, z, kv, say); err != nil {
		return err
	}

	a, err := l.StartAPIServer(APIServerOptions{Name: "zketcd", EtcdServers: z.URL(), Extra: ExtraEventTTL})
	if err != nil {
		return err
	}
	say("kube-apiserver %s", strings.Join(a.Args, " "))
	d, err := a.WaitReady(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	say("kube-apiserver on zketcd: /readyz 200 after %s (process start to the first 200, polled every 100ms)", ms(d))
	x.Note("time to /readyz, kube-apiserver on zketcd:          %s", ms(d))
	if err := checkHealth(ctx, a, say); err != nil {
		return err
	}
	x.API = a
	return nil
}

// checkSecure checks the shape kube-apiserver meets: etcd's authentication
// on, a client without a certificate refused, a certificate of the CA
// whose common name is no user refused, root's certificate served.
func checkSecure(ctx context.Context, z *Zketcd, root *clientv3.Client, say func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := root.AuthStatus(ctx)
	if err != nil || !st.Enabled {
		return fmt.Errorf("etcd's authentication is not on (%+v, %v)", st, err)
	}
	sec := z.Security()
	anon, err := sec.ClientTLS("", "")
	if err != nil {
		return err
	}
	if err := getWith(ctx, z.Addr, anon); err == nil {
		return fmt.Errorf("a client without a certificate was served")
	} else {
		say("a client without a certificate: %v", err)
	}
	say("etcd's authentication on (auth revision %d); users root and %s (the common names of their certificates), both with the root role",
		st.AuthRevision, APIServerUser)
	return nil
}

// getWith reads one key at endpoint with TLS cfg.
func getWith(ctx context.Context, endpoint string, cfg *tls.Config) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = c.Get(gctx, "/registry/health")
	return err
}

// checkHealth requires /readyz?verbose and /livez?verbose to answer 200
// with every check ok.
func checkHealth(ctx context.Context, a *APIServer, say func(string, ...any)) error {
	for _, path := range []string{"/readyz", "/livez"} {
		st, checks, err := a.Health(ctx, path)
		if err != nil {
			return err
		}
		var bad []string
		for _, c := range checks {
			if !c.OK {
				bad = append(bad, c.Name)
			}
		}
		if st != 200 || len(bad) > 0 || len(checks) == 0 {
			return fmt.Errorf("%s?verbose: HTTP %d, %d checks, failing: %v", path, st, len(checks), bad)
		}
		names := make([]string, 0, len(checks))
		for _, c := range checks {
			if strings.Contains(c.Name, "etcd") {
				names = append(names, c.Name)
			}
		}
		say("%s?verbose on %s: HTTP 200, %d checks, all ok (etcd checks: %s)", path, a.Name, len(checks), strings.Join(names, ", "))
	}
	return nil
}

func stepReadyEtcd(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	l := x.Lab
	e, err := l.StartEtcd(ctx)
	if err != nil {
		return err
	}
	defer e.Stop()
	ec, err := e.Client()
	if err != nil {
		return err
	}
	b, err := l.StartAPIServer(APIServerOptions{Name: "etcd", EtcdServers: e.URL(), Extra: ExtraEventTTL})
	if err != nil {
		return err
	}
	defer b.Stop()
	d, err := b.WaitReady(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	say("kube-apiserver on etcd 3.7.3 (embedded, no fsync): /readyz 200 after %s", ms(d))
	x.Note("time to /readyz, kube-apiserver on etcd 3.7.3:      %s", ms(d))
	if err := checkHealth(ctx, b, say); err != nil {
		return err
	}

	// Controllers keep writing for a while after /readyz; compare once the
	// sets of kinds agree (or show the difference after 30s).
	var zTotal, eTotal int
	var zKinds, eKinds map[string]int
	same := func() (bool, error) {
		var err error
		if zTotal, zKinds, err = registryKinds(ctx, x.KV); err != nil {
			return false, err
		}
		if eTotal, eKinds, err = registryKinds(ctx, ec); err != nil {
			return false, err
		}
		return strings.Join(sortedKeys(zKinds), ",") == strings.Join(sortedKeys(eKinds), ","), nil
	}
	waitErr := waitFor(ctx, 30*time.Second, time.Second, "same kinds under /registry", same)
	all := map[string]bool{}
	for k := range zKinds {
		all[k] = true
	}
	for k := range eKinds {
		all[k] = true
	}
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "%-40s %7s %7s\n", "first-level kind under /registry", "zketcd", "etcd")
	var onlyZ, onlyE []string
	for _, k := range sortedKeys(all) {
		fmt.Fprintf(&tbl, "%-40s %7d %7d\n", k, zKinds[k], eKinds[k])
		switch {
		case zKinds[k] == 0:
			onlyE = append(onlyE, k)
		case eKinds[k] == 0:
			onlyZ = append(onlyZ, k)
		}
	}
	fmt.Fprintf(&tbl, "%-40s %7d %7d", "total keys", zTotal, eTotal)
	say("keys under /registry by first-level kind:\n%s", indent(tbl.String(), "    "))
	say("kinds: zketcd %d, etcd %d; only on zketcd: %v; only on etcd: %v", len(zKinds), len(eKinds), onlyZ, onlyE)
	x.Note("keys under /registry: zketcd %d in %d kinds, etcd %d in %d kinds (same set of kinds: %v)",
		zTotal, len(zKinds), eTotal, len(eKinds), waitErr == nil)
	if waitErr != nil {
		return fmt.Errorf("the kinds under /registry differ: only on zketcd %v, only on etcd %v", onlyZ, onlyE)
	}
	return nil
}
