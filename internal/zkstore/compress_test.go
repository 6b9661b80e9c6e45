package zkstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"reflect"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/zketcd/zketcd/internal/revision"
)

// compressibleEntry is an entry whose values look like kube-apiserver's
// objects: repeated field names and label values.
func compressibleEntry() *revision.Entry {
	e := &revision.Entry{Writer: revision.WriterTag{Nonce: 9, Seq: 3}}
	var changes []revision.Change
	for i := 0; i < 20; i++ {
		v := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%02d","namespace":"team-a","labels":{"app.kubernetes.io/name":"checkout"}},"data":{"k":"%d"}}`, i, i)
		changes = append(changes, revision.Change{Key: []byte(fmt.Sprintf("/registry/configmaps/team-a/cm-%02d", i)), Value: []byte(v)})
	}
	e.Ops = []revision.Op{{Kind: revision.OpTxn, Rev: 2, Changes: changes}}
	return e
}

func compressibleSnapshot() *revision.Snapshot {
	s := &revision.Snapshot{State: revision.State{LSN: 9, Rev: 21, CompactRev: 21, Zxid: 77},
		Leases: []revision.Lease{{ID: 7, TTL: 60}}, Auth: []byte("auth"), Alarms: []revision.Alarm{{Member: 3, Type: 1}}}
	for i, c := range compressibleEntry().Ops[0].Changes {
		s.Keys = append(s.Keys, revision.KeyHistory{Key: c.Key, Versions: []*revision.KeyValue{
			{Key: c.Key, Value: c.Value, ModRevision: int64(2 + i), CreateRevision: int64(2 + i), Version: 1, ModZxid: 70, CreateZxid: 70},
		}})
	}
	return s
}

func TestEntriesCompressOnlyFromRootFormatTwo(t *testing.T) {
	e := compressibleEntry()
	plain := EncodeEntryFormat(e, 1)
	if !bytes.Equal(plain, EncodeEntry(e)) {
		t.Fatal("a root of format 1 got a form other than format 1")
	}
	packed := EncodeEntryFormat(e, 2)
	if packed[0] != compressedEntryFormat || len(packed) >= len(plain)/2 {
		t.Fatalf("format-2 root: first byte %d, %d bytes of %d", packed[0], len(packed), len(plain))
	}
	for _, data := range [][]byte{plain, packed} {
		got, err := DecodeEntry(data)
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("decode format %d: %v", data[0], err)
		}
	}
	// Small or incompressible entries stay in format 1 even then.
	if small := EncodeEntryFormat(sampleEntry(), 2); small[0] != entryFormat {
		t.Fatalf("a small entry was compressed (format %d)", small[0])
	}
}

func TestCompressedEntriesAreCheckedAndNeverNested(t *testing.T) {
	packed := EncodeEntryFormat(compressibleEntry(), 2)
	bad := append([]byte(nil), packed...)
	bad[len(bad)/2] ^= 0x10
	if _, err := DecodeEntry(bad); !errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("damaged compressed entry: %v", err)
	}
	// An intact frame whose record is not format 1 is corrupt.
	inner := append([]byte(nil), EncodeEntry(compressibleEntry())...)
	inner[0] = compressedEntryFormat
	nested := compressEntry(reseal(inner, compressedEntryFormat))
	if nested[0] == compressedEntryFormat {
		if _, err := DecodeEntry(nested); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("nested compressed entry: %v", err)
		}
	}
}

func TestSnapshotsRoundTripInBothFormats(t *testing.T) {
	s := compressibleSnapshot()
	plain, packed := EncodeSnapshot(s), encodeSnapshotCompressed(s)
	if plain[0] != snapshotFormat || packed[0] != compressedSnapshotFormat || len(packed) >= len(plain)/2 {
		t.Fatalf("formats %d/%d, %d vs %d bytes", plain[0], packed[0], len(packed), len(plain))
	}
	for _, data := range [][]byte{plain, packed} {
		got, err := DecodeSnapshot(data)
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Fatalf("decode format %d: %v\n got %+v", data[0], err, got)
		}
		bad := append([]byte(nil), data...)
		bad[len(bad)/2] ^= 0x08
		if _, err := DecodeSnapshot(bad); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("damaged format %d snapshot: %v", data[0], err)
		}
		if _, err := DecodeSnapshot(data[:len(data)-7]); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("truncated format %d snapshot: %v", data[0], err)
		}
	}
}

