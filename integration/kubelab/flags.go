package kubelab

import (
	"sort"
	"strings"
)

// ServiceAccountIssuer is the --service-account-issuer of every
// kube-apiserver of the experiment.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// ServiceClusterIPRange is the --service-cluster-ip-range of every
// kube-apiserver of the experiment.
const ServiceClusterIPRange = "10.96.0.0/16"

// APIServerSite holds the kube-apiserver settings that depend on where it
// runs (addresses, ports and file paths); everything else is fixed by
// [APIServerFlags].
type APIServerSite struct {
	BindAddress      string // --bind-address
	AdvertiseAddress string // --advertise-address
	SecurePort       string // --secure-port
	CertDir          string // --cert-dir (self-signed serving certificate)
	EtcdServers      string // --etcd-servers, comma separated URLs
	SAPublicKey      string // --service-account-key-file (PEM public key)
	SAPrivateKey     string // --service-account-signing-key-file (PEM private key)
	TokenFile        string // --token-auth-file (CSV: token,user,uid,"group")
	// TLS to the store (zketcd's secure shape); empty for a plaintext
	// store (the etcd it is compared with, the seed failure).
	EtcdCAFile   string // --etcd-cafile
	EtcdCertFile string // --etcd-certfile (client certificate: its common name is the zketcd user)
	EtcdKeyFile  string // --etcd-keyfile
}

// APIServerFlags is the one flag list of the experiment: `make e2e`, `make
// demo` and docker-compose.yml all start kube-apiserver with exactly these
// flags (the compose test checks that), plus a scenario's own extras (see
// the Extra* variables). Token authentication, RBAC, no endpoint
// reconciler (a single apiserver with no kubelet), etcd storage at the
// default prefix /registry, reached over TLS with a client certificate
// when the site names one (docs/kubernetes.md).
func APIServerFlags(s APIServerSite) []string {
	var store []string
	if s.EtcdCAFile != "" {
		store = []string{"--etcd-cafile=" + s.EtcdCAFile, "--etcd-certfile=" + s.EtcdCertFile, "--etcd-keyfile=" + s.EtcdKeyFile}
	}
	return append([]string{
		"--bind-address=" + s.BindAddress,
		"--advertise-address=" + s.AdvertiseAddress,
		"--secure-port=" + s.SecurePort,
		"--cert-dir=" + s.CertDir,
		"--etcd-servers=" + s.EtcdServers,
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + s.SAPublicKey,
		"--service-account-signing-key-file=" + s.SAPrivateKey,
		"--token-auth-file=" + s.TokenFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--endpoint-reconciler-type=none",
	}, store...)
}

// Scenario extras, appended to [APIServerFlags] by the scenarios that need
// them.
var (
	// ExtraEventTTL makes Events expire quickly (the default is 1h).
	ExtraEventTTL = []string{"--event-ttl=10s"}
	// ExtraCompaction makes the apiserver compact every 5s (default 5m)
	// and serve reads and watches from etcd (zketcd) instead of its watch
	// cache, so that an old resourceVersion meets the store's compaction.
	ExtraCompaction = []string{"--etcd-compaction-interval=5s", "--watch-cache=false"}
)

// ZketcdSite holds the zketcd settings that depend on where it runs.
type ZketcdSite struct {
	ZK                  string // --zk, comma separated host:port
	ZKAuthFile          string // --zk-auth-file: the ZooKeeper identity
	ListenClientURLs    string // --listen-client-urls (https)
	AdvertiseClientURLs string // --advertise-client-urls
	ListenMetricsURLs   string // --listen-metrics-urls
	Name                string // --name
	CertFile            string // --cert-file: the serving certificate
	KeyFile             string // --key-file
	TrustedCAFile       string // --trusted-ca-file: the CA of the clients' certificates
}

// ZketcdRoot is the --zk-root of every zketcd of the compose file; the
// e2e run gives each of its stacks a root of its own under it.
const ZketcdRoot = "/zketcd"

// ZketcdFlags is the flag list of `zketcd serve` in the experiment (e2e,
// demo and docker-compose.yml), root given separately: the secure shape of
// docs/kubernetes.md — a ZooKeeper identity, client TLS, client
// certificates required (with etcd's authentication on, each certificate's
// common name is its user).
func ZketcdFlags(s ZketcdSite, root string) []string {
	return []string{
		"serve",
		"--zk=" + s.ZK,
		"--zk-root=" + root,
		"--zk-auth-file=" + s.ZKAuthFile,
		"--name=" + s.Name,
		"--listen-client-urls=" + s.ListenClientURLs,
		"--advertise-client-urls=" + s.AdvertiseClientURLs,
		"--listen-metrics-urls=" + s.ListenMetricsURLs,
		"--cert-file=" + s.CertFile,
		"--key-file=" + s.KeyFile,
		"--trusted-ca-file=" + s.TrustedCAFile,
		"--client-cert-auth",
		"--log-level=info",
	}
}

// ParseFlags splits "--name=value" arguments into a map (a flag given
// twice keeps the last value; a bare "--flag" maps to ""). Arguments that
// are not flags are returned in order.
func ParseFlags(args []string) (flags map[string]string, positional []string) {
	flags = map[string]string{}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			positional = append(positional, a)
			continue
		}
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		flags[name] = value
	}
	return flags, positional
}

// FlagNames returns the sorted names of the flags in args.
func FlagNames(args []string) []string {
	m, _ := ParseFlags(args)
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
