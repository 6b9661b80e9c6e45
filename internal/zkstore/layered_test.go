package zkstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// dumpSnap prints every key's versions and the state, for comparing.
func dumpSnap(s *revision.Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%+v leases %v\n", s.State, s.Leases)
	s.Each(func(kh revision.KeyHistory) bool {
		fmt.Fprintf(&b, "%s:", kh.Key)
		for _, kv := range kh.Versions {
			fmt.Fprintf(&b, " %d.%d/v%d/c%d/l%d=%s", kv.ModRevision, kv.Sub, kv.Version, kv.CreateRevision, kv.Lease, kv.Value)
		}
		b.WriteString("\n")
		return true
	})
	return b.String()
}

// On a root of format 3, a compaction that changed few keys stores a delta
// after the previous generation's layers, and loading the generation gives
// the view's state exactly; after maxDeltas deltas (or once a quarter of
// the keys changed) a whole snapshot is written again. Collecting old
// generations and FreeCompacted never delete a layer the current
// generation uses; a delta that goes away or changes is ErrBaseChanged or
// corrupt.
func TestLayeredBaseGenerationsLoadAsTheViewTheyWereTakenFrom(t *testing.T) {
	srv := zkservertest.Standalone(t)
	s := openStoreWith(t, Config{Servers: []string{srv.Addr()}, Root: "/layered", MaxEntryBytes: 16 << 10})
	if s.Format() < layeredMetaFormat {
		t.Fatalf("a new root has format %d", s.Format())
	}
	ctx := context.Background()
	cur, err := s.ReadBase()
	if err != nil {
		t.Fatal(err)
	}
	lf := &layeredFixture{t: t, s: s, fence: Fence{path: s.l.meta()}, // a guard that holds
		v: revision.NewView(1, 1), lsn: 1, rev: 1, live: map[int]bool{}, cur: cur}
	write, compact, publish := lf.write, lf.compact, lf.publish

	for i := 0; i < 2000; i += 100 {
		write(i, i+100, false)
	}
	compact()
	full := publish(1)
	if len(full.Deltas) != 0 || full.Format != fullBaseFormat {
		t.Fatalf("the first generation has %d deltas", len(full.Deltas))
	}
	// Rewrites, deletions and a re-creation, a few keys each time.
	for round := 1; round <= maxDeltas; round++ {
		write(round*10, round*10+8, false)
		write(round*10+300, round*10+305, true)
		write(round*10+300, round*10+302, false)
		compact()
		nb := publish(uint64(1 + round))
		if len(nb.Deltas) != round || nb.Path != full.Path || nb.Format != layeredBaseFormat {
			t.Fatalf("round %d: %d deltas on %s (the whole one %s)", round, len(nb.Deltas), nb.Path, full.Path)
		}
		if d := nb.Deltas[round-1]; d.Size*4 > full.Size {
			t.Fatalf("round %d: a delta of %d bytes against %d for everything", round, d.Size, full.Size)
		}
		if round == 2 {
			refusesDamagedDescriptions(t, s, nb)
		}
	}
	// The chain is full: the next generation is whole again, and the
	// layers before it stay until the one after (an instance may be
	// loading them).
	write(0, 5, false)
	compact()
	again := publish(100)
	if len(again.Deltas) != 0 || again.Path == full.Path || again.PrevPath != full.Path || len(again.PrevDeltas) != maxDeltas {
		t.Fatalf("after %d deltas: %d deltas, path %s, previous %s and %d deltas", maxDeltas, len(again.Deltas), again.Path, again.PrevPath, len(again.PrevDeltas))
	}
	// Over a quarter of the keys changed: whole.
	write(0, 1000, false)
	compact()
	if nb := publish(101); len(nb.Deltas) != 0 {
		t.Fatalf("%d deltas after half the keys changed", len(nb.Deltas))
	}
	// A delta again; FreeCompacted keeps the layers the current one uses.
	write(7, 9, false)
	compact()
	nb := publish(102)
	if len(nb.Deltas) != 1 {
		t.Fatalf("%d deltas", len(nb.Deltas))
	}
	freed, _, err := s.FreeCompacted(ctx, nb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadBase(ctx, freed); err != nil {
		t.Fatalf("after FreeCompacted: %v", err)
	}
	// A changed byte of the delta is corrupt; without it, the generation
	// changed.
	p := baseChunk(nb.Deltas[0].Path, 0)
	data, _, _ := s.conn.Get(p)
	data[len(data)/2] ^= 1
	if _, err := s.conn.Set(p, data, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadBase(ctx, freed); !errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("a changed byte in a delta: %v", err)
	}
	if err := s.conn.Delete(p, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadBase(ctx, freed); !errors.Is(err, ErrBaseChanged) {
		t.Fatalf("a delta gone: %v", err)
	}
}

// layeredFixture is a view written to and published as base generations of
// s, each checked to load as the view it was taken from.
type layeredFixture struct {
	t        *testing.T
	s        *Store
	fence    Fence
	v        *revision.View
	lsn, rev int64
	live     map[int]bool
	cur      Base
}

func (f *layeredFixture) apply(ops ...revision.Op) {
	f.t.Helper()
	f.lsn++
	if _, err := f.v.Apply(&revision.Entry{LSN: f.lsn, Zxid: f.lsn, Ops: ops}); err != nil {
		f.t.Fatal(err)
	}
}

func layeredKey(i int) []byte { return []byte(fmt.Sprintf("/registry/pods/ns/pod-%04d", i)) }

// write puts the keys from..to (del: deletes those that exist) in one
// revision.
func (f *layeredFixture) write(from, to int, del bool) {
	f.t.Helper()
	var cs []revision.Change
	for i := from; i < to; i++ {
		if del {
			if f.live[i] {
				cs = append(cs, revision.Change{Key: layeredKey(i), Delete: true})
				delete(f.live, i)
			}
			continue
		}
		cs = append(cs, revision.Change{Key: layeredKey(i), Value: []byte(fmt.Sprintf(`{"kind":"Pod","rev":%d,"i":%d}`, f.rev+1, i))})
		f.live[i] = true
	}
	if len(cs) == 0 {
		return
	}
	f.rev++
	f.apply(revision.Op{Kind: revision.OpTxn, Rev: f.rev, Changes: cs})
}

// compact compacts the view at its revision.
func (f *layeredFixture) compact() {
	f.t.Helper()
	f.apply(revision.Op{Kind: revision.OpCompact, Rev: f.rev})
	for f.v.TrimCompacted(64) {
	}
}

// publish writes the view as the next base generation (nonce names the
// writer's attempt), publishes it, collects the generations it replaces,
// and checks that it loads as the view.
func (f *layeredFixture) publish(nonce uint64) Base {
	t, s, ctx := f.t, f.s, context.Background()
	t.Helper()
	snap := f.v.Snapshot()
	nb, err := s.PrepareBase(ctx, snap, f.cur, nonce)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generation %d: %d deltas, %d bytes", nb.Gen, len(nb.Deltas), nb.StoredSize())
	if raw := EncodeSnapshot(snap); nb.Raw == 0 || nb.RawSize() < int64(len(raw))-5 {
		// Every layer records its bytes before compression, at least
		// the view's whole encoding (less its format byte and trailer).
		t.Fatalf("generation %d records %d bytes before compression (%d with its deltas), the view encodes to %d", nb.Gen, nb.Raw, nb.RawSize(), len(raw))
	}
	if nb, err = s.PublishBase(f.fence, nb); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CollectBases(ctx, f.fence, nb); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadBase(ctx, nb)
	if err != nil {
		t.Fatalf("load generation %d (%d deltas): %v", nb.Gen, len(nb.Deltas), err)
	}
	if a, b := dumpSnap(got), dumpSnap(snap); a != b {
		t.Fatalf("generation %d (%d deltas) loads as\n%s\nwant\n%s", nb.Gen, len(nb.Deltas), a, b)
	}
	if _, err := revision.FromSnapshot(got); err != nil {
		t.Fatal(err)
	}
	f.cur = nb
	f.v.PruneRemoved(nb.Rev)
	return nb
}

// refusesDamagedDescriptions checks that hostile or damaged descriptions
// of layered (a generation with two deltas) are refused, never misread:
// deltas out of order, a whole snapshot named as a delta, a delta named as
// the whole snapshot (corrupt), a wrong chunk count (corrupt, or changed).
func refusesDamagedDescriptions(t *testing.T, s *Store, layered Base) {
	t.Helper()
	ctx := context.Background()
	for name, edit := range map[string]func(b *Base){
		"deltas swapped": func(b *Base) { b.Deltas[0], b.Deltas[1] = b.Deltas[1], b.Deltas[0] },
		"whole named as a delta": func(b *Base) {
			b.Deltas[0] = Layer{Gen: b.FullGen, Path: b.Path, Chunks: b.Chunks, Size: b.Size, Sum: b.Sum}
		},
		"delta named as the whole": func(b *Base) {
			d := b.Deltas[0]
			b.Path, b.Chunks, b.Size, b.Sum, b.FullGen = d.Path, d.Chunks, d.Size, d.Sum, d.Gen
		},
		"chunk count": func(b *Base) { b.Deltas[1].Chunks += 1000 },
	} {
		var bad Base
		data, _ := json.Marshal(layered)
		if err := json.Unmarshal(data, &bad); err != nil {
			t.Fatal(err)
		}
		edit(&bad)
		if _, err := s.LoadBase(ctx, bad); !errors.Is(err, ErrCorruptEntry) && !errors.Is(err, ErrBaseChanged) {
			t.Fatalf("%s: %v", name, err)
		} else if name != "chunk count" && !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("%s: %v, want corrupt", name, err)
		}
	}

}

// encodeDelta returns the stored form of d.
func encodeDelta(d *revision.Delta) []byte {
	var buf bytes.Buffer
	_, _ = writeDelta(&buf, d)
	return buf.Bytes()
}

// FuzzDecodeDelta checks that no delta body, compressed and sealed as a
// stored delta is, makes the decoder or Delta.Apply panic, and that what
// decodes applies to a state at its revision or is refused.
func FuzzDecodeDelta(f *testing.F) {
	base := compressibleSnapshot()
	keys := []revision.KeyHistory{}
	base.Each(func(kh revision.KeyHistory) bool { keys = append(keys, kh); return true })
	d := &revision.Delta{Since: base.State.Rev, Changed: &revision.Snapshot{State: base.State, Keys: keys[:1]}, Removed: [][]byte{[]byte("gone")}}
	d.Changed.State.LSN++
	body := func(d *revision.Delta) []byte {
		// The uncompressed body: what the fuzzer mutates.
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		_ = writeDeltaBody(bw, d)
		_ = bw.Flush()
		return buf.Bytes()
	}
	f.Add(body(d))
	f.Add(body(&revision.Delta{Changed: &revision.Snapshot{}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf bytes.Buffer
		_, _ = writeStored(&buf, deltaFormat, true, func(w *bufio.Writer) error { _, err := w.Write(data); return err })
		got, err := readDelta(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Fatalf("not a corrupt-entry error: %v", err)
			}
			return
		}
		if merged, err := got.Apply(base); err == nil {
			_, _ = revision.FromSnapshot(merged)
		}
		if _, err := readDelta(bytes.NewReader(encodeDelta(got)), int64(len(encodeDelta(got)))); err != nil {
			t.Fatalf("re-encoded delta does not decode: %v", err)
		}
	})
}
