package backend

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/compactor"
	"github.com/zketcd/zketcd/zkstore"
)

// Config configures a Backend.
type Config struct {
	// Store configures the ZooKeeper connection and root.
	Store zkstore.Config
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
	// Logger receives structured logs (required; embed fills it).
	Logger *logrus.Entry
	// Registerer receives the backend's Prometheus metrics (nil: none).
	Registerer prometheus.Registerer
	// CommitPipeline is how many log entries the committer keeps in flight
	// (default 1: a batch is evaluated once the previous one landed). More
	// lets ZooKeeper group fsyncs, at the cost of smaller batches and more
	// ZooKeeper transactions; measure before raising it.
	CommitPipeline int
	// RelaxedReads makes the linearizable-read barrier a ZooKeeper sync
	// instead of a quorum round trip. sync is cheaper, but a ZooKeeper server
	// cut off from its quorum that still believes it is the leader answers
	// it alone, so a read through it can miss acknowledged writes.
	RelaxedReads bool
	// AutoCompaction is etcd's --auto-compaction-mode and
	// --auto-compaction-retention (zero: off). Every instance samples
	// revisions; only the leader instance compacts.
	AutoCompaction compactor.Config
	// CompactionHook, if set, is called between the steps of a physical
	// compaction ("base-prepared", "base-published", "log-truncated"); an
	// error stops the compaction there, as a crash would. For fault
	// injection in tests.
	CompactionHook func(step string) error
}

// Defaults used for zero Config fields. The request limits (etcd's
// --max-request-bytes and --max-txn-ops) are grpcsrv's settings, the entry
// budget zkstore's: each setting has one owner.
const (
	DefaultMaxBatchRequests = 512
	DefaultCommitPipeline   = 1
	DefaultReadWindow       = 64
	DefaultStaleAfter       = 3 * time.Second
)

func (c *Config) setDefaults() {
	if c.CommitPipeline == 0 {
		c.CommitPipeline = DefaultCommitPipeline
	}
	if c.MaxBatchRequests == 0 {
		c.MaxBatchRequests = DefaultMaxBatchRequests
	}
	if c.ReadWindow == 0 {
		c.ReadWindow = DefaultReadWindow
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter
	}
}

// Validate reports the first invalid setting of the engine's own (the
// store's are checked by zkstore when it opens).
func (c *Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("member name must not be empty")
	case c.Logger == nil:
		return errors.New("backend: no logger")
	}
	if err := c.AutoCompaction.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
