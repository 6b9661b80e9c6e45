// Package mirror copies a running etcd, or one key prefix of it, into a
// zketcd root with the same revision numbers (`zketcd mirror`), follows it,
// and cuts over (`zketcd mirror cutover`).
//
// The initial copy is, for the whole key space, a snapshot of the source
// restored as the root's base generation (its retained history included);
// for a prefix (Config.Prefix: one cluster of a shared etcd, as Kamaji
// keeps its tenants), a paginated Range of the prefix at one source
// revision R0, with the leases its keys are attached to, written as the
// base generation at R0 with the compacted revision at R0 (the prefix's
// history before R0 is not copied: reads below R0 answer ErrCompacted).
// Then the mirror follows the source's watch stream and commits every
// source revision that changed a copied key as one log entry at the same
// revision, with the same changes in the same order (so the same create
// revisions and versions), granting and revoking leases as the source
// does, with the same IDs and granted TTLs and the time they have left at
// the source (a remaining-TTL checkpoint, from LeaseTimeToLive; keepalives
// are not mirrored: the cut-over renews the copy of every lease the source
// kept alive since, and after it every lease counts down from what it had
// left, and a keepalive renews it for its granted TTL, as on the source).
//
// The revisions of a prefix are sparse (the source's other clusters took
// the numbers between): the mirror keeps them, moving the root's revision
// over each gap (revision.OpBumpRev; a root of format 4). Revisions stay
// monotonic, and a read at a revision inside a gap answers the prefix's
// state before it, as the source does.
//
// The mirror must be the root's only writer: it claims the root
// (<root>/mirror, zkstore.ClaimMirror) before writing it, every zketcd
// instance refuses to serve a root a mirror is copying into, and it stops
// if another writer commits. A mirror that stopped (killed, interrupted,
// failed) continues from the root's head when run again with the same
// source and prefix; a root of another source or prefix, or one cut over
// already, is refused. Compactions of the source are not mirrored (the
// root keeps more history); a source that compacts past the mirror's
// position stops it with ErrSourceCompacted, and it cannot resume then.
//
// The cut-over (Cutover) catches up, waits until the source has taken no
// write under the prefix for a quiet period, copies the tail, moves the
// root's revision to the source's (so no revision a client got from the
// source is in the root's future), checks that both sides hash the prefix
// alike at that revision (PrefixHash), and marks the mirror finished.
package mirror

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// ErrSourceCompacted is returned when the source compacted revisions the
// mirror had not copied yet.
var ErrSourceCompacted = errors.New("source etcd compacted past the mirror's position")

// ErrNotResumable is wrapped by the errors for a root the mirror must not
// continue: a mirror of another source or prefix, a mirror cut over
// already, or a root an instance serves.
var ErrNotResumable = errors.New("the mirror cannot continue into this root")

// ErrHashMismatch is returned by Cutover when the source and the root hash
// the prefix differently at the agreed revision.
var ErrHashMismatch = errors.New("the source and the copy differ")

// Config configures a mirror.
type Config struct {
	// Source is a client of the etcd to copy; SourceURLs its URLs, as
	// recorded in the root.
	Source     *clientv3.Client
	SourceURLs string
	// Prefix is the key prefix to copy (empty: the whole key space).
	Prefix []byte
	// Store names the ZooKeeper ensemble and the root to fill.
	Store zkstore.Config
	// UntilCaughtUp stops the mirror (returning nil) the first time it has
	// copied every revision the source had when it last looked.
	UntilCaughtUp bool
	// StatusInterval is how often the mirror logs its position and looks at
	// the source's revision and leases (default 5 s).
	StatusInterval time.Duration
	// TempDir holds the initial snapshot of a whole-key-space mirror while
	// it is restored.
	TempDir string
	// PageSize is how many keys one Range of a prefix's initial copy reads
	// (default 1000).
	PageSize int
	// Quiet is how long the cut-over waits for the source to take no write
	// under the prefix (default 1 s).
	Quiet time.Duration
	// Start, if not nil, holds a cut-over back: it copies and follows
	// until Start is closed (the operator stopped the writers), and only
	// then waits for the quiet period. Nil: the cut-over starts at once.
	Start <-chan struct{}
	// AfterCommit, if set, is called after each entry the mirror commits
	// and applies, with that entry (tests: an error stops the mirror
	// there, as a crash between two commits would; a fault injected
	// there meets the mirror's next ZooKeeper request). It must not
	// change the entry.
	AfterCommit func(e *revision.Entry) error
}

