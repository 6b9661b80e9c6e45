package revision

import (
	"bytes"
	"sort"

	"github.com/google/btree"
)

// keyIndex is the history of one key: its versions in ascending
// ModRevision order. A tombstone (the key deleted at ModRevision) is a
// KeyValue with Version 0 and no value; it ends a generation.
//
// A keyIndex in the view's tree is never modified: a change replaces it
// with a new one (whose versions may share the old array, appending past
// the old length), so a snapshot holding a clone of the tree reads the
// keyIndexes it holds without the view's lock.
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

// with returns a keyIndex holding ki's versions and then kv.
func (ki *keyIndex) with(kv *KeyValue) *keyIndex {
	return &keyIndex{key: ki.key, versions: append(ki.versions, kv)}
}

// retainedFrom returns the index of the oldest version a read at a
// revision >= rev can see (or a watch from rev needs): the versions before
// it are compacted away. len(versions) means none is left.
func retainedFrom(versions []*KeyValue, rev int64) int {
	i := sort.Search(len(versions), func(i int) bool { return versions[i].ModRevision > rev }) - 1
	if i < 0 {
		return 0
	}
	if versions[i].Version == 0 && versions[i].ModRevision < rev {
		// The deletion is invisible at every revision >= rev. A deletion at
		// exactly rev stays: etcd still delivers it to a watch from rev.
		i++
	}
	return i
}

// compacted returns ki without the versions no read at a revision >= rev
// can see: ki itself if it has none such, nil if nothing is left.
func (ki *keyIndex) compacted(rev int64) *keyIndex {
	i := retainedFrom(ki.versions, rev)
	switch {
	case i == 0:
		return ki
	case i == len(ki.versions):
		return nil
	}
	rest := make([]*KeyValue, len(ki.versions)-i)
	copy(rest, ki.versions[i:])
	return &keyIndex{key: ki.key, versions: rest}
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
