package etcdformat

import (
	"bytes"
	"testing"
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
