package etcdformat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/zketcd/zketcd/internal/revision"
)

// StorageVersion is the storage version a written database declares (etcd
// writes major.minor.0 of the binary that wrote it).
const StorageVersion = "3.7.0"

// writeBatch is how many records one bbolt transaction writes: it bounds
// the dirty pages held in memory while a database is written.
const writeBatch = 8192

// Bucket is a bucket's worth of extra records for a database, keys in any
// order.
type Bucket struct {
	Name    string
	Records []KV
}

// KV is one bbolt key and value.
type KV struct{ Key, Value []byte }

// DBInfo is what a database records besides the key space and leases.
type DBInfo struct {
	// ConsistentIndex and Term go to the meta bucket (etcd: the raft index
	// and term the database has applied). etcdutl snapshot restore
	// replaces both.
	ConsistentIndex uint64
	Term            uint64
	// Extra are buckets owned by other state (etcd's auth buckets, once
	// zketcd keeps users and roles); their records are written as given.
	Extra []Bucket
}

// DBStats describes a written database.
type DBStats struct {
	Size      int64 // bytes of the bbolt file
	Keys      int   // distinct keys with a retained version
	Records   int   // key-bucket records (retained versions, tombstones included)
	Leases    int
	Rev       int64
	Compacted int64
}

// emptyBuckets are created in every database so that etcd finds the layout
// it creates itself.
var emptyBuckets = []string{AlarmBucket, ClusterBucket, MembersBucket, MembersRemovedBucket, AuthBucket, AuthUsersBucket, AuthRolesBucket}

// WriteDB writes s as an etcd 3.7 backend database (bbolt) at path, which
// must not exist: the key bucket holds every retained version in revision
// order, the lease bucket every lease (leasepb.Lease), the meta bucket the
// consistent index, term, storage version and — if s was ever compacted —
// the scheduled and finished compact revisions; the other buckets etcd
// creates are created empty (or from info.Extra). Records are written in
// transactions of a few thousand, so memory stays at one record per version
// (pointers into s) plus one batch of pages. On error the file is removed.
func WriteDB(path string, s *revision.Snapshot, info DBInfo) (st DBStats, err error) {
	if _, err := os.Stat(path); err == nil {
		return st, fmt.Errorf("write snapshot database: %s exists", path)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		return st, fmt.Errorf("write snapshot database: %w", err)
	}
	defer func() {
		// bbolt grows its file in steps of up to 16 MiB; what lies past the
		// last page in use (the size a transaction reports, as etcd's own
		// snapshot sends it) is cut off.
		if err == nil {
			err = db.View(func(tx *bolt.Tx) error { st.Size = tx.Size(); return nil })
		}
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("write snapshot database: close: %w", cerr)
		}
		if err == nil {
			if terr := os.Truncate(path, st.Size); terr != nil {
				err = fmt.Errorf("write snapshot database: %w", terr)
			}
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	st.Rev, st.Compacted = s.State.Rev, s.State.CompactRev
	if err := db.Update(func(tx *bolt.Tx) error { return writeSmallBuckets(tx, s, info, &st) }); err != nil {
		return st, fmt.Errorf("write snapshot database: %w", err)
	}
	recs := Records(s, 0)
	s.Each(func(kh revision.KeyHistory) bool {
		if len(kh.Versions) > 0 {
			st.Keys++
		}
		return true
	})
	var kbuf []byte
	for start := 0; start < len(recs); start += writeBatch {
		batch := recs[start:min(start+writeBatch, len(recs))]
		err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(KeyBucket))
			b.FillPercent = 1 // appended in key order: fill every page
			for _, r := range batch {
				v, err := Value(r.KV)
				if err != nil {
					return err
				}
				kbuf = AppendRevKey(kbuf[:0], r.Rev)
				if err := b.Put(kbuf, v); err != nil {
					return fmt.Errorf("key bucket: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return st, fmt.Errorf("write snapshot database: %w", err)
		}
		st.Records += len(batch)
	}
	if err := db.Sync(); err != nil {
		return st, fmt.Errorf("write snapshot database: sync: %w", err)
	}
	return st, nil
}

func writeSmallBuckets(tx *bolt.Tx, s *revision.Snapshot, info DBInfo, st *DBStats) error {
	if _, err := tx.CreateBucket([]byte(KeyBucket)); err != nil {
		return err
	}
	meta, err := tx.CreateBucket([]byte(MetaBucket))
	if err != nil {
		return err
	}
	put := func(k string, v []byte) error { return meta.Put([]byte(k), v) }
	if err := errors.Join(
		put(MetaConsistentIndex, binary.BigEndian.AppendUint64(nil, info.ConsistentIndex)),
		put(MetaTerm, binary.BigEndian.AppendUint64(nil, info.Term)),
		put(MetaStorageVersion, []byte(StorageVersion)),
	); err != nil {
		return fmt.Errorf("meta bucket: %w", err)
	}
	if c := s.State.CompactRev; c >= 0 {
		rk := AppendRevKey(nil, Rev{Main: c})
		if err := errors.Join(put(MetaScheduledCompact, rk), put(MetaFinishedCompact, rk)); err != nil {
			return fmt.Errorf("meta bucket: %w", err)
		}
	}
	lb, err := tx.CreateBucket([]byte(LeaseBucket))
	if err != nil {
		return err
	}
	for _, l := range s.Leases {
		if err := lb.Put(LeaseKey(l.ID), LeaseValue(l)); err != nil {
			return fmt.Errorf("lease bucket: %w", err)
		}
		st.Leases++
	}
	extra := map[string][]KV{}
	for _, b := range info.Extra {
		extra[b.Name] = b.Records
	}
	names := append([]string(nil), emptyBuckets...)
	for _, b := range info.Extra {
		if !contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	for _, name := range names {
		b, err := tx.CreateBucket([]byte(name))
		if err != nil {
			return fmt.Errorf("bucket %s: %w", name, err)
		}
		for _, r := range extra[name] {
			if err := b.Put(r.Key, r.Value); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// LeaseKey is a lease's key in the lease bucket: its ID, 8 bytes big-endian.
func LeaseKey(id int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(id)) }

// LeaseValue is a lease's value in the lease bucket: a marshaled
// leasepb.Lease (ID = 1, TTL = 2, RemainingTTL = 3, all int64).
func LeaseValue(l revision.Lease) []byte {
	var b []byte
	for _, f := range []struct {
		num protowire.Number
		v   int64
	}{{1, l.ID}, {2, l.TTL}, {3, l.RemainingTTL}} {
		if f.v != 0 {
			b = protowire.AppendTag(b, f.num, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(f.v))
		}
	}
	return b
}

// parseLeaseValue decodes a leasepb.Lease, skipping unknown fields.
func parseLeaseValue(b []byte) (revision.Lease, error) {
	var l revision.Lease
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return l, fmt.Errorf("lease record: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.VarintType || num > 3 {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return l, fmt.Errorf("lease record: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return l, fmt.Errorf("lease record: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			l.ID = int64(v)
		case 2:
			l.TTL = int64(v)
		case 3:
			l.RemainingTTL = int64(v)
		}
	}
	return l, nil
}
