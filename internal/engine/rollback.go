package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/lossfile"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Rollback detection.
//
// ZooKeeper's data can go back in time under a running instance: the
// ensemble is restored from an older backup, or its data directories are
// wiped. The instance then holds, in its view, acknowledged entries that
// ZooKeeper no longer has, and ZooKeeper may be given a different history
// at the same log positions by other instances. Applying that history on
// top of the view, or committing on top of it, would mix the two.
//
// So, once per ZooKeeper connection (and whenever a head read is behind
// what the view had applied before the read), before the tailer applies or
// the committer commits anything, the instance checks that ZooKeeper's log
// still holds, at the view's position, the very entry the view applied
// (same writer tag and zxid) and that the head is not behind it. ZooKeeper
// refuses a session to a client that has seen a newer zxid than its own
// (it closes the connection during the handshake, and the ZooKeeper client
// retries forever), so while the instance has no session for longer than
// Config.RollbackCheckAfter it checks the same through a fresh session,
// which ZooKeeper accepts.
//
// When the check fails the instance halts for good: it writes what
// ZooKeeper lost to a loss file (lossfile), logs one error naming both
// positions, and from then on fails every read (serializable ones too: the
// view holds a history that is no longer the cluster's), every write and
// its health check with that error. Restarting the instance adopts
// ZooKeeper's state; `zketcd replay-loss` re-applies the loss file.

// ErrRollback is wrapped by the error of an instance that found ZooKeeper's
// data older than, or diverged from, what it had applied.
var ErrRollback = errors.New("zookeeper's data is older than this instance's")

// ErrHalted is wrapped by the error of an instance that stopped serving for
// good: ZooKeeper's data went back (ErrRollback), or the log holds data in a
// format newer than this build reads (zkstore.ErrNewerFormat). Health
// returns that error; requests fail with etcd's corrupt-cluster error.
var ErrHalted = errors.New("instance halted")

// haltError is a halted instance's error.
type haltError struct{ err error }

func (e *haltError) Error() string {
	if errors.Is(e.err, ErrRollback) {
		return e.err.Error()
	}
	return e.err.Error() + ". This instance serves nothing more until restarted with a build that reads it"
}

func (e *haltError) Unwrap() []error { return []error{e.err, ErrHalted} }

// Position is a point in a log history.
type Position struct {
	LSN, Rev, Zxid int64
}

// RollbackError describes ZooKeeper's data going back under an instance.
type RollbackError struct {
	// Applied is the newest entry the instance applied; ZooKeeper is
	// ZooKeeper's head; Fork is the newest entry both histories share.
	Applied, ZooKeeper, Fork Position
	// Diverged says ZooKeeper holds entries after Fork that the instance
	// never applied (written by others after the restore).
	Diverged bool
	// ForkUnknown says the instance no longer remembers where the
	// histories part (further back than it keeps): Fork is a lower bound.
	ForkUnknown bool
	// NoRoot says ZooKeeper holds no zketcd data under the root at all,
	// or a root with another cluster ID.
	NoRoot bool
	// Refused says the instance's own session was being refused.
	Refused bool
	// LossFile is where the lost changes were written ("" if they could
	// not be; LossErr says why).
	LossFile string
	LossErr  error
}

func (e *RollbackError) Unwrap() []error { return []error{ErrRollback, ErrHalted} }

func (e *RollbackError) Error() string {
	var b strings.Builder
	switch {
	case e.NoRoot:
		fmt.Fprintf(&b, "ZooKeeper holds none of this instance's data: revision %d applied, ZooKeeper holds no zketcd root with this cluster ID — the ensemble was wiped or replaced", e.Applied.Rev)
	case e.Diverged:
		fmt.Fprintf(&b, "ZooKeeper's data is older than this instance's and was written on since: revision %d applied, ZooKeeper holds %d of another history after revision %d — the ensemble was restored from an older backup", e.Applied.Rev, e.ZooKeeper.Rev, e.Fork.Rev)
	default:
		fmt.Fprintf(&b, "ZooKeeper's data is older than this instance's: revision %d applied, ZooKeeper holds %d — the ensemble was restored from an older backup", e.Applied.Rev, e.ZooKeeper.Rev)
	}
	switch {
	case e.Applied.Rev > e.Fork.Rev:
		fmt.Fprintf(&b, "; acknowledged revisions %d–%d are not in ZooKeeper", e.Fork.Rev+1, e.Applied.Rev)
	default:
		fmt.Fprintf(&b, "; no revision is lost, but log entries %d–%d (lease or compaction records) are", e.Fork.LSN+1, e.Applied.LSN)
	}
	if e.ForkUnknown {
		b.WriteString(" (or more: the histories part further back than this instance remembers)")
	}
	if e.Refused {
		fmt.Fprintf(&b, " (ZooKeeper refuses this instance's session: it has seen zxid %#x, ZooKeeper's head was written at %#x)", e.Applied.Zxid, e.ZooKeeper.Zxid)
	}
	b.WriteString(". This instance serves nothing more; restart it to adopt ZooKeeper's state")
	switch {
	case e.LossFile != "":
		fmt.Fprintf(&b, ", after which `zketcd replay-loss %s` re-applies the lost changes", e.LossFile)
	case e.LossErr != nil:
		fmt.Fprintf(&b, " (the lost changes could not be written to a file: %v)", e.LossErr)
	}
	return b.String()
}

