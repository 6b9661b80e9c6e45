package zkstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/revision"
)

// Entries larger than the byte budget (a 1.5 MiB value, a delete of
// thousands of keys) are written as chunk znodes, each within the budget,
// created before the commit; the log entry then holds only an indirect
// record naming them, and the commit multi checks that each still exists.
const indirectFormat = 2

// encodeIndirect is the log entry data that points at chunks holding an
// encoded entry of size bytes with checksum sum.
func encodeIndirect(names []string, size int, sum uint32) []byte {
	b := []byte{indirectFormat}
	b = binary.AppendUvarint(b, uint64(size))
	b = binary.BigEndian.AppendUint32(b, sum)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendBytes(b, []byte(n))
	}
	return b
}

type indirect struct {
	size  int
	sum   uint32
	names []string
}

func decodeIndirect(data []byte) (indirect, error) {
	d := decoder{b: data}
	if f := d.byte(); f != indirectFormat {
		return indirect{}, fmt.Errorf("%w: not an indirect entry", ErrCorruptEntry)
	}
	var in indirect
	in.size = int(d.uvarint())
	if len(d.b) < 4 {
		return indirect{}, fmt.Errorf("%w: truncated indirect entry", ErrCorruptEntry)
	}
	in.sum = binary.BigEndian.Uint32(d.b[:4])
	d.b = d.b[4:]
	n := d.count(2)
	for i := 0; i < n && d.err == nil; i++ {
		in.names = append(in.names, string(d.bytes()))
	}
	if d.err != nil {
		return indirect{}, d.err
	}
	return in, nil
}

// writeChunks stores data as chunks of at most the byte budget and returns
// their names. Chunks are immutable; a failed commit leaves them for the
// garbage collector.
func (s *Store) writeChunks(lsn int64, w revision.WriterTag, data []byte) ([]string, error) {
	var names []string
	var parts [][]byte
	for i := 0; len(data) > 0; i++ {
		n := min(len(data), s.cfg.MaxEntryBytes)
		names = append(names, chunkName(lsn, w, i))
		parts = append(parts, data[:n])
		data = data[n:]
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.conn.Create(s.l.chunk(names[i]), parts[i], 0, s.acl)
			if errors.Is(err, zk.ErrNodeExists) {
				err = nil // an earlier attempt of ours wrote it
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, s.wrap("write chunk", err)
		}
	}
	return names, nil
}

// readChunks reads and reassembles the data an indirect record points at.
func (s *Store) readChunks(in indirect) ([]byte, error) {
	parts := make([][]byte, len(in.names))
	errs := make([]error, len(in.names))
	var wg sync.WaitGroup
	for i, name := range in.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, _, err := s.conn.Get(s.l.chunk(name))
			if errors.Is(err, zk.ErrNoNode) {
				err = fmt.Errorf("%w: chunk %s", ErrEntryMissing, name)
			} else if err != nil {
				err = s.wrap("read chunk", err)
			}
			parts[i], errs[i] = data, err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, in.size)
	for _, p := range parts {
		out = append(out, p...)
	}
	if len(out) != in.size || crc32.Checksum(out, crcTable) != in.sum {
		return nil, fmt.Errorf("%w: chunks do not match their indirect record", ErrCorruptEntry)
	}
	return out, nil
}

// CollectChunks deletes chunks no log entry references: those of commits
// that lost their position or failed, and those of entries compacted away.
// Chunks written for positions beyond the head are left alone unless they
// are older than the head by grace (measured on ZooKeeper's clock), since a
// commit may be about to use them. It returns how many it deleted. Leader
// only: fence guards each deletion batch.
func (s *Store) CollectChunks(ctx context.Context, fence Fence, graceMillis int64) (int, error) {
	names, _, err := s.conn.Children(s.l.chunks())
	if err != nil {
		return 0, s.wrap("list chunks", err)
	}
	if len(names) == 0 {
		return 0, nil
	}
	var head Head
	data, headStat, err := s.conn.Get(s.l.head())
	if err != nil {
		return 0, s.wrap("read head", err)
	}
	if err := decodeJSON(s.l.head(), data, &head); err != nil {
		return 0, err
	}
	referenced := map[int64]map[string]bool{}
	var doomed []string
	for _, name := range names {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		lsn, ok := parseChunkName(name)
		if !ok {
			continue // not ours
		}
		if lsn > head.LSN {
			_, st, err := s.conn.Get(s.l.chunk(name))
			if err == nil && headStat.Mtime-st.Ctime > graceMillis {
				doomed = append(doomed, name)
			}
			continue
		}
		refs, seen := referenced[lsn]
		if !seen {
			refs = map[string]bool{}
			data, _, err := s.conn.Get(s.l.entry(lsn))
			switch {
			case errors.Is(err, zk.ErrNoNode):
			case err != nil:
				return 0, s.wrap("read entry", err)
			case len(data) > 0 && data[0] == indirectFormat:
				if in, err := decodeIndirect(data); err == nil {
					for _, n := range in.names {
						refs[n] = true
					}
				}
			}
			referenced[lsn] = refs
		}
		if !refs[name] {
			doomed = append(doomed, name)
		}
	}
	deleted := 0
	for len(doomed) > 0 {
		n := min(len(doomed), 256)
		ops := []any{&zk.CheckVersionRequest{Path: fence.path, Version: -1}}
		for _, name := range doomed[:n] {
			ops = append(ops, &zk.DeleteRequest{Path: s.l.chunk(name), Version: -1})
		}
		if _, err := s.conn.Multi(ops...); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return deleted, s.wrap("delete chunks", err)
		}
		deleted += n
		doomed = doomed[n:]
	}
	return deleted, nil
}
