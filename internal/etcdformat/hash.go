package etcdformat

import (
	"hash/crc32"

	"github.com/zketcd/zketcd/internal/revision"
)

// castagnoli is the CRC-32 table etcd hashes with.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// KVHash is etcd's hash of the key space: HashKVResponse's hash,
// compact_revision and hash_revision.
type KVHash struct {
	Hash            uint32
	CompactRevision int64
	Revision        int64
}

// HashKV computes the hash etcd 3.7 answers HashKV(rev) with for a store
// holding s: CRC-32 (Castagnoli) over the bucket name "key" and then, in
// bucket order, the key and value of every key-bucket record with a main
// revision <= rev, where a record at or below the compacted revision counts
// only if it is the version of its key live at rev (unless no key is live
// at rev, when all of them count), and a tombstone at exactly the compacted
// revision never counts (etcd versions differ in whether compaction keeps
// it). rev 0 is the current revision; a negative rev hashes no record (and
// is reported as the hash revision, as etcd does).
//
// Errors: revision.ErrCompacted for 0 < rev < the compacted revision,
// revision.ErrFutureRev for rev > the current revision (both as etcd).
//
// etcd answers HashKV at the revision of one of its last ten compactions
// from the hash it computed while compacting (CompactionHash, kept by a
// HashStore); callers look there first, as etcd does.
func HashKV(s *revision.Snapshot, rev int64) (KVHash, error) {
	compacted, cur := s.State.CompactRev, s.State.Rev
	switch {
	case rev > 0 && rev < compacted:
		return KVHash{}, revision.ErrCompacted
	case rev > cur:
		return KVHash{}, revision.ErrFutureRev
	case rev == 0:
		rev = cur
	}
	// keep: the revision of each key's version live at rev (etcd's
	// index.Keep(rev)).
	keep := make(map[Rev]struct{})
	s.Each(func(kh revision.KeyHistory) bool {
		if vis := visibleAt(kh.Versions, rev); vis != nil && vis.Version != 0 {
			keep[RevOf(vis)] = struct{}{}
		}
		return true
	})
	return hashRecords(s, rev, compacted, keep, 0, nil)
}

// CompactionHash is the hash etcd 3.7 computes while it compacts to rev
// and keeps for HashKV(rev) (see HashStore), from the state right before
// the compaction: the records up to rev — all of them, the history the
// compaction removes included — where a record at or below the previous
// compacted revision (before.State.CompactRev) counts only if the
// compaction keeps it (the version of its key visible at rev, a deletion
// only at exactly rev; all of them if it keeps none), and a deletion at
// exactly the previous compacted revision never counts. The answer's
// compact_revision is the previous compacted revision.
func CompactionHash(before *revision.Snapshot, rev int64) (KVHash, error) {
	return pacedCompactionHash(before, rev, 0, nil)
}

// pacedCompactionHash is CompactionHash calling pace (if not nil) after
// every slice keys and every slice records it reads (slice > 0): a hash
// computed in the background yields its CPU there (see HashStore).
func pacedCompactionHash(before *revision.Snapshot, rev int64, slice int, pace func()) (KVHash, error) {
	keep := make(map[Rev]struct{})
	n := 0
	before.Each(func(kh revision.KeyHistory) bool {
		vis := visibleAt(kh.Versions, rev)
		if vis != nil && (vis.Version != 0 || vis.ModRevision == rev) {
			keep[Rev{Main: vis.ModRevision, Sub: vis.Sub}] = struct{}{}
		}
		if n++; pace != nil && slice > 0 && n%slice == 0 {
			pace()
		}
		return true
	})
	return hashRecords(before, rev, before.State.CompactRev, keep, slice, pace)
}

// visibleAt returns the newest version with ModRevision <= rev, or nil.
func visibleAt(vs []*revision.KeyValue, rev int64) *revision.KeyValue {
	var vis *revision.KeyValue
	for _, kv := range vs {
		if kv.ModRevision > rev {
			break
		}
		vis = kv
	}
	return vis
}

// hashRecords is etcd's kvHasher over the records of s up to rev, calling
// pace (if not nil) after every slice records.
func hashRecords(s *revision.Snapshot, rev, compacted int64, keep map[Rev]struct{}, slice int, pace func()) (KVHash, error) {
	h := crc32.New(castagnoli)
	h.Write([]byte(KeyBucket))
	var kbuf, vbuf []byte
	for i, r := range Records(s, rev) {
		if r.Rev.Main > rev {
			break
		}
		if pace != nil && slice > 0 && i > 0 && i%slice == 0 {
			pace()
		}
		if r.Rev.Main <= compacted && len(keep) > 0 {
			if _, ok := keep[Rev{Main: r.Rev.Main, Sub: r.Rev.Sub}]; !ok {
				continue
			}
		}
		if r.Rev.Main == compacted && r.Rev.Tombstone {
			continue
		}
		var err error
		if vbuf, err = AppendValue(vbuf[:0], r.KV); err != nil {
			return KVHash{}, err
		}
		kbuf = AppendRevKey(kbuf[:0], r.Rev)
		h.Write(kbuf)
		h.Write(vbuf)
	}
	return KVHash{Hash: h.Sum32(), CompactRevision: compacted, Revision: rev}, nil
}