// ringSize is how many applied entries the instance remembers to find where
// two histories part.
const ringSize = 1 << 14

// ringChunk is how many entries of the ring are allocated at once, when
// the first of them is written: an engine that applies few entries (a
// fleet's idle tenant) holds a chunk or two, not the whole ring.
const ringChunk = 1 << 9

// appliedEntry identifies one applied log entry.
type appliedEntry struct {
	lsn, zxid    int64
	prevRev, rev int64
	writer       revision.WriterTag
}

// rollbackGuard watches for ZooKeeper's data going back under the instance
// (above) and halts it. Safe for concurrent use.
type rollbackGuard struct {
	*core
	// inspect opens fresh sessions for the checks while the instance's own
	// is refused (nil: none; see watch).
	inspect inspectFunc

	err    atomic.Pointer[haltError]
	halted chan struct{} // closed when err is set

	mu       sync.Mutex      // serializes checks
	verified <-chan struct{} // SessionChanged when the history was last checked; nil: check

	gauge prometheus.Gauge // zketcd_halted

	ringMu sync.Mutex
	ring   [ringSize / ringChunk]*[ringChunk]appliedEntry // nil: not written yet
	newest int64                                          // newest LSN recorded (0: none)
}

// newRollbackGuard returns the guard of c, checking through inspect (nil:
// none), whose zketcd_halted gauge, if reg is not nil, is registered
// there.
func newRollbackGuard(c *core, inspect inspectFunc, reg prometheus.Registerer) *rollbackGuard {
	g := &rollbackGuard{core: c, inspect: inspect, halted: make(chan struct{}), gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "halted",
		Help: "1 once this instance stopped serving for good: ZooKeeper's data went back under it, or holds a newer format (health says which).",
	})}
	if reg != nil {
		reg.MustRegister(g.gauge)
	}
	return g
}

// record remembers entry e, applied from revision prevRev to rev.
func (g *rollbackGuard) record(e *revision.Entry, prevRev, rev int64) {
	i := e.LSN % ringSize
	g.ringMu.Lock()
	c := g.ring[i/ringChunk]
	if c == nil {
		c = new([ringChunk]appliedEntry)
		g.ring[i/ringChunk] = c
	}
	c[i%ringChunk] = appliedEntry{lsn: e.LSN, zxid: e.Zxid, prevRev: prevRev, rev: rev, writer: e.Writer}
	g.newest = e.LSN
	g.ringMu.Unlock()
}

// moved forgets the entries applied from the log the engine left for a
// move's destination (their zxids are the source's) and remembers e, the
// destination's copy of the fence, instead; the next check reads the
// destination's history. Called with applyMu held.
func (g *rollbackGuard) moved(e *revision.Entry) {
	g.ringMu.Lock()
	g.ring = [ringSize / ringChunk]*[ringChunk]appliedEntry{}
	g.ringMu.Unlock()
	rev := g.view.State().Rev
	g.record(e, rev, rev)
	g.recheck()
}

func (g *rollbackGuard) lookup(lsn int64) (appliedEntry, bool) {
	if lsn <= 0 {
		return appliedEntry{}, false
	}
	i := lsn % ringSize
	g.ringMu.Lock()
	defer g.ringMu.Unlock()
	c := g.ring[i/ringChunk]
	if c == nil {
		return appliedEntry{}, false
	}
	a := c[i%ringChunk]
	return a, a.lsn == lsn
}

func (g *rollbackGuard) oldest() int64 {
	g.ringMu.Lock()
	defer g.ringMu.Unlock()
	return max(1, g.newest-ringSize+1)
}

