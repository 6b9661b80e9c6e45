package mirror

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PrefixHash is zketcd's hash of the keys under a prefix at one revision,
// computed the same way from an etcd (SourceHash) and from a zketcd root:
// CRC-32C over, in ascending key order, every live key's length and bytes,
// create revision, mod revision, version, lease ID, and its value's length
// and bytes (lengths and numbers as varints). It is not etcd's HashKV,
// which covers a whole key space with its history and so differs between
// a shared etcd and the copy of one of its prefixes. Not safe for
// concurrent use.
type PrefixHash struct {
	sum  uint32
	keys int
	buf  []byte
}

// NewPrefixHash returns an empty hash.
func NewPrefixHash() *PrefixHash { return &PrefixHash{} }

// Add hashes one key; keys must come in ascending order.
func (p *PrefixHash) Add(key, value []byte, create, mod, version, lease int64) {
	b := p.buf[:0]
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	for _, v := range []int64{create, mod, version, lease} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(value)))
	p.sum = crc32.Update(p.sum, castagnoli, b)
	p.sum = crc32.Update(p.sum, castagnoli, value)
	p.buf = b
	p.keys++
}

// Sum returns the hash of the keys added so far.
func (p *PrefixHash) Sum() uint32 { return p.sum }

// Keys returns how many keys were added.
func (p *PrefixHash) Keys() int { return p.keys }

// SourceHash computes PrefixHash of the keys under prefix (empty: every
// key) of an etcd (or zketcd) at revision rev, by a paginated Range of
// page keys at a time, and returns it with the number of keys. Errors are
// the Range's (ErrCompacted, ErrFutureRev among them), wrapped.
func SourceHash(ctx context.Context, c *clientv3.Client, prefix []byte, rev int64, page int) (uint32, int, error) {
	if page <= 0 {
		page = 1000
	}
	key, end := []byte{0}, "\x00"
	if len(prefix) > 0 {
		key, end = prefix, clientv3.GetPrefixRangeEnd(string(prefix))
	}
	h := NewPrefixHash()
	for {
		resp, err := c.Get(ctx, string(key), clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(int64(page)))
		if err != nil {
			return 0, 0, fmt.Errorf("mirror: hash the source's prefix at revision %d: %w", rev, err)
		}
		for _, kv := range resp.Kvs {
			h.Add(kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return h.Sum(), h.Keys(), nil
		}
		key = append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0)
	}
}
