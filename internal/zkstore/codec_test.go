package zkstore

import (
	"errors"
	"reflect"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

func sampleEntry() *revision.Entry {
	return &revision.Entry{
		Writer: revision.WriterTag{Nonce: 0xdeadbeef, Seq: 42},
		Ops: []revision.Op{
			{Kind: revision.OpLeaseGrant, Lease: 7, TTL: 60},
			{Kind: revision.OpTxn, Rev: 5, Changes: []revision.Change{
				{Key: []byte("a"), Value: []byte("1"), Lease: 7},
				{Key: []byte("b"), Value: []byte{}},
				{Delete: true, Key: []byte("c")},
			}},
			{Kind: revision.OpCompact, Rev: 3},
			{Kind: revision.OpLeaseCheckpoint, Lease: 7, TTL: 30},
			{Kind: revision.OpLeaseRevoke, Lease: 7},
		},
	}
}

func TestEntryRoundTrip(t *testing.T) {
	e := sampleEntry()
	got, err := DecodeEntry(EncodeEntry(e))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
	}
	// The tags of forwarded requests (format 1 too: an older build refuses
	// the op kind as a newer zketcd's).
	e.Ops = append(e.Ops, revision.Op{Kind: revision.OpOrigin, Origin: revision.WriterTag{Nonce: 0xfeedface, Seq: 9}, Rev: 5})
	if got, err = DecodeEntry(EncodeEntry(e)); err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip with an origin op:\n got %+v %v\nwant %+v", got, err, e)
	}
	empty, err := DecodeEntry(EncodeEntry(&revision.Entry{}))
	if err != nil || len(empty.Ops) != 0 {
		t.Fatalf("empty entry: %+v %v", empty, err)
	}
}

// RecordBytes is the record's length, for every op kind and for varints
// of every width (negative ones too).
func TestRecordBytesIsTheEncodedLength(t *testing.T) {
	big := make([]byte, 300<<10)
	withOrigin := sampleEntry()
	withOrigin.Ops = append(withOrigin.Ops, revision.Op{Kind: revision.OpOrigin, Origin: revision.WriterTag{Nonce: 1 << 63, Seq: 9}, Rev: 1 << 40})
	for name, e := range map[string]*revision.Entry{
		"empty":  {},
		"sample": sampleEntry(),
		"origin": withOrigin,
		"extremes": {Writer: revision.WriterTag{Nonce: ^uint64(0), Seq: 127}, Ops: []revision.Op{
			{Kind: revision.OpTxn, Rev: -1, Changes: []revision.Change{{Key: big, Value: big, Lease: -1 << 62}, {Key: []byte{}, Value: nil, Lease: 64}}},
			{Kind: revision.OpLeaseGrant, Lease: -64, TTL: 1 << 62},
			{Kind: revision.OpAuth, Auth: big[:200]},
			{Kind: revision.OpAlarm, Alarm: revision.AlarmChange{Activate: true, Alarm: revision.Alarm{Member: ^uint64(0), Type: -1}}},
			{Kind: revision.OpAlarm, Alarm: revision.AlarmChange{Alarm: revision.Alarm{Member: 128, Type: 2}}},
		}},
	} {
		if got, want := RecordBytes(e), len(EncodeEntry(e)); got != want {
			t.Errorf("%s: RecordBytes %d, encoded %d", name, got, want)
		}
	}
}

func TestDecodeRejectsCorruption(t *testing.T) {
	data := EncodeEntry(sampleEntry())
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, err := DecodeEntry(bad); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("flipping byte %d: %v", i, err)
		}
	}
	for n := 0; n < len(data); n++ {
		if _, err := DecodeEntry(data[:n]); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := DecodeEntry([]byte(`{"json":"not ours"}`)); !errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("foreign data: %v", err)
	}
}

// FuzzDecodeEntry checks that no input makes the decoder panic or allocate
// without bound, and that whatever decodes re-encodes to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(EncodeEntry(sampleEntry()))
	f.Add(EncodeEntry(&revision.Entry{}))
	f.Add([]byte{1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xf, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data)
		if err != nil {
			return
		}
		again := EncodeEntry(e)
		if n := RecordBytes(e); n != len(again) {
			t.Fatalf("RecordBytes = %d, the record has %d bytes", n, len(again))
		}
		if string(again) != string(data) {
			// Varints have one canonical form when written by us; a
			// non-canonical input may decode, but must still be stable.
			e2, err := DecodeEntry(again)
			if err != nil || !reflect.DeepEqual(e, e2) {
				t.Fatalf("unstable decode: %v", err)
			}
		}
	})
}

// FuzzDecodeSnapshot checks that no input makes the snapshot decoder panic
// or allocate without bound.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(EncodeSnapshot(&revision.Snapshot{
		State:  revision.State{LSN: 9, Rev: 7, CompactRev: 5, Zxid: 0x100000004},
		Leases: []revision.Lease{{ID: 3, TTL: 10}},
		Keys: []revision.KeyHistory{{Key: []byte("a"), Versions: []*revision.KeyValue{
			{ModRevision: 5, CreateRevision: 4, Version: 2, Value: []byte("v"), Lease: 3},
			{ModRevision: 6},
		}}},
	}))
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		_, _ = revision.FromSnapshot(snap)
	})
}

// A move's fence, in the source's form and the destination's (Arrived),
// round-trips and is counted as encoded; only the source's form fences.
func TestFenceOpRoundTrips(t *testing.T) {
	for _, mv := range []revision.Move{
		{Servers: "127.0.0.1:2181,127.0.0.1:2182", Root: "/zketcd/b"},
		{Root: "/r", Arrived: true},
	} {
		e := &revision.Entry{Writer: revision.WriterTag{Nonce: 3, Seq: 4}, Ops: []revision.Op{{Kind: revision.OpFence, Move: mv}}}
		got, err := DecodeEntry(EncodeEntry(e))
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip:\n got %+v %v\nwant %+v", got, err, e)
		}
		if got, want := RecordBytes(e), len(EncodeEntry(e)); got != want {
			t.Errorf("RecordBytes %d, encoded %d", got, want)
		}
		if fenced := got.Fence() != nil; fenced == mv.Arrived {
			t.Errorf("%+v: Fence() says fenced %v", mv, fenced)
		}
	}
}

// A revision bump (root format 4) is an op of a format-1 record: it round
// trips, compressed too, and RecordBytes counts it.
func TestBumpRevRoundTrips(t *testing.T) {
	e := &revision.Entry{Writer: revision.WriterTag{Nonce: 3, Seq: 4}, Ops: []revision.Op{
		{Kind: revision.OpBumpRev, Rev: 1 << 40},
		{Kind: revision.OpTxn, Rev: 1<<40 + 1, Changes: []revision.Change{{Key: []byte("/p/a"), Value: []byte("v")}}},
		{Kind: revision.OpBumpRev, Rev: 1<<40 + 9},
	}}
	for _, f := range []int{1, GapsMetaFormat} {
		got, err := DecodeEntry(EncodeEntryFormat(e, f))
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("root format %d: round trip:\n got %+v %v\nwant %+v", f, got, err, e)
		}
	}
	if got, want := RecordBytes(e), len(EncodeEntry(e)); got != want {
		t.Errorf("RecordBytes %d, encoded %d", got, want)
	}
}
