package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/compactor"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/grpcsrv"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// serveFlags are the flags of "serve" (and "dev"), named as etcd's where
// etcd has the same setting.
type serveFlags struct {
	zk               string
	zkRoot           string
	zkSessionTimeout time.Duration
	zkTickTime       time.Duration
	zkAuth           string
	zkAuthFile       string
	zkFormerAuth     stringList
	zkTLSCert        string
	zkTLSKey         string
	zkTLSCA          string

	tenants tenantFlags

	name                string
	listenClientURLs    string
	advertiseClientURLs string
	listenMetricsURLs   string
	enablePprof         bool
	cors                string
	hostWhitelist       string

	maxRequestBytes int
	maxTxnOps       int

	certFile      string
	keyFile       string
	trustedCAFile string
	clientCert    bool
	cipherSuites  string
	tlsMinVersion string
	tlsMaxVersion string

	watchProgressInterval time.Duration
	relaxedReads          bool
	forwardWrites         bool
	readLease             bool
	internalListenURL     string
	advertiseInternalURL  string
	peer                  peerFlags
	commitPipeline        pipelineDepth
	commitLinger          time.Duration
	autoCompactionMode    string
	autoCompactionRetain  string
	maxWatchersPerStream  int
	maxConcurrentStreams  uint
	maxConcurrentRequests int
	handshakeTimeout      time.Duration

	authToken    string
	authTokenTTL uint
	bcryptCost   uint

	keepaliveMinTime  time.Duration
	keepaliveInterval time.Duration
	keepaliveTimeout  time.Duration

	logLevel  string
	logFormat string

	configFile         string
	configWarnings     []string
	lossDir            string
	rollbackCheckAfter time.Duration

	// dev is set by zketcd dev: its ZooKeeper may be world-readable.
	dev bool

	quotaBackendBytes int64
	zkHeapBytes       int64
	corruptCheckTime  time.Duration
	featureGates      string

	// logOutput, if set, receives the log instead of stderr (tests).
	logOutput io.Writer

	// argvCredentials are the credential flags given with a password on
	// the command line (argvCredentials), for a warning.
	argvCredentials []string
}

// defaultLossDir is where loss files go without --rollback-loss-dir and
// $STATE_DIRECTORY: a durable directory (never the temporary one, which
// systemd's PrivateTmp= empties when the unit stops).
const defaultLossDir = "/var/lib/zketcd/loss"

// lossDirectory returns --rollback-loss-dir, or its default.
func (f *serveFlags) lossDirectory() string {
	if f.lossDir != "" {
		return f.lossDir
	}
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		// systemd sets it for StateDirectory= (several: colon separated).
		first, _, _ := strings.Cut(d, ":")
		return filepath.Join(first, "loss")
	}
	return defaultLossDir
}

// checkLossDir tells whether loss files can be written to dir (creating
// it): a rollback found later must not lose its record for want of a
// directory.
func checkLossDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".zketcd-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// registerZK registers the flags that reach ZooKeeper (servers, root,
// session, credentials, TLS), shared by serve, dev and the commands that
// write a root (snapshot restore, mirror).
func (f *serveFlags) registerZK(fs *flag.FlagSet, zkHelp, rootHelp string) {
	fs.StringVar(&f.zk, "zk", "", zkHelp)
	fs.StringVar(&f.zkRoot, "zk-root", "/zketcd", rootHelp)
	fs.DurationVar(&f.zkSessionTimeout, "zk-session-timeout", zkstore.DefaultSessionTimeout, "ZooKeeper session timeout (ZooKeeper may grant another: it clamps it to its minSessionTimeout and maxSessionTimeout)")
	fs.DurationVar(&f.zkTickTime, "zk-tick-time", 0, "ZooKeeper's tickTime, for servers that do not allow the conf four-letter word (4lw.commands.whitelist): with the granted session timeout it bounds the leader proof window of --read-lease and of keepalives answered from memory (0: only what conf answers; the larger of the two counts)")
	fs.StringVar(&f.zkAuth, "zk-auth", "", "ZooKeeper identity every znode of the root is ACLed to: digest:user:password, x509 (the --zk-tls-cert-file certificate; ZooKeeper's X509AuthenticationProvider on its secureClientPort) or sasl:user:password (SASL DIGEST-MD5); a root with other ACLs is re-ACLed at start (see zketcd zk-acl). Without it ZooKeeper's data is world-readable")
	fs.StringVar(&f.zkAuthFile, "zk-auth-file", "", "file holding the --zk-auth value (keeps the credential out of the command line)")
	fs.Var(&f.zkFormerAuth, "zk-former-auth", "an identity the root's znodes are ACLed to now (digest:user:password or sasl:user:password; repeatable), proven besides --zk-auth to move them to it")
	fs.StringVar(&f.zkTLSCert, "zk-tls-cert-file", "", "client certificate for TLS to ZooKeeper (its secureClientPort)")
	fs.StringVar(&f.zkTLSKey, "zk-tls-key-file", "", "key of --zk-tls-cert-file")
	fs.StringVar(&f.zkTLSCA, "zk-tls-ca-file", "", "CA bundle to verify ZooKeeper's certificate; setting it turns TLS to ZooKeeper on")
}

