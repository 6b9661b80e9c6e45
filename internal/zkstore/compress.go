package zkstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compression (root format 2): log entries of compressedEntryFormat and
// base snapshots of compressedSnapshotFormat hold zstd data. zstd at its
// fastest level was chosen over s2 on kube-apiserver's objects: about 3.2×
// smaller where s2 makes them 2.5× (ZooKeeper keeps every stored byte in
// the heap of each member, so the ratio is memory), for ~10 ns of CPU per
// byte written; decoding costs ~1–2 ns per byte (docs/bench/analysis.md,
// "Compression").
//
// Neither form adds zstd's own checksum: the records keep their CRC-32C.

// compressedEntryFormat is a log entry whose format-1 record (checksum
// included) is stored as one zstd frame:
//
//	byte    3
//	uvarint length of the format-1 record
//	...     zstd frame of the record
//	uint32  CRC-32C of everything before it (big endian)
const compressedEntryFormat = 3

// minCompressBytes is the smallest entry worth compressing: below it a
// frame's overhead eats the gain.
const minCompressBytes = 256

// maxDecodedEntryBytes bounds what one compressed entry may decode to.
const maxDecodedEntryBytes = 1 << 30

// entryWindowBytes is the zstd window of compressed entries: every build
// has encoded them with it, so a frame asking for a larger one is corrupt
// (or hostile: the decoder would allocate the window it asks for, up to
// maxDecodedEntryBytes, before finding out).
const entryWindowBytes = 1 << 20

// entryCodec is the zstd encoder and decoder of log entries, shared by
// every Store of the process and built on first use. Both are safe for
// concurrent use and hold nothing between calls but buffers.
var entryCodec = sync.OnceValue(func() *codec {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(4),
		zstd.WithWindowSize(entryWindowBytes), zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
	if err != nil {
		panic(fmt.Sprintf("zstd encoder: %v", err)) // only for invalid options
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(4), zstd.WithDecoderMaxMemory(maxDecodedEntryBytes),
		zstd.WithDecoderMaxWindow(entryWindowBytes), zstd.IgnoreChecksum(true))
	if err != nil {
		panic(fmt.Sprintf("zstd decoder: %v", err))
	}
	return &codec{enc: enc, dec: dec}
})

type codec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// compressEntry returns record (a format-1 entry) in compressedEntryFormat
// if that is smaller, else record itself.
func compressEntry(record []byte) []byte {
	if len(record) < minCompressBytes {
		return record
	}
	out := make([]byte, 0, len(record)/2+16)
	out = append(out, compressedEntryFormat)
	out = binary.AppendUvarint(out, uint64(len(record)))
	out = entryCodec().enc.EncodeAll(record, out)
	if len(out)+4 >= len(record) {
		return record
	}
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, crcTable))
}

// records holds buffers for decompressed entry records (*[]byte): a record
// is garbage once parsed (the decoder copies every key and value it keeps),
// and a recovery replaying a log of kube-like entries otherwise left as
// many bytes of garbage as the log holds data, collected meanwhile.
var records = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRecord is the largest record buffer records keeps: one huge
// entry must not pin its size in every pooled buffer.
const maxPooledRecord = 1 << 20

// decompressEntry returns the format-1 record a compressedEntryFormat
// entry holds, appended to into[:0] (which it may reuse); data's checksum
// has been verified.
func decompressEntry(body, into []byte) ([]byte, error) {
	d := decoder{b: body[1:]}
	n := d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	if n > maxDecodedEntryBytes || n < 5 {
		return nil, fmt.Errorf("%w: compressed entry of %d bytes", ErrCorruptEntry, n)
	}
	// The declared length bounds the first allocation only as far as the
	// frame could plausibly expand; DecodeAll grows it if needed.
	if uint64(cap(into)) < min(n, uint64(len(d.b))*64) {
		into = make([]byte, 0, min(n, uint64(len(d.b))*64))
	}
	out, err := entryCodec().dec.DecodeAll(d.b, into[:0])
	if err != nil {
		return nil, fmt.Errorf("%w: decompress: %v", ErrCorruptEntry, err)
	}
	if uint64(len(out)) != n {
		return nil, fmt.Errorf("%w: decompressed %d bytes, want %d", ErrCorruptEntry, len(out), n)
	}
	return out, nil
}

// snapshotWindowBytes is the zstd window of compressed base snapshots: as
// with entries, every build has encoded them with it, and a larger window
// asked for is corrupt.
const snapshotWindowBytes = 4 << 20

// newStreamCompressor returns a zstd stream writer onto w (base
// snapshots). Close flushes it; it does not close w.
func newStreamCompressor(w io.Writer) io.WriteCloser {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(snapshotWindowBytes), zstd.WithEncoderCRC(false))
	if err != nil {
		panic(fmt.Sprintf("zstd stream encoder: %v", err)) // only for invalid options
	}
	return zw
}

type streamDecompressor struct{ *zstd.Decoder }

func (s streamDecompressor) Close() { s.Decoder.Close() }

// newStreamDecompressor returns a zstd stream reader of r (base
// snapshots). The caller closes it.
func newStreamDecompressor(r io.Reader) (streamDecompressor, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxWindow(snapshotWindowBytes), zstd.IgnoreChecksum(true))
	if err != nil {
		return streamDecompressor{}, err
	}
	return streamDecompressor{zr}, nil
}
