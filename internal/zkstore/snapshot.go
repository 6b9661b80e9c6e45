package zkstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/zketcd/zketcd/internal/revision"
)

// Snapshots (base generations) are stored in this binary form, then split
// into chunks within the byte budget:
//
//	byte    format (snapshotFormat, or compressedSnapshotFormat)
//	body:
//	varint  lsn, rev, compacted rev, zxid
//	uvarint leases; per lease: varint id, ttl, remaining ttl
//	uvarint keys; per key: bytes key, uvarint versions; per version:
//	        byte deleted, varint mod rev, sub, mod zxid,
//	        [varint create rev, version, lease, create zxid, bytes value]
//	[bytes  auth state, if the store has one or alarms follow (a base
//	        without it has none; empty means none)]
//	[uvarint alarms; per alarm: uvarint member, varint type — only if an
//	        alarm is active]
//	uint32  CRC-32C of everything before it (the stored bytes)
//
// In the compressed form (format 2) the body is one zstd stream; the
// format byte and the CRC (of the stored, compressed bytes) stay outside
// it. Both forms are written and read as streams: a base generation is
// never held in memory whole, encoded or decoded.
//
// A delta (format 3, a layer of a base generation after its full snapshot,
// revision.Delta) is compressed like format 2, and its body is a
// snapshot's body (the delta's state, leases, changed keys, auth state and
// alarms) after a prefix:
//
//	varint  the revision it applies to (Delta.Since)
//	uvarint removed keys; per key: bytes key (ascending)
const (
	snapshotFormat           = 1
	compressedSnapshotFormat = 2
	deltaFormat              = 3
	// maxSnapshotFormat is the newest snapshot format this build reads.
	maxSnapshotFormat = deltaFormat
)

// writeSnapshot writes the stored form of s to w (compressed: format 2)
// and returns the bytes of its body before compression. w sees every
// stored byte, trailer included.
func writeSnapshot(w io.Writer, s *revision.Snapshot, compressed bool) (int64, error) {
	format := byte(snapshotFormat)
	if compressed {
		format = compressedSnapshotFormat
	}
	return writeStored(w, format, compressed, func(bw *bufio.Writer) error { return writeSnapshotBody(bw, s) })
}

// writeDelta writes the stored form of d (format 3, compressed) to w and
// returns the bytes of its body before compression.
func writeDelta(w io.Writer, d *revision.Delta) (int64, error) {
	return writeStored(w, deltaFormat, true, func(bw *bufio.Writer) error { return writeDeltaBody(bw, d) })
}

// writeDeltaBody writes a delta's body (before compression): the prefix,
// then the snapshot body of d.Changed.
func writeDeltaBody(w *bufio.Writer, d *revision.Delta) error {
	var scratch []byte
	scratch = binary.AppendVarint(scratch, d.Since)
	scratch = binary.AppendUvarint(scratch, uint64(len(d.Removed)))
	_, _ = w.Write(scratch)
	for _, k := range d.Removed {
		_, _ = w.Write(binary.AppendUvarint(scratch[:0], uint64(len(k))))
		_, _ = w.Write(k) // bufio.Writer keeps the first error for Flush
	}
	return writeSnapshotBody(w, d.Changed)
}

// writeStored writes a record: the format byte, the body (written by body,
// through zstd if compressed) and the CRC-32C trailer. It returns the
// body's bytes before compression.
func writeStored(w io.Writer, format byte, compressed bool, body func(*bufio.Writer) error) (int64, error) {
	crc := crc32.New(crcTable)
	out := io.MultiWriter(w, crc)
	if _, err := out.Write([]byte{format}); err != nil {
		return 0, err
	}
	var dst io.Writer = out
	var zw io.WriteCloser
	if compressed {
		zw = newStreamCompressor(out)
		dst = zw
	}
	raw := &countWriter{w: dst}
	bw := bufio.NewWriterSize(raw, 64<<10)
	if err := body(bw); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return 0, fmt.Errorf("compress snapshot: %w", err)
		}
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	return raw.n, err
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeSnapshotBody(w *bufio.Writer, s *revision.Snapshot) error {
	var scratch []byte
	put := func(b []byte) {
		_, _ = w.Write(b) // bufio.Writer keeps the first error for Flush
	}
	varint := func(v int64) { scratch = binary.AppendVarint(scratch[:0], v); put(scratch) }
	uvarint := func(v uint64) { scratch = binary.AppendUvarint(scratch[:0], v); put(scratch) }
	bytesField := func(b []byte) { uvarint(uint64(len(b))); put(b) }
	st := s.State
	for _, v := range []int64{st.LSN, st.Rev, st.CompactRev, st.Zxid} {
		varint(v)
	}
	uvarint(uint64(len(s.Leases)))
	for _, l := range s.Leases {
		varint(l.ID)
		varint(l.TTL)
		varint(l.RemainingTTL)
	}
	uvarint(uint64(s.Len()))
	s.Each(func(kh revision.KeyHistory) bool {
		bytesField(kh.Key)
		uvarint(uint64(len(kh.Versions)))
		for _, kv := range kh.Versions {
			deleted := kv.Version == 0
			if deleted {
				put([]byte{1})
			} else {
				put([]byte{0})
			}
			varint(kv.ModRevision)
			varint(kv.Sub)
			varint(kv.ModZxid)
			if deleted {
				continue
			}
			varint(kv.CreateRevision)
			varint(kv.Version)
			varint(kv.Lease)
			varint(kv.CreateZxid)
			bytesField(kv.Value)
		}
		return true
	})
	if s.Auth != nil || len(s.Alarms) > 0 {
		bytesField(s.Auth)
	}
	if len(s.Alarms) > 0 {
		uvarint(uint64(len(s.Alarms)))
		for _, a := range s.Alarms {
			uvarint(a.Member)
			varint(int64(a.Type))
		}
	}
	return w.Flush()
}

