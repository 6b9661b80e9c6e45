package compactor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Mode is how the retention is read: etcd's --auto-compaction-mode.
type Mode string

// The modes etcd knows.
const (
	ModePeriodic Mode = "periodic"
	ModeRevision Mode = "revision"
)

// DefaultRevisionInterval is how often revision mode checks; etcd has it
// fixed at 5 minutes.
const DefaultRevisionInterval = 5 * time.Minute

// MinRetention is the shortest periodic retention accepted. etcd takes any
// positive duration, but below a few nanoseconds its sampling interval
// (retention/10) is zero and it spins; nothing useful compacts that often.
const MinRetention = time.Second

// ErrCompacted is what Target.Compact returns (possibly wrapped) when the
// revision is at or below the store's compacted revision. The compactor
// counts it as done, as etcd does.
var ErrCompacted = errors.New("revision already compacted")

// Config selects the auto-compactor. The zero value is off.
type Config struct {
	// Mode is periodic (the default) or revision.
	Mode Mode
	// Retention is the periodic mode's retention (0: off).
	Retention time.Duration
	// Revisions is the revision mode's retention: how many revisions to keep
	// (0: off).
	Revisions int64
	// RevisionInterval is how often revision mode checks (default
	// DefaultRevisionInterval, as etcd). Not a flag in etcd; for tests.
	RevisionInterval time.Duration
	// Clock is the compactor's time source (nil: the real clock). For tests.
	Clock Clock
}

// ParseRetention reads --auto-compaction-retention as etcd does: a bare
// non-negative integer is hours in periodic mode and a revision count in
// revision mode; anything else must be a Go duration, in periodic mode.
// Unlike etcd it refuses a duration in revision mode (etcd takes its
// nanoseconds as the revision count) and a negative duration.
func ParseRetention(mode Mode, retention string) (Config, error) {
	cfg := Config{Mode: mode}
	switch mode {
	case ModePeriodic, ModeRevision:
	case "":
		return cfg, errors.New("undefined auto-compaction-mode")
	default:
		return cfg, fmt.Errorf("unknown auto-compaction-mode %q: want periodic or revision", mode)
	}
	if n, err := strconv.ParseInt(retention, 10, 64); err == nil && n >= 0 {
		if mode == ModeRevision {
			cfg.Revisions = n
		} else {
			if n > int64(1<<63-1)/int64(time.Hour) {
				return cfg, fmt.Errorf("auto-compaction-retention %q: too many hours", retention)
			}
			cfg.Retention = time.Duration(n) * time.Hour
		}
		return cfg, cfg.Validate()
	}
	if mode == ModeRevision {
		return cfg, fmt.Errorf("auto-compaction-retention %q: revision mode wants a non-negative number of revisions", retention)
	}
	d, err := time.ParseDuration(retention)
	if err != nil {
		return cfg, fmt.Errorf("auto-compaction-retention %q: want hours or a duration such as 30m: %w", retention, err)
	}
	cfg.Retention = d
	return cfg, cfg.Validate()
}

func (c Config) mode() Mode {
	if c.Mode == "" {
		return ModePeriodic
	}
	return c.Mode
}

// Enabled reports whether the configuration compacts at all.
func (c Config) Enabled() bool {
	switch c.mode() {
	case ModePeriodic:
		return c.Retention > 0
	case ModeRevision:
		return c.Revisions > 0
	}
	return false
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch c.mode() {
	case ModePeriodic:
		if c.Revisions != 0 {
			return errors.New("auto-compaction: Revisions is for revision mode")
		}
		if c.Retention < 0 {
			return fmt.Errorf("auto-compaction retention %s must not be negative", c.Retention)
		}
		if c.Retention > 0 && c.Retention < MinRetention {
			return fmt.Errorf("auto-compaction retention %s is shorter than %s", c.Retention, MinRetention)
		}
	case ModeRevision:
		if c.Retention != 0 {
			return errors.New("auto-compaction: Retention is for periodic mode")
		}
		if c.Revisions < 0 {
			return fmt.Errorf("auto-compaction retention %d revisions must not be negative", c.Revisions)
		}
	default:
		return fmt.Errorf("unknown auto-compaction mode %q: want periodic or revision", c.Mode)
	}
	if c.RevisionInterval < 0 {
		return fmt.Errorf("auto-compaction revision interval %s must not be negative", c.RevisionInterval)
	}
	return nil
}

// Clock is the compactor's time source. Its methods may be called from any
// goroutine.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Target is the store a compactor samples and compacts. Its methods are
// called from the compactor's goroutine only, one at a time, concurrently
// with the store's other users.
type Target interface {
	// Rev returns the store's current revision.
	Rev() int64
	// Leader reports whether this instance is the one that compacts now.
	Leader() bool
	// Compact compacts the store to rev, as the Compact RPC does. It
	// returns ErrCompacted (possibly wrapped) if rev is at or below the
	// compacted revision, and fails if this instance is no longer the
	// leader when the compaction is committed.
	Compact(ctx context.Context, rev int64) error
}

// Compactor runs one auto-compaction policy against a Target. Call Run once,
// in a goroutine of its own; the compactor keeps its state in that goroutine.
type Compactor struct {
	cfg    Config
	clock  Clock
	target Target
	log    *logrus.Entry

	compactions *prometheus.CounterVec
	lastRev     prometheus.Gauge
}

