package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/compactor"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Config configures an Engine.
type Config struct {
	// Store configures the ZooKeeper connection and root.
	Store zkstore.Config
	// OpenMoved opens the destination of a move that fenced the log (nil:
	// the instance cannot follow a move; Open sets OpenMovedStore(Store)).
	OpenMoved OpenMovedFunc
	// WaitMoved waits until the destination of a move is ready to open
	// (nil: OpenMoved is tried every 20-100 ms; Open sets
	// WaitMovedStore(Store)).
	WaitMoved WaitMovedFunc
	// Name is this instance's member name; the member ID derives from it
	// and the cluster ID, so it is stable across restarts.
	Name string
	// ClientURLs are advertised in the member list.
	ClientURLs []string
	// MaxBatchRequests bounds how many requests share one log entry.
	MaxBatchRequests int
	// ReadWindow is how many log entries are read in flight while catching up.
	ReadWindow int
	// StaleAfter is how long the view may lag the head before the instance
	// reports itself unhealthy.
	StaleAfter time.Duration
	// IdlePoll, when longer than their own periods, is how often the
	// loops that poll ZooKeeper whether or not anything happens look: the
	// tailer's probe of the head behind its watch (1 s), the look for the
	// other instances' corruption-check requests (1 s; the leader waits
	// 10 s for answers) and the compactor's round (2 s). A fleet, which
	// runs an engine per tenant against one ensemble, sets a longer one so
	// that idle tenants ask ZooKeeper little. StaleAfter must be longer
	// (its default is DefaultStaleAfter past it).
	IdlePoll time.Duration
	// Logger receives structured logs (required; embed fills it).
	Logger *logrus.Entry
	// Registerer receives the engine's Prometheus metrics (nil: none).
	Registerer prometheus.Registerer
	// CommitPipeline is how many log entries the committer keeps in flight
	// to ZooKeeper: 0 (the default, --commit-pipeline auto) chooses the
	// depth by itself, between 1 and MaxAutoCommitPipeline, from the
	// commits' measured latency and the queue (pipeline.go); N > 0 fixes
	// it. Depth 1 evaluates a batch once the previous one landed and
	// writes exactly what versions without a pipeline wrote.
	CommitPipeline int
	// CommitLinger is how long the committer may wait before sending an
	// entry while nothing is in flight, the previous entry carried more
	// than one request and the queue holds fewer than it did: requests
	// arriving meanwhile join the entry, so concurrent clients cost
	// ZooKeeper fewer transactions (and fsyncs). A lone client (entries of
	// one request) never waits. 0: DefaultCommitLinger; negative: never
	// wait (an entry leaves as soon as the previous one landed).
	CommitLinger time.Duration
	// RelaxedReads makes the linearizable-read barrier a ZooKeeper sync
	// instead of a quorum round trip. sync is cheaper, but a ZooKeeper server
	// cut off from its quorum that still believes it is the leader answers
	// it alone, so a read through it can miss acknowledged writes.
	RelaxedReads bool
	// AutoCompaction is etcd's --auto-compaction-mode and
	// --auto-compaction-retention (zero: off). Every instance samples
	// revisions; only the leader instance compacts.
	AutoCompaction compactor.Config
	// QuotaBackendBytes is etcd's --quota-backend-bytes: writes that would
	// take DBSize (the bytes before compression) past it raise the NOSPACE
	// alarm and are refused (0: translate.DefaultQuotaBytes, 2 GiB;
	// negative: no quota).
	QuotaBackendBytes int64
	// ZooKeeperHeapBytes is each ZooKeeper server's JVM heap (-Xmx),
	// --zk-heap-bytes (0: not given). With it zketcd warns when ZooKeeper's
	// data nears ZKHeapDataShare of it and, while QuotaBackendBytes is 0,
	// refuses writes that would take the root's stored bytes past that
	// (sizing.go).
	ZooKeeperHeapBytes int64
	// CorruptCheckTime is etcd's --corrupt-check-time: the period of the
	// leader instance's check that every instance's HashKV agrees at one
	// revision (0: off). See corrupt.go.
	CorruptCheckTime time.Duration
	// InitialCorruptCheck is etcd's InitialCorruptCheck feature gate: New
	// compares the instance's HashKV with the other instances' before it
	// returns, and fails on a mismatch (see corrupt.go).
	InitialCorruptCheck bool
	// HashHook, if set, sees every hash this instance computes for the
	// corruption check and may change it (fault injection in tests).
	HashHook func(h uint32) uint32
	// CompactionHook, if set, is called between the steps of a physical
	// compaction ("base-prepared", "base-published", "log-truncated"); an
	// error stops the compaction there, as a crash would. For fault
	// injection in tests.
	CompactionHook func(step string) error
	// appliedHook, if set, is called by the tailer right after the view
	// applied an entry, before the tailer lets go of it (tests: an
	// instance paused in the middle of applying a fence).
	appliedHook func(e *revision.Entry)
	// LogGenerationLimit bounds when a physical compaction keeps the log as
	// its generation instead of writing a base: while there is no base
	// generation yet, a compaction writes none as long as the log's data
	// (keys, values and auth states of every entry from the first) is at
	// most this many times the data a base would hold (every version the
	// compaction retains). After a bulk load the log is mostly live data and
	// a whole base would rewrite it all. Zero: the default, 1.5 (superseded
	// versions up to half the live data, the bound layered generations
	// keep); negative: always write a base.
	LogGenerationLimit float64
	// AfterCompaction, if set, is called from the compaction loop once per
	// round in which the view dropped what a compaction released, a
	// generation was published (a base written, or the log kept) or an
	// observer of compactions dropped its copy of the view (OnCompact),
	// after all of them and once no observer holds a copy (the copy keeps
	// what the trim dropped alive): the zketcd command returns the freed
	// memory to the operating system there (debug.FreeOSMemory), which a
	// library must not do for its host.
	AfterCompaction func()
	// BeforeRecovery, if set, is called by New when the instance is about
	// to rebuild its view from a base generation or a log generation, with
	// the bytes that generation decodes to (what it recorded; four times its
	// stored bytes for one written before those were recorded); not before
	// a root's first compaction (nothing recorded); the function it returns
	// is called once the view is rebuilt (the log after the base replayed),
	// or recovery failed. The zketcd command prepares the Go heap for the
	// load there (gctune.Tuner.Load), which a library must not do for its
	// host.
	BeforeRecovery func(dataBytes int64) (done func())
	// RollbackCheckAfter is how long the instance may be without a
	// ZooKeeper session before it checks, through a fresh session, whether
	// ZooKeeper's data went back to an older state (which makes ZooKeeper
	// refuse the instance's session for good); it checks again every
	// RollbackCheckAfter while the session stays down. Zero: the default;
	// negative: never (the check on every new connection still runs).
	RollbackCheckAfter time.Duration
	// LossDir is where an instance that finds ZooKeeper's data older than
	// its own writes the changes ZooKeeper lost (default, and when it
	// cannot be created: the system's temporary directory; zketcd serve
	// defaults it to a durable directory).
	LossDir string
	// ForwardWrites makes the leader instance the only committer: another
	// instance forwards its writes, lease grants and revokes, keepalives
	// and ReadIndex requests through Forwarder to the internal endpoint
	// the leader advertises in its member znode (InternalURL), and commits
	// them itself only when no leader endpoint is known (see forward.go).
	// False: every instance commits its own writes.
	ForwardWrites bool
	Forwarder     Forwarder
	// InternalURL is this instance's internal endpoint, advertised in its
	// member znode ("": none; another instance then commits its own writes
	// while this one leads).
	InternalURL string
	// Host identifies the host and network namespace this instance runs
	// on, advertised beside InternalURL: an internal endpoint on loopback
	// is dialed only by instances of the same host (host.go). Empty: this
	// host's, as the kernel tells it (tests give each engine its own).
	Host string
	// LeaderProofWindow bounds how long after a ZooKeeper transaction of
	// its session was sent, and landed (a commit, a quorum barrier), the
	// leader still answers read-lease reads and keepalives from memory
	// without another. The window in force is derived from what ZooKeeper
	// granted the session — the granted session timeout and ZooKeeper's
	// tick (proofwindow.go) — and follows each new session and connection;
	// a positive value only narrows it. Zero: the derived window; negative:
	// none (each such answer waits for a transaction that started after it,
	// no clock assumption; the read lease needs a window).
	LeaderProofWindow time.Duration
	// ReadLease lets the leader instance answer linearizable reads (and
	// the ReadIndex of the others) from memory within the proof window of
	// a landed transaction of its session, while it holds the read lease
	// znode (readlease.go). Needs ForwardWrites, a LeaderProofWindow that
	// is not negative and not RelaxedReads; while the session's grant
	// allows no window the lease is not taken (Warnings says why).
	ReadLease bool
	// WorldReadableOK accepts a root whose ZooKeeper data anyone may read
	// (zketcd dev, tests): no warning, and authentication may be enabled
	// on it. Otherwise such a root is reported by Warnings and AuthEnable
	// is refused on it (its tokens could be minted from what ZooKeeper
	// shows).
	WorldReadableOK bool
	// ForwardResendLimit is how long after its first send a forwarded
	// write of unknown outcome is sent again before the client gets
	// etcd's "request timed out, possibly due to connection lost" (0: twice
	// the session timeout, at least 10 s).
	ForwardResendLimit time.Duration
	// OriginGeneration is how many forwarded requests' tags one generation
	// of the tag index holds (origins.go; 0: the default). Fault injection
	// sets it small to test what the index no longer holds.
	OriginGeneration int
	// Now is the time source of lease expiry (nil: time.Now). Expiry only
	// compares its readings with each other, on the monotonic clock, so a
	// step of the wall clock moves no deadline. For tests.
	Now func() time.Time
	// expiryTick is how often the leader looks for leases past their
	// deadline (zero: defaultExpiryTick). For the package's tests, which
	// move Now by hand and wait for the loop's scans (lessor.expiryScans).
	expiryTick time.Duration
}

