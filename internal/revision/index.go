package revision

import (
	"bytes"
	"sort"

	"github.com/google/btree"
)

// keyIndex is the history of one key: its versions in ascending
// ModRevision order. A tombstone (the key deleted at ModRevision) is a
// KeyValue with Version 0 and no value; it ends a generation.
type keyIndex struct {
	key      []byte
	versions []*KeyValue
}

func keyIndexLess(a, b *keyIndex) bool { return bytes.Compare(a.key, b.key) < 0 }

func newKeyTree() *btree.BTreeG[*keyIndex] {
	return btree.NewG[*keyIndex](32, keyIndexLess)
}

// latest returns the newest version, or nil if the key is currently deleted.
func (ki *keyIndex) latest() *KeyValue {
	if len(ki.versions) == 0 {
		return nil
	}
	kv := ki.versions[len(ki.versions)-1]
	if kv.Version == 0 {
		return nil
	}
	return kv
}

// at returns the version visible at rev, or nil if the key did not exist then.
func (ki *keyIndex) at(rev int64) *KeyValue {
	n := len(ki.versions)
	if n > 0 && ki.versions[n-1].ModRevision <= rev {
		return ki.latest()
	}
	i := sort.Search(n, func(i int) bool { return ki.versions[i].ModRevision > rev }) - 1
	if i < 0 || ki.versions[i].Version == 0 {
		return nil
	}
	return ki.versions[i]
}

// compact drops every version that no read at a revision >= rev can see.
// It reports whether the key has no history left.
func (ki *keyIndex) compact(rev int64) (empty bool) {
	i := sort.Search(len(ki.versions), func(i int) bool { return ki.versions[i].ModRevision > rev }) - 1
	if i < 0 {
		return len(ki.versions) == 0
	}
	if ki.versions[i].Version == 0 && ki.versions[i].ModRevision < rev {
		// The deletion is invisible at every revision >= rev. A deletion at
		// exactly rev stays: etcd still delivers it to a watch from rev.
		i++
	}
	if i > 0 {
		rest := make([]*KeyValue, len(ki.versions)-i)
		copy(rest, ki.versions[i:])
		ki.versions = rest
	}
	return len(ki.versions) == 0
}

// isSingleKey reports whether end selects just key (etcd: range_end unset).
func isSingleKey(end []byte) bool { return end == nil }

func sortedKeys(m map[string]struct{}) [][]byte {
	out := make([][]byte, 0, len(m))
	for k := range m {
		out = append(out, []byte(k))
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return out
}
