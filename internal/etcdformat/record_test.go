package etcdformat

import (
	"bytes"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

func TestRevKeyRoundTripsAndSortsLikeRevisions(t *testing.T) {
	revs := []Rev{{Main: 1}, {Main: 1, Sub: 2}, {Main: 2, Tombstone: true}, {Main: 2, Sub: 1}, {Main: 300, Sub: 7}}
	var prev []byte
	for _, r := range revs {
		b := AppendRevKey(nil, r)
		got, err := ParseRevKey(b)
		if err != nil || got != r {
			t.Fatalf("ParseRevKey(%x) = %+v, %v; want %+v", b, got, err, r)
		}
		if prev != nil && bytes.Compare(prev, b) >= 0 {
			t.Fatalf("key of %+v does not sort after the previous one", r)
		}
		prev = b
	}
}

func TestParseRevKeyRejectsMalformedKeys(t *testing.T) {
	good := AppendRevKey(nil, Rev{Main: 5, Sub: 1})
	bad := [][]byte{
		nil,
		good[:16],
		append(append([]byte(nil), good...), 'x'),
		append(append([]byte(nil), good...), 't', 't'),
		func() []byte { b := append([]byte(nil), good...); b[8] = '-'; return b }(),
		AppendRevKey(nil, Rev{Main: -1}),
	}
	for _, b := range bad {
		if _, err := ParseRevKey(b); err == nil {
			t.Errorf("ParseRevKey(%x) succeeded", b)
		}
	}
}

// AppendValue into a reused buffer gives Value's bytes, record after record.
func TestAppendValueReusesItsBufferAndMatchesValue(t *testing.T) {
	kvs := []*revision.KeyValue{
		{Key: []byte("a"), Value: bytes.Repeat([]byte("x"), 5000), CreateRevision: 2, ModRevision: 9, Version: 3, Lease: 7},
		{Key: []byte("b"), ModRevision: 10}, // a deletion
		{Key: []byte("c"), Value: []byte("v"), CreateRevision: 11, ModRevision: 11, Version: 1},
	}
	var buf []byte
	for _, kv := range kvs {
		want, err := Value(kv)
		if err != nil {
			t.Fatal(err)
		}
		if buf, err = AppendValue(buf[:0], kv); err != nil || !bytes.Equal(buf, want) {
			t.Fatalf("%s: AppendValue %x, Value %x (%v)", kv.Key, buf, want, err)
		}
	}
}