// A view's snapshot (a clone of its key index) encodes as the same bytes
// as the listed snapshot of the same state.
func TestViewSnapshotsEncodeAsTheirListedForm(t *testing.T) {
	s := compressibleSnapshot()
	v, err := revision.FromSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := EncodeSnapshot(v.Snapshot()), EncodeSnapshot(s); !bytes.Equal(got, want) {
		t.Fatalf("view snapshot encodes differently:\n got %x\nwant %x", got, want)
	}
}

// The compressed forms as this build wrote them: they must stay readable.
const (
	goldenEntryV3    = "03d91d28b52ffd60d90db50a004210352b8027020f78cff33c0042d7ded478b9a22dff27f896102709e6f87b12ec25d94ddafd13615dbf2e2d966f120e080f0c886df3f4cfe9ff94fecfe8ff84fecfe7ff74fecfe6ff64fef9df7dba4fd3244952144510043dcfe3384ed3340cc3fc476c9b9d9f2b2bdb660d6255d4262c165464abadc47601a914d7a58e3c678f5de8c38afdbc945ed9469556ec5c22527edea8d29167d594a1da462bbed4c0011bd22af03343c2ca8aafe06769c10cdb0378a92349837389482d9a88bada925d1a1db0212d6a59c0b40c3a165b0810030149022090043c209073433a32894d9a6e3f27263624b76d8fc8744769b2fd9c98d890dcb53d22d31da5a9f67362624372d3f6884c779426dacf89890dc99fedb199d828b9663f224c78d2782e4eac92fc5c4cac92fc5c4cac25f95c4cac25f95c9c5825f95c9c5825f9b9985825f9b998584bf2b99858b32480efce67243d1871fd1bac19babf38a9"
	goldenSnapshotV2 = "0228b52ffd60940ec50d00129a512d10a7a800f00c004590da5f5faec350175adefb14df7445a008902449c273879a9881aba888020b4044060cdb7b8c825b8018d90843bd2ec9d712ffb22c89af257cabaa22be8ef02b8a82f81ac2a7a649bf567f92a487af1f7c298a1cbe76f023086af8bac1876264f89ac18f4f7c2282af190b5f2ff84fbc2e85af15fccbb2225f477cabaa205f43fc8aa212be4ef0a9697a7cfdf0274942f81ac197a2e8e0eb033f822083af0d7c2846c7d70e3f86a13e8aa94533984a5052b4094305319d259b1699623a37c9399d36f14d7072974981b14c789ed40ca6dfc5a49017daa89c6c72828ae9cca4f7cd4d72dae8f34cb64c319d9be43483a90425458273d3463d29a0a255705d00c594c269166d3412504cb94efb2e7380e649cdfcc0d78cc6d70dff79265be6c8c92627e87c9edc2a5a05d7658e810bf86995797100445ce0f127904820013920f0b50332894039c96412817292c92402e52493494494934c26112827994c22504e329944a09c647212817292c924c2505e49e298b0498abc9858a0715262ba817292c52402e5248b4904ca491626112827594c22504eb29844a09c6431894079932c923289480acaa1c9514a01f31b2137"
)

