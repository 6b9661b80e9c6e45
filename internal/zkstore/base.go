package zkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/revision"
)

// Base names the current base generation: a snapshot of the state at log
// position Gen, from which recovery starts instead of entry 1. It is the
// data of <root>/compact, changed only by the leader in a fenced multi with
// a version check.
type Base struct {
	// Format is the description's format (baseFormat; 0, absent, is 1).
	Format int `json:"format,omitempty"`
	// Gen is the log position of the snapshot; 0 means there is none and
	// recovery replays the log from entry 1.
	Gen int64 `json:"gen"`
	// Path is the znode holding the snapshot's chunks.
	Path       string `json:"path,omitempty"`
	Rev        int64  `json:"rev"`
	CompactRev int64  `json:"compact_rev"`
	Chunks     int    `json:"chunks"`
	Size       int    `json:"size"`
	Sum        uint32 `json:"crc"`
	// Raw is the whole snapshot's bytes before compression (absent, 0, in
	// descriptions written before it was recorded; older builds ignore
	// it): what a recovery prepares its heap for (RawSize).
	Raw int64 `json:"raw,omitempty"`
	// PrevGen and PrevPath name the generation before; log entries from
	// PrevGen on are kept, so an instance a little behind can still tail.
	PrevGen  int64  `json:"prev_gen"`
	PrevPath string `json:"prev_path,omitempty"`
	// PrevSize is the size of the generation at PrevPath and LogBytes the
	// bytes of the log entries after PrevGen up to Gen, as the publishing
	// leader counted them: what the root keeps for instances a cycle behind
	// until the next compaction or FreeCompacted (absent in descriptions
	// written before these fields existed: 0, not counted).
	PrevSize int   `json:"prev_size,omitempty"`
	LogBytes int64 `json:"log_bytes,omitempty"`
	// PrevRaw and LogRaw are the same before compression (the previous
	// generation's RawSize, the log entries' records): the logical bytes
	// the DB size counts (absent, 0, in descriptions written before they
	// were recorded: PrevSize and LogBytes stand in).
	PrevRaw int64 `json:"prev_raw,omitempty"`
	LogRaw  int64 `json:"log_raw,omitempty"`
	// Deltas, in a layered description (layeredBaseFormat), follow the
	// whole snapshot at Path, oldest first: each holds what changed since
	// the state before it (revision.Delta), the last one the state at Gen.
	// FullGen is then the whole snapshot's log position.
	Deltas  []Layer `json:"deltas,omitempty"`
	FullGen int64   `json:"full_gen,omitempty"`
	// PrevDeltas are the previous generation's delta paths, kept with
	// PrevPath.
	PrevDeltas []string `json:"prev_deltas,omitempty"`

	version int32 // of the compact znode; -1 if it does not exist
}

// Layer is one delta of a layered base generation: its log position and
// revision, and its chunks as for the whole snapshot.
type Layer struct {
	Gen    int64  `json:"gen"`
	Rev    int64  `json:"rev"`
	Path   string `json:"path"`
	Chunks int    `json:"chunks"`
	Size   int    `json:"size"`
	Sum    uint32 `json:"crc"`
	Raw    int64  `json:"raw,omitempty"`
}

// RawSize returns the bytes of the generation's snapshot and deltas before
// compression (a bound on the data a view built from it holds: a delta's
// keys replace some of those before it), or 0 if a layer did not record
// them.
func (b Base) RawSize() int64 {
	n := b.Raw
	for _, l := range b.Deltas {
		if l.Raw == 0 {
			return 0
		}
		n += l.Raw
	}
	if b.Gen == 0 {
		return b.Raw // the log's, in a log generation (LogGeneration)
	}
	if b.Raw == 0 {
		return 0
	}
	return n
}

// StoredSize returns the bytes the generation's snapshot and deltas take.
func (b Base) StoredSize() int {
	n := b.Size
	for _, d := range b.Deltas {
		n += d.Size
	}
	return n
}