// Status is the mirror's position.
type Status struct {
	// Rev is the root's revision; Seen the source revision up to which
	// every change under the prefix is copied (Rev for a whole key space;
	// above it when the source's last revisions were other clusters');
	// SourceRev the source's revision when last looked at.
	Rev, Seen, SourceRev int64
	Leases               int
	// Copied counts the keys of the initial copy written so far, while it
	// runs (Initial true).
	Copied  int
	Initial bool
}

// Behind is how many source revisions the mirror has yet to look at.
func (s Status) Behind() int64 { return max(0, s.SourceRev-s.Seen) }

// Result is what a cut-over agreed on.
type Result struct {
	// Rev is the revision both sides are at and hashed.
	Rev int64
	// SourceHash and RootHash are PrefixHash of each side at Rev; Keys the
	// number of keys under the prefix there.
	SourceHash, RootHash uint32
	Keys                 int
	Leases               int
}

// Run copies the source into the root (or continues a copy that stopped)
// and follows it until ctx ends (returning nil), until it has caught up if
// cfg.UntilCaughtUp, or until an error: ErrSourceCompacted, ErrNotResumable,
// zkstore.ErrNotFresh, another writer on the root, or the source or
// ZooKeeper failing. The root stays claimed by the mirror (no instance
// serves it) until Cutover finishes it.
func Run(ctx context.Context, cfg Config, status func(Status)) error {
	m, err := prepare(ctx, cfg, status)
	if err != nil {
		return err
	}
	defer m.st.Close()
	_, err = m.follow(ctx, status, false)
	return err
}

// Cutover copies the source (continuing a mirror that ran before, or
// starting one), catches up, waits until the source has taken no write
// under the prefix for cfg.Quiet, copies the tail, renews the leases the
// source kept alive since they were copied, moves the root's revision to
// the source's,
// compares PrefixHash of both sides at that revision (ErrHashMismatch if
// they differ: the mirror then stays unfinished) and marks the mirror
// finished, after which instances may serve the root. The writers of the
// prefix must have been stopped first: a write under the prefix after the
// agreed revision is not in the copy.
func Cutover(ctx context.Context, cfg Config, status func(Status)) (Result, error) {
	m, err := prepare(ctx, cfg, status)
	if err != nil {
		return Result{}, err
	}
	defer m.st.Close()
	rev, err := m.follow(ctx, status, true)
	if err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("mirror: cut-over interrupted: %w", ctx.Err())
	}
	return m.finish(ctx, rev)
}

type mirror struct {
	cfg      Config
	lg       *logrus.Entry
	st       *zkstore.Store
	view     *revision.View
	tag      revision.WriterTag
	key, end []byte // the source's range: the prefix (or every key)
	src      int64  // source revision last seen
	seen     int64  // source revision up to which every change is copied
	last     time.Time
	// timed holds the leases whose remaining TTL the root holds: those the
	// mirror granted, and those of the initial snapshot once the first
	// lease sync checkpointed them.
	timed map[int64]bool
}

func (m *mirror) prefixed() bool { return len(m.cfg.Prefix) > 0 }

// prepare claims the root, makes the initial copy or recovers the one a
// previous run made, and returns the mirror positioned at the root's head.
func prepare(ctx context.Context, cfg Config, status func(Status)) (*mirror, error) {
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 5 * time.Second
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 1000
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = time.Second
	}
	lg := cfg.Store.Logger
	if lg == nil {
		lg = logrus.NewEntry(logrus.StandardLogger())
		cfg.Store.Logger = lg
	}
	lg = lg.WithFields(logrus.Fields{"component": "mirror", "root": cfg.Store.Root})
	if len(cfg.Prefix) > 0 {
		lg = lg.WithField("prefix", string(cfg.Prefix))
	}
	cfg.Store.Mirror = true
	m := &mirror{cfg: cfg, lg: lg, timed: map[int64]bool{}, last: time.Now()}
	m.key, m.end = []byte{0}, []byte{0}
	if len(cfg.Prefix) > 0 {
		m.key, m.end = cfg.Prefix, []byte(clientv3.GetPrefixRangeEnd(string(cfg.Prefix)))
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	m.tag = revision.WriterTag{Nonce: binary.BigEndian.Uint64(nonce[:])}
	head, err := sourceHead(ctx, cfg.Source, m.key)
	if err != nil {
		return nil, fmt.Errorf("mirror: source: %w", err)
	}
	want := zkstore.MirrorRecord{SourceClusterID: head.Header.ClusterId, Source: cfg.SourceURLs, Prefix: cfg.Prefix, Started: time.Now().UTC().Truncate(time.Second)}
	for attempt := 0; ; attempt++ {
		rec, created, err := zkstore.ClaimMirror(ctx, cfg.Store, want)
		if err != nil {
			return nil, fmt.Errorf("mirror: claim %s: %w", cfg.Store.Root, err)
		}
		if err := resumable(cfg.Store.Root, rec, want); err != nil {
			return nil, err
		}
		st, err := zkstore.Open(ctx, cfg.Store)
		if err != nil {
			return nil, fmt.Errorf("mirror: open root: %w", err)
		}
		m.st = st
		fresh, err := m.check(created)
		if err != nil {
			st.Close()
			return nil, err
		}
		if !fresh {
			if err := m.recover(ctx); err != nil {
				st.Close()
				return nil, err
			}
			return m, nil
		}
		if !created {
			// A previous run stopped during its initial copy: what it
			// wrote is not a copy yet. Start the root over.
			st.Close()
			if attempt > 0 {
				return nil, fmt.Errorf("mirror: %s: could not start the initial copy over", cfg.Store.Root)
			}
			lg.Warn("mirror: a previous run stopped during the initial copy; starting it over")
			if err := zkstore.DeleteRoot(ctx, cfg.Store, true); err != nil {
				return nil, fmt.Errorf("mirror: clear %s: %w", cfg.Store.Root, err)
			}
			continue
		}
		if err := m.initial(ctx, status); err != nil {
			st.Close()
			return nil, err
		}
		return m, nil
	}
}

