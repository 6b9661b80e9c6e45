// Package gctune keeps the Go heap's growth between collections
// proportional to a fraction of the live heap, with a floor, instead of Go's
// default of 100% (GOGC=100: a process holding 2 GB of live data may grow
// to 4 GB before its next collection, and keeps that memory). zketcd's live
// heap is its view, which can be gigabytes of values: a fixed fraction of
// it is plenty of room for the garbage of requests.
//
// The tuner reads the live heap after each collection (runtime/metrics) and
// sets the GC percentage (debug.SetGCPercent) to
//
//	clamp(100 × max(Floor, Fraction × live) / live, MinPercent, 100)
//
// so small heaps keep Go's default and large ones collect once they grew by
// Fraction.
//
// A bulk load that keeps what it allocates (an instance recovering its
// view) is better served otherwise, and Tuner.Load switches to that for
// its duration (collection deferred, huge pages asked for).
//
// It changes process-wide settings: run one per process (the zketcd
// command does; embedded instances leave it to their host), and not at all
// when the GOGC environment variable is set (the operator chose).
package gctune

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Config configures Run. Zero fields take the defaults below.
type Config struct {
	// Fraction is the growth allowed between collections, as a fraction
	// of the live heap (default 0.05).
	Fraction float64
	// Floor is the least growth allowed, in bytes (default 64 MiB).
	Floor int64
	// MinPercent is the lowest GC percentage set (default 5).
	MinPercent int
	// Memory bounds what a Load reserves to half of it (default: the
	// machine's memory).
	Memory int64
	// Every is how often the live heap is read (default 1 s).
	Every time.Duration
	// Logger logs changes of the percentage at debug level.
	Logger *logrus.Entry
	// Gauge, if set, follows the percentage set (see NewGauge).
	Gauge prometheus.Gauge
}

// NewGauge returns the zketcd_gc_percent gauge for Config.Gauge (for the
// caller to register: the tuner starts before the instance's registry
// exists, so that recovery runs with it).
func NewGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "gc_percent",
		Help: "The Go GC percentage (GOGC) the memory tuner set: the heap may grow by this share of the live heap between collections.",
	})
}

// Defaults.
const (
	DefaultFraction   = 0.05
	DefaultFloor      = 64 << 20
	DefaultMinPercent = 5
)

func (c *Config) setDefaults() {
	if c.Fraction <= 0 {
		c.Fraction = DefaultFraction
	}
	if c.Floor <= 0 {
		c.Floor = DefaultFloor
	}
	if c.MinPercent <= 0 {
		c.MinPercent = DefaultMinPercent
	}
	if c.Memory <= 0 {
		c.Memory = physicalMemory()
	}
	if c.Every <= 0 {
		c.Every = time.Second
	}
	if c.Logger == nil {
		l := logrus.New()
		l.SetOutput(nopWriter{})
		c.Logger = logrus.NewEntry(l)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// Percent returns the GC percentage the tuner sets for a live heap of live
// bytes.
func (c Config) Percent(live int64) int {
	c.setDefaults()
	if live <= 0 {
		return 100
	}
	room := math.Max(float64(c.Floor), c.Fraction*float64(live))
	p := int(math.Ceil(100 * room / float64(live)))
	return min(100, max(c.MinPercent, p))
}

// Enabled reports whether the tuner should run: not when GOGC is set.
func Enabled() bool {
	_, set := os.LookupEnv("GOGC")
	return !set
}

// Tuner is the memory tuner of one process: New, then Run in a goroutine
// of its own, and Load around a bulk load. Its methods are safe for
// concurrent use.
type Tuner struct {
	cfg   Config
	mu    sync.Mutex
	cur   int   // the percentage set (Run's), restored after a load
	loads int   // Loads in progress: Run leaves the settings to them
	limit int64 // the memory limit before the first of them
}

// New returns a tuner of cfg. It changes nothing until Run or Load.
func New(cfg Config) *Tuner {
	cfg.setDefaults()
	if cfg.Gauge == nil {
		cfg.Gauge = NewGauge()
	}
	cur := debug.SetGCPercent(100)
	debug.SetGCPercent(cur)
	return &Tuner{cfg: cfg, cur: cur}
}

// Run tunes the GC percentage until ctx ends, then restores the one it
// found. It blocks. While a Load is in progress it leaves the settings
// alone.
func (t *Tuner) Run(ctx context.Context) {
	t.mu.Lock()
	orig := t.cur
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.cur = orig
		if t.loads == 0 {
			debug.SetGCPercent(orig)
		}
	}()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	tick := time.NewTicker(t.cfg.Every)
	defer tick.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			t.tune(int64(sample[0].Value.Uint64()))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// tune sets the percentage for a live heap of live bytes, unless a load is
// in progress.
func (t *Tuner) tune(live int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.loads > 0 {
		return
	}
	if p := t.cfg.Percent(live); p != t.cur {
		debug.SetGCPercent(p)
		t.cfg.Logger.WithFields(logrus.Fields{"live_heap_bytes": live, "gc_percent": p}).Debug("gc percentage")
		t.cur = p
	}
	t.cfg.Gauge.Set(float64(t.cur))
}
