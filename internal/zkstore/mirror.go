package zkstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// ErrMirrorInProgress is wrapped by Open for a root that `zketcd mirror`
// is still copying into (its <root>/mirror says MirrorCopying): only the
// mirror writes it until its cut-over marks it MirrorFinished.
var ErrMirrorInProgress = errors.New("zketcd mirror is copying into this root")

// Mirror states (MirrorRecord.State).
const (
	// MirrorCopying: the mirror owns the root; no instance may serve it.
	MirrorCopying = "copying"
	// MirrorFinished: the cut-over ended the mirror; instances serve the
	// root, and no mirror writes it again.
	MirrorFinished = "finished"
)

// MirrorRecord is <root>/mirror: which etcd, and which prefix of it, a
// mirror copies into the root, and whether it finished. A root without it
// was never a mirror's.
type MirrorRecord struct {
	// SourceClusterID is the source etcd's cluster ID (its response
	// headers'); Source the client URLs the mirror was given.
	SourceClusterID uint64 `json:"source_cluster_id"`
	Source          string `json:"source"`
	// Prefix is the copied key prefix (empty: the whole key space).
	Prefix []byte `json:"prefix"`
	State  string `json:"state"`
	// StartRev is the source revision of the initial copy; FinishedRev the
	// revision both sides agreed on at the cut-over.
	StartRev    int64     `json:"start_rev,omitempty"`
	FinishedRev int64     `json:"finished_rev,omitempty"`
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished,omitempty"`

	version int32
}

// Same reports whether r records a mirror of the same source and prefix
// as o.
func (r MirrorRecord) Same(o MirrorRecord) bool {
	return r.SourceClusterID == o.SourceClusterID && bytes.Equal(r.Prefix, o.Prefix)
}

func (l layout) mirror() string { return l.root + "/mirror" }

// ClaimMirror makes cfg.Root a mirror's root before anything else is
// written there: it creates the root znode (and its parents) if missing
// and <root>/mirror holding rec, provided the root has no other child. If
// <root>/mirror exists already, it returns what it holds (created false)
// and writes nothing: the caller decides whether it resumes. A root with
// other children and no mirror record fails with ErrNotFresh.
func ClaimMirror(ctx context.Context, cfg Config, rec MirrorRecord) (got MirrorRecord, created bool, err error) {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return MirrorRecord{}, false, err
	}
	defer s.Close()
	if r, ok, err := s.readMirror(); err != nil || ok {
		return r, false, err
	}
	if err := s.ensureRootNode(); err != nil {
		return MirrorRecord{}, false, err
	}
	kids, _, err := s.conn.Children(cfg.Root)
	if err != nil {
		return MirrorRecord{}, false, s.wrap("list "+cfg.Root, err)
	}
	if len(kids) > 0 {
		return MirrorRecord{}, false, fmt.Errorf("%w: %s has %d children and no mirror record; mirror into a new root", ErrNotFresh, cfg.Root, len(kids))
	}
	rec.State = MirrorCopying
	data, _ := json.Marshal(rec)
	if _, err := s.conn.Create(s.l.mirror(), data, 0, s.acl); err != nil {
		if errors.Is(err, zk.ErrNodeExists) {
			return MirrorRecord{}, false, fmt.Errorf("%w: another mirror claimed %s meanwhile", ErrNotFresh, cfg.Root)
		}
		return MirrorRecord{}, false, s.wrap("claim "+cfg.Root, err)
	}
	// Something created beside the record meanwhile (an instance that
	// opened the root before the record existed): not this mirror's.
	if kids, _, err = s.conn.Children(cfg.Root); err == nil && len(kids) > 1 {
		_ = s.conn.Delete(s.l.mirror(), -1)
		return MirrorRecord{}, false, fmt.Errorf("%w: %s changed while the mirror claimed it", ErrNotFresh, cfg.Root)
	}
	return rec, true, nil
}

// MirrorRecord returns <root>/mirror (ok false: the root has none).
func (s *Store) MirrorRecord() (rec MirrorRecord, ok bool, err error) { return s.readMirror() }

func (s *Store) readMirror() (MirrorRecord, bool, error) {
	data, st, err := s.conn.Get(s.l.mirror())
	if errors.Is(err, zk.ErrNoNode) {
		return MirrorRecord{}, false, nil
	}
	if err != nil {
		return MirrorRecord{}, false, s.wrap("read "+s.l.mirror(), err)
	}
	var r MirrorRecord
	if err := decodeJSON(s.l.mirror(), data, &r); err != nil {
		return MirrorRecord{}, false, err
	}
	r.version = st.Version
	return r, true, nil
}

// FinishMirror marks the root's mirror finished at revision rev (instances
// may serve the root from then on), provided the record is still the one
// read (rec, from MirrorRecord) and the log's head is still head: nothing
// else wrote meanwhile.
func (s *Store) FinishMirror(rec MirrorRecord, head Head, rev int64) (MirrorRecord, error) {
	rec.State, rec.FinishedRev, rec.Finished = MirrorFinished, rev, time.Now().UTC().Truncate(time.Second)
	data, _ := json.Marshal(rec)
	headData, headStat, err := s.conn.Get(s.l.head())
	if err != nil {
		return rec, s.wrap("read head", err)
	}
	cur, err := s.decodeHead(headData, headStat)
	if err != nil {
		return rec, err
	}
	if cur.LSN != head.LSN {
		return rec, fmt.Errorf("finish mirror: the log's head is entry %d, the mirror wrote up to %d: another writer on %s", cur.LSN, head.LSN, s.l.root)
	}
	_, err = s.conn.Multi(&zk.CheckVersionRequest{Path: s.l.head(), Version: headStat.Version},
		&zk.SetDataRequest{Path: s.l.mirror(), Data: data, Version: rec.version})
	if err != nil {
		return rec, s.wrap("finish mirror on "+s.l.root, err)
	}
	rec.version++
	return rec, nil
}

// checkMirror refuses (ErrMirrorInProgress) a root a mirror is copying
// into, unless this store is the mirror's (Config.Mirror).
func (s *Store) checkMirror() error {
	if s.cfg.Mirror {
		return nil
	}
	r, ok, err := s.readMirror()
	if err != nil || !ok || r.State == MirrorFinished {
		return err
	}
	what := "the whole key space"
	if len(r.Prefix) > 0 {
		what = fmt.Sprintf("prefix %q", r.Prefix)
	}
	return fmt.Errorf("%w: %s is %s of etcd cluster %x (%s) since %s; serve it once `zketcd mirror cutover` finished the mirror",
		ErrMirrorInProgress, s.l.root, what, r.SourceClusterID, r.Source, r.Started.Format(time.RFC3339))
}