// sourceHead is a linearizable read of one key (the prefix itself), for
// the source's header: its cluster ID and current revision, at the cost
// of one key, not of the prefix's.
func sourceHead(ctx context.Context, c *clientv3.Client, key []byte) (*clientv3.GetResponse, error) {
	return c.Get(ctx, string(key), clientv3.WithCountOnly())
}

// resumable refuses a root claimed by another mirror, or finished.
func resumable(root string, rec, want zkstore.MirrorRecord) error {
	if !rec.Same(want) {
		return fmt.Errorf("mirror: %w: %s holds a mirror of etcd cluster %x, prefix %q (from %s), not of cluster %x, prefix %q",
			ErrNotResumable, root, rec.SourceClusterID, rec.Prefix, rec.Source, want.SourceClusterID, want.Prefix)
	}
	if rec.State == zkstore.MirrorFinished {
		return fmt.Errorf("mirror: %w: the mirror into %s was cut over at revision %d on %s; instances may have served it since",
			ErrNotResumable, root, rec.FinishedRev, rec.Finished.Format(time.RFC3339))
	}
	return nil
}

// check reports whether the root still needs its initial copy, and
// refuses a root an instance serves or whose format has no revision gaps.
func (m *mirror) check(created bool) (fresh bool, err error) {
	members, err := m.st.Members()
	if err != nil {
		return false, fmt.Errorf("mirror: %w", err)
	}
	if len(members) > 0 {
		return false, fmt.Errorf("mirror: %w: %d zketcd instance(s) serve %s (member %s)", ErrNotResumable, len(members), m.cfg.Store.Root, members[0].Name)
	}
	if m.prefixed() && m.st.Format() < zkstore.GapsMetaFormat {
		return false, fmt.Errorf("mirror: %s has root format %d; a prefix needs format %d (revision gaps)", m.cfg.Store.Root, m.st.Format(), zkstore.GapsMetaFormat)
	}
	base, err := m.st.ReadBase()
	if err != nil {
		return false, fmt.Errorf("mirror: %w", err)
	}
	head, err := m.st.SyncHead()
	if err != nil {
		return false, fmt.Errorf("mirror: %w", err)
	}
	return base.Gen == 0 && head.LSN == 1, nil
}

// recover rebuilds the view of a root a previous run copied into.
func (m *mirror) recover(ctx context.Context) error {
	view, head, _, err := engine.Replay(ctx, m.st, engine.DefaultReadWindow, nil)
	if err != nil {
		return fmt.Errorf("mirror: read %s back: %w", m.cfg.Store.Root, err)
	}
	m.view = view
	for _, id := range view.LeaseIDs() {
		m.timed[id] = true // the run that granted it checkpointed it
	}
	m.seen = view.State().Rev
	m.lg.WithFields(logrus.Fields{"revision": head.Rev, "entry": head.LSN, "keys": view.KeyCount(), "leases": view.LeaseCount()}).
		Info("mirror: continuing from the root's head")
	return nil
}

