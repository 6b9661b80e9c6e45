package zkstore

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// Format versions.
//
// Every stored form carries its format: the first byte of a log entry
// (entryFormat for an entry, indirectFormat for one written as chunks), the
// first byte of a base snapshot (snapshotFormat), the "format" field of the
// base description (<root>/compact) and of <root>/meta. Format numbers only
// grow: a new form of a log entry gets the next unused first byte (3, then
// 4, …), never a reused one, so a build reading a byte above the highest it
// knows has met a newer zketcd's data, not corrupt data. Every binary form,
// present and future, keeps the format byte first and a CRC-32C of
// everything before it last, so a record that fails its checksum is
// corrupt, and an intact one of a higher format is newer. The build refuses it
// with an error wrapping ErrNewerFormat (a *FormatError naming both
// versions) instead of misreading it.
//
// <root>/meta's format is the root's version: the newest forms writers may
// use on the root. A build refuses to open a root whose meta format is above
// MetaFormat. A future build that adds a form must keep writing the old one
// while meta says so, and raise meta only once every instance on the root
// runs a build that reads the new form (see docs/operations.md, "Rolling upgrades of zketcd").
//
// Root formats: 1, every form of format 1 (entries 1 and 2, snapshots 1);
// 2, compression: entries may be compressedEntryFormat (3) and base
// snapshots compressedSnapshotFormat (2); 3, layered base generations: a
// base description may be of format 2 (layeredBaseFormat), a full snapshot
// followed by deltas (deltaFormat, 3); 4, revision gaps: a log entry may
// hold an op that moves the revision without changing a key
// (revision.OpBumpRev, written only by `zketcd mirror --prefix`, whose
// source's other clusters took the revisions between: the committer never
// writes it), so consecutive transactions of the log may skip revisions.
// Older builds refuse a root of format 4 at open; one that met such an op
// anyway (its root raised while it ran) halts on the entry as a newer
// zketcd's (the op kind is unknown to it). A build reads every form of every
// root format up to its own, writes only the forms of the format
// <root>/meta says, and the leader instance raises meta to the build's
// once every live instance's member znode says it reads that format
// (RaiseFormat).
const (
	// MetaFormat is the newest root format this build knows (and writes
	// into a new root's meta).
	MetaFormat = 4
	// compressionMetaFormat is the root format from which writers
	// compress entries and base snapshots.
	compressionMetaFormat = 2
	// layeredMetaFormat is the root format from which physical compaction
	// may write a delta instead of a whole base (layered descriptions).
	layeredMetaFormat = 3
	// GapsMetaFormat is the root format from which a log entry may move
	// the revision without a change (revision.OpBumpRev): a mirrored
	// root's revision gaps.
	GapsMetaFormat = 4
	// maxEntryFormat is the highest first byte of a log entry this build
	// reads.
	maxEntryFormat = compressedEntryFormat
	// fullBaseFormat is the format of a base description naming one
	// whole snapshot (0, absent, is the same); layeredBaseFormat of one
	// with deltas after it (Base.Deltas).
	fullBaseFormat    = 1
	layeredBaseFormat = 2
	// baseFormat is the newest base description format this build reads.
	baseFormat = layeredBaseFormat
)

// ErrNewerFormat is wrapped by the errors for data written in a format newer
// than this build reads (by a newer zketcd).
var ErrNewerFormat = errors.New("written in a newer format")

// FormatError describes data in a format this build does not know.
type FormatError struct {
	// What names the data ("log entry", "base snapshot", …).
	What string
	// Got is the data's format; Known the newest this build reads.
	Got, Known int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s has format %d, newer than this zketcd reads (up to %d): a newer zketcd wrote it; upgrade this instance",
		e.What, e.Got, e.Known)
}

func (e *FormatError) Unwrap() error { return ErrNewerFormat }

// Format returns the root's format as this store last read it: the
// newest forms it writes. Safe for concurrent use.
func (s *Store) Format() int { return int(s.format.Load()) }

// RefreshFormat reads <root>/meta again and returns the root's format
// (raised by another instance's RaiseFormat since). A root raised past
// what this build reads is a *FormatError.
func (s *Store) RefreshFormat() (int, error) {
	data, _, err := s.conn.Get(s.l.meta())
	if err != nil {
		return s.Format(), s.wrap("read meta", err)
	}
	var m Meta
	if err := decodeJSON(s.l.meta(), data, &m); err != nil {
		return s.Format(), err
	}
	if m.Format > MetaFormat {
		return s.Format(), &FormatError{What: "zketcd root " + s.l.root, Got: m.Format, Known: MetaFormat}
	}
	s.format.Store(int32(m.Format))
	return m.Format, nil
}

// RaiseFormat raises the root's format to MetaFormat once every live
// member reads it (Member.ReadsFormat), and returns the root's format. A
// member of an older build that starts afterwards refuses the root at
// start, naming both versions; one that was not live and is still running
// (its session lost meanwhile) halts at the first entry of the new form.
// The meta znode is replaced with a version check, so two instances
// raising at once raise once. Any instance may call it.
func (s *Store) RaiseFormat() (int, error) {
	data, st, err := s.conn.Get(s.l.meta())
	if err != nil {
		return s.Format(), s.wrap("read meta", err)
	}
	var m Meta
	if err := decodeJSON(s.l.meta(), data, &m); err != nil {
		return s.Format(), err
	}
	if m.Format >= MetaFormat {
		s.format.Store(int32(m.Format))
		return m.Format, nil
	}
	members, err := s.Members()
	if err != nil {
		return m.Format, err
	}
	for _, mb := range members {
		if mb.ReadsFormat < MetaFormat {
			s.format.Store(int32(m.Format))
			return m.Format, nil
		}
	}
	m.Format = MetaFormat
	next, _ := json.Marshal(m)
	if _, err := s.conn.Set(s.l.meta(), next, st.Version); err != nil {
		if errors.Is(err, zk.ErrBadVersion) {
			return s.RefreshFormat()
		}
		return s.Format(), s.wrap("raise root format", err)
	}
	s.format.Store(int32(MetaFormat))
	s.log.WithFields(logrus.Fields{"root": s.l.root, "format": MetaFormat, "members": len(members)}).
		Info("raised the root's format: every live instance reads it")
	return MetaFormat, nil
}
