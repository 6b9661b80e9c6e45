package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/watchbridge"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// core is what every concern of one instance shares: its configuration,
// logger, log, view, watch hub, election, metrics and read barrier, its
// identity and its lifetime. Each concern (the tailer, the committer, the
// forwarder, the lessor, ...) is a type of its own that embeds it. Its
// fields are set before the engine runs (hub and election once the view
// is recovered) and never change after; the values they point to are safe
// for concurrent use.
type core struct {
	cfg     Config
	log     *logrus.Entry
	store   Log
	view    *revision.View
	hub     *watchbridge.Hub
	metrics *metrics
	barrier *barrier
	// election is this instance's candidacy: who leads, and the fence of
	// its own leadership.
	election zkstore.Leadership
	memberID uint64
	// nonce is this process's writer nonce: the tags of its log entries
	// and of the requests it forwards carry it.
	nonce uint64
	// host is this instance's host (host.go), advertised in its member
	// znode.
	host string
	// maxEntryBytes is the log's entry budget: a batch is cut before it.
	maxEntryBytes int
	// applyMu serializes View.Apply with the hub's notification, a reload
	// of the view and a halt.
	applyMu sync.Mutex
	// kick wakes the tailer (kickTailer).
	kick chan struct{}
	// ctx ends when the engine closes; opened is when it started.
	ctx    context.Context
	opened time.Time
}

// kickTailer asks the tailer to read the head now.
func (c *core) kickTailer() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// leader reports whether this instance leads, with the fence of its
// leadership.
func (c *core) leader() (bool, zkstore.Fence) {
	leader, fence, _ := c.election.State()
	return leader, fence
}
