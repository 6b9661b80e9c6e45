// Package lossfile reads and writes the file in which a zketcd instance
// records the changes ZooKeeper lost when its data went back to an older
// state (an ensemble restored from an older backup): the changes the
// instance had applied, and acknowledged, beyond the newest entry both
// histories share.
//
// The format is JSON lines: a Header, then one Record per key change in
// revision order. Keys and values are base64 (JSON []byte); KeyText repeats
// the key when it is valid UTF-8, for people reading the file. The file is
// written once, whole (a temporary file renamed into place after fsync),
// so a reader never sees a partial one.
package lossfile

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// Format is the version of the file format this package writes and reads.
const Format = 1

// Header describes what was lost and why.
type Header struct {
	// Format is the file format version (Format).
	Format int `json:"zketcd_loss_format"`
	// ClusterID is the cluster ID of the root (hex), Root its znode and
	// Member the instance that wrote the file.
	ClusterID string `json:"cluster_id"`
	Root      string `json:"root"`
	Member    string `json:"member"`
	// Written is when the file was written (RFC 3339, UTC).
	Written string `json:"written"`
	// AppliedLSN and AppliedRev are the newest log entry and revision the
	// instance had applied; ZooKeeperLSN and ZooKeeperRev are ZooKeeper's
	// head when the loss was found.
	AppliedLSN   int64 `json:"applied_lsn"`
	AppliedRev   int64 `json:"applied_rev"`
	ZooKeeperLSN int64 `json:"zookeeper_lsn"`
	ZooKeeperRev int64 `json:"zookeeper_rev"`
	// ForkRev is the newest revision both histories share: the records are
	// the changes of revisions ForkRev+1 through AppliedRev.
	ForkRev int64 `json:"fork_rev"`
	// Diverged says ZooKeeper holds entries after the fork that the
	// instance never applied (other writers since the restore).
	Diverged bool `json:"diverged,omitempty"`
	// Compacted says the instance's history after ForkRev was compacted:
	// the records are then the final state of every key changed after
	// ForkRev: puts of the keys whose mod revision is above it, then
	// deletes (revision 0: not known) of the keys ZooKeeper held at ForkRev
	// that the instance had deleted since.
	Compacted bool `json:"compacted,omitempty"`
	// DeletesUnknown says, with Compacted, that ZooKeeper's state at the
	// fork could not be read: deletions after ForkRev are not listed.
	DeletesUnknown bool `json:"deletes_unknown,omitempty"`
	// Reason is the error the instance logged.
	Reason string `json:"reason"`
}

// Op names of a Record.
const (
	OpPut    = "put"
	OpDelete = "delete"
)

// Record is one lost key change.
type Record struct {
	// Rev is the revision of the change (the key's mod revision); 0 for a
	// delete whose revision was compacted away (see Header.Compacted).
	Rev     int64  `json:"rev"`
	Op      string `json:"op"`
	Key     []byte `json:"key"`
	KeyText string `json:"key_text,omitempty"`
	Value   []byte `json:"value,omitempty"`
	// Lease is the lease the key was attached to (0: none).
	Lease int64 `json:"lease,omitempty"`
	// CreateRev and Version are the key's create revision and version after
	// the change (puts only).
	CreateRev int64 `json:"create_rev,omitempty"`
	Version   int64 `json:"version,omitempty"`
}

// NewRecord returns a Record with KeyText filled in when key is UTF-8.
func NewRecord(rev int64, op string, key, value []byte) Record {
	r := Record{Rev: rev, Op: op, Key: key, Value: value}
	if utf8.Valid(key) {
		r.KeyText = string(key)
	}
	return r
}

// Write writes h and recs to path, atomically: the file appears whole or
// not at all. An existing file at path is replaced.
func Write(path string, h Header, recs []Record) (err error) {
	h.Format = Format
	tmp, err := os.CreateTemp(filepath.Dir(path), ".zketcd-loss-*")
	if err != nil {
		return fmt.Errorf("create loss file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriter(tmp)
	enc := json.NewEncoder(w)
	if err := enc.Encode(h); err != nil {
		return fmt.Errorf("write loss file header: %w", err)
	}
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write loss file: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write loss file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync loss file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close loss file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename loss file: %w", err)
	}
	return nil
}

// Read parses a file written by Write. Errors name the line at fault; a
// file of a newer format is refused, never misread.
func Read(r io.Reader) (Header, []Record, error) {
	dec := json.NewDecoder(r)
	var h Header
	if err := dec.Decode(&h); err != nil {
		return Header{}, nil, fmt.Errorf("loss file header: %w", err)
	}
	switch {
	case h.Format == 0:
		return Header{}, nil, errors.New("not a zketcd loss file (no zketcd_loss_format in its first line)")
	case h.Format > Format:
		return Header{}, nil, fmt.Errorf("loss file format %d is newer than this zketcd reads (%d): use a newer zketcd", h.Format, Format)
	}
	var recs []Record
	for line := 2; ; line++ {
		var rec Record
		err := dec.Decode(&rec)
		if errors.Is(err, io.EOF) {
			return h, recs, nil
		}
		if err != nil {
			return Header{}, nil, fmt.Errorf("loss file line %d: %w", line, err)
		}
		if rec.Op != OpPut && rec.Op != OpDelete {
			return Header{}, nil, fmt.Errorf("loss file line %d: unknown op %q", line, rec.Op)
		}
		recs = append(recs, rec)
	}
}

// Latest returns the last record of each key, in the order of their
// revisions: replaying them leaves every key as the instance had it.
func Latest(recs []Record) []Record {
	last := make(map[string]int, len(recs))
	for i, r := range recs {
		last[string(r.Key)] = i
	}
	out := make([]Record, 0, len(last))
	for i, r := range recs {
		if last[string(r.Key)] == i {
			out = append(out, r)
		}
	}
	return out
}