// initial makes the initial copy into the claimed, fresh root.
func (m *mirror) initial(ctx context.Context, status func(Status)) error {
	start := time.Now()
	var snap *revision.Snapshot
	var err error
	if m.prefixed() {
		snap, err = m.rangeCopy(ctx, status)
	} else {
		snap, err = m.snapshotCopy(ctx)
	}
	if err != nil {
		return err
	}
	snap.State.LSN = 1
	view, err := revision.FromSnapshot(snap)
	if err != nil {
		return fmt.Errorf("mirror: initial copy: %w", err)
	}
	m.lg.WithFields(logrus.Fields{"revision": snap.State.Rev, "keys": len(snap.Keys), "bytes": snap.DataBytes()}).
		Info("mirror: writing the initial copy to ZooKeeper")
	b, err := m.st.ImportBase(ctx, snap)
	if err != nil {
		return fmt.Errorf("mirror: write the initial copy to %s: %w", m.cfg.Store.Root, err)
	}
	m.view = view
	m.seen = view.State().Rev
	m.lg.WithFields(logrus.Fields{"revision": snap.State.Rev, "keys": len(snap.Keys), "leases": len(snap.Leases),
		"bytes": b.Size, "took": time.Since(start).Round(time.Millisecond)}).Info("mirror: initial copy written; following the source")
	return nil
}

// snapshotCopy reads a snapshot of the whole source.
func (m *mirror) snapshotCopy(ctx context.Context) (*revision.Snapshot, error) {
	dir, err := os.MkdirTemp(m.cfg.TempDir, "zketcd-mirror-")
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "source.snapshot")
	rc, err := m.cfg.Source.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("mirror: snapshot of the source: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return nil, fmt.Errorf("mirror: snapshot of the source: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	snap, _, err := etcdformat.ReadFile(path, etcdformat.ReadOptions{TempDir: dir})
	if err != nil {
		return nil, fmt.Errorf("mirror: snapshot of the source: %w", err)
	}
	return snap, nil
}

