package zkstore

import (
	"errors"
	"fmt"
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
const (
	// MetaFormat is the newest root format this build knows (and writes
	// into a new root's meta).
	MetaFormat = 1
	// maxEntryFormat is the highest first byte of a log entry this build
	// reads.
	maxEntryFormat = indirectFormat
	// baseFormat is the base description format this build writes and the
	// newest it reads (0, absent, is the same as 1).
	baseFormat = 1
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
