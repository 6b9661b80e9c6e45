package zkserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// ErrPrerequisites is returned (wrapped) by [Preflight], [StartStandalone]
// and [StartEnsemble] when Java or the ZooKeeper jars cannot be found.
var ErrPrerequisites = errors.New("java or ZooKeeper jars not found")

// ClassPathEnv names the environment variable that, when set and
// [Options.ClassPath] is empty, gives the JVM class path (entries separated
// by ':') instead of [DefaultClassPath].
const ClassPathEnv = "ZKETCD_ZK_CLASSPATH"

// Default values applied by [Options] fields left zero.
const (
	DefaultTickTime     = 2 * time.Second
	DefaultInitLimit    = 10
	DefaultSyncLimit    = 5
	DefaultStartTimeout = 60 * time.Second
	DefaultStopTimeout  = 10 * time.Second
)

// Names of files inside a server's directory.
const (
	ConfigFileName = "zoo.cfg"
	LogFileName    = "zookeeper.log"
	DataDirName    = "data"
)

const (
	standaloneMain = "org.apache.zookeeper.server.ZooKeeperServerMain"
	quorumMain     = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// DefaultClassPath returns the class path of Debian's `zookeeper` package:
// zookeeper.jar (whose manifest pulls in its dependencies) and
// slf4j-simple.jar (so that the server logs to stderr, which goes to the log
// file). It returns a new slice on every call.
func DefaultClassPath() []string {
	cp := []string{"/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar"}
	// netty-codec and netty-resolver are not on the class path that
	// Debian's zookeeper.jar names, but its Netty connection factory (needed
	// for TLS clients) requires them; added when installed.
	for _, jar := range []string{"/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar"} {
		if _, err := os.Stat(jar); err == nil {
			cp = append(cp, jar)
		}
	}
	return cp
}

// DefaultJVMFlags returns the JVM flags used unless [Options.NoDefaultJVMFlags]
// is set. They bound the heap, use the single-threaded serial collector,
// stop the JIT at C1 (about 20% less CPU until the server serves, at the
// cost of peak throughput) and skip the hsperfdata file (which SIGKILL
// would leave behind in /tmp). This suits tests and development on small
// machines. It returns a new slice on every call.
func DefaultJVMFlags() []string {
	return []string{
		"-Xmx512m",
		"-XX:+UseSerialGC",
		"-Xss512k",
		"-XX:TieredStopAtLevel=1",
		"-XX:-UsePerfData",
	}
}

// NettyConnectionFactory is the value of the system property
// zookeeper.serverCnxnFactory that makes ZooKeeper serve its clients with
// Netty instead of its NIO connection threads (needed for TLS; see
// [NettyAvailable]).
const NettyConnectionFactory = "org.apache.zookeeper.server.NettyServerCnxnFactory"

// NettyAvailable reports whether the class path (empty: what [Options]
// uses when its ClassPath is empty: $ZKETCD_ZK_CLASSPATH or
// [DefaultClassPath]) carries Netty, so that [NettyConnectionFactory] can start: Debian's
// zookeeper.jar names Netty's transport jars in its manifest, and
// DefaultClassPath adds netty-codec.jar when it is installed; another class
// path must name a Netty jar or a directory wildcard (the lib/* of
// ZooKeeper's own release, which ships Netty).
func NettyAvailable(classPath []string) bool {
	if len(classPath) == 0 {
		if env := os.Getenv(ClassPathEnv); env != "" {
			classPath = filepath.SplitList(env)
		} else {
			classPath = DefaultClassPath()
		}
	}
	for _, p := range classPath {
		base := filepath.Base(p)
		if strings.HasPrefix(base, "netty-codec") || strings.HasSuffix(p, "*") {
			return true
		}
	}
	return false
}

// LowCPUSystemProps returns the ZooKeeper system properties measured to
// cost ZooKeeper the least CPU per request under zketcd's load without
// weakening durability (docs/operations.md, "ZooKeeper settings"): the
// Netty connection factory when [NettyAvailable] says it can start (about
// a third less of ZooKeeper's CPU per request at 16 clients on 2 cores,
// half its system time). `zketcd dev` and the benchmarks use them. It
// returns a new map on every call.
func LowCPUSystemProps(classPath []string) map[string]string {
	out := map[string]string{}
	if NettyAvailable(classPath) {
		out["zookeeper.serverCnxnFactory"] = NettyConnectionFactory
	}
	return out
}

// Options configures a server or an ensemble. The zero value of every field
// selects a default; only Dir is required.
type Options struct {
	// Dir is the directory for configuration, data and log. It is created
	// (with parents) if missing. Existing data in it is kept and served. For
	// an ensemble, member i (0-based) uses the subdirectory member-<i+1>.
	Dir string

	// ClientPort is the port clients connect to on 127.0.0.1; 0 picks a free
	// one from Ports. For an ensemble, member i uses ClientPort+i when
	// ClientPort is not 0.
	ClientPort int

	// Java is the java executable; empty means $JAVA_HOME/bin/java if it
	// exists, else "java" from $PATH.
	Java string

	// ClassPath lists the jars (or directories) for the JVM class path;
	// empty means $ZKETCD_ZK_CLASSPATH if set, else [DefaultClassPath].
	ClassPath []string

	// JVMFlags are passed to the JVM after [DefaultJVMFlags] (so they win
	// over them, e.g. "-Xmx1g") and before the system properties.
	JVMFlags []string

	// NoDefaultJVMFlags drops [DefaultJVMFlags].
	NoDefaultJVMFlags bool

	// SystemProps are passed to the JVM as -Dkey=value, for example
	// {"jute.maxbuffer": "4194304"}. They come after the package's own
	// properties, so they win over them.
	SystemProps map[string]string

	// ExtraConfig holds additional zoo.cfg lines (key=value); they are written
	// after the generated ones, so they win over them. Example:
	// {"forceSync": "no"} speeds up writes in throw-away test servers.
	ExtraConfig map[string]string

	// TickTime is ZooKeeper's tickTime, rounded down to milliseconds;
	// 0 means [DefaultTickTime]. Session timeouts are bounded by
	// 2*TickTime .. MaxSessionTimeout.
	TickTime time.Duration

	// InitLimit and SyncLimit are ZooKeeper's initLimit and syncLimit, in
	// ticks; 0 means [DefaultInitLimit] and [DefaultSyncLimit].
	InitLimit, SyncLimit int

	// MaxSessionTimeout is ZooKeeper's maxSessionTimeout; 0 leaves
	// ZooKeeper's default of 20*TickTime.
	MaxSessionTimeout time.Duration

	// StartTimeout bounds how long a start waits for the server (or, for an
	// ensemble, the quorum) to serve; 0 means [DefaultStartTimeout]. The
	// context passed to a start bounds it as well.
	StartTimeout time.Duration

	// StopTimeout is how long [Server.Stop] waits after SIGTERM before it
	// sends SIGKILL; 0 means [DefaultStopTimeout].
	StopTimeout time.Duration

	// Env holds extra environment variables (KEY=value) for the JVM,
	// appended to this process's environment; for example LD_PRELOAD of a
	// shim that slows fsync down (integration/faults' slow-disk scenario).
	Env []string

	// Logger receives this package's log entries; nil means the logrus
	// standard logger. Entries carry the field component=zkserver.
	Logger *logrus.Entry

	// Ports allocates free ports; nil means a process-wide allocator shared by
	// all servers of this process (see [PortAllocator]).
	Ports *PortAllocator

	// RoutePeer, if not nil, gives each ensemble member its own view of
	// where the other members are, so that a test can put something (a
	// TCP proxy that can blackhole traffic) between every pair of members.
	// Every member's zoo.cfg lists the member itself at its real quorum and
	// election ports; for each other member it lists the address RoutePeer
	// returns for that link. [StartEnsemble] calls it once per link (2 per
	// ordered pair of members, n*(n-1)*2 calls), from one goroutine, after
	// picking the ports and before launching any member; restarts reuse the
	// answers. The answer must be 127.0.0.1:port; an error aborts the
	// start. Nil (the default) lists every member at its real ports
	// everywhere. Ignored for a standalone server.
	//
	// A member dials another's quorum port only to follow it as leader, so
	// routing the quorum links is what cuts a follower off from its leader.
	// Election links are routed only in part: in ZooKeeper 3.8 a member
	// that dials one with a higher myid sends its own election address,
	// and the dialed member drops that connection and dials the address
	// back directly, around the route. An election connection does not
	// make a member serve, so this does not undo a partition of the
	// quorum links.
	RoutePeer func(PeerLink) (string, error)
}

// PeerPort names one of an ensemble member's two member-to-member ports.
type PeerPort string

// The ports of a [PeerLink].
const (
	// QuorumPort is the port a leader accepts its followers on.
	QuorumPort PeerPort = "quorum"
	// ElectionPort is the port of leader election.
	ElectionPort PeerPort = "election"
)

// PeerLink is one directed member-to-member link of an ensemble, passed to
// [Options.RoutePeer]: member From (a myid) reaching Port of member To (a
// myid), whose real address is Addr (127.0.0.1:port).
type PeerLink struct {
	From, To int
	Port     PeerPort
	Addr     string
}

// setDefaults fills o's unset options with their defaults and makes Dir
// absolute; the logger gets the component's field.
func (o *Options) setDefaults() {
	if o.Dir != "" {
		if dir, err := filepath.Abs(o.Dir); err == nil {
			o.Dir = dir
		}
	}
	if o.TickTime == 0 {
		o.TickTime = DefaultTickTime
	}
	if o.InitLimit == 0 {
		o.InitLimit = DefaultInitLimit
	}
	if o.SyncLimit == 0 {
		o.SyncLimit = DefaultSyncLimit
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.Logger == nil {
		o.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	o.Logger = o.Logger.WithField("component", "zkserver")
	if o.Ports == nil {
		o.Ports = processPorts
	}
	if len(o.ClassPath) == 0 {
		if env := os.Getenv(ClassPathEnv); env != "" {
			o.ClassPath = filepath.SplitList(env)
		} else {
			o.ClassPath = DefaultClassPath()
		}
	}
	if o.Java == "" {
		o.Java = "java"
		if home := os.Getenv("JAVA_HOME"); home != "" {
			if p := filepath.Join(home, "bin", "java"); isExecutable(p) {
				o.Java = p
			}
		}
	}
}

// Validate reports the first invalid option (after the defaults: the
// server's constructors fill them first).
func (o *Options) Validate() error {
	switch {
	case o.Dir == "":
		return errors.New("zkserver: Options.Dir is empty")
	case !filepath.IsAbs(o.Dir):
		return fmt.Errorf("zkserver: resolve dir %q: not an absolute path", o.Dir)
	case o.ClientPort < 0 || o.ClientPort > 65535:
		return fmt.Errorf("zkserver: invalid client port %d", o.ClientPort)
	case o.TickTime < time.Millisecond:
		return fmt.Errorf("zkserver: TickTime %s is below 1ms", o.TickTime)
	}
	for k, v := range o.ExtraConfig {
		if k == "" || strings.ContainsAny(k, "=\r\n") || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("zkserver: invalid ExtraConfig entry %q=%q", k, v)
		}
	}
	for k := range o.SystemProps {
		if k == "" || strings.ContainsAny(k, "= \t\r\n") {
			return fmt.Errorf("zkserver: invalid SystemProps key %q", k)
		}
	}
	return nil
}

// prepared is opts with its defaults, validated.
func prepared(opts Options) (Options, error) {
	opts.setDefaults()
	return opts, opts.Validate()
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Preflight reports whether a server could be started with opts: whether the
// java executable and every class path entry exist. It starts nothing and
// ignores opts.Dir. A failure wraps [ErrPrerequisites] and names what is
// missing.
func Preflight(opts Options) error {
	if opts.Dir == "" {
		opts.Dir = os.TempDir()
	}
	o, err := prepared(opts)
	if err != nil {
		return err
	}
	return o.preflight()
}

func (o Options) preflight() error {
	var missing []string
	if _, err := exec.LookPath(o.Java); err != nil {
		missing = append(missing, fmt.Sprintf("java executable %q (%v)", o.Java, err))
	}
	for _, p := range o.ClassPath {
		if strings.ContainsAny(p, "*") {
			continue // a JVM class path wildcard such as /opt/zookeeper/lib/*
		}
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, fmt.Sprintf("class path entry %q", p))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("zkserver: %w: missing %s (on Debian/Ubuntu: apt-get install zookeeper default-jre-headless, or set %s)",
			ErrPrerequisites, strings.Join(missing, ", "), ClassPathEnv)
	}
	return nil
}

// jvmArgs returns the java command line (without the executable) that runs
// mainClass with the config file cfg.
func (o Options) jvmArgs(mainClass, cfg string) []string {
	var args []string
	if !o.NoDefaultJVMFlags {
		args = append(args, DefaultJVMFlags()...)
	}
	args = append(args,
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
		"-Dzookeeper.jmx.log4j.disable=true",
	)
	args = append(args, o.JVMFlags...)
	for _, k := range sortedKeys(o.SystemProps) {
		args = append(args, "-D"+k+"="+o.SystemProps[k])
	}
	args = append(args, "-cp", strings.Join(o.ClassPath, string(filepath.ListSeparator)), mainClass, cfg)
	return args
}

// quorumPeer describes one ensemble member for zoo.cfg's server.N lines:
// the ports on 127.0.0.1 that the member whose zoo.cfg it is uses for it.
type quorumPeer struct {
	id                   int
	quorumPort, elecPort int
}

// routedPeers returns member self's view of peers (the real ports of every
// member): peers itself when route is nil, else peers with every other
// member's ports replaced by route's answers.
func routedPeers(self int, peers []quorumPeer, route func(PeerLink) (string, error)) ([]quorumPeer, error) {
	if route == nil {
		return peers, nil
	}
	out := make([]quorumPeer, len(peers))
	for i, p := range peers {
		out[i] = p
		if p.id == self {
			continue
		}
		var err error
		if out[i].quorumPort, err = routePort(route, PeerLink{From: self, To: p.id, Port: QuorumPort, Addr: loopback(p.quorumPort)}); err != nil {
			return nil, err
		}
		if out[i].elecPort, err = routePort(route, PeerLink{From: self, To: p.id, Port: ElectionPort, Addr: loopback(p.elecPort)}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// routePort asks route for l's address and returns its port; the address
// must be on 127.0.0.1, the host every zoo.cfg line names.
func routePort(route func(PeerLink) (string, error), l PeerLink) (int, error) {
	addr, err := route(l)
	if err != nil {
		return 0, fmt.Errorf("zkserver: route member %d to member %d's %s port: %w", l.From, l.To, l.Port, err)
	}
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("zkserver: route member %d to member %d's %s port: %w", l.From, l.To, l.Port, err)
	}
	port, err := strconv.Atoi(ps)
	if host != "127.0.0.1" || err != nil || port <= 0 || port > 65535 {
		return 0, fmt.Errorf("zkserver: route member %d to member %d's %s port: %q is not 127.0.0.1:port", l.From, l.To, l.Port, addr)
	}
	return port, nil
}

// config renders zoo.cfg for a server whose data lives in dataDir and that
// serves clients on clientPort. peers is empty for a standalone server.
func (o Options) config(dataDir string, clientPort int, peers []quorumPeer) string {
	var b strings.Builder
	b.WriteString("# Generated by zketcd internal/zkserver; rewritten on every start.\n")
	fmt.Fprintf(&b, "tickTime=%d\n", o.TickTime.Milliseconds())
	fmt.Fprintf(&b, "initLimit=%d\n", o.InitLimit)
	fmt.Fprintf(&b, "syncLimit=%d\n", o.SyncLimit)
	fmt.Fprintf(&b, "dataDir=%s\n", dataDir)
	fmt.Fprintf(&b, "clientPort=%d\n", clientPort)
	b.WriteString("clientPortAddress=127.0.0.1\n")
	b.WriteString("admin.enableServer=false\n")
	b.WriteString("4lw.commands.whitelist=srvr,mntr,ruok,stat,conf\n")
	b.WriteString("autopurge.purgeInterval=1\n")
	b.WriteString("autopurge.snapRetainCount=3\n")
	if o.MaxSessionTimeout > 0 {
		fmt.Fprintf(&b, "maxSessionTimeout=%d\n", o.MaxSessionTimeout.Milliseconds())
	}
	for _, p := range peers {
		fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", p.id, p.quorumPort, p.elecPort)
	}
	for _, k := range sortedKeys(o.ExtraConfig) {
		fmt.Fprintf(&b, "%s=%s\n", k, o.ExtraConfig[k])
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
