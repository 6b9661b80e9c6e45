// Package mirror copies a running etcd into a fresh zketcd root with the
// same revision numbers (`zketcd mirror`): it restores a snapshot of the
// source into the root (package snaprestore), then follows the source's
// watch stream and commits every source revision as one log entry at the
// same revision, with the same changes in the same order (so the same
// sub-revisions, create revisions and versions), granting and revoking
// leases as the source does, with the same IDs and granted TTLs and the time
// they have left at the source (a remaining-TTL checkpoint, from
// LeaseTimeToLive; keepalives are not mirrored, so after the cut-over every
// lease counts down from what it had left when the mirror looked, and a
// keepalive renews it for its granted TTL, as on the source).
//
// The mirror must be the root's only writer: no zketcd may serve the root
// until the mirror has stopped (it refuses to start on a root with members
// and stops if another writer commits). Compactions of the source are not
// mirrored (the root keeps more history); a source that compacts past the
// mirror's position stops it with ErrSourceCompacted.
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
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/snaprestore"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// ErrSourceCompacted is returned when the source compacted revisions the
// mirror had not copied yet.
var ErrSourceCompacted = errors.New("source etcd compacted past the mirror's position")

// Config configures a mirror.
type Config struct {
	// Source is a client of the etcd to copy.
	Source *clientv3.Client
	// Store names the ZooKeeper ensemble and the fresh root to fill.
	Store zkstore.Config
	// UntilCaughtUp stops the mirror (returning nil) the first time it has
	// copied every revision the source had when it last looked.
	UntilCaughtUp bool
	// StatusInterval is how often the mirror logs its position and looks at
	// the source's revision and leases (default 5 s).
	StatusInterval time.Duration
	// TempDir holds the initial snapshot while it is restored.
	TempDir string
}

// Status is the mirror's position.
type Status struct {
	// Rev is the last source revision copied; SourceRev the source's
	// revision when last looked at.
	Rev, SourceRev int64
	Leases         int
}

// Run copies the source into the root and follows it until ctx ends
// (returning nil), until it has caught up if cfg.UntilCaughtUp, or until an
// error: ErrSourceCompacted, a root that is not fresh, another writer on the
// root, or the source or ZooKeeper failing. On an error after the initial
// restore, the root holds the source up to the last revision copied (see
// the log) and must not be used as a complete copy.
func Run(ctx context.Context, cfg Config, status func(Status)) error {
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 5 * time.Second
	}
	lg := cfg.Store.Logger
	if lg == nil {
		lg = logrus.NewEntry(logrus.StandardLogger())
		cfg.Store.Logger = lg
	}
	lg = lg.WithFields(logrus.Fields{"component": "mirror", "root": cfg.Store.Root})
	res, err := initial(ctx, cfg)
	if err != nil {
		return err
	}
	view, err := revision.FromSnapshot(res.Snapshot)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	st, err := zkstore.Open(ctx, cfg.Store)
	if err != nil {
		return fmt.Errorf("mirror: open root: %w", err)
	}
	defer st.Close()
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	m := &mirror{cfg: cfg, lg: lg, st: st, view: view, tag: revision.WriterTag{Nonce: binary.BigEndian.Uint64(nonce[:])}, timed: map[int64]bool{}}
	lg.WithFields(logrus.Fields{"revision": res.Rev, "keys": res.Keys, "leases": res.Leases}).Info("mirror: initial snapshot restored; following the source")
	return m.follow(ctx, status)
}

// initial saves a snapshot of the source and restores it into the root.
func initial(ctx context.Context, cfg Config) (snaprestore.Result, error) {
	dir, err := os.MkdirTemp(cfg.TempDir, "zketcd-mirror-")
	if err != nil {
		return snaprestore.Result{}, fmt.Errorf("mirror: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "source.snapshot")
	rc, err := cfg.Source.Snapshot(ctx)
	if err != nil {
		return snaprestore.Result{}, fmt.Errorf("mirror: snapshot of the source: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return snaprestore.Result{}, fmt.Errorf("mirror: %w", err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return snaprestore.Result{}, fmt.Errorf("mirror: snapshot of the source: %w", err)
	}
	if err := f.Close(); err != nil {
		return snaprestore.Result{}, fmt.Errorf("mirror: %w", err)
	}
	return snaprestore.Restore(ctx, snaprestore.Config{File: path, TempDir: cfg.TempDir, Store: cfg.Store})
}

type mirror struct {
	cfg  Config
	lg   *logrus.Entry
	st   *zkstore.Store
	view *revision.View
	tag  revision.WriterTag
	src  int64 // source revision last seen
	// timed holds the leases whose remaining TTL the root holds: those the
	// mirror granted, and those of the initial snapshot once the first
	// lease sync checkpointed them.
	timed map[int64]bool
}

func (m *mirror) follow(ctx context.Context, status func(Status)) (err error) {
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
			status(Status{Rev: m.view.State().Rev, SourceRev: m.src, Leases: len(m.view.LeaseIDs())})
		}
	}()
	check := func() (bool, error) {
		if err := m.syncLeases(ctx); err != nil {
			return false, err
		}
		resp, err := m.cfg.Source.Get(ctx, "\x00", clientv3.WithCountOnly())
		if err != nil {
			return false, fmt.Errorf("mirror: source revision: %w", err)
		}
		m.src = resp.Header.Revision
		s := Status{Rev: m.view.State().Rev, SourceRev: m.src, Leases: len(m.view.LeaseIDs())}
		m.lg.WithFields(logrus.Fields{"revision": s.Rev, "source_revision": s.SourceRev, "behind": s.SourceRev - s.Rev, "leases": s.Leases}).Info("mirror status")
		if status != nil {
			status(s)
		}
		return m.cfg.UntilCaughtUp && s.Rev >= s.SourceRev, nil
	}
	if done, err := check(); err != nil || done {
		return err
	}
	from := m.view.State().Rev + 1
	wch := m.cfg.Source.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	tick := time.NewTicker(m.cfg.StatusInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if done, err := check(); err != nil || done {
				return err
			}
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("mirror: the source closed the watch")
			}
			if resp.CompactRevision != 0 {
				return fmt.Errorf("mirror: %w (copied up to %d, source compacted to %d); start over into a new root",
					ErrSourceCompacted, m.view.State().Rev, resp.CompactRevision)
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("mirror: source watch: %w", err)
			}
			if err := m.copy(ctx, resp.Events); err != nil {
				return err
			}
			if m.cfg.UntilCaughtUp && resp.Header.Revision <= m.view.State().Rev {
				if done, err := check(); err != nil || done {
					return err
				}
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
	if cur := m.view.State().Rev; rev != cur+1 {
		return fmt.Errorf("mirror: source revision %d does not follow %d", rev, cur)
	}
	var ops []revision.Op
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
	return m.commit(ctx, append(ops, txn), rev)
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
// without keys never show in the watch stream), checkpoints the remaining
// TTL of those the initial snapshot brought (once), and revokes the root's
// leases the source no longer has, once their keys are gone (their
// deletion arrives through the watch).
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
	if len(ops) == 0 {
		return nil
	}
	return m.commit(ctx, ops, m.view.State().Rev)
}

// commit appends one entry after the view's position and applies it.
func (m *mirror) commit(ctx context.Context, ops []revision.Op, rev int64) error {
	prev := m.view.State().LSN
	m.tag.Seq++
	e := &revision.Entry{LSN: prev + 1, Writer: m.tag, Ops: ops}
	res, err := m.st.Commit(ctx, zkstore.CommitRequest{Prev: prev, Entry: e, Rev: rev})
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
	return nil
}