// paths returns the znodes of the generation's snapshot and deltas.
func (b Base) paths() []string {
	if b.Path == "" {
		return nil
	}
	out := []string{b.Path}
	for _, d := range b.Deltas {
		out = append(out, d.Path)
	}
	return out
}

// prevPaths returns the znodes of the previous generation that b does not
// share.
func (b Base) prevPaths() []string {
	mine := map[string]bool{}
	for _, p := range b.paths() {
		mine[p] = true
	}
	var out []string
	for _, p := range append([]string{b.PrevPath}, b.PrevDeltas...) {
		if p != "" && !mine[p] {
			out = append(out, p)
		}
	}
	return out
}

// ErrBaseChanged is returned by LoadBase when the generation was replaced
// while being read; read the base again and retry.
var ErrBaseChanged = errors.New("base generation replaced while loading")

// ReadBase reads <root>/compact. A root without it has no base.
func (s *Store) ReadBase() (Base, error) {
	data, st, err := s.conn.Get(s.l.compact())
	if errors.Is(err, zk.ErrNoNode) {
		return Base{version: -1}, nil
	}
	if err != nil {
		return Base{}, s.wrap("read compact", err)
	}
	var b Base
	if len(data) > 0 {
		if err := decodeJSON(s.l.compact(), data, &b); err != nil {
			return Base{}, err
		}
		if b.Format > baseFormat {
			return Base{}, &FormatError{What: "base description " + s.l.compact(), Got: b.Format, Known: baseFormat}
		}
	}
	b.version = st.Version
	return b, nil
}

// LoadBase reads and decodes the snapshot b names as a stream: its chunks
// are read in order with a bounded number in flight and decoded as they
// arrive, so the encoded base is never held whole. Errors: ErrBaseChanged
// if a chunk is gone (a newer generation replaced it), ErrCorruptEntry for
// bad data (the description's size and checksum included).
func (s *Store) LoadBase(ctx context.Context, b Base) (*revision.Snapshot, error) {
	if b.Gen == 0 {
		return nil, errors.New("no base generation")
	}
	fullGen := b.Gen
	if len(b.Deltas) > 0 {
		fullGen = b.FullGen
	}
	full := Layer{Gen: fullGen, Path: b.Path, Chunks: b.Chunks, Size: b.Size, Sum: b.Sum}
	snap, _, err := s.loadLayer(ctx, full, false)
	if err != nil {
		return nil, err
	}
	for _, l := range b.Deltas {
		_, d, err := s.loadLayer(ctx, l, true)
		if err != nil {
			return nil, err
		}
		if snap, err = d.Apply(snap); err != nil {
			return nil, fmt.Errorf("%w: base %s: %v", ErrCorruptEntry, l.Path, err)
		}
	}
	if snap.State.LSN != b.Gen || snap.State.Rev != b.Rev {
		return nil, fmt.Errorf("%w: base %s holds entry %d (revision %d), not %d (%d)", ErrCorruptEntry, b.Path, snap.State.LSN, snap.State.Rev, b.Gen, b.Rev)
	}
	return snap, nil
}

