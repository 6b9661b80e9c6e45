package zkstore

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

// The stored forms of format 1, as this build and every earlier one wrote
// them: they must stay readable, and unchanged, on every root.
const (
	goldenEntry    = "01effdb6f50d2a05030e78010a0300016101310e00016200000101630206050e3c040ee8398145"
	goldenSnapshot = "01120a069a01010e783c01016101000a008c0108040e7801317db026b9"
)

func goldenSnapshotValue() *revision.Snapshot {
	return &revision.Snapshot{
		State:  revision.State{LSN: 9, Rev: 5, CompactRev: 3, Zxid: 77},
		Leases: []revision.Lease{{ID: 7, TTL: 60, RemainingTTL: 30}},
		Keys: []revision.KeyHistory{{Key: []byte("a"), Versions: []*revision.KeyValue{
			{Key: []byte("a"), Value: []byte("1"), ModRevision: 5, CreateRevision: 4, Version: 2, Lease: 7, ModZxid: 70, CreateZxid: 60},
		}}},
	}
}

func TestFormatOneEntriesAndSnapshotsStayReadableAndUnchanged(t *testing.T) {
	data, _ := hex.DecodeString(goldenEntry)
	e, err := DecodeEntry(data)
	if err != nil || !reflect.DeepEqual(e, sampleEntry()) {
		t.Fatalf("golden entry: %+v %v", e, err)
	}
	if got := hex.EncodeToString(EncodeEntry(sampleEntry())); got != goldenEntry {
		t.Fatalf("the entry encoding changed:\n got %s\nwant %s", got, goldenEntry)
	}
	data, _ = hex.DecodeString(goldenSnapshot)
	s, err := DecodeSnapshot(data)
	if err != nil || !reflect.DeepEqual(s, goldenSnapshotValue()) {
		t.Fatalf("golden snapshot: %+v %v", s, err)
	}
	if got := hex.EncodeToString(EncodeSnapshot(goldenSnapshotValue())); got != goldenSnapshot {
		t.Fatalf("the snapshot encoding changed:\n got %s\nwant %s", got, goldenSnapshot)
	}
}

// reseal replaces data's first byte with format and fixes the checksum, as a
// newer writer would produce a valid record.
func reseal(data []byte, format byte) []byte {
	b := append([]byte{format}, data[1:len(data)-4]...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func wantNewer(t *testing.T, err error, what string, got, known int) {
	t.Helper()
	var fe *FormatError
	if !errors.Is(err, ErrNewerFormat) || !errors.As(err, &fe) || fe.Got != got || fe.Known != known {
		t.Fatalf("err %v, want a FormatError %d > %d", err, got, known)
	}
	if errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("a newer format reported as corrupt: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, what) || !strings.Contains(msg, "newer than this zketcd reads") {
		t.Fatalf("message %q does not name %q and the versions", msg, what)
	}
}

func TestDecodeRefusesANewerEntryFormatNamingTheVersions(t *testing.T) {
	good := EncodeEntry(sampleEntry())
	for _, f := range []byte{maxEntryFormat + 1, maxEntryFormat + 2, 200} {
		_, err := DecodeEntry(reseal(good, f))
		wantNewer(t, err, fmt.Sprintf("log entry has format %d", f), int(f), maxEntryFormat)
		// A damaged one is corrupt, whatever its first byte says.
		bad := reseal(good, f)
		bad[len(bad)/2] ^= 0x40
		if _, err := DecodeEntry(bad); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("damaged format %d record: %v", f, err)
		}
	}
}

func TestDecodeRefusesAnUnknownOpKindAsANewerFormat(t *testing.T) {
	b := []byte{entryFormat}
	b = binary.AppendUvarint(b, 1) // nonce
	b = binary.AppendUvarint(b, 1) // seq
	b = binary.AppendUvarint(b, 1) // one op
	b = append(b, 250, 0, 0)       // of an unknown kind
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	_, err := DecodeEntry(b)
	wantNewer(t, err, "op kind 250", entryFormat, entryFormat)
}

func TestDecodeRefusesANewerSnapshotFormat(t *testing.T) {
	good := EncodeSnapshot(goldenSnapshotValue())
	_, err := DecodeSnapshot(reseal(good, maxSnapshotFormat+1))
	wantNewer(t, err, fmt.Sprintf("base snapshot has format %d", maxSnapshotFormat+1), maxSnapshotFormat+1, maxSnapshotFormat)
}