// registerLog registers --log-level and --log-format.
func (f *serveFlags) registerLog(fs *flag.FlagSet) {
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
}

func (f *serveFlags) register(fs *flag.FlagSet, zkRequired bool) {
	zkHelp := "ZooKeeper servers, comma separated host:port"
	if !zkRequired {
		zkHelp += " (empty: start a local ZooKeeper)"
	}
	f.registerZK(fs, zkHelp, "znode under which zketcd keeps everything")
	fs.StringVar(&f.name, "name", "", "member name (default: host name and client port); the member ID derives from it")
	f.tenants.register(fs)
	fs.StringVar(&f.listenClientURLs, "listen-client-urls", "http://127.0.0.1:2379", "URLs to serve the etcd API on, comma separated")
	fs.StringVar(&f.advertiseClientURLs, "advertise-client-urls", "", "URLs advertised in the member list (default: the listen URLs)")
	fs.StringVar(&f.listenMetricsURLs, "listen-metrics-urls", "", "URLs to serve /metrics and /health on (http only), comma separated")
	fs.BoolVar(&f.enablePprof, "enable-pprof", false, "serve Go's runtime profiles under /debug/pprof on the client and metrics URLs (as etcd's flag)")
	fs.StringVar(&f.cors, "cors", "*", "comma-separated origins (scheme://host:port) allowed cross-origin HTTP requests to the gateway (empty or * allows all)")
	fs.StringVar(&f.hostWhitelist, "host-whitelist", "*", "comma-separated hostnames accepted in the Host header of HTTP requests on client URLs without TLS (empty or * allows all)")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", translate.DefaultMaxRequestBytes, "largest request accepted, in bytes")
	fs.IntVar(&f.maxTxnOps, "max-txn-ops", translate.DefaultMaxTxnOps, "most operations in one transaction")
	fs.StringVar(&f.certFile, "cert-file", "", "TLS certificate for clients")
	fs.StringVar(&f.keyFile, "key-file", "", "TLS key for clients")
	fs.StringVar(&f.trustedCAFile, "trusted-ca-file", "", "CA bundle to verify client certificates")
	fs.BoolVar(&f.clientCert, "client-cert-auth", false, "require client certificates signed by --trusted-ca-file")
	fs.StringVar(&f.cipherSuites, "cipher-suites", "", "comma-separated TLS cipher suites for clients, by Go/IANA name (empty: Go's defaults; TLS 1.3 suites are not configurable)")
	fs.StringVar(&f.tlsMinVersion, "tls-min-version", "TLS1.2", "lowest TLS version accepted from clients: TLS1.2 or TLS1.3")
	fs.StringVar(&f.tlsMaxVersion, "tls-max-version", "", "highest TLS version accepted from clients: TLS1.2 or TLS1.3 (empty: Go's highest)")
	fs.BoolVar(&f.relaxedReads, "relaxed-reads", false, "use ZooKeeper sync as the linearizable-read barrier instead of a quorum round trip (faster; a ZooKeeper server partitioned from its quorum can then serve stale reads)")
	fs.BoolVar(&f.forwardWrites, "forward-writes", true, "only the leader instance commits: other instances forward writes, lease requests, keepalives and linearizable-read positions to it over the internal endpoint (false: every instance commits its own writes)")
	fs.BoolVar(&f.readLease, "read-lease", false, "the leader instance answers linearizable reads (its own and the other instances' read index) from memory while it holds the read lease: no other instance can commit then, and a ZooKeeper transaction of its session landed within the leader proof window, which the granted session timeout and ZooKeeper's tick bound (refused when conf is not allowed and --zk-tick-time is not given; assumes this host's clock runs at no less than half the ZooKeeper leader's rate); needs --forward-writes on every instance of the root, all of this build or later")
	fs.StringVar(&f.internalListenURL, "internal-listen-url", "http://"+embed.DefaultInternalAddr, "URL of the internal endpoint between instances (port 0 picks a free one): https:// with --peer-cert-file and --peer-key-file (or --peer-auto-tls); http:// on loopback only, unless --internal-insecure-plaintext")
	fs.StringVar(&f.advertiseInternalURL, "advertise-internal-url", "", "internal endpoint URL advertised to the other instances in the member znode (default: the scheme and address listened on)")
	f.peer.register(fs)
	f.commitPipeline = engine.DefaultCommitPipeline
	fs.Var(&f.commitPipeline, "commit-pipeline", fmt.Sprintf("log entries the committer keeps in flight to ZooKeeper: auto (chosen from the commits' latency and the queue, 1 to %d) or a fixed number (1: one at a time, as before pipelining)", engine.MaxAutoCommitPipeline))
	fs.DurationVar(&f.commitLinger, "commit-linger", engine.DefaultCommitLinger, fmt.Sprintf("how long the committer may wait for more writes to join an entry when nothing is in flight and the previous entry carried several (0: never; at most %v): fewer ZooKeeper transactions per write under concurrent clients; a lone client never waits", engine.MaxCommitLinger))
	fs.StringVar(&f.autoCompactionMode, "auto-compaction-mode", string(compactor.ModePeriodic), "how --auto-compaction-retention is read: periodic (a duration; a bare number is hours) or revision (a number of revisions)")
	fs.StringVar(&f.autoCompactionRetain, "auto-compaction-retention", "0", "history the leader instance keeps when compacting automatically, e.g. 1h, 30m or 10000 (revision mode); 0 turns auto-compaction off")
	fs.Int64Var(&f.quotaBackendBytes, "quota-backend-bytes", 0, "most bytes the root may hold before compression (base generations and log entries: etcd's DB size) before writes raise the NOSPACE alarm and are refused (0: etcd's default 2 GiB; negative: no quota)")
	fs.Int64Var(&f.zkHeapBytes, "zk-heap-bytes", 0, "the JVM heap (-Xmx) of each ZooKeeper server, in bytes: zketcd warns when ZooKeeper's data nears half of it and, while --quota-backend-bytes is left at its default, refuses writes (NOSPACE) past it (0: not given)")
	fs.StringVar(&f.featureGates, "feature-gates", "", "etcd's feature gates, e.g. InitialCorruptCheck=true (the only one zketcd has; others are ignored with a warning)")
	fs.DurationVar(&f.corruptCheckTime, "corrupt-check-time", 0, "period of the leader instance's check that every instance's HashKV agrees at one revision; a mismatch raises the CORRUPT alarm (0: off)")
	fs.IntVar(&f.maxWatchersPerStream, "max-watchers-per-stream", 100000, "most watchers on one watch stream (0: no bound); a create beyond it is canceled with a reason")
	fs.UintVar(&f.maxConcurrentStreams, "max-concurrent-streams", 0, "most concurrent gRPC streams per client connection (0: unbounded, as etcd's default)")
	fs.IntVar(&f.maxConcurrentRequests, "max-concurrent-requests", grpcsrv.DefaultMaxConcurrentRequests, "most requests (unary RPCs and RangeStream) in flight across all clients; one more fails at once with \"too many requests\" (0: unbounded)")
	f.registerAuth(fs)
	fs.DurationVar(&f.handshakeTimeout, "grpc-handshake-timeout", grpcsrv.DefaultConnectionTimeout, "time a new client connection has to finish its TLS and HTTP/2 handshakes before it is closed")
	fs.DurationVar(&f.watchProgressInterval, "watch-progress-notify-interval", grpcsrv.DefaultWatchProgressNotifyInterval, "period of progress notifications to watchers that ask for them")
	fs.DurationVar(&f.keepaliveMinTime, "grpc-keepalive-min-time", grpcsrv.DefaultKeepaliveMinTime, "shortest keepalive interval a client may use")
	fs.DurationVar(&f.keepaliveInterval, "grpc-keepalive-interval", grpcsrv.DefaultKeepaliveInterval, "interval of server-to-client pings")
	fs.DurationVar(&f.keepaliveTimeout, "grpc-keepalive-timeout", grpcsrv.DefaultKeepaliveTimeout, "time to wait for a ping answer before closing")
	f.registerLog(fs)
	fs.StringVar(&f.lossDir, "rollback-loss-dir", "", "directory where the instance writes what ZooKeeper lost if ZooKeeper's data goes back to an older state, e.g. a restored backup (default: $STATE_DIRECTORY/loss under systemd's StateDirectory=, else "+defaultLossDir+"; zketcd dev: --data-dir/loss); see zketcd replay-loss")
	fs.DurationVar(&f.rollbackCheckAfter, "rollback-check-after", engine.DefaultRollbackCheck, "time without a ZooKeeper session after which the instance checks, on a fresh session, whether ZooKeeper's data went back to an older state (ZooKeeper then refuses its session for good)")
	fs.StringVar(&f.configFile, "config-file", "", "etcd's YAML configuration file: the keys zketcd has (etcd's names, and zketcd's own flag names); flags and environment override it")
}