// loadLayer reads and decodes one layer of a generation as a stream: a
// whole snapshot, or a delta if delta is set.
func (s *Store) loadLayer(ctx context.Context, l Layer, delta bool) (*revision.Snapshot, *revision.Delta, error) {
	if l.Chunks <= 0 || l.Size < 5 {
		return nil, nil, fmt.Errorf("%w: base %s of %d chunks, %d bytes", ErrCorruptEntry, l.Path, l.Chunks, l.Size)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cr := &chunkReader{ctx: ctx, n: l.Chunks, get: func(i int) ([]byte, error) {
		data, _, err := s.conn.Get(baseChunk(l.Path, i))
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return nil, ErrBaseChanged
		case err != nil:
			return nil, s.wrap("read base chunk", err)
		}
		return data, nil
	}}
	cr.start(16)
	counted := &crcWriter{h: crc32.New(crcTable)}
	snap, d, err := readStored(io.TeeReader(cr, counted), int64(l.Size))
	if err == nil && (d != nil) != delta {
		err = fmt.Errorf("%w: a delta and a whole snapshot swapped", ErrCorruptEntry)
	}
	if err != nil {
		if cerr := cr.failure(); cerr != nil {
			return nil, nil, cerr // a chunk that went away explains the rest
		}
		return nil, nil, fmt.Errorf("base %s: %w", l.Path, err)
	}
	rest, err := io.Copy(counted, cr)
	if err != nil {
		// Chunks the description names past the record's end that are
		// not there: replaced meanwhile, or a description that lies.
		return nil, nil, fmt.Errorf("base %s: %w", l.Path, err)
	}
	if rest != 0 || counted.n != int64(l.Size) || counted.h.Sum32() != l.Sum {
		return nil, nil, fmt.Errorf("%w: base %s does not match its description", ErrCorruptEntry, l.Path)
	}
	st := func() revision.State {
		if d != nil {
			return d.Changed.State
		}
		return snap.State
	}()
	if st.LSN != l.Gen {
		return nil, nil, fmt.Errorf("%w: base %s holds entry %d, not %d", ErrCorruptEntry, l.Path, st.LSN, l.Gen)
	}
	return snap, d, nil
}

// chunkReader serves the concatenation of n chunks, fetching up to a
// window of them ahead in parallel.
type chunkReader struct {
	ctx  context.Context
	n    int
	get  func(i int) ([]byte, error)
	next int // the next chunk to serve
	cur  []byte
	q    []chan chunkResult
	err  error
	mu   sync.Mutex // guards err for failure()
}

type chunkResult struct {
	data []byte
	err  error
}

func (c *chunkReader) start(window int) {
	for len(c.q) < window && c.next+len(c.q) < c.n {
		c.launch(c.next + len(c.q))
	}
}