// rolledBack returns the error the instance halted with, or nil.
func (g *rollbackGuard) rolledBack() error {
	if e := g.err.Load(); e != nil {
		return e
	}
	return nil
}

// servable fails every request of a halted instance with etcd's corrupt
// cluster error (the log and the health check say why).
func (g *rollbackGuard) servable() error {
	if g.err.Load() != nil {
		return rpctypes.ErrGRPCCorrupt
	}
	return nil
}

// check makes sure, once per ZooKeeper connection, that ZooKeeper's
// log continues the view's history. It returns nil once checked, the
// rollback error if it does not, another error if it could not tell.
func (g *rollbackGuard) check() error {
	if err := g.rolledBack(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.verified; v != nil {
		select {
		case <-v:
		default:
			return nil
		}
	}
	changed := g.store.SessionChanged()
	if _, ok := g.store.Session(); !ok {
		return fmt.Errorf("check history: %w: no session", zkstore.ErrUnavailable)
	}
	rbe, err := g.compare(g.store)
	if err != nil {
		return fmt.Errorf("check history: %w", err)
	}
	if rbe != nil {
		g.declare(rbe, g.store)
		return g.rolledBack()
	}
	g.verified = changed
	return nil
}

// recheck forgets the last check: the next check reads again.
func (g *rollbackGuard) recheck() {
	g.mu.Lock()
	g.verified = nil
	g.mu.Unlock()
}

// wait is check retried until it can tell: nil or the
// rollback error (or ErrStopped when the instance closes).
func (g *rollbackGuard) wait() error {
	for {
		err := g.check()
		if err == nil || errors.Is(err, ErrHalted) {
			return err
		}
		g.barrier.idle() // the committer waits: reads must not wait for its commit
		select {
		case <-g.ctx.Done():
			return rpctypes.ErrGRPCStopped
		case <-g.halted:
		case <-g.store.SessionChanged():
		case <-time.After(time.Second):
		}
	}
}

// compare compares the view with the log st reads (after a sync).
// It returns a RollbackError if ZooKeeper's head is behind the view or its
// log holds another entry at the view's position; nil, nil if the log
// continues the view.
func (g *rollbackGuard) compare(st Log) (*RollbackError, error) {
	v := g.view.State()
	applied := Position{LSN: v.LSN, Rev: v.Rev, Zxid: v.Zxid}
	if st.Meta().ClusterID != g.store.Meta().ClusterID {
		return &RollbackError{Applied: applied, Fork: Position{LSN: 1, Rev: 1}, NoRoot: true, Diverged: true}, nil
	}
	h, err := st.SyncHead()
	if errors.Is(err, zkstore.ErrNoRoot) {
		return &RollbackError{Applied: applied, Fork: Position{LSN: 1, Rev: 1}, NoRoot: true}, nil
	}
	if err != nil {
		return nil, err
	}
	zk := Position{LSN: h.LSN, Rev: h.Rev, Zxid: h.Zxid}
	at := min(h.LSN, v.LSN)
	same, _, err := g.sameEntry(st, at, v)
	if errors.Is(err, zkstore.ErrEntryMissing) && h.LSN >= v.LSN {
		return nil, nil // compacted past the view: the tailer reloads
	}
	if err != nil && !errors.Is(err, zkstore.ErrEntryMissing) {
		return nil, err
	}
	if err == nil && same {
		if h.LSN >= v.LSN {
			return nil, nil
		}
		return &RollbackError{Applied: applied, ZooKeeper: zk, Fork: zk}, nil
	}
	// ZooKeeper holds another entry at (or none up to) at: find the newest
	// entry both hold.
	rbe := &RollbackError{Applied: applied, ZooKeeper: zk, Diverged: true}
	lo, hi := g.oldest(), at-1 // the fork is in [lo-1, hi]
	for lo <= hi {
		mid := lo + (hi-lo)/2
		s, known, err := g.sameEntry(st, mid, v)
		if err != nil && !errors.Is(err, zkstore.ErrEntryMissing) {
			return nil, err
		}
		if err == nil && known && s {
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	fork := lo - 1 // newest LSN known to match, or one below the ring
	if a, ok := g.lookup(fork); ok {
		rbe.Fork = Position{LSN: fork, Rev: a.rev, Zxid: a.zxid}
	} else if a, ok := g.lookup(fork + 1); ok {
		rbe.Fork = Position{LSN: fork, Rev: a.prevRev}
		rbe.ForkUnknown = true
	} else {
		rbe.Fork = Position{LSN: 1, Rev: 1}
		rbe.ForkUnknown = true
	}
	return rbe, nil
}

// sameEntry reports whether st's log entry lsn is the one the view applied
// there; known is false when the instance does not remember that entry.
func (g *rollbackGuard) sameEntry(st Log, lsn int64, v revision.State) (same, known bool, err error) {
	var got *revision.Entry
	if err := st.ReadEntries(g.ctx, lsn, lsn, 1, func(e *revision.Entry, _ int) error { got = e; return nil }); err != nil {
		return false, false, err
	}
	if a, ok := g.lookup(lsn); ok {
		return got.Writer == a.writer && got.Zxid == a.zxid, true, nil
	}
	if lsn == v.LSN && v.Zxid != 0 {
		return got.Zxid == v.Zxid, true, nil
	}
	return true, false, nil // not remembered: no evidence against it
}

// halt stops the instance for good with err, logged once: no entry is
// applied from then on, every request fails.
func (g *rollbackGuard) halt(err error) {
	g.applyMu.Lock()
	if g.err.Load() != nil {
		g.applyMu.Unlock()
		return
	}
	h := &haltError{err: err}
	g.err.Store(h)
	close(g.halted)
	g.gauge.Set(1)
	g.applyMu.Unlock()
	g.log.Error(h.Error())
	g.kickTailer()
	g.resign()
}

// resign withdraws a halted instance from the election, so that another
// instance leads (commits, expires leases, compacts) while this one serves
// nothing; it runs in the background (withdrawing may wait on ZooKeeper).
func (g *rollbackGuard) resign() {
	go g.election.Close()
}

// declare halts the instance: no entry is applied from then on, the
// loss is written to a file and the error logged once.
func (g *rollbackGuard) declare(rbe *RollbackError, st Log) {
	g.applyMu.Lock()
	if g.err.Load() != nil {
		g.applyMu.Unlock()
		return
	}
	// Halt first (requests fail from now on), then write the loss file and
	// name it in the error.
	first := *rbe
	g.err.Store(&haltError{err: &first})
	close(g.halted)
	g.gauge.Set(1)
	rbe.LossFile, rbe.LossErr = g.writeLoss(rbe, st)
	g.err.Store(&haltError{err: rbe})
	g.applyMu.Unlock()
	g.log.WithFields(logrus.Fields{
		"applied_lsn": rbe.Applied.LSN, "applied_revision": rbe.Applied.Rev, "applied_zxid": fmt.Sprintf("%#x", rbe.Applied.Zxid),
		"zookeeper_lsn": rbe.ZooKeeper.LSN, "zookeeper_revision": rbe.ZooKeeper.Rev, "zookeeper_zxid": fmt.Sprintf("%#x", rbe.ZooKeeper.Zxid),
		"fork_revision": rbe.Fork.Rev, "loss_file": rbe.LossFile,
	}).Error(rbe.Error())
	g.kickTailer()
	g.resign()
}

// writeLoss writes the view's changes after the fork to a new file in
// Config.LossDir. The caller holds applyMu (the view does not move). st, if
// not nil, reads ZooKeeper's log: with the view's history after the fork
// compacted, the keys ZooKeeper holds at the fork tell which were deleted.
func (g *rollbackGuard) writeLoss(rbe *RollbackError, st Log) (string, error) {
	v := g.view.State()
	h := lossfile.Header{
		ClusterID: fmt.Sprintf("%x", g.store.Meta().ClusterID), Root: g.store.Root(), Member: g.cfg.Name,
		Written:    time.Now().UTC().Format(time.RFC3339),
		AppliedLSN: v.LSN, AppliedRev: v.Rev,
		ZooKeeperLSN: rbe.ZooKeeper.LSN, ZooKeeperRev: rbe.ZooKeeper.Rev,
		ForkRev: rbe.Fork.Rev, Diverged: rbe.Diverged,
	}
	from := rbe.Fork.Rev + 1
	lost, err := lossfile.Collect(g.view, rbe.Fork.Rev, func(live map[string]bool) ([]lossfile.Record, error) {
		return g.keysAtFork(st, rbe, live)
	})
	if err != nil {
		return "", fmt.Errorf("list the lost changes: %w", err)
	}
	recs := lost.Records
	h.Compacted = lost.Compacted
	if lost.DeletesErr != nil {
		h.DeletesUnknown = true
		g.log.WithError(lost.DeletesErr).Warn("loss file: cannot tell which keys were deleted after the fork")
	}
	h.Reason = (&RollbackError{Applied: rbe.Applied, ZooKeeper: rbe.ZooKeeper, Fork: rbe.Fork,
		Diverged: rbe.Diverged, ForkUnknown: rbe.ForkUnknown, NoRoot: rbe.NoRoot}).summary()
	dir := g.cfg.LossDir
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		// Better a file in the temporary directory than none.
		g.log.WithError(err).WithField("dir", dir).Error("loss directory unusable: writing the loss file to the temporary directory")
		dir = os.TempDir()
	}
	name := fmt.Sprintf("zketcd-lost-%016x-%s-rev%d-%d-%s.jsonl", g.store.Meta().ClusterID, sanitize(g.cfg.Name),
		from, v.Rev, time.Now().UTC().Format("20060102T150405Z"))
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	if err := lossfile.Write(path, h, recs); err != nil {
		return "", err
	}
	return path, nil
}

// keysAtFork returns a delete record (revision 0: not known) for every key
// ZooKeeper's log holds at the fork revision that is not in live.
func (g *rollbackGuard) keysAtFork(st Log, rbe *RollbackError, live map[string]bool) ([]lossfile.Record, error) {
	if rbe.NoRoot || rbe.Fork.Rev <= 1 {
		return nil, nil // nothing existed at the fork
	}
	if st == nil {
		return nil, errors.New("no zookeeper session to read the fork's state")
	}
	ctx, cancel := context.WithTimeout(g.ctx, time.Minute)
	defer cancel()
	zv, _, _, err := Replay(ctx, st, g.cfg.ReadWindow, nil)
	if err != nil {
		return nil, fmt.Errorf("replay zookeeper's log: %w", err)
	}
	var out []lossfile.Record
	err = zv.Read(func(r revision.Reader) error {
		return r.Range([]byte{}, []byte{}, rbe.Fork.Rev, func(kv *revision.KeyValue) bool {
			if !live[string(kv.Key)] {
				out = append(out, lossfile.NewRecord(0, lossfile.OpDelete, kv.Key, nil))
			}
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("zookeeper's keys at revision %d: %w", rbe.Fork.Rev, err)
	}
	return out, nil
}

// summary is the error's first sentence (what happened and what is lost).
func (e *RollbackError) summary() string {
	s := e.Error()
	if i := strings.Index(s, ". This instance"); i >= 0 {
		s = s[:i]
	}
	return s
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r == ' ' {
			return '_'
		}
		return r
	}, name)
}

// watch checks ZooKeeper's history through a fresh session while
// the instance's own has been down for RollbackCheckAfter (ZooKeeper
// refuses it for good if its data went back), every RollbackCheckAfter.
// It needs an inspector (g.inspect: Open sets ZooKeeper's); without one
// the history is checked on the instance's own sessions only.
func (g *rollbackGuard) watch() {
	after := g.cfg.RollbackCheckAfter
	if after < 0 || g.inspect == nil {
		return
	}
	t := time.NewTicker(min(after/4, time.Second))
	defer t.Stop()
	var lostAt, probed time.Time
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-g.halted:
			return
		case <-t.C:
		}
		if _, ok := g.store.Session(); ok {
			lostAt = time.Time{}
			continue
		}
		now := time.Now()
		if lostAt.IsZero() {
			lostAt = now
		}
		if now.Sub(lostAt) < after || now.Sub(probed) < after {
			continue
		}
		probed = now
		g.probe()
	}
}

// probe compares the view with ZooKeeper through a fresh session.
func (g *rollbackGuard) probe() {
	ctx, cancel := context.WithTimeout(g.ctx, max(g.cfg.RollbackCheckAfter, 5*time.Second))
	defer cancel()
	v := g.view.State()
	st, err := g.inspect(ctx)
	if errors.Is(err, zkstore.ErrNoRoot) {
		g.declare(&RollbackError{Applied: Position{LSN: v.LSN, Rev: v.Rev, Zxid: v.Zxid}, Fork: Position{LSN: 1, Rev: 1}, NoRoot: true}, nil)
		return
	}
	if err != nil {
		g.log.WithError(err).Debug("rollback check: zookeeper not reachable on a fresh session either")
		return
	}
	defer st.Close()
	rbe, err := g.compare(st)
	if err != nil {
		g.log.WithError(err).Debug("rollback check")
		return
	}
	if rbe == nil {
		return
	}
	rbe.Refused = rbe.ZooKeeper.Zxid < rbe.Applied.Zxid
	g.declare(rbe, st)
}
