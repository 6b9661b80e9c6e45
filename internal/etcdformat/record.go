package etcdformat

import (
	"encoding/binary"
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/revision"
)

const (
	revKeyLen       = 8 + 1 + 8
	markedRevKeyLen = revKeyLen + 1
	tombstoneMark   = 't'
)

// Rev is a revision key of etcd's key bucket.
type Rev struct {
	Main, Sub int64
	Tombstone bool
}

// Less orders revision keys as bbolt orders their encodings (Main, then Sub).
func (r Rev) Less(o Rev) bool {
	if r.Main != o.Main {
		return r.Main < o.Main
	}
	return r.Sub < o.Sub
}

// AppendRevKey appends the bucket key of r to b.
func AppendRevKey(b []byte, r Rev) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(r.Main))
	b = append(b, '_')
	b = binary.BigEndian.AppendUint64(b, uint64(r.Sub))
	if r.Tombstone {
		b = append(b, tombstoneMark)
	}
	return b
}

// ParseRevKey decodes a key-bucket key. It fails on a wrong length, a
// missing separator, an unknown mark or a negative revision.
func ParseRevKey(b []byte) (Rev, error) {
	if len(b) != revKeyLen && len(b) != markedRevKeyLen {
		return Rev{}, fmt.Errorf("revision key of %d bytes (want %d or %d)", len(b), revKeyLen, markedRevKeyLen)
	}
	if b[8] != '_' {
		return Rev{}, fmt.Errorf("revision key without '_' separator: %x", b)
	}
	r := Rev{Main: int64(binary.BigEndian.Uint64(b)), Sub: int64(binary.BigEndian.Uint64(b[9:]))}
	if r.Main < 0 || r.Sub < 0 {
		return Rev{}, fmt.Errorf("negative revision in key %x", b)
	}
	if len(b) == markedRevKeyLen {
		if b[revKeyLen] != tombstoneMark {
			return Rev{}, fmt.Errorf("unknown revision key mark %q", b[revKeyLen])
		}
		r.Tombstone = true
	}
	return r, nil
}

// Record is one change of the key space: a key-bucket entry.
type Record struct {
	Rev Rev
	KV  *revision.KeyValue // a tombstone's KV has Version 0
}

// RevOf returns the revision key of a version kept by a view.
func RevOf(kv *revision.KeyValue) Rev {
	return Rev{Main: kv.ModRevision, Sub: kv.Sub, Tombstone: kv.Version == 0}
}

// Value returns the key-bucket value of kv as etcd writes it: the marshaled
// mvccpb.KeyValue; a tombstone holds only the key.
func Value(kv *revision.KeyValue) ([]byte, error) {
	return AppendValue(nil, kv)
}

// AppendValue appends Value(kv) to dst: a caller encoding every record in
// turn (hashing) reuses one buffer instead of allocating each record's
// encoding, which for a whole store is as many bytes as the store holds.
func AppendValue(dst []byte, kv *revision.KeyValue) ([]byte, error) {
	m := mvccpb.KeyValue{Key: kv.Key}
	if kv.Version != 0 {
		m.Value, m.CreateRevision, m.ModRevision, m.Version, m.Lease = kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(dst, &m)
	if err != nil {
		return dst, fmt.Errorf("marshal key %q at revision %d: %w", kv.Key, kv.ModRevision, err)
	}
	return b, nil
}

// Records returns every retained version of s with ModRevision <= upTo
// (upTo <= 0: all) as key-bucket records in bucket (revision) order. The
// records share the snapshot's KeyValues. Memory: one Record per version.
func Records(s *revision.Snapshot, upTo int64) []Record {
	n := 0
	s.Each(func(kh revision.KeyHistory) bool { n += len(kh.Versions); return true })
	out := make([]Record, 0, n)
	s.Each(func(kh revision.KeyHistory) bool {
		for _, kv := range kh.Versions {
			if upTo > 0 && kv.ModRevision > upTo {
				break
			}
			out = append(out, Record{Rev: RevOf(kv), KV: kv})
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Rev.Less(out[j].Rev) })
	return out
}

func sortKeys(ks []revision.KeyHistory) {
	sort.Slice(ks, func(i, j int) bool { return string(ks[i].Key) < string(ks[j].Key) })
}