func (c *chunkReader) launch(i int) {
	ch := make(chan chunkResult, 1)
	c.q = append(c.q, ch)
	go func() {
		if err := c.ctx.Err(); err != nil {
			ch <- chunkResult{err: err}
			return
		}
		data, err := c.get(i)
		ch <- chunkResult{data, err}
	}()
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if len(c.q) == 0 {
			return 0, io.EOF
		}
		r := <-c.q[0]
		c.q = c.q[1:]
		if r.err != nil {
			c.mu.Lock()
			c.err = r.err
			c.mu.Unlock()
			return 0, r.err
		}
		c.cur = r.data
		c.next++
		if i := c.next + len(c.q); i < c.n {
			c.launch(i)
		}
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// failure returns the error a chunk read failed with, if any.
func (c *chunkReader) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// PrepareBase stores snap as a base generation in a fresh path (nothing
// reads it until PublishBase makes it current), compressed on a root of
// format 2. It encodes snap as a stream, cut into chunks written with a
// few in flight, so the encoded base is never held whole. On failure the
// chunks written so far are left for CollectBases.
//
// On a root of format 3, when snap is a view's snapshot that can tell what
// changed since prev (revision.Snapshot.Since) and little did, it stores
// only that, as a delta layered on prev's layers: physical compaction then
// costs what changed, not the whole data. A whole snapshot is written
// instead once prev has maxDeltas deltas, their bytes exceed half the
// whole snapshot's, or over a quarter of the keys changed, so ZooKeeper
// holds at most about half a snapshot of superseded data and recovery
// applies a bounded chain.
func (s *Store) PrepareBase(ctx context.Context, snap *revision.Snapshot, prev Base, nonce uint64) (Base, error) {
	if d := s.deltaFor(snap, prev); d != nil {
		return s.prepareDelta(ctx, d, prev, nonce)
	}
	nb := Base{
		Format: fullBaseFormat,
		Gen:    snap.State.LSN, Rev: snap.State.Rev, CompactRev: snap.State.CompactRev,
		PrevGen: prev.Gen, PrevPath: prev.Path, PrevDeltas: layerPaths(prev.Deltas),
	}
	l, err := s.writeLayer(ctx, snap.State.LSN, nonce, func(w io.Writer) (int64, error) {
		return writeSnapshot(w, snap, s.Format() >= compressionMetaFormat)
	})
	if err != nil {
		return Base{}, err
	}
	nb.Path, nb.Size, nb.Sum, nb.Chunks, nb.Raw = l.Path, l.Size, l.Sum, l.Chunks, l.Raw
	nb.version = prev.version
	return nb, nil
}

// LogGeneration returns the description that records a physical
// compaction to compactRev without writing a base: the log from its first
// entry stays what recovery replays (Gen 0, as before any compaction), and
// raw, the data bytes before encoding of the entries up to the leader's
// position, is what a recovery prepares its heap for (RawSize). prev must
// be a description without a generation (Gen 0); PublishBase makes the
// result current only if prev still is. Builds that predate it read a
// description with Gen 0 as they always did: replay the log from its start.
func LogGeneration(prev Base, compactRev, raw int64) Base {
	return Base{Format: fullBaseFormat, CompactRev: compactRev, Raw: raw, version: prev.version}
}

// Layered generations: at most maxDeltas deltas after a whole snapshot.
const maxDeltas = 8

// deltaFor returns the delta to store instead of snap, or nil for a whole
// snapshot (see PrepareBase).
func (s *Store) deltaFor(snap *revision.Snapshot, prev Base) *revision.Delta {
	if s.Format() < layeredMetaFormat || prev.Gen == 0 || prev.Path == "" || len(prev.Deltas) >= maxDeltas ||
		snap.State.LSN <= prev.Gen {
		return nil
	}
	deltaBytes := prev.StoredSize() - prev.Size
	if deltaBytes > prev.Size/2 {
		return nil
	}
	d, ok := snap.Since(prev.Rev)
	if !ok || 4*(len(d.Changed.Keys)+len(d.Removed)) > d.Total {
		return nil
	}
	return d
}

// prepareDelta stores d as the next layer after prev's.
func (s *Store) prepareDelta(ctx context.Context, d *revision.Delta, prev Base, nonce uint64) (Base, error) {
	st := d.Changed.State
	nb := prev
	nb.Format = layeredBaseFormat
	nb.Gen, nb.Rev, nb.CompactRev = st.LSN, st.Rev, st.CompactRev
	if len(prev.Deltas) == 0 {
		nb.FullGen = prev.Gen
	}
	nb.PrevGen, nb.PrevPath, nb.PrevDeltas, nb.PrevSize, nb.LogBytes = prev.Gen, prev.Path, layerPaths(prev.Deltas), 0, 0
	nb.PrevRaw, nb.LogRaw = 0, 0
	l, err := s.writeLayer(ctx, st.LSN, nonce, func(w io.Writer) (int64, error) { return writeDelta(w, d) })
	if err != nil {
		return Base{}, err
	}
	l.Gen, l.Rev = st.LSN, st.Rev
	nb.Deltas = append(slices.Clip(prev.Deltas), l)
	nb.version = prev.version
	return nb, nil
}

func layerPaths(ls []Layer) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Path)
	}
	return out
}

