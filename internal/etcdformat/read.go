package etcdformat

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/revision"
)

// ErrFormat is returned for a file that is not an etcd v3 backend database
// of a storage version this package reads (etcd 3.5, 3.6 and 3.7 share the
// layout).
var ErrFormat = errors.New("not an etcd 3.5-3.7 snapshot")

// FileInfo describes a snapshot file read by ReadFile.
type FileInfo struct {
	// StorageVersion is the meta bucket's storage version ("" for etcd 3.5,
	// which does not write one).
	StorageVersion  string
	ConsistentIndex uint64
	Term            uint64
	Records         int  // key-bucket records read
	Checksum        bool // the file had a SHA-256 trailer, and it matched
}

// ReadOptions tune ReadFile.
type ReadOptions struct {
	// SkipHashCheck accepts a file without a SHA-256 trailer (a database
	// copied from a data directory's member/snap/db); etcd's flag has the
	// same name. A file with a trailer is always checked.
	SkipHashCheck bool
	// TempDir is where the database is copied to (without its trailer) to
	// be opened; "" means the system's.
	TempDir string
	// Progress, if set, is called every few thousand key-bucket records.
	Progress func(records int)
}

// ReadFile reads an etcd snapshot file into a snapshot of the key space as
// etcd would serve it after starting on it: every retained version with its
// create/mod revision, version and lease, tombstones, the leases (TTL,
// remaining TTL), the compacted revision (the scheduled one if a
// compaction was not finished: etcd finishes it on start, and so does
// ReadFile, dropping what it would drop) and the current revision (the
// newest record's, at least the compacted revision). The snapshot's LSN is
// 0; the caller places it in its log.
//
// Errors: ErrChecksum for a trailer that does not match (a truncated or
// corrupted file), ErrFormat (wrapped, with the reason) for a file that is
// not an etcd database or of another storage version, and errors for a
// database whose records do not decode.
func ReadFile(path string, opts ReadOptions) (snap *revision.Snapshot, info FileInfo, err error) {
	// bbolt reads the database through a memory map and trusts its page
	// references: a corrupt file (whose checksum held, or was not checked)
	// can make it panic or touch memory past the file's end. Such a fault
	// becomes a panic of this goroutine, and the panic an error.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			snap, err = nil, fmt.Errorf("read snapshot %s: %w: corrupt database: %v", path, ErrFormat, r)
		}
	}()
	db, cleanup, err := openVerified(path, opts, &info)
	if err != nil {
		return nil, info, err
	}
	defer cleanup()
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		snap, err = decodeDB(boltBuckets{tx}, &info, opts.Progress)
		return err
	})
	if err != nil {
		return nil, info, fmt.Errorf("read snapshot %s: %w", path, err)
	}
	return snap, info, nil
}

// openVerified checks the trailer and opens a trailer-less copy read-only.
func openVerified(path string, opts ReadOptions, info *FileInfo) (*bolt.DB, func(), error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read snapshot: %w", err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("read snapshot: %w", err)
	}
	size := fi.Size()
	if HasTrailer(size) {
		size -= sha256.Size
		info.Checksum = true
	} else if !opts.SkipHashCheck {
		return nil, nil, fmt.Errorf("read snapshot %s: %w (%d bytes: no SHA-256 trailer; a database copied from a data directory needs --skip-hash-check)", path, ErrChecksum, size)
	}
	tmp, err := os.CreateTemp(opts.TempDir, "zketcd-import-*.db")
	if err != nil {
		return nil, nil, fmt.Errorf("read snapshot: %w", err)
	}
	cleanup := func() { tmp.Close(); os.Remove(tmp.Name()) }
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(src, size)); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("read snapshot: copy: %w", err)
	}
	if info.Checksum {
		want := make([]byte, sha256.Size)
		if _, err := io.ReadFull(src, want); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("read snapshot: trailer: %w", err)
		}
		if !bytes.Equal(want, h.Sum(nil)) {
			cleanup()
			return nil, nil, fmt.Errorf("read snapshot %s: %w", path, ErrChecksum)
		}
	}
	if err := tmp.Close(); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("read snapshot: %w", err)
	}
	db, err := bolt.Open(tmp.Name(), 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("read snapshot %s: %w: not a bbolt database: %v", filepath.Base(path), ErrFormat, err)
	}
	return db, func() { db.Close(); cleanup() }, nil
}

// progressEvery is how often (in records) ReadFile reports progress.
const progressEvery = 50000

// bucketSet is the read side of a database decodeDB needs: a bbolt
// transaction (boltBuckets), or in-memory buckets in the fuzz test.
type bucketSet interface {
	// bucket returns the named bucket, or nil.
	bucket(name string) bucketReader
}

// bucketReader reads one bucket; ForEach visits keys in ascending order.
type bucketReader interface {
	Get(key []byte) []byte
	ForEach(fn func(k, v []byte) error) error
}

type boltBuckets struct{ tx *bolt.Tx }

