package zkserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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
}

// withDefaults returns a copy of o with defaults filled in and Dir made
// absolute.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("zkserver: Options.Dir is empty")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, fmt.Errorf("zkserver: resolve dir %q: %w", o.Dir, err)
	}
	o.Dir = dir
	if o.ClientPort < 0 || o.ClientPort > 65535 {
		return o, fmt.Errorf("zkserver: invalid client port %d", o.ClientPort)
	}
	if o.TickTime == 0 {
		o.TickTime = DefaultTickTime
	}
	if o.TickTime < time.Millisecond {
		return o, fmt.Errorf("zkserver: TickTime %s is below 1ms", o.TickTime)
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
	for k, v := range o.ExtraConfig {
		if k == "" || strings.ContainsAny(k, "=\r\n") || strings.ContainsAny(v, "\r\n") {
			return o, fmt.Errorf("zkserver: invalid ExtraConfig entry %q=%q", k, v)
		}
	}
	for k := range o.SystemProps {
		if k == "" || strings.ContainsAny(k, "= \t\r\n") {
			return o, fmt.Errorf("zkserver: invalid SystemProps key %q", k)
		}
	}
	return o, nil
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
	o, err := opts.withDefaults()
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

// quorumPeer describes one ensemble member for zoo.cfg's server.N lines.
type quorumPeer struct {
	id                   int
	quorumPort, elecPort int
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
	b.WriteString("4lw.commands.whitelist=srvr,mntr,ruok,stat\n")
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