// writeLayer creates a fresh znode for a layer at log position lsn
// (freshGeneration) and stores what encode writes as its chunks, and
// returns its path, their count, size and checksum, and the bytes before
// compression encode returns.
func (s *Store) writeLayer(ctx context.Context, lsn int64, nonce uint64, encode func(io.Writer) (int64, error)) (Layer, error) {
	p, err := s.freshGeneration(lsn, nonce)
	if err != nil {
		return Layer{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Small chunks, one at a time, ZooKeeper left idle a third of the
	// time: ZooKeeper applies writes in one order, so a commit or quorum
	// read sent meanwhile waits behind at most one chunk, not behind
	// megabytes of base (with 8 chunks of 512 KiB in flight, write and read
	// p99 were 7× their usual during a compaction).
	size := min(s.cfg.MaxEntryBytes, baseChunkBytes)
	if s.cfg.BaseChunkBytes > 0 {
		size = s.cfg.BaseChunkBytes
	}
	cw := &chunkWriter{ctx: ctx, size: size, sem: make(chan struct{}, baseChunksInFlight), pace: true, put: func(i int, c []byte) error {
		// The generation's znode is fresh: a chunk that exists already is
		// not this attempt's and must never be taken for it.
		if _, err := s.conn.Create(baseChunk(p, i), c, 0, s.acl); err != nil {
			return s.wrap("write base chunk", err)
		}
		return nil
	}}
	counted := &crcWriter{h: crc32.New(crcTable)}
	raw, werr := encode(io.MultiWriter(cw, counted))
	if err := errors.Join(werr, cw.Close()); err != nil {
		return Layer{}, err
	}
	return Layer{Path: p, Size: int(counted.n), Sum: counted.h.Sum32(), Chunks: cw.chunks, Raw: raw}, nil
}

// freshGeneration creates the znode of a new layer at log position lsn
// written by nonce's writer and returns its path: one no attempt wrote
// before. A layer's path names its position and writer and, since a
// compaction that failed before publishing is retried at the same position
// (perhaps after the root's format changed, writing other bytes), the
// attempt: a path already there, this process's or a previous one's with
// the same nonce, is passed over, never written into. Leftovers are
// CollectBases'.
func (s *Store) freshGeneration(lsn int64, nonce uint64) (string, error) {
	if _, err := s.conn.Create(s.l.base(), nil, 0, s.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return "", s.wrap("create base", err)
	}
	for range maxGenerationAttempts {
		p := s.l.generation(lsn, nonce, s.baseAttempts.Add(1))
		_, err := s.conn.Create(p, nil, 0, s.acl)
		switch {
		case err == nil:
			return p, nil
		case !errors.Is(err, zk.ErrNodeExists):
			return "", s.wrap("create base generation", err)
		}
	}
	return "", fmt.Errorf("create base generation at entry %d: %d paths in a row exist already", lsn, maxGenerationAttempts)
}

// maxGenerationAttempts bounds the paths freshGeneration passes over.
const maxGenerationAttempts = 64

// Base generations are written in chunks of baseChunkBytes, at most
// baseChunksInFlight at once, paced (chunkWriter.pace).
const (
	baseChunkBytes     = 256 << 10
	baseChunksInFlight = 1
)

// chunkWriter cuts what is written into chunks of size bytes and stores
// each with put, at most cap(sem) at once. Close stores the last one and
// waits for all; the first error fails every later Write.
type chunkWriter struct {
	ctx  context.Context
	size int
	sem  chan struct{}
	put  func(i int, c []byte) error
	// pace, if set, sleeps after each chunk half as long as storing it
	// took.
	pace   bool
	buf    []byte
	chunks int
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

func (c *chunkWriter) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && c.ctx.Err() != nil {
		c.err = c.ctx.Err()
	}
	return c.err
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if err := c.failed(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, c.size)
		}
		k := min(len(p), c.size-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == c.size {
			c.flush()
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() {
	chunk, i := c.buf, c.chunks
	c.buf = nil
	c.chunks++
	c.sem <- struct{}{}
	c.wg.Add(1)
	go func() {
		defer func() { <-c.sem; c.wg.Done() }()
		if err := c.failed(); err != nil {
			return
		}
		start := time.Now()
		err := c.put(i, chunk)
		if c.pace {
			// Leave ZooKeeper idle half as long as the chunk took: its
			// commit pipeline (and, on small hosts, its CPU) is shared
			// with every write and quorum read.
			time.Sleep(time.Since(start) / 2)
		}
		if err != nil {
			c.mu.Lock()
			if c.err == nil {
				c.err = err
			}
			c.mu.Unlock()
		}
	}()
}

// Close stores the last, partial chunk and waits for every chunk.
func (c *chunkWriter) Close() error {
	if len(c.buf) > 0 && c.failed() == nil {
		c.flush()
	}
	c.wg.Wait()
	return c.failed()
}

// PublishBase makes nb (from PrepareBase) the current generation with a
// fenced multi that checks the generation it was prepared after is still
// current. Errors: ErrUnavailable, or a ZooKeeper error if the fence or the
// version check failed (nothing changed).
func (s *Store) PublishBase(fence Fence, nb Base) (Base, error) {
	meta, _ := json.Marshal(nb)
	var flip any = &zk.SetDataRequest{Path: s.l.compact(), Data: meta, Version: nb.version}
	if nb.version < 0 {
		flip = &zk.CreateRequest{Path: s.l.compact(), Data: meta, Acl: s.acl}
	}
	if _, err := s.conn.Multi(fence.Guard().op(), flip); err != nil {
		return Base{}, s.wrap("make base current", err)
	}
	nb.version++
	return nb, nil
}

func (g Guard) op() any { return &zk.CheckVersionRequest{Path: g.path, Version: g.version} }

// deleteBatch is how many znodes one multi of TruncateLog deletes.
const deleteBatch = 128

// pacedMulti runs one multi of deletions, then leaves ZooKeeper idle half
// as long as it took: deleting a compaction's worth of log entries (or a
// generation's chunks) in a row held every commit and quorum read behind
// it (write and read p99 10× their usual for the seconds it took).
func (s *Store) pacedMulti(ops []any) error {
	start := time.Now()
	_, err := s.conn.Multi(ops...)
	time.Sleep(time.Since(start) / 2)
	return err
}

// TruncateLog deletes the log entries below lsn, oldest first, in fenced
// batches (paced: pacedMulti), and the buckets left empty. Entries at or
// above lsn stay.
func (s *Store) TruncateLog(ctx context.Context, fence Fence, lsn int64) (int, error) {
	buckets, _, err := s.conn.Children(s.l.log())
	if err != nil {
		return 0, s.wrap("list log buckets", err)
	}
	sort.Strings(buckets)
	deleted := 0
	for _, bname := range buckets {
		bn, err := strconv.ParseInt(bname, 10, 64)
		if err != nil || bn > lsn>>bucketShift {
			continue
		}
		bpath := child(s.l.log(), bname)
		names, _, err := s.conn.Children(bpath)
		if err != nil {
			return deleted, s.wrap("list log bucket", err)
		}
		sort.Strings(names)
		var doomed []string
		for _, n := range names {
			if e, err := strconv.ParseInt(n, 10, 64); err == nil && e < lsn {
				doomed = append(doomed, child(bpath, n))
			}
		}
		for len(doomed) > 0 {
			if ctx.Err() != nil {
				return deleted, ctx.Err()
			}
			n := min(len(doomed), deleteBatch)
			ops := []any{fence.Guard().op()}
			for _, p := range doomed[:n] {
				ops = append(ops, &zk.DeleteRequest{Path: p, Version: -1})
			}
			if err := s.pacedMulti(ops); err != nil {
				return deleted, s.wrap("delete log entries", err)
			}
			deleted += n
			doomed = doomed[n:]
		}
		if len(names) > 0 && (bn+1)<<bucketShift <= lsn {
			// Every entry of the bucket is below lsn: drop the bucket.
			if _, err := s.conn.Multi(fence.Guard().op(), &zk.DeleteRequest{Path: bpath, Version: -1}); err != nil && !errors.Is(err, zk.ErrNotEmpty) {
				return deleted, s.wrap("delete log bucket", err)
			}
			s.forgetBucket(bn << bucketShift)
		}
	}
	return deleted, nil
}

// CollectBases deletes every base generation other than cur's layers and
// the one before it (a deposed leader's unfinished one, or generations older than
// the previous), chunks first. Leader only.
func (s *Store) CollectBases(ctx context.Context, fence Fence, cur Base) (int, error) {
	gens, _, err := s.conn.Children(s.l.base())
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrap("list bases", err)
	}
	keep := map[string]bool{}
	for _, p := range append(cur.paths(), cur.prevPaths()...) {
		keep[p] = true
	}
	removed := 0
	for _, g := range gens {
		p := child(s.l.base(), g)
		if keep[p] {
			continue
		}
		// A generation newer than cur may be one being written right now
		// by this leader; only the leader writes, and it collects after
		// writing, so anything here is abandoned.
		if err := s.deleteGeneration(ctx, fence, p); err != nil {
			return removed, err
		}
		removed++
	}
	return removed, nil
}

// deleteGeneration deletes the base generation at p, chunks first, each
// multi guarded by fence. A generation already gone is no error.
func (s *Store) deleteGeneration(ctx context.Context, fence Fence, p string) error {
	chunks, _, err := s.conn.Children(p)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return s.wrap("list base chunks", err)
	}
	for len(chunks) > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n := min(len(chunks), deleteBatch/4) // chunks are large
		ops := []any{fence.Guard().op()}
		for _, c := range chunks[:n] {
			ops = append(ops, &zk.DeleteRequest{Path: child(p, c), Version: -1})
		}
		if err := s.pacedMulti(ops); err != nil {
			return s.wrap("delete base chunks", err)
		}
		chunks = chunks[n:]
	}
	if _, err := s.conn.Multi(fence.Guard().op(), &zk.DeleteRequest{Path: p, Version: -1}); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return s.wrap("delete base", err)
	}
	return nil
}