// Defaults used for zero Config fields. The request limits (etcd's
// --max-request-bytes and --max-txn-ops) are grpcsrv's settings, the entry
// budget zkstore's: each setting has one owner.
const (
	DefaultMaxBatchRequests = 512
	DefaultCommitPipeline   = 0 // auto
	// DefaultCommitLinger is Config.CommitLinger's default: under the
	// kube-apiserver load at 16 clients it cut ZooKeeper's transactions
	// per write and raised throughput (docs/bench/analysis.md, issue 38).
	DefaultCommitLinger = 10 * time.Millisecond
	// MaxCommitLinger bounds Config.CommitLinger: a longer wait would be
	// felt by every write and buys nothing more on any ZooKeeper.
	MaxCommitLinger      = 50 * time.Millisecond
	DefaultReadWindow    = 64
	DefaultStaleAfter    = 3 * time.Second
	DefaultRollbackCheck = 5 * time.Second
)

func (c *Config) setDefaults() {
	if c.CommitLinger == 0 {
		c.CommitLinger = DefaultCommitLinger
	}
	if c.MaxBatchRequests == 0 {
		c.MaxBatchRequests = DefaultMaxBatchRequests
	}
	if c.ReadWindow == 0 {
		c.ReadWindow = DefaultReadWindow
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter + c.IdlePoll
	}
	if c.RollbackCheckAfter == 0 {
		c.RollbackCheckAfter = DefaultRollbackCheck
	}
}

// Validate reports the first invalid setting of the engine's own (the
// store's are checked by zkstore when it opens).
func (c *Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("member name must not be empty")
	case c.CommitLinger > MaxCommitLinger:
		return fmt.Errorf("commit linger %v above %v", c.CommitLinger, MaxCommitLinger)
	case c.Logger == nil:
		return errors.New("engine: no logger")
	case c.CorruptCheckTime < 0:
		return fmt.Errorf("corrupt check time %v must not be negative", c.CorruptCheckTime)
	case c.IdlePoll > 0 && c.StaleAfter <= c.IdlePoll:
		return fmt.Errorf("the view's staleness bound %v must be longer than the idle poll %v (the tailer's probe)", c.StaleAfter, c.IdlePoll)
	case c.ReadLease && (!c.ForwardWrites || c.RelaxedReads || c.LeaderProofWindow < 0):
		return errors.New("--read-lease needs --forward-writes, a quorum barrier (not --relaxed-reads) and a leader proof window that is not off")
	}
	if err := c.AutoCompaction.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