// New returns a compactor for cfg, which must be enabled. lg receives a line
// per compaction; reg, if not nil, receives its metrics.
func New(cfg Config, target Target, lg *logrus.Entry, reg prometheus.Registerer) (*Compactor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("auto-compaction is off: retention 0")
	}
	cfg.Mode = cfg.mode()
	if cfg.RevisionInterval == 0 {
		cfg.RevisionInterval = DefaultRevisionInterval
	}
	c := &Compactor{cfg: cfg, clock: cfg.Clock, target: target, log: lg}
	if c.clock == nil {
		c.clock = realClock{}
	}
	if c.log == nil {
		c.log = logrus.NewEntry(logrus.StandardLogger())
	}
	c.log = c.log.WithField("component", "auto-compactor")
	c.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "zketcd", Name: "auto_compactions_total",
		Help: "Compactions the auto-compactor attempted as the leader, by mode and outcome (compacted, already_compacted, failed).",
	}, []string{"mode", "outcome"})
	c.lastRev = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "auto_compaction_revision",
		Help: "Revision of this instance's last successful auto-compaction.",
	})
	if reg != nil {
		if err := reg.Register(c.compactions); err != nil {
			return nil, fmt.Errorf("register auto-compaction metrics: %w", err)
		}
		if err := reg.Register(c.lastRev); err != nil {
			return nil, fmt.Errorf("register auto-compaction metrics: %w", err)
		}
	}
	return c, nil
}

// Run samples and compacts until ctx ends. Call it once.
func (c *Compactor) Run(ctx context.Context) {
	retention := c.retentionString()
	c.log.WithFields(logrus.Fields{"mode": c.cfg.Mode, "retention": retention}).Info("auto-compaction on")
	if c.cfg.Mode == ModeRevision {
		c.runRevision(ctx)
		return
	}
	c.runPeriodic(ctx)
}

func (c *Compactor) retentionString() string {
	if c.cfg.Mode == ModeRevision {
		return strconv.FormatInt(c.cfg.Revisions, 10)
	}
	return c.cfg.Retention.String()
}

// retryDivisor: periodic mode samples the revision this many times per
// min(retention, 1h), as etcd.
const retryDivisor = 10

// periodicTimes returns periodic mode's sampling interval, how often it
// compacts once it has, and how many samples it keeps (etcd's
// getRetryInterval, getCompactInterval and getRetentions).
func periodicTimes(retention time.Duration) (sample, compact time.Duration, keep int) {
	compact = min(retention, time.Hour)
	sample = compact / retryDivisor
	return sample, compact, int(retention/sample) + 1
}

// runPeriodic is etcd's periodic compactor: each round samples the current
// revision, waits one sampling interval, then compacts to the oldest sample
// kept if it is new and enough time has passed since the last success (or
// since the start: retention the first time, min(retention, 1h) after).
// The oldest sample is keep-1 intervals old when taken, one interval more
// when used: retention plus one interval at steady state. Instances that
// are not the leader sample but never compact, so a new leader already has
// a window of samples.
func (c *Compactor) runPeriodic(ctx context.Context) {
	sample, compact, keep := periodicTimes(c.cfg.Retention)
	revs := make([]int64, 0, keep+1)
	var last int64
	lastSuccess := c.clock.Now()
	wait := c.cfg.Retention
	for {
		revs = append(revs, c.target.Rev())
		if len(revs) > keep {
			revs = revs[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(sample):
		}
		if !c.target.Leader() {
			continue
		}
		rev := revs[0]
		if c.clock.Now().Sub(lastSuccess) < wait || rev == last {
			continue
		}
		wait = compact
		if c.compact(ctx, rev) {
			last, lastSuccess = rev, c.clock.Now()
		}
	}
}

// runRevision is etcd's revision compactor: every interval, as the leader,
// it compacts to the current revision minus the retention, unless that is
// not positive or is what it last compacted to.
func (c *Compactor) runRevision(ctx context.Context) {
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(c.cfg.RevisionInterval):
		}
		if !c.target.Leader() {
			continue
		}
		rev := c.target.Rev() - c.cfg.Revisions
		if rev <= 0 || rev == last {
			continue
		}
		if c.compact(ctx, rev) {
			last = rev
		}
	}
}

// compactTimeout bounds one compaction (the committer bounds its ZooKeeper
// requests too; this covers a wait in its queue).
const compactTimeout = time.Minute

// compact compacts to rev and reports whether that counts as done.
func (c *Compactor) compact(ctx context.Context, rev int64) bool {
	cctx, cancel := context.WithTimeout(ctx, compactTimeout)
	defer cancel()
	start := c.clock.Now()
	err := c.target.Compact(cctx, rev)
	if err != nil && ctx.Err() != nil {
		return false // stopping
	}
	lg := c.log.WithFields(logrus.Fields{
		"mode": c.cfg.Mode, "retention": c.retentionString(), "revision": rev,
	})
	switch {
	case err == nil:
		c.compactions.WithLabelValues(string(c.cfg.Mode), "compacted").Inc()
		c.lastRev.Set(float64(rev))
		lg.WithField("took", c.clock.Now().Sub(start).Round(time.Millisecond)).Info("auto-compaction")
		return true
	case errors.Is(err, ErrCompacted):
		c.compactions.WithLabelValues(string(c.cfg.Mode), "already_compacted").Inc()
		c.lastRev.Set(float64(rev))
		lg.Info("auto-compaction: revision already compacted")
		return true
	default:
		c.compactions.WithLabelValues(string(c.cfg.Mode), "failed").Inc()
		lg.WithError(err).Warn("auto-compaction failed; retrying at the next check")
		return false
	}
}
