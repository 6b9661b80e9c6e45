package zkstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/zketcd/zketcd/internal/revision"
)

// Snapshots (base generations) are stored in this binary form, then split
// into chunks within the byte budget:
//
//	byte    format (snapshotFormat)
//	varint  lsn, rev, compacted rev, zxid
//	uvarint leases; per lease: varint id, ttl, remaining ttl
//	uvarint keys; per key: bytes key, uvarint versions; per version:
//	        byte deleted, varint mod rev, sub, mod zxid,
//	        [varint create rev, version, lease, create zxid, bytes value]
//	[bytes  auth state, if the store has one or alarms follow (a base
//	        without it has none; empty means none)]
//	[uvarint alarms; per alarm: uvarint member, varint type — only if an
//	        alarm is active]
//	uint32  CRC-32C of everything before it
const snapshotFormat = 1

// EncodeSnapshot returns the stored form of s.
func EncodeSnapshot(s *revision.Snapshot) []byte {
	size := 64
	for _, kh := range s.Keys {
		size += len(kh.Key) + 8
		for _, kv := range kh.Versions {
			size += len(kv.Value) + 48
		}
	}
	b := make([]byte, 0, size)
	b = append(b, snapshotFormat)
	st := s.State
	for _, v := range []int64{st.LSN, st.Rev, st.CompactRev, st.Zxid} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Leases)))
	for _, l := range s.Leases {
		b = binary.AppendVarint(b, l.ID)
		b = binary.AppendVarint(b, l.TTL)
		b = binary.AppendVarint(b, l.RemainingTTL)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Keys)))
	for _, kh := range s.Keys {
		b = appendBytes(b, kh.Key)
		b = binary.AppendUvarint(b, uint64(len(kh.Versions)))
		for _, kv := range kh.Versions {
			deleted := kv.Version == 0
			if deleted {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
			b = binary.AppendVarint(b, kv.ModRevision)
			b = binary.AppendVarint(b, kv.Sub)
			b = binary.AppendVarint(b, kv.ModZxid)
			if deleted {
				continue
			}
			b = binary.AppendVarint(b, kv.CreateRevision)
			b = binary.AppendVarint(b, kv.Version)
			b = binary.AppendVarint(b, kv.Lease)
			b = binary.AppendVarint(b, kv.CreateZxid)
			b = appendBytes(b, kv.Value)
		}
	}
	if s.Auth != nil || len(s.Alarms) > 0 {
		b = appendBytes(b, s.Auth)
	}
	if len(s.Alarms) > 0 {
		b = binary.AppendUvarint(b, uint64(len(s.Alarms)))
		for _, a := range s.Alarms {
			b = binary.AppendUvarint(b, a.Member)
			b = binary.AppendVarint(b, int64(a.Type))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// DecodeSnapshot parses data written by EncodeSnapshot; malformed input
// returns an error wrapping ErrCorruptEntry, never a panic.
func DecodeSnapshot(data []byte) (*revision.Snapshot, error) {
	if len(data) < 5 {
		return nil, fmt.Errorf("%w: snapshot of %d bytes", ErrCorruptEntry, len(data))
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: snapshot checksum mismatch", ErrCorruptEntry)
	}
	if data[0] > snapshotFormat {
		return nil, &FormatError{What: "base snapshot", Got: int(data[0]), Known: snapshotFormat}
	}
	d := decoder{b: body}
	if f := d.byte(); f != snapshotFormat {
		return nil, fmt.Errorf("%w: unknown snapshot format %d", ErrCorruptEntry, f)
	}
	s := &revision.Snapshot{}
	s.State.LSN, s.State.Rev, s.State.CompactRev, s.State.Zxid = d.varint(), d.varint(), d.varint(), d.varint()
	nl := d.count(3)
	for i := 0; i < nl && d.err == nil; i++ {
		s.Leases = append(s.Leases, revision.Lease{ID: d.varint(), TTL: d.varint(), RemainingTTL: d.varint()})
	}
	nk := d.count(2)
	if d.err == nil {
		s.Keys = make([]revision.KeyHistory, 0, nk)
	}
	for i := 0; i < nk && d.err == nil; i++ {
		kh := revision.KeyHistory{Key: d.bytes()}
		nv := d.count(4)
		for j := 0; j < nv && d.err == nil; j++ {
			kv := &revision.KeyValue{Key: kh.Key}
			deleted := d.byte()
			kv.ModRevision, kv.Sub, kv.ModZxid = d.varint(), d.varint(), d.varint()
			switch deleted {
			case 1:
			case 0:
				kv.CreateRevision, kv.Version, kv.Lease, kv.CreateZxid = d.varint(), d.varint(), d.varint(), d.varint()
				kv.Value = d.bytes()
				if d.err == nil && kv.Version < 1 {
					d.fail("key %q: live version %d", kh.Key, kv.Version)
				}
			default:
				d.fail("bad deletion flag %d", deleted)
			}
			kh.Versions = append(kh.Versions, kv)
		}
		s.Keys = append(s.Keys, kh)
	}
	if d.err == nil && len(d.b) != 0 {
		if s.Auth = d.bytes(); len(s.Auth) == 0 {
			s.Auth = nil
		}
	}
	if d.err == nil && len(d.b) != 0 {
		na := d.count(2)
		for i := 0; i < na && d.err == nil; i++ {
			a := revision.Alarm{Member: d.uvarint(), Type: d.int32()}
			s.Alarms = revision.ApplyAlarm(s.Alarms, revision.AlarmChange{Alarm: a, Activate: true})
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}