// FreeCompacted deletes at once what the current generation cur made
// obsolete and physical compaction otherwise keeps for one more cycle (for
// instances a little behind): the log entries below cur.Gen and the
// previous generation. It then records that in the description (PrevGen =
// Gen, no PrevPath, PrevSize and LogBytes 0) and returns it. Any instance
// may call it: nothing below the current generation is needed (recovery
// starts at it, an instance behind it reloads), and generations only move
// forward. The description is replaced only if cur is still current;
// ErrBaseChanged otherwise (what was deleted stays deleted: it is below a
// newer generation too). A cur without a generation (Gen 0) frees nothing.
func (s *Store) FreeCompacted(ctx context.Context, cur Base) (Base, int, error) {
	if cur.Gen == 0 {
		return cur, 0, nil
	}
	guard := Fence{path: s.l.compact()}
	deleted, err := s.TruncateLog(ctx, guard, cur.Gen)
	if err != nil {
		return Base{}, deleted, fmt.Errorf("truncate log below entry %d: %w", cur.Gen, err)
	}
	for _, p := range cur.prevPaths() {
		if err := s.deleteGeneration(ctx, guard, p); err != nil {
			return Base{}, deleted, err
		}
	}
	nb := cur
	nb.PrevGen, nb.PrevPath, nb.PrevDeltas, nb.PrevSize, nb.LogBytes = cur.Gen, "", nil, 0, 0
	nb.PrevRaw, nb.LogRaw = 0, 0
	meta, _ := json.Marshal(nb)
	if _, err := s.conn.Set(s.l.compact(), meta, cur.version); err != nil {
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			return Base{}, deleted, ErrBaseChanged
		}
		return Base{}, deleted, s.wrap("record freed generation", err)
	}
	nb.version++
	return nb, deleted, nil
}