// parse parses the command line and the environment, then the
// --config-file, if any, for what neither set.
func (f *serveFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	f.argvCredentials = argvCredentials(args)
	if f.configFile == "" {
		return nil
	}
	w, err := applyConfigFile(fs, f.configFile)
	f.configWarnings = w
	return err
}

// parseInterspersed parses flags that may come after positional
// arguments and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseWithEnv(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseWithEnv parses args, then fills every flag not given on the command
// line from ZKETCD_<NAME> (dashes as underscores, upper case).
func parseWithEnv(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := "ZKETCD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", env, e)
			}
		}
	})
	return err
}

func (f *serveFlags) logger() (*logrus.Logger, error) {
	lg := logrus.New()
	if f.logOutput != nil {
		lg.SetOutput(f.logOutput)
	}
	lvl, err := logrus.ParseLevel(f.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	lg.SetLevel(lvl)
	switch f.logFormat {
	case "json":
		lg.SetFormatter(durationFormatter{next: &logrus.JSONFormatter{}})
	case "text", "console": // etcd's name for its text format
		lg.SetFormatter(durationFormatter{next: &logrus.TextFormatter{FullTimestamp: true}})
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
	}
	return lg, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// listenAddrs turns client URLs into host:port and tells whether they use TLS.
func listenAddrs(urls []string) (addrs []string, secure bool, err error) {
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, false, fmt.Errorf("client url %q: %w", raw, err)
		}
		switch u.Scheme {
		case "http":
		case "https":
			secure = true
		default:
			return nil, false, fmt.Errorf("client url %q: scheme must be http or https", raw)
		}
		if u.Host == "" {
			return nil, false, fmt.Errorf("client url %q: no host:port", raw)
		}
		addrs = append(addrs, u.Host)
	}
	return addrs, secure, nil
}