// rangeCopy reads the prefix at one revision, page by page, and the leases
// its keys are attached to, as a snapshot compacted at that revision.
func (m *mirror) rangeCopy(ctx context.Context, status func(Status)) (*revision.Snapshot, error) {
	snap := &revision.Snapshot{}
	var rev int64
	subs := map[int64]int64{} // next sub-revision per mod revision
	leases := map[int64]bool{}
	var order []int64
	key := m.key
	report := time.Now()
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(string(m.end)), clientv3.WithLimit(int64(m.cfg.PageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := m.cfg.Source.Get(ctx, string(key), opts...)
		if err != nil {
			return nil, fmt.Errorf("mirror: initial copy (read %d keys at revision %d): %w", len(snap.Keys), rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
			m.lg.WithField("revision", rev).Info("mirror: initial copy of the prefix")
		}
		for _, kv := range resp.Kvs {
			// A key's sub-revision is not in a Range's answer; keys of one
			// revision get distinct ones, in key order (an etcd snapshot
			// of the root needs them distinct).
			sub := subs[kv.ModRevision]
			subs[kv.ModRevision] = sub + 1
			v := &revision.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
				Version: kv.Version, Lease: kv.Lease, Sub: sub}
			snap.Keys = append(snap.Keys, revision.KeyHistory{Key: kv.Key, Versions: []*revision.KeyValue{v}})
			if kv.Lease != 0 && !leases[kv.Lease] {
				leases[kv.Lease] = true
				order = append(order, kv.Lease)
			}
		}
		if status != nil && (time.Since(report) >= m.cfg.StatusInterval || !resp.More) {
			report = time.Now()
			status(Status{Rev: rev, Seen: rev, SourceRev: rev, Copied: len(snap.Keys), Initial: true})
			m.lg.WithFields(logrus.Fields{"keys": len(snap.Keys), "revision": rev}).Info("mirror: initial copy")
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0)
	}
	for _, id := range order {
		granted, remaining, err := m.sourceTTL(ctx, id)
		if err != nil {
			return nil, err
		}
		l := revision.Lease{ID: id, TTL: granted}
		if remaining > 0 && remaining < granted {
			l.RemainingTTL = remaining
		}
		snap.Leases = append(snap.Leases, l)
		m.timed[id] = true
	}
	sortLeases(snap.Leases)
	snap.State = revision.State{Rev: rev, CompactRev: rev}
	return snap, nil
}

func sortLeases(ls []revision.Lease) {
	sort.Slice(ls, func(i, j int) bool { return ls[i].ID < ls[j].ID })
}

func (m *mirror) status() Status {
	st := m.view.State()
	return Status{Rev: st.Rev, Seen: max(m.seen, st.Rev), SourceRev: m.src, Leases: m.view.LeaseCount()}
}

// follower is the state of one follow: what the cut-over waits for and
// what the last progress request asked. It lives on follow's goroutine.
type follower struct {
	m       *mirror
	status  func(Status)
	cutover bool
	// asked is the source's revision when the mirror last asked the watch
	// for a progress notification; a notification at or above it says
	// every change up to it was delivered.
	asked    int64
	caughtUp bool
	// armed: the cut-over's quiet period counts (at once, or from the
	// operator's signal on start).
	armed bool
	start <-chan struct{}
}

// look reads the source's revision and, with sync, renews the copied
// leases and reports the status.
func (f *follower) look(ctx context.Context, sync bool) error {
	m := f.m
	if sync {
		if err := m.syncLeases(ctx); err != nil {
			return err
		}
	}
	resp, err := sourceHead(ctx, m.cfg.Source, m.key)
	if err != nil {
		return fmt.Errorf("mirror: source revision: %w", err)
	}
	m.src = resp.Header.Revision
	if sync {
		s := m.status()
		m.lg.WithFields(logrus.Fields{"revision": s.Rev, "seen": s.Seen, "source_revision": s.SourceRev, "behind": s.Behind(), "leases": s.Leases}).Info("mirror status")
		if f.status != nil {
			f.status(s)
		}
	}
	return nil
}

// confirmed takes a revision up to which every change is copied and says
// whether the mirror is done.
func (f *follower) confirmed(rev int64) bool {
	m := f.m
	m.seen = max(m.seen, rev)
	if !f.caughtUp {
		f.caughtUp = true
		m.lg.WithFields(logrus.Fields{"revision": m.view.State().Rev, "seen": m.seen}).Info("mirror: caught up with the source")
		if f.status != nil {
			f.status(m.status())
		}
	}
	if f.cutover {
		return f.armed && time.Since(m.last) >= m.cfg.Quiet
	}
	return m.cfg.UntilCaughtUp
}

// watched copies one watch response and says whether the mirror is done.
func (f *follower) watched(ctx context.Context, resp clientv3.WatchResponse) (done bool, err error) {
	m := f.m
	if resp.CompactRevision != 0 {
		return false, fmt.Errorf("mirror: %w: it compacted its history to revision %d, past revision %d the copy in %s holds; "+
			"the changes between are gone from the source, so this copy cannot continue: delete the root (or use a new one) and mirror again",
			ErrSourceCompacted, resp.CompactRevision, m.view.State().Rev, m.cfg.Store.Root)
	}
	if err := resp.Err(); err != nil {
		return false, fmt.Errorf("mirror: source watch: %w", err)
	}
	if len(resp.Events) > 0 {
		if err := m.copy(ctx, resp.Events); err != nil {
			return false, err
		}
		m.last = time.Now()
	}
	return resp.IsProgressNotify() && f.asked > 0 && resp.Header.Revision >= f.asked && f.confirmed(resp.Header.Revision), nil
}

// follow copies the source's changes until ctx ends or an error, or (until
// caught up, or cutover) until it returns the revision up to which the
// root holds every change of the source: for the cut-over, once the source
// took no write under the prefix for cfg.Quiet.
func (m *mirror) follow(ctx context.Context, status func(Status), cutover bool) (agreed int64, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	defer func() {
		// Stopped by ctx: not an error, whatever was interrupted (an entry
		// whose commit was cut short is either in the log or not, whole).
		if err != nil && ctx.Err() != nil {
			m.lg.WithError(err).Warn("mirror: stopped while copying")
			err = nil
		}
		if err == nil && status != nil {
			status(m.status())
		}
	}()
	f := &follower{m: m, status: status, cutover: cutover, start: m.cfg.Start}
	f.armed = cutover && f.start == nil
	if !cutover {
		f.start = nil
	}
	if err := f.look(ctx, true); err != nil {
		return 0, err
	}
	if m.seen >= m.src && f.confirmed(m.src) {
		return m.seen, nil
	}
	from := m.view.State().Rev + 1
	opts := []clientv3.OpOption{clientv3.WithRev(from), clientv3.WithProgressNotify()}
	if m.prefixed() {
		opts = append(opts, clientv3.WithRange(string(m.end)))
	} else {
		opts = append(opts, clientv3.WithFromKey())
	}
	wch := m.cfg.Source.Watch(wctx, string(m.key), opts...)
	interval := m.cfg.StatusInterval
	fast := interval
	if cutover || m.cfg.UntilCaughtUp {
		fast = min(interval, 100*time.Millisecond)
	}
	tick := time.NewTicker(fast)
	defer tick.Stop()
	lastSync := time.Now()
	for {
		select {
		case <-ctx.Done():
			return 0, nil
		case <-f.start:
			// The quiet period counts from now: writes before the
			// operator's signal do not count as quiet.
			f.start, f.armed, m.last = nil, true, time.Now()
			m.lg.Info("mirror: cut-over started; waiting for the source to be quiet")
		case <-tick.C:
			sync := time.Since(lastSync) >= interval
			if sync {
				lastSync = time.Now()
			}
			if err := f.look(ctx, sync); err != nil {
				return 0, err
			}
			if m.seen >= m.src {
				// Nothing happened at the source since the last change
				// copied (a watch from a future revision gets no
				// progress notification, as in etcd).
				if f.confirmed(m.src) {
					return m.seen, nil
				}
				continue
			}
			f.asked = m.src
			if err := m.cfg.Source.RequestProgress(wctx); err != nil {
				return 0, fmt.Errorf("mirror: source watch progress: %w", err)
			}
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return 0, nil
				}
				return 0, errors.New("mirror: the source closed the watch")
			}
			done, err := f.watched(ctx, resp)
			if err != nil {
				return 0, err
			}
			if done {
				return m.seen, nil
			}
		}
	}
}