func (b boltBuckets) bucket(name string) bucketReader {
	if bk := b.tx.Bucket([]byte(name)); bk != nil {
		return bk
	}
	return nil
}

func decodeDB(db bucketSet, info *FileInfo, progress func(int)) (*revision.Snapshot, error) {
	meta := db.bucket(MetaBucket)
	keys := db.bucket(KeyBucket)
	if meta == nil || keys == nil {
		return nil, fmt.Errorf("%w: no %q or %q bucket", ErrFormat, KeyBucket, MetaBucket)
	}
	if v := meta.Get([]byte(MetaStorageVersion)); v != nil {
		info.StorageVersion = string(v)
		if !supportedVersion(info.StorageVersion) {
			return nil, fmt.Errorf("%w: storage version %q", ErrFormat, v)
		}
	}
	if v := meta.Get([]byte(MetaConsistentIndex)); len(v) == 8 {
		info.ConsistentIndex = be64(v)
	}
	if v := meta.Get([]byte(MetaTerm)); len(v) == 8 {
		info.Term = be64(v)
	}
	compacted := int64(-1)
	for _, k := range []string{MetaFinishedCompact, MetaScheduledCompact} {
		if v := meta.Get([]byte(k)); v != nil {
			r, err := ParseRevKey(v)
			if err != nil {
				return nil, fmt.Errorf("meta %s: %w", k, err)
			}
			compacted = max(compacted, r.Main)
		}
	}

	byKey := map[string]int{}
	var hist []revision.KeyHistory
	rev := int64(1)
	var last Rev
	err := keys.ForEach(func(k, v []byte) error {
		r, err := ParseRevKey(k)
		if err != nil {
			return fmt.Errorf("key bucket: %w", err)
		}
		if info.Records > 0 && !last.Less(r) {
			return fmt.Errorf("key bucket: revision %d_%d repeated", r.Main, r.Sub)
		}
		last = r
		info.Records++
		if progress != nil && info.Records%progressEvery == 0 {
			progress(info.Records)
		}
		rev = max(rev, r.Main)
		if len(v) == 0 {
			// A revision marker without a change (etcdutl restore
			// --bump-revision writes one).
			return nil
		}
		var m mvccpb.KeyValue
		if err := proto.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("key bucket: record %d_%d: %w", r.Main, r.Sub, err)
		}
		if len(m.Key) == 0 {
			return fmt.Errorf("key bucket: record %d_%d has no key", r.Main, r.Sub)
		}
		kv := &revision.KeyValue{ModRevision: r.Main, Sub: r.Sub}
		if !r.Tombstone {
			if m.ModRevision != r.Main || m.Version <= 0 || m.CreateRevision <= 0 || m.CreateRevision > r.Main {
				return fmt.Errorf("key bucket: record %d_%d of %q: inconsistent revisions (create %d, mod %d, version %d)",
					r.Main, r.Sub, m.Key, m.CreateRevision, m.ModRevision, m.Version)
			}
			kv.Value, kv.CreateRevision, kv.Version, kv.Lease = m.Value, m.CreateRevision, m.Version, m.Lease
		}
		i, ok := byKey[string(m.Key)]
		if !ok {
			i = len(hist)
			byKey[string(m.Key)] = i
			hist = append(hist, revision.KeyHistory{Key: m.Key})
		}
		kv.Key = hist[i].Key
		hist[i].Versions = append(hist[i].Versions, kv)
		return nil
	})
	if err != nil {
		return nil, err
	}
	rev = max(rev, compacted)

	snap := &revision.Snapshot{State: revision.State{Rev: rev, CompactRev: compacted}}
	for _, kh := range hist {
		if vs := retained(kh.Versions, compacted); len(vs) > 0 {
			snap.Keys = append(snap.Keys, revision.KeyHistory{Key: kh.Key, Versions: vs})
		}
	}
	sortKeys(snap.Keys)
	if lb := db.bucket(LeaseBucket); lb != nil {
		err := lb.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("lease bucket: key of %d bytes", len(k))
			}
			l, err := parseLeaseValue(v)
			if err != nil {
				return err
			}
			if l.ID != int64(be64(k)) {
				return fmt.Errorf("lease bucket: record %x holds lease %x", k, l.ID)
			}
			snap.Leases = append(snap.Leases, l)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// retained is what etcd keeps of one key's versions after compacting at
// compacted: the version visible there (a tombstone only at exactly that
// revision) and everything after it. Versions are in revision order.
func retained(vs []*revision.KeyValue, compacted int64) []*revision.KeyValue {
	i := -1
	for j, kv := range vs {
		if kv.ModRevision <= compacted {
			i = j
		}
	}
	if i < 0 {
		return vs
	}
	if vs[i].Version == 0 && vs[i].ModRevision < compacted {
		i++
	}
	return vs[i:]
}

// supportedVersion accepts the storage versions of etcd 3.5 (none), 3.6
// and 3.7.
func supportedVersion(v string) bool {
	return v == "" || strings.HasPrefix(v, "3.6.") || strings.HasPrefix(v, "3.7.")
}

func be64(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}