// tlsVersions parses --tls-min-version, --tls-max-version and
// --cipher-suites with etcd's rules: versions are TLS1.2 or TLS1.3 (empty:
// Go's choice, 0), min must not exceed max, and cipher suites cannot be set
// when the minimum is TLS 1.3 (Go does not let TLS 1.3 suites be chosen).
// It returns the insecure suites named, for a warning.
func (f *serveFlags) tlsVersions() (minV, maxV uint16, suites []uint16, insecure []string, err error) {
	if minV, err = parseTLSVersion(f.tlsMinVersion); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("--tls-min-version: %w", err)
	}
	if maxV, err = parseTLSVersion(f.tlsMaxVersion); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("--tls-max-version: %w", err)
	}
	if maxV != 0 && minV > maxV {
		return 0, 0, nil, nil, fmt.Errorf("--tls-min-version %s is above --tls-max-version %s", f.tlsMinVersion, f.tlsMaxVersion)
	}
	names := splitList(f.cipherSuites)
	if len(names) > 0 && minV == tls.VersionTLS13 {
		return 0, 0, nil, nil, errors.New("--cipher-suites cannot be set when --tls-min-version is TLS1.3 (TLS 1.3 suites are not configurable)")
	}
	suites, insecure, err = parseCipherSuites(names)
	if err != nil {
		return 0, 0, nil, nil, fmt.Errorf("--cipher-suites: %w", err)
	}
	return minV, maxV, suites, insecure, nil
}

