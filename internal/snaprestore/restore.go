// Package snaprestore loads an etcd snapshot file into a fresh zketcd root
// (`zketcd snapshot restore`): the key space, every retained version with
// its create/mod revision, version and lease, the leases and the compacted
// revision, as the base generation of the root's log, so that zketcd serves
// the revisions etcd served and continues from the snapshot's revision.
//
// Restore is a one-shot operation on a root nothing serves; it is safe to
// run concurrently only on different roots.
package snaprestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Config configures one restore.
type Config struct {
	// File is the snapshot, as `etcdctl snapshot save` writes it (with its
	// SHA-256 trailer), or a bare database with SkipHashCheck.
	File          string
	SkipHashCheck bool
	// TempDir holds a copy of the database while it is read ("": the
	// system's).
	TempDir string
	// Store names the ZooKeeper ensemble and the root to fill; its Logger
	// also receives the progress lines.
	Store zkstore.Config
}

// Result describes what was imported.
type Result struct {
	Rev, CompactRev int64
	// Keys have retained history; Live of them exist at Rev.
	Keys, Live, Versions int
	Leases               int
	StorageVersion       string // of the snapshot ("" for etcd 3.5)
	Base                 zkstore.Base
	// Snapshot is the state written (at log position 1).
	Snapshot *revision.Snapshot
}

// ErrRootInUse is returned for a root that exists with content.
var ErrRootInUse = errors.New("zookeeper root is not empty")

// Restore reads cfg.File (checking its checksum and format before it
// touches ZooKeeper), checks the root is fresh (absent or an empty znode),
// and writes the snapshot there as the root's base generation at log
// position 1. If anything fails after the root was written to, what was
// written is deleted again, so the root is left as it was found.
//
// Errors: etcdformat.ErrChecksum, etcdformat.ErrFormat, ErrRootInUse,
// zkstore.ErrNotFresh, zkstore.ErrUnavailable (all wrapped), and errors for
// snapshots whose content is inconsistent (a live key on a missing lease).
func Restore(ctx context.Context, cfg Config) (Result, error) {
	lg := cfg.Store.Logger
	if lg == nil {
		lg = logrus.NewEntry(logrus.StandardLogger())
		cfg.Store.Logger = lg
	}
	lg = lg.WithFields(logrus.Fields{"file": cfg.File, "root": cfg.Store.Root})
	start := time.Now()
	exists, children, err := zkstore.RootExists(ctx, cfg.Store)
	if err != nil {
		return Result{}, fmt.Errorf("check root %s: %w", cfg.Store.Root, err)
	}
	if children > 0 {
		return Result{}, fmt.Errorf("refusing to restore into %s: %w (%d children); restore into a new --zk-root", cfg.Store.Root, ErrRootInUse, children)
	}
	lg.Info("reading etcd snapshot")
	snap, info, err := etcdformat.ReadFile(cfg.File, etcdformat.ReadOptions{
		SkipHashCheck: cfg.SkipHashCheck,
		TempDir:       cfg.TempDir,
		Progress: func(n int) {
			lg.WithFields(logrus.Fields{"records": n, "elapsed": time.Since(start).Round(time.Millisecond)}).Info("reading etcd snapshot")
		},
	})
	if err != nil {
		return Result{}, err
	}
	snap.State.LSN = 1
	res := Result{Snapshot: snap, Rev: snap.State.Rev, CompactRev: snap.State.CompactRev, Keys: len(snap.Keys), Leases: len(snap.Leases), StorageVersion: info.StorageVersion}
	for _, kh := range snap.Keys {
		res.Versions += len(kh.Versions)
		if kh.Versions[len(kh.Versions)-1].Version != 0 {
			res.Live++
		}
	}
	lg = lg.WithFields(logrus.Fields{"revision": res.Rev, "compact_revision": res.CompactRev, "keys": res.Keys, "live_keys": res.Live,
		"versions": res.Versions, "leases": res.Leases, "storage_version": info.StorageVersion})
	lg.WithField("elapsed", time.Since(start).Round(time.Millisecond)).Info("read etcd snapshot")
	// A view must accept it, as recovery will.
	if _, err := revision.FromSnapshot(snap); err != nil {
		return Result{}, fmt.Errorf("snapshot %s: %w", cfg.File, err)
	}
	lg.WithField("elapsed", time.Since(start).Round(time.Millisecond)).Info("writing the base generation to ZooKeeper")
	res.Base, err = write(ctx, cfg.Store, snap)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if derr := zkstore.DeleteRoot(cctx, cfg.Store, exists); derr != nil {
			lg.WithError(derr).Error("restore failed and what it wrote could not be deleted; delete the root by hand")
		} else {
			lg.WithError(err).Warn("restore failed; deleted what it wrote")
		}
		return Result{}, err
	}
	lg.WithFields(logrus.Fields{"bytes": res.Base.Size, "chunks": res.Base.Chunks,
		"took": time.Since(start).Round(time.Millisecond)}).Info("restored etcd snapshot")
	return res, nil
}

func write(ctx context.Context, zc zkstore.Config, snap *revision.Snapshot) (zkstore.Base, error) {
	st, err := zkstore.Open(ctx, zc)
	if err != nil {
		return zkstore.Base{}, fmt.Errorf("open root %s: %w", zc.Root, err)
	}
	defer st.Close()
	b, err := st.ImportBase(ctx, snap)
	if err != nil {
		return zkstore.Base{}, fmt.Errorf("restore into %s: %w", zc.Root, err)
	}
	return b, nil
}