// EncodeSnapshot returns the stored form of s in format 1 (what every
// build writes on a root whose meta format is 1).
func EncodeSnapshot(s *revision.Snapshot) []byte {
	var buf bytes.Buffer
	_, _ = writeSnapshot(&buf, s, false) // a bytes.Buffer does not fail
	return buf.Bytes()
}

// encodeSnapshotCompressed returns the stored form of s in format 2.
func encodeSnapshotCompressed(s *revision.Snapshot) []byte {
	var buf bytes.Buffer
	_, _ = writeSnapshot(&buf, s, true)
	return buf.Bytes()
}

// DecodeSnapshot parses data written by writeSnapshot (either format);
// malformed input returns an error wrapping ErrCorruptEntry, never a panic.
func DecodeSnapshot(data []byte) (*revision.Snapshot, error) {
	return readSnapshot(bytes.NewReader(data), int64(len(data)))
}

// readSnapshot decodes a stored snapshot of size bytes from r, reading it
// once, front to back. Errors wrap ErrCorruptEntry for data that is not a
// valid snapshot (checksum included), a *FormatError for an intact one of
// a newer format, or are r's.
func readSnapshot(r io.Reader, size int64) (*revision.Snapshot, error) {
	s, d, err := readStored(r, size)
	if err == nil && d != nil {
		return nil, fmt.Errorf("%w: a delta where a whole snapshot belongs", ErrCorruptEntry)
	}
	return s, err
}

// readDelta decodes a stored delta (format 3) of size bytes from r. Errors
// as readSnapshot's.
func readDelta(r io.Reader, size int64) (*revision.Delta, error) {
	_, d, err := readStored(r, size)
	if err == nil && d == nil {
		return nil, fmt.Errorf("%w: a whole snapshot where a delta belongs", ErrCorruptEntry)
	}
	return d, err
}

// readStored decodes a stored snapshot or delta: d is set for a delta.
func readStored(r io.Reader, size int64) (*revision.Snapshot, *revision.Delta, error) {
	if size < 5 {
		return nil, nil, fmt.Errorf("%w: snapshot of %d bytes", ErrCorruptEntry, size)
	}
	crc := crc32.New(crcTable)
	body := io.TeeReader(io.LimitReader(r, size-4), crc)
	var fb [1]byte
	if _, err := io.ReadFull(body, fb[:]); err != nil {
		return nil, nil, readErr(err)
	}
	format := fb[0]
	sealed := func() (bool, error) {
		// Whatever the body held, the rest up to the trailer counts.
		if _, err := io.Copy(io.Discard, body); err != nil {
			return false, readErr(err)
		}
		var tb [4]byte
		if _, err := io.ReadFull(r, tb[:]); err != nil {
			return false, readErr(err)
		}
		return binary.BigEndian.Uint32(tb[:]) == crc.Sum32(), nil
	}
	var src io.Reader
	switch format {
	case snapshotFormat:
		src = body
	case compressedSnapshotFormat, deltaFormat:
		zr, err := newStreamDecompressor(body)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: snapshot: %v", ErrCorruptEntry, err)
		}
		defer zr.Close()
		src = zr
	default:
		ok, err := sealed()
		switch {
		case err != nil:
			return nil, nil, err
		case !ok:
			return nil, nil, fmt.Errorf("%w: snapshot checksum mismatch", ErrCorruptEntry)
		case format > maxSnapshotFormat:
			// Every form keeps the format byte first and the checksum
			// last: an intact record of a higher format is a newer
			// zketcd's.
			return nil, nil, &FormatError{What: "base snapshot", Got: int(format), Known: maxSnapshotFormat}
		}
		return nil, nil, fmt.Errorf("%w: unknown snapshot format %d", ErrCorruptEntry, format)
	}
	dec := &streamDecoder{r: bufio.NewReaderSize(src, 64<<10)}
	var delta *revision.Delta
	if format == deltaFormat {
		delta = &revision.Delta{Since: dec.varint()}
		n := dec.uvarint()
		for i := uint64(0); i < n && dec.err == nil; i++ {
			k := dec.bytes()
			if dec.err == nil && len(delta.Removed) > 0 && bytes.Compare(delta.Removed[len(delta.Removed)-1], k) >= 0 {
				dec.fail("removed keys out of order")
			}
			delta.Removed = append(delta.Removed, k)
		}
	}
	s := readSnapshotBody(dec)
	if dec.err == nil && !dec.atEOF() {
		dec.fail("trailing bytes")
	}
	ok, err := sealed()
	switch {
	case err != nil:
		return nil, nil, err
	case !ok:
		return nil, nil, fmt.Errorf("%w: snapshot checksum mismatch", ErrCorruptEntry)
	case dec.err != nil:
		return nil, nil, dec.err
	}
	if delta != nil {
		delta.Changed = s
		return nil, delta, nil
	}
	return s, nil, nil
}

func readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: snapshot truncated", ErrCorruptEntry)
	}
	return err
}

func readSnapshotBody(d *streamDecoder) *revision.Snapshot {
	s := &revision.Snapshot{}
	s.State.LSN, s.State.Rev, s.State.CompactRev, s.State.Zxid = d.varint(), d.varint(), d.varint(), d.varint()
	nl := d.uvarint()
	for i := uint64(0); i < nl && d.err == nil; i++ {
		s.Leases = append(s.Leases, revision.Lease{ID: d.varint(), TTL: d.varint(), RemainingTTL: d.varint()})
	}
	nk := d.uvarint()
	for i := uint64(0); i < nk && d.err == nil; i++ {
		kh := revision.KeyHistory{Key: d.bytes()}
		nv := d.uvarint()
		for j := uint64(0); j < nv && d.err == nil; j++ {
			kv := &revision.KeyValue{Key: kh.Key}
			deleted := d.byte()
			kv.ModRevision, kv.Sub, kv.ModZxid = d.varint(), d.varint(), d.varint()
			switch deleted {
			case 1:
			case 0:
				kv.CreateRevision, kv.Version, kv.Lease, kv.CreateZxid = d.varint(), d.varint(), d.varint(), d.varint()
				kv.Value = d.bytes()
				if d.err == nil && kv.Version < 1 {
					d.fail(fmt.Sprintf("key %q: live version %d", kh.Key, kv.Version))
				}
			default:
				d.fail(fmt.Sprintf("bad deletion flag %d", deleted))
			}
			kh.Versions = append(kh.Versions, kv)
		}
		s.Keys = append(s.Keys, kh)
	}
	if d.err == nil && !d.atEOF() {
		if s.Auth = d.bytes(); len(s.Auth) == 0 {
			s.Auth = nil
		}
	}
	if d.err == nil && !d.atEOF() {
		na := d.uvarint()
		for i := uint64(0); i < na && d.err == nil; i++ {
			member := d.uvarint()
			typ := d.varint()
			if d.err == nil && (typ < -1<<31 || typ >= 1<<31) {
				d.fail(fmt.Sprintf("alarm type %d out of range", typ))
			}
			a := revision.Alarm{Member: member, Type: int32(typ)}
			s.Alarms = revision.ApplyAlarm(s.Alarms, revision.AlarmChange{Alarm: a, Activate: true})
		}
	}
	return s
}

// streamDecoder reads the varint fields of a snapshot from a stream. Once
// it failed every read returns zero values; allocations are bounded by what
// the stream really holds (a field's length is read in pieces, never
// allocated up front from a corrupt count).
type streamDecoder struct {
	r   *bufio.Reader
	err error
}

func (d *streamDecoder) fail(msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: snapshot: %s", ErrCorruptEntry, msg)
	}
}

func (d *streamDecoder) ioFail(err error) {
	if d.err != nil {
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		d.fail("truncated")
		return
	}
	d.err = fmt.Errorf("%w: snapshot: %v", ErrCorruptEntry, err)
}

func (d *streamDecoder) atEOF() bool {
	if d.err != nil {
		return true
	}
	_, err := d.r.Peek(1)
	return err != nil
}

func (d *streamDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	b, err := d.r.ReadByte()
	if err != nil {
		d.ioFail(err)
	}
	return b
}

func (d *streamDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.ioFail(err)
	}
	return v
}

func (d *streamDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	if err != nil {
		d.ioFail(err)
	}
	return v
}

// bytesPiece is the most one allocation of a field trusts a length for
// before the bytes are there.
const bytesPiece = 1 << 20

func (d *streamDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n <= bytesPiece {
		v := make([]byte, n)
		if _, err := io.ReadFull(d.r, v); err != nil {
			d.ioFail(err)
			return nil
		}
		return v
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, d.r, int64(min(n, 1<<62))); err != nil {
		d.ioFail(err)
		return nil
	}
	return buf.Bytes()
}

// crcWriter counts and checksums what passes through it.
type crcWriter struct {
	h hash.Hash32
	n int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}