// parseTLSVersion maps etcd's version names to crypto/tls constants; ""
// is 0 (Go's default).
func parseTLSVersion(v string) (uint16, error) {
	switch v {
	case "":
		return 0, nil
	case "TLS1.2":
		return tls.VersionTLS12, nil
	case "TLS1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("unknown TLS version %q (want TLS1.2 or TLS1.3)", v)
}

// cipherSuiteAliases are the names etcd accepts besides Go's: the
// ChaCha20 suites as Go named them before their IANA names.
var cipherSuiteAliases = map[string]uint16{
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
}

// parseCipherSuites maps cipher suite names (Go's, which are IANA's) to
// IDs in the order given (an empty list is nil: Go's defaults). An unknown
// name is an error; insecure lists the names Go marks insecure.
func parseCipherSuites(names []string) (ids []uint16, insecure []string, err error) {
	known := map[string]uint16{}
	for _, c := range tls.CipherSuites() {
		known[c.Name] = c.ID
	}
	weak := map[string]uint16{}
	for _, c := range tls.InsecureCipherSuites() {
		weak[c.Name] = c.ID
	}
	for _, n := range names {
		id, ok := known[n]
		if !ok {
			id, ok = cipherSuiteAliases[n]
		}
		if !ok {
			if id, ok = weak[n]; ok {
				insecure = append(insecure, n)
			}
		}
		if !ok {
			return nil, nil, fmt.Errorf("unknown TLS cipher suite %q", n)
		}
		ids = append(ids, id)
	}
	return ids, insecure, nil
}

// tlsConfig builds the client TLS configuration, or nil without
// --cert-file/--key-file. The version and cipher suite flags are checked
// even then, so a typo never goes unnoticed.
func (f *serveFlags) tlsConfig() (*tls.Config, error) {
	minV, maxV, suites, _, err := f.tlsVersions()
	if err != nil {
		return nil, err
	}
	if minV == 0 {
		minV = tls.VersionTLS12
	}
	if f.certFile == "" && f.keyFile == "" {
		if f.clientCert {
			return nil, errors.New("--client-cert-auth needs --cert-file and --key-file")
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("load --cert-file/--key-file: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: minV, MaxVersion: maxV, CipherSuites: suites}
	if f.trustedCAFile != "" {
		pem, err := os.ReadFile(f.trustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("read --trusted-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--trusted-ca-file %s: no certificates", f.trustedCAFile)
		}
		cfg.ClientCAs = pool
	}
	if f.clientCert {
		if cfg.ClientCAs == nil {
			return nil, errors.New("--client-cert-auth needs --trusted-ca-file")
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// zkIdentity returns --zk-auth, or the content of --zk-auth-file (one
// line; surrounding white space ignored); giving both is an error.
func (f *serveFlags) zkIdentity() (string, error) {
	if f.zkAuthFile == "" {
		return f.zkAuth, nil
	}
	if f.zkAuth != "" {
		return "", errors.New("give --zk-auth or --zk-auth-file, not both")
	}
	b, err := os.ReadFile(f.zkAuthFile)
	if err != nil {
		return "", fmt.Errorf("--zk-auth-file: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("--zk-auth-file %s is empty", f.zkAuthFile)
	}
	return id, nil
}

// loggedStoreConfig is storeConfig logging through the logger the flags
// describe, for the commands that only write a root (snapshot restore,
// mirror).
func (f *serveFlags) loggedStoreConfig() (zkstore.Config, error) {
	logger, err := f.logger()
	if err != nil {
		return zkstore.Config{}, err
	}
	return f.storeConfig(logrus.NewEntry(logger))
}

func (f *serveFlags) storeConfig(lg *logrus.Entry) (zkstore.Config, error) {
	id, err := f.zkIdentity()
	if err != nil {
		return zkstore.Config{}, err
	}
	var auth []string
	if id != "" {
		auth = []string{id}
	}
	cfg := zkstore.Config{
		Servers:        splitList(f.zk),
		Root:           f.zkRoot,
		SessionTimeout: f.zkSessionTimeout,
		TickTime:       f.zkTickTime,
		Auth:           auth,
		FormerAuth:     f.zkFormerAuth,
		Logger:         lg,
	}
	if f.zkTLSCA == "" {
		if f.zkTLSCert != "" || f.zkTLSKey != "" {
			return cfg, errors.New("--zk-tls-cert-file and --zk-tls-key-file need --zk-tls-ca-file")
		}
		return cfg, nil
	}
	pem, err := os.ReadFile(f.zkTLSCA)
	if err != nil {
		return cfg, fmt.Errorf("read --zk-tls-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return cfg, fmt.Errorf("--zk-tls-ca-file %s: no certificates", f.zkTLSCA)
	}
	cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if f.zkTLSCert != "" || f.zkTLSKey != "" {
		cert, err := tls.LoadX509KeyPair(f.zkTLSCert, f.zkTLSKey)
		if err != nil {
			return cfg, fmt.Errorf("load --zk-tls-cert-file/--zk-tls-key-file: %w", err)
		}
		cfg.TLS.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
