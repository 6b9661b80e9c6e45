package etcdformat

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/zketcd/zketcd/internal/revision"
)

// memBuckets is an in-memory bucketSet for fuzzing the decoder without a
// file per input.
type memBuckets map[string]*memBucket

type memBucket struct{ keys, vals [][]byte }

func (m memBuckets) bucket(name string) bucketReader {
	if b := m[name]; b != nil {
		return b
	}
	return nil
}

func (b *memBucket) Get(k []byte) []byte {
	for i, key := range b.keys {
		if bytes.Equal(key, k) {
			return b.vals[i]
		}
	}
	return nil
}

func (b *memBucket) ForEach(fn func(k, v []byte) error) error {
	idx := make([]int, len(b.keys))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return bytes.Compare(b.keys[idx[i]], b.keys[idx[j]]) < 0 })
	for n, i := range idx {
		if n > 0 && bytes.Equal(b.keys[idx[n-1]], b.keys[i]) {
			continue // a bucket holds a key once
		}
		if err := fn(b.keys[i], b.vals[i]); err != nil {
			return err
		}
	}
	return nil
}

var fuzzBuckets = []string{KeyBucket, MetaBucket, LeaseBucket}

// parseFuzzBuckets reads records: a bucket selector byte, a key length
// byte, the key, a 2-byte value length, the value.
func parseFuzzBuckets(data []byte) memBuckets {
	m := memBuckets{}
	for _, name := range fuzzBuckets {
		m[name] = &memBucket{}
	}
	for len(data) >= 2 {
		b, kl := m[fuzzBuckets[int(data[0])%len(fuzzBuckets)]], int(data[1])
		data = data[2:]
		if len(data) < kl+2 {
			break
		}
		k := data[:kl]
		vl := int(binary.BigEndian.Uint16(data[kl:]))
		data = data[kl+2:]
		vl = min(vl, len(data))
		b.keys, b.vals = append(b.keys, k), append(b.vals, data[:vl])
		data = data[vl:]
	}
	return m
}

// encodeFuzzBuckets is parseFuzzBuckets' inverse for the seeds.
func encodeFuzzBuckets(t testing.TB, db *bolt.DB) []byte {
	var out []byte
	err := db.View(func(tx *bolt.Tx) error {
		for sel, name := range fuzzBuckets {
			b := tx.Bucket([]byte(name))
			if b == nil {
				continue
			}
			if err := b.ForEach(func(k, v []byte) error {
				out = append(out, byte(sel), byte(len(k)))
				out = append(out, k...)
				out = binary.BigEndian.AppendUint16(out, uint16(len(v)))
				out = append(out, v...)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzDecodeSnapshotDB feeds arbitrary bucket contents (key-bucket
// records, meta keys, lease records) to the snapshot decoder: it must
// return an error or a snapshot, never panic, and a snapshot it returns
// must be safe to hash and to load into a view.
func FuzzDecodeSnapshotDB(f *testing.F) {
	dir := f.TempDir()
	for i, s := range []*revision.Snapshot{testView(f).Snapshot(), revision.NewView(1, 1).Snapshot()} {
		path := filepath.Join(dir, string(rune('a'+i))+".db")
		if _, err := WriteDB(path, s, DBInfo{ConsistentIndex: 3, Term: 1}); err != nil {
			f.Fatal(err)
		}
		db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(encodeFuzzBuckets(f, db))
		db.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var info FileInfo
		snap, err := decodeDB(parseFuzzBuckets(data), &info, nil)
		if err != nil {
			return
		}
		if _, err := HashKV(snap, 0); err != nil {
			t.Fatalf("HashKV of a decoded snapshot: %v", err)
		}
		if _, err := CompactionHash(snap, snap.State.Rev); err != nil {
			t.Fatalf("CompactionHash of a decoded snapshot: %v", err)
		}
		_, _ = revision.FromSnapshot(snap)
	})
}

// FuzzReadSnapshot feeds mutated database files to ReadFile (bbolt
// included): an error or a snapshot, never a crash. It writes a file per
// input, so it is slow; make fuzz runs FuzzDecodeSnapshotDB, and `go test`
// runs this one's corpus (testdata/fuzz) as regression tests.
func FuzzReadSnapshot(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.db")
	if _, err := WriteDB(seed, testView(f).Snapshot(), DBInfo{ConsistentIndex: 3, Term: 1}); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		tmp := t.TempDir()
		p := filepath.Join(tmp, "in.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		snap, _, err := ReadFile(p, ReadOptions{SkipHashCheck: true, TempDir: tmp})
		if err != nil {
			return
		}
		if _, err := HashKV(snap, 0); err != nil {
			t.Fatalf("HashKV of a decoded snapshot: %v", err)
		}
		_, _ = revision.FromSnapshot(snap)
	})
}