func TestCompressedGoldenFormsStayReadable(t *testing.T) {
	for name, data := range map[string]string{"entry": goldenEntryV3, "snapshot": goldenSnapshotV2} {
		b, err := hex.DecodeString(data)
		if err != nil {
			t.Fatal(err)
		}
		switch name {
		case "entry":
			e, err := DecodeEntry(b)
			if err != nil || !reflect.DeepEqual(e, compressibleEntry()) {
				t.Fatalf("golden compressed entry: %v", err)
			}
		case "snapshot":
			s, err := DecodeSnapshot(b)
			if err != nil || !reflect.DeepEqual(s, compressibleSnapshot()) {
				t.Fatalf("golden compressed snapshot: %v", err)
			}
		}
	}
}

// FuzzDecodeCompressedEntry checks that no input makes the decoder of
// compressed entries panic or allocate without bound, and that what it
// decodes is stable.
func FuzzDecodeCompressedEntry(f *testing.F) {
	f.Add(EncodeEntryFormat(compressibleEntry(), 2))
	f.Add(compressEntry(EncodeEntry(sampleEntry())))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Seal whatever the fuzzer made, so the decoder behind the
		// checksum is what gets exercised.
		if len(data) < 2 {
			return
		}
		data = reseal(append(data, 0, 0, 0, 0), compressedEntryFormat)
		e, err := DecodeEntry(data)
		if err != nil {
			return
		}
		if _, err := DecodeEntry(EncodeEntryFormat(e, 2)); err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
	})
}

// FuzzDecodeCompressedSnapshot does the same for compressed base
// snapshots, checksum sealed.
func FuzzDecodeCompressedSnapshot(f *testing.F) {
	f.Add(encodeSnapshotCompressed(compressibleSnapshot()))
	f.Add(encodeSnapshotCompressed(&revision.Snapshot{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		data = reseal(append(data, 0, 0, 0, 0), compressedSnapshotFormat)
		snap, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		_, _ = revision.FromSnapshot(snap)
	})
}

// Decoded entries own their bytes: the buffer a compressed record was
// decompressed into is reused for the next ones, concurrently too, and
// changes nothing an earlier entry holds.
func TestDecodedEntriesKeepTheirBytesWhileRecordBuffersAreReused(t *testing.T) {
	entry := func(n int) *revision.Entry {
		e := compressibleEntry()
		for i := range e.Ops[0].Changes {
			c := &e.Ops[0].Changes[i]
			c.Value = bytes.Repeat([]byte{byte('a' + n%26)}, 300+n)
		}
		return e
	}
	var decoded []*revision.Entry
	for n := 0; n < 64; n++ {
		got, err := DecodeEntry(EncodeEntryFormat(entry(n), 2))
		if err != nil {
			t.Fatal(err)
		}
		decoded = append(decoded, got)
	}
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for n := 64; n < 128; n++ {
				if _, err := DecodeEntry(EncodeEntryFormat(entry(n), 2)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for n, got := range decoded {
		if !reflect.DeepEqual(got, entry(n)) {
			t.Fatalf("entry %d changed after later decodes", n)
		}
	}
}

// TestAFrameAskingForALargerWindowIsCorrupt: every build compresses entries
// with a 1 MiB window and snapshots with 4 MiB, so a frame that asks for
// more is corrupt, refused before its window is allocated (a fuzzer's
// frame of a few hundred bytes made the decoder allocate 590 MB).
func TestAFrameAskingForALargerWindowIsCorrupt(t *testing.T) {
	record := make([]byte, 3<<20)
	for i := range record {
		record[i] = byte(i*7919>>3) ^ byte(i>>11)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(16<<20), zstd.WithEncoderCRC(false))
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte{compressedEntryFormat}, binary.AppendUvarint(nil, uint64(len(record)))...)
	out = enc.EncodeAll(record, out)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(out, crcTable))
	if _, err := DecodeEntry(out); !errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("an entry frame with a 16 MiB window: %v, want ErrCorruptEntry", err)
	}
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(record)
	zw.Write(record)
	zw.Close()
	zr, err := newStreamDecompressor(&buf)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	if _, err := io.Copy(io.Discard, zr); err == nil {
		t.Fatal("a snapshot stream with a 16 MiB window decoded")
	}
}