// copy commits the events of one watch response, one entry per revision.
func (m *mirror) copy(ctx context.Context, events []*clientv3.Event) error {
	for len(events) > 0 {
		rev := events[0].Kv.ModRevision
		n := 1
		for n < len(events) && events[n].Kv.ModRevision == rev {
			n++
		}
		if err := m.commitRevision(ctx, rev, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

func (m *mirror) commitRevision(ctx context.Context, rev int64, events []*clientv3.Event) error {
	var ops []revision.Op
	switch cur := m.view.State().Rev; {
	case rev == cur+1:
	case rev > cur+1 && m.prefixed():
		// The source's other clusters took the revisions between.
		ops = append(ops, revision.Op{Kind: revision.OpBumpRev, Rev: rev - 1})
	default:
		return fmt.Errorf("mirror: source revision %d does not follow %d", rev, cur)
	}
	granted := map[int64]bool{}
	txn := revision.Op{Kind: revision.OpTxn, Rev: rev}
	for _, ev := range events {
		c := revision.Change{Key: ev.Kv.Key}
		if ev.Type == mvccpb.DELETE {
			c.Delete = true
		} else {
			c.Value, c.Lease = ev.Kv.Value, ev.Kv.Lease
			if l := ev.Kv.Lease; l != 0 && !granted[l] && m.lease(l) == nil {
				grant, err := m.grantOps(ctx, l)
				if err != nil {
					return err
				}
				ops = append(ops, grant...)
				granted[l] = true
			}
		}
		txn.Changes = append(txn.Changes, c)
	}
	if err := m.commit(ctx, append(ops, txn), rev); err != nil {
		return err
	}
	m.seen = max(m.seen, rev)
	return nil
}

func (m *mirror) lease(id int64) *revision.Lease {
	var l *revision.Lease
	_ = m.view.Read(func(r revision.Reader) error { l = r.Lease(id); return nil })
	return l
}

// sourceTTL is a lease's granted and remaining TTL at the source; a lease
// already gone there gets a granted TTL of 1 s and no remaining TTL (its
// keys' deletion follows).
func (m *mirror) sourceTTL(ctx context.Context, id int64) (granted, remaining int64, err error) {
	resp, err := m.cfg.Source.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil {
		return 0, 0, fmt.Errorf("mirror: lease %x at the source: %w", id, err)
	}
	if resp.TTL < 0 || resp.GrantedTTL <= 0 {
		return 1, 0, nil
	}
	return resp.GrantedTTL, resp.TTL, nil
}

// checkpoint is the op recording a lease's remaining TTL, if it has less
// than its granted TTL left (none otherwise: the lease then lives a whole
// TTL from when a zketcd leader first sees it). The remaining TTL is the
// source's when the mirror asked, and a zketcd leader counts it from its
// own first look at the lease, after the mirror stopped: the copy never
// expires before the source would have expired it.
func checkpoint(id, granted, remaining int64) []revision.Op {
	if remaining <= 0 || remaining >= granted {
		return nil
	}
	return []revision.Op{{Kind: revision.OpLeaseCheckpoint, Lease: id, TTL: remaining}}
}

// grantOps grants lease id as the source has it: its ID, its granted TTL,
// and a checkpoint of its remaining TTL.
func (m *mirror) grantOps(ctx context.Context, id int64) ([]revision.Op, error) {
	granted, remaining, err := m.sourceTTL(ctx, id)
	if err != nil {
		return nil, err
	}
	m.timed[id] = true
	return append([]revision.Op{{Kind: revision.OpLeaseGrant, Lease: id, TTL: granted}}, checkpoint(id, granted, remaining)...), nil
}

// syncLeases grants the source's leases the root does not have (leases
// without keys never show in the watch stream; for a whole key space
// only: a prefix's leases are those its keys name), checkpoints the
// remaining TTL of those the initial snapshot brought (once), and revokes
// the root's leases the source no longer has, once their keys are gone
// (their deletion arrives through the watch).
func (m *mirror) syncLeases(ctx context.Context) error {
	resp, err := m.cfg.Source.Leases(ctx)
	if err != nil {
		return fmt.Errorf("mirror: source leases: %w", err)
	}
	src := map[int64]bool{}
	var ops []revision.Op
	for _, l := range resp.Leases {
		id := int64(l.ID)
		src[id] = true
		switch have := m.lease(id); {
		case have == nil:
			if m.prefixed() {
				continue
			}
			grant, err := m.grantOps(ctx, id)
			if err != nil {
				return err
			}
			ops = append(ops, grant...)
		case !m.timed[id]:
			granted, remaining, err := m.sourceTTL(ctx, id)
			if err != nil {
				return err
			}
			m.timed[id] = true
			if granted == have.TTL {
				ops = append(ops, checkpoint(id, granted, remaining)...)
			}
		}
	}
	ids := m.view.LeaseIDs()
	_ = m.view.Read(func(r revision.Reader) error {
		for _, id := range ids {
			if l := r.Lease(id); !src[id] && l != nil && len(l.Keys()) == 0 {
				ops = append(ops, revision.Op{Kind: revision.OpLeaseRevoke, Lease: id})
			}
		}
		return nil
	})
	return m.commitOps(ctx, ops)
}

// renewKeptAlive renews the root's copy of every lease that has more time
// left at the source than the copy would have: one the source kept alive
// after the mirror checkpointed it (keepalives are not mirrored). The copy
// then lives its whole granted TTL from a leader's first look, never less
// than at the source. The time the copy has left is estimated as a
// zketcd instance's LeaseTimeToLive does (from the token's write time, by
// ZooKeeper's clock, and the checkpoint): a clock offset between
// ZooKeeper and this host shifts the estimate by as much.
func (m *mirror) renewKeptAlive(ctx context.Context) error {
	var renew []int64
	now := time.Now()
	for _, id := range m.view.LeaseIDs() {
		l := m.lease(id)
		if l == nil {
			continue
		}
		_, remaining, err := m.sourceTTL(ctx, id)
		if err != nil {
			return err
		}
		tok, ok, err := m.st.ReadLeaseToken(id)
		if err != nil {
			return fmt.Errorf("mirror: lease %x: %w", id, err)
		}
		if !ok {
			continue
		}
		left := l.TTL
		if tok.Version == 0 && l.RemainingTTL > 0 && l.RemainingTTL < left {
			left = l.RemainingTTL
		}
		if est := float64(left) - now.Sub(tok.Renewed).Seconds(); float64(remaining) > est+1 {
			renew = append(renew, id)
		}
	}
	if len(renew) == 0 {
		return nil
	}
	if _, err := m.st.RenewLeases(renew); err != nil {
		return fmt.Errorf("mirror: renew the leases the source kept alive: %w", err)
	}
	m.lg.WithField("leases", len(renew)).Info("mirror: renewed the leases the source kept alive since they were copied")
	return nil
}

// commitOps commits ops that take no revision, in entries of at most
// opsPerEntry ops.
func (m *mirror) commitOps(ctx context.Context, ops []revision.Op) error {
	const opsPerEntry = 5000
	for len(ops) > 0 {
		n := min(len(ops), opsPerEntry)
		if err := m.commit(ctx, ops[:n], m.view.State().Rev); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// commit appends one entry after the view's position and applies it.
func (m *mirror) commit(ctx context.Context, ops []revision.Op, rev int64) error {
	prev := m.view.State().LSN
	m.tag.Seq++
	e := &revision.Entry{LSN: prev + 1, Writer: m.tag, Ops: ops}
	res, err := m.commitRiding(ctx, zkstore.CommitRequest{Prev: prev, Entry: e, Rev: rev})
	if err != nil {
		return fmt.Errorf("mirror: commit revision %d: %w", rev, err)
	}
	if res.Outcome != zkstore.Committed {
		return fmt.Errorf("mirror: commit revision %d: %v (another writer on the root?)", rev, res.Outcome)
	}
	e.Zxid = res.Zxid
	if _, err := m.view.Apply(e); err != nil {
		return fmt.Errorf("mirror: entry %d: %w", e.LSN, err)
	}
	if m.cfg.AfterCommit != nil {
		return m.cfg.AfterCommit(e)
	}
	return nil
}

// commitRiding commits req, riding through ZooKeeper being unavailable for
// longer than one Commit waits (an ensemble electing a leader on a loaded
// host): it sends the same entry, under the same writer tag, until ZooKeeper
// answers or ctx ends. Sending it again is safe: a Commit that failed as
// unavailable either wrote nothing, or landed and is then found by its
// writer tag and reported Committed.
func (m *mirror) commitRiding(ctx context.Context, req zkstore.CommitRequest) (zkstore.CommitResult, error) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		res, err := m.st.Commit(ctx, req)
		if err == nil || !errors.Is(err, zkstore.ErrUnavailable) {
			return res, err
		}
		m.lg.WithError(err).WithField("lsn", req.Entry.LSN).Warn("mirror: ZooKeeper unavailable while committing; sending the entry again")
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// finish ends a cut-over at rev, up to which the root holds every change
// of the source: it renews the leases the source renewed since the mirror
// checkpointed them, moves the root's revision to rev, compares the
// prefix's hashes at rev and marks the mirror finished.
func (m *mirror) finish(ctx context.Context, rev int64) (Result, error) {
	if err := m.renewKeptAlive(ctx); err != nil {
		return Result{}, err
	}
	if cur := m.view.State().Rev; rev > cur {
		if !m.prefixed() {
			return Result{}, fmt.Errorf("mirror: the source is at revision %d, the copy at %d, with no change between", rev, cur)
		}
		if err := m.commit(ctx, []revision.Op{{Kind: revision.OpBumpRev, Rev: rev}}, rev); err != nil {
			return Result{}, err
		}
	}
	res := Result{Rev: rev, Leases: m.view.LeaseCount()}
	var err error
	var srcKeys int
	began := time.Now()
	if res.SourceHash, srcKeys, err = SourceHash(ctx, m.cfg.Source, m.cfg.Prefix, rev, m.cfg.PageSize); err != nil {
		return res, err
	}
	m.lg.WithFields(logrus.Fields{"revision": rev, "keys": srcKeys, "took": time.Since(began).Round(time.Millisecond)}).Info("mirror: hashed the source's prefix")
	began = time.Now()
	if err := m.view.Read(func(r revision.Reader) error {
		h := NewPrefixHash()
		key, end := m.key, m.end
		if len(end) == 1 && end[0] == 0 {
			end = []byte{}
		}
		err := r.Range(key, end, rev, func(kv *revision.KeyValue) bool {
			h.Add(kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
			return true
		})
		res.RootHash, res.Keys = h.Sum(), h.Keys()
		return err
	}); err != nil {
		return res, fmt.Errorf("mirror: hash the copy at revision %d: %w", rev, err)
	}
	m.lg.WithFields(logrus.Fields{"revision": rev, "keys": res.Keys, "took": time.Since(began).Round(time.Millisecond)}).Info("mirror: hashed the copy")
	if res.SourceHash != res.RootHash || srcKeys != res.Keys {
		return res, fmt.Errorf("mirror: %w at revision %d: the source's prefix hash is %08x over %d keys, the copy's %08x over %d keys; the mirror stays unfinished",
			ErrHashMismatch, rev, res.SourceHash, srcKeys, res.RootHash, res.Keys)
	}
	if err := m.markFinished(ctx, rev); err != nil {
		return res, err
	}
	m.lg.WithFields(logrus.Fields{"revision": rev, "keys": res.Keys, "leases": res.Leases, "hash": fmt.Sprintf("%08x", res.RootHash)}).
		Info("mirror: cut over; instances may serve the root")
	return res, nil
}

// markFinished marks the mirror finished at rev, riding through ZooKeeper
// being unavailable for a while (a member lost, a leader elected), as the
// commits before it do: each try reads the record again, so a finish that
// landed while its answer was lost is found done, and is not done twice.
func (m *mirror) markFinished(ctx context.Context, rev int64) error {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := m.tryFinish(rev)
		if err == nil || !errors.Is(err, zkstore.ErrUnavailable) {
			return err
		}
		m.lg.WithError(err).Warn("mirror: ZooKeeper unavailable while finishing the cut-over; trying again")
		select {
		case <-ctx.Done():
			return fmt.Errorf("mirror: finish the cut-over at revision %d: %w (last: %v)", rev, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// tryFinish is one try of markFinished.
func (m *mirror) tryFinish(rev int64) error {
	root := m.cfg.Store.Root
	rec, ok, err := m.st.MirrorRecord()
	if err != nil {
		return fmt.Errorf("mirror: read the mirror record of %s: %w", root, err)
	}
	if !ok {
		return fmt.Errorf("mirror: %s has no mirror record", root)
	}
	if rec.State == zkstore.MirrorFinished {
		if rec.FinishedRev == rev {
			return nil // an earlier try's, whose answer was lost
		}
		return fmt.Errorf("mirror: %w: %s was cut over at revision %d meanwhile, not at %d", ErrNotResumable, root, rec.FinishedRev, rev)
	}
	head, err := m.st.SyncHead()
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	if head.LSN != m.view.State().LSN {
		return fmt.Errorf("mirror: the root's head is entry %d, the mirror wrote up to %d: another writer on %s", head.LSN, m.view.State().LSN, root)
	}
	if _, err := m.st.FinishMirror(rec, head, rev); err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	return nil
}
