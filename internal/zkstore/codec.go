package zkstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/zketcd/zketcd/internal/revision"
)

// Log entries are stored in a compact binary form:
//
//	byte    format (entryFormat)
//	uvarint writer nonce, writer sequence
//	uvarint number of ops
//	per op: byte kind, then
//	  txn:        varint rev, uvarint n, n × (byte flags, bytes key, [bytes value, varint lease])
//	  compact:    varint rev
//	  bump rev:   varint rev (root format 4 only: see GapsMetaFormat)
//	  lease ops:  varint lease, [varint ttl]
//	  auth:       bytes state (package auth's encoding, opaque here)
//	  alarm:      byte activate (0 or 1), uvarint member, varint type
//	  origin:     uvarint nonce, uvarint seq, varint rev
//	  fence:      bytes servers, bytes root, byte arrived (0 or 1)
//	uint32  CRC-32C of everything before it (big endian)
//
// bytes = uvarint length + raw bytes. Decoding copies keys and values so an
// entry's buffer is never pinned by one surviving value.
const entryFormat = 1

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptEntry is wrapped by DecodeEntry for data that is not a valid entry.
var ErrCorruptEntry = errors.New("corrupt log entry")

const flagDelete = 1

// EncodeEntry returns the stored form of e in format 1 (LSN and Zxid are
// not stored: they are the znode's name and czxid). EncodeEntryFormat
// chooses the form by the root's format.
func EncodeEntry(e *revision.Entry) []byte {
	size := 1 + 2*binary.MaxVarintLen64 + binary.MaxVarintLen64 + 4
	for _, op := range e.Ops {
		size += 1 + 3*binary.MaxVarintLen64 + len(op.Auth) + len(op.Move.Servers) + len(op.Move.Root) + 2*binary.MaxVarintLen64 + 1
		for _, c := range op.Changes {
			size += 1 + 2*binary.MaxVarintLen64 + len(c.Key) + len(c.Value) + binary.MaxVarintLen64
		}
	}
	b := make([]byte, 0, size)
	b = append(b, entryFormat)
	b = binary.AppendUvarint(b, e.Writer.Nonce)
	b = binary.AppendUvarint(b, e.Writer.Seq)
	b = binary.AppendUvarint(b, uint64(len(e.Ops)))
	for _, op := range e.Ops {
		b = append(b, byte(op.Kind))
		switch op.Kind {
		case revision.OpTxn:
			b = binary.AppendVarint(b, op.Rev)
			b = binary.AppendUvarint(b, uint64(len(op.Changes)))
			for _, c := range op.Changes {
				if c.Delete {
					b = append(b, flagDelete)
					b = appendBytes(b, c.Key)
					continue
				}
				b = append(b, 0)
				b = appendBytes(b, c.Key)
				b = appendBytes(b, c.Value)
				b = binary.AppendVarint(b, c.Lease)
			}
		case revision.OpCompact, revision.OpBumpRev:
			b = binary.AppendVarint(b, op.Rev)
		case revision.OpLeaseGrant, revision.OpLeaseCheckpoint:
			b = binary.AppendVarint(b, op.Lease)
			b = binary.AppendVarint(b, op.TTL)
		case revision.OpLeaseRevoke:
			b = binary.AppendVarint(b, op.Lease)
		case revision.OpAuth:
			b = appendBytes(b, op.Auth)
		case revision.OpAlarm:
			b = appendAlarmChange(b, op.Alarm)
		case revision.OpOrigin:
			b = binary.AppendUvarint(b, op.Origin.Nonce)
			b = binary.AppendUvarint(b, op.Origin.Seq)
			b = binary.AppendVarint(b, op.Rev)
		case revision.OpFence:
			b = appendBytes(b, []byte(op.Move.Servers))
			b = appendBytes(b, []byte(op.Move.Root))
			b = append(b, boolByte(op.Move.Arrived))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// RecordBytes returns len(EncodeEntry(e)) without encoding it: the bytes
// of the entry's record before any compression (what the space
// accounting counts as the entry's logical size). O(changes), no
// allocation.
func RecordBytes(e *revision.Entry) int {
	n := 1 + uvarintLen(e.Writer.Nonce) + uvarintLen(e.Writer.Seq) + uvarintLen(uint64(len(e.Ops))) + 4
	for i := range e.Ops {
		op := &e.Ops[i]
		n++ // kind
		switch op.Kind {
		case revision.OpTxn:
			n += varintLen(op.Rev) + uvarintLen(uint64(len(op.Changes)))
			for j := range op.Changes {
				c := &op.Changes[j]
				n += 1 + bytesLen(c.Key)
				if !c.Delete {
					n += bytesLen(c.Value) + varintLen(c.Lease)
				}
			}
		case revision.OpCompact, revision.OpBumpRev:
			n += varintLen(op.Rev)
		case revision.OpLeaseGrant, revision.OpLeaseCheckpoint:
			n += varintLen(op.Lease) + varintLen(op.TTL)
		case revision.OpLeaseRevoke:
			n += varintLen(op.Lease)
		case revision.OpAuth:
			n += bytesLen(op.Auth)
		case revision.OpAlarm:
			n += 1 + uvarintLen(op.Alarm.Member) + varintLen(int64(op.Alarm.Type))
		case revision.OpOrigin:
			n += uvarintLen(op.Origin.Nonce) + uvarintLen(op.Origin.Seq) + varintLen(op.Rev)
		case revision.OpFence:
			n += bytesLen([]byte(op.Move.Servers)) + bytesLen([]byte(op.Move.Root)) + 1
		}
	}
	return n
}

// uvarintLen is the length of binary.AppendUvarint's encoding of x.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// varintLen is the length of binary.AppendVarint's encoding of x.
func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func bytesLen(v []byte) int { return uvarintLen(uint64(len(v))) + len(v) }

// EncodeEntryFormat returns the stored form of e that a root of meta
// format metaFormat allows: compressed (format 3) from meta format 2 on
// when that is smaller, format 1 otherwise.
func EncodeEntryFormat(e *revision.Entry, metaFormat int) []byte {
	record := EncodeEntry(e)
	if metaFormat >= compressionMetaFormat {
		return compressEntry(record)
	}
	return record
}

func appendAlarmChange(b []byte, c revision.AlarmChange) []byte {
	if c.Activate {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, c.Member)
	return binary.AppendVarint(b, int64(c.Type))
}

func (d *decoder) alarmChange() revision.AlarmChange {
	var c revision.AlarmChange
	switch f := d.byte(); f {
	case 0:
	case 1:
		c.Activate = true
	default:
		d.fail("bad alarm action %d", f)
	}
	c.Member = d.uvarint()
	c.Type = d.int32()
	return c
}

func (d *decoder) int32() int32 {
	v := d.varint()
	if d.err == nil && (v < -1<<31 || v >= 1<<31) {
		d.fail("alarm type %d out of range", v)
	}
	return int32(v)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// DecodeEntry parses data written by EncodeEntry. Any malformed input
// returns an error wrapping ErrCorruptEntry; it never panics.
func DecodeEntry(data []byte) (*revision.Entry, error) {
	if len(data) < 5 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorruptEntry, len(data))
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptEntry)
	}
	if data[0] > maxEntryFormat {
		// Every form keeps the format byte first and the checksum last,
		// so an intact record of a higher format is a newer zketcd's.
		return nil, &FormatError{What: "log entry", Got: int(data[0]), Known: maxEntryFormat}
	}
	if data[0] == compressedEntryFormat {
		buf := records.Get().(*[]byte)
		record, err := decompressEntry(body, *buf)
		if err != nil {
			return nil, err
		}
		var e *revision.Entry
		if len(record) > 0 && (record[0] == compressedEntryFormat || record[0] == indirectFormat) {
			err = fmt.Errorf("%w: compressed entry holds format %d", ErrCorruptEntry, record[0])
		} else {
			e, err = DecodeEntry(record) // format 1, or a newer one refused as such
		}
		if cap(record) <= maxPooledRecord {
			*buf = record[:0] // nothing of it is kept: the decoder copies
			records.Put(buf)
		}
		return e, err
	}
	d := decoder{b: body}
	if f := d.byte(); f != entryFormat {
		return nil, fmt.Errorf("%w: unknown format %d", ErrCorruptEntry, f)
	}
	e := &revision.Entry{}
	e.Writer.Nonce = d.uvarint()
	e.Writer.Seq = d.uvarint()
	nops := d.count(2)
	if d.err == nil && nops > 0 {
		e.Ops = make([]revision.Op, 0, nops)
	}
	for i := 0; i < nops && d.err == nil; i++ {
		op := revision.Op{Kind: revision.OpKind(d.byte())}
		switch op.Kind {
		case revision.OpTxn:
			op.Rev = d.varint()
			n := d.count(2)
			if d.err == nil {
				op.Changes = make([]revision.Change, 0, n)
			}
			for j := 0; j < n && d.err == nil; j++ {
				var c revision.Change
				flags := d.byte()
				c.Key = d.bytes()
				switch flags {
				case flagDelete:
					c.Delete = true
				case 0:
					c.Value = d.bytes()
					c.Lease = d.varint()
				default:
					d.fail("unknown change flags %d", flags)
				}
				op.Changes = append(op.Changes, c)
			}
		case revision.OpCompact, revision.OpBumpRev:
			op.Rev = d.varint()
		case revision.OpLeaseGrant, revision.OpLeaseCheckpoint:
			op.Lease = d.varint()
			op.TTL = d.varint()
		case revision.OpLeaseRevoke:
			op.Lease = d.varint()
		case revision.OpAuth:
			op.Auth = d.bytes()
		case revision.OpAlarm:
			op.Alarm = d.alarmChange()
		case revision.OpOrigin:
			op.Origin.Nonce = d.uvarint()
			op.Origin.Seq = d.uvarint()
			op.Rev = d.varint()
		case revision.OpFence:
			op.Move.Servers = string(d.bytes())
			op.Move.Root = string(d.bytes())
			switch a := d.byte(); a {
			case 0, 1:
				op.Move.Arrived = a == 1
			default:
				d.fail("fence: arrived flag %d", a)
			}
		default:
			// The checksum held: a newer zketcd wrote an op this build
			// does not know.
			if d.err == nil {
				d.err = &FormatError{What: fmt.Sprintf("log entry (op kind %d)", op.Kind), Got: entryFormat, Known: entryFormat}
			}
			d.b = nil
		}
		e.Ops = append(e.Ops, op)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return e, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorruptEntry, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads an element count; each element takes at least minSize bytes,
// which bounds what a corrupt count can make us allocate.
func (d *decoder) count(minSize int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)/minSize) {
		d.fail("count %d exceeds data", v)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length %d exceeds data", n)
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b[:n])
	d.b = d.b[n:]
	return v
}
