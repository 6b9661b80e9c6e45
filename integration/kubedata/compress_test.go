package kubedata

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// TestCompressionOfKubeLikeEntries measures what compressing zketcd's log
// entries and base generations would save on the mix: the ratio and the
// CPU per byte of each candidate codec, on entries of 1 and 64 objects and
// on a base of 20,000 objects compressed as one stream. It only logs (run
// with -v and KUBEDATA_COMPRESSION=1; docs/benchmarks.md quotes a run).
func TestCompressionOfKubeLikeEntries(t *testing.T) {
	if os.Getenv("KUBEDATA_COMPRESSION") == "" {
		t.Skip("a measurement: set KUBEDATA_COMPRESSION=1")
	}
	g := New(1)
	const n = 20000
	objs := make([]Object, n)
	for i := range objs {
		objs[i] = g.Object(i)
	}
	entry := func(from, to int) []byte {
		var changes []revision.Change
		for _, o := range objs[from:to] {
			changes = append(changes, revision.Change{Key: []byte(o.Key), Value: o.Value})
		}
		return zkstore.EncodeEntry(&revision.Entry{Writer: revision.WriterTag{Nonce: 1, Seq: uint64(from)},
			Ops: []revision.Op{{Kind: revision.OpTxn, Rev: int64(from + 2), Changes: changes}}})
	}
	var single, batched [][]byte
	for i := 0; i < n; i++ {
		single = append(single, entry(i, i+1))
	}
	for i := 0; i+64 <= n; i += 64 {
		batched = append(batched, entry(i, i+64))
	}
	var base []byte
	for _, e := range single {
		base = append(base, e...)
	}

	zfast, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	zdef, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	zdec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	type codec struct {
		name string
		enc  func(dst, src []byte) []byte
		dec  func(src []byte) ([]byte, error)
	}
	codecs := []codec{
		{"s2", func(d, s []byte) []byte { return s2.Encode(d[:0], s) }, func(s []byte) ([]byte, error) { return s2.Decode(nil, s) }},
		{"s2-better", func(d, s []byte) []byte { return s2.EncodeBetter(d[:0], s) }, func(s []byte) ([]byte, error) { return s2.Decode(nil, s) }},
		{"zstd-fastest", func(d, s []byte) []byte { return zfast.EncodeAll(s, d[:0]) }, func(s []byte) ([]byte, error) { return zdec.DecodeAll(s, nil) }},
		{"zstd-default", func(d, s []byte) []byte { return zdef.EncodeAll(s, d[:0]) }, func(s []byte) ([]byte, error) { return zdec.DecodeAll(s, nil) }},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| codec | input | raw MB | stored MB | ratio | encode ns/B | decode ns/B |\n|---|---|---|---|---|---|---|\n")
	for _, c := range codecs {
		for _, in := range []struct {
			name string
			data [][]byte
		}{{"entries of 1 object", single}, {"entries of 64 objects", batched}, {"base of 20,000 objects", [][]byte{base}}} {
			raw, stored := 0, 0
			var dst []byte
			outs := make([][]byte, len(in.data))
			start := time.Now()
			for i, d := range in.data {
				dst = c.enc(dst, d)
				outs[i] = append([]byte(nil), dst...)
				raw += len(d)
				stored += len(dst)
			}
			enc := time.Since(start)
			start = time.Now()
			for _, o := range outs {
				if _, err := c.dec(o); err != nil {
					t.Fatal(err)
				}
			}
			dec := time.Since(start)
			fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.2f | %.2f | %.2f |\n", c.name, in.name,
				float64(raw)/1e6, float64(stored)/1e6, float64(raw)/float64(stored),
				float64(enc.Nanoseconds())/float64(raw), float64(dec.Nanoseconds())/float64(raw))
		}
	}
	t.Log(b.String())
}
