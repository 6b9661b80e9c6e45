package zkstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/revision"
)

// Moving a root (`zketcd move`): the destination root is a copy of the
// source's, znode by znode where it can be (log entries and their chunks
// byte for byte, at the same positions; the meta with its cluster ID and
// format; the lease tokens), the base generation rewritten under the
// destination's paths. Two records keep instances off a root that is not
// theirs:
//
//	<dest>/move    the copy in progress (MoveRecord): Open refuses the
//	               root until the mover marks it finished
//	<source>/moved where the cluster went (MovedRecord), left by the mover
//	               once the destination is finished: Open refuses the root
//	               for good (ErrMoved), and a freed source keeps only it

// ErrMoveInProgress is wrapped by Open for a root a move is copying into.
var ErrMoveInProgress = errors.New("a move is copying into this root")

// ErrMoved is wrapped by Open for a root whose cluster moved elsewhere
// (see MovedError).
var ErrMoved = errors.New("this root's cluster moved")

// ErrFleetTenant is wrapped by a root move (`zketcd move`) of a fleet's
// root, of a fleet tenant's root (<fleet>/roots/<name>, or a root a
// tenant move copied it into), or into a fleet's roots: a tenant moves
// with `zketcd tenant move`, which keeps the fleet's registry naming
// where its data lives.
var ErrFleetTenant = errors.New("a fleet's root or a tenant's root is not moved by zketcd move (move a tenant with zketcd tenant move)")

// TenantRef names a fleet's tenant: the fleet root and the tenant's name.
type TenantRef struct {
	Fleet string `json:"fleet"`
	Name  string `json:"name"`
}

// refuseFleet fails with ErrFleetTenant if root is a fleet root, a tenant
// root of one (its parent is <fleet>/roots, <fleet>/fleet exists), or
// the destination of a tenant's move (its move record names the tenant);
// what names the operation (e.g. "move").
func (s *Store) refuseFleet(root, what string) error {
	if r, ok, err := s.readMoveOf(root); err != nil {
		return err
	} else if ok && r.Tenant != nil {
		return fmt.Errorf("%w: cannot %s %s, the root of tenant %q of fleet %s", ErrFleetTenant, what, root, r.Tenant.Name, r.Tenant.Fleet)
	}
	fleet, tenant := root, ""
	if dir := path.Dir(root); path.Base(dir) == "roots" {
		fleet, tenant = path.Dir(dir), path.Base(root)
	}
	for _, f := range []string{root, fleet} {
		ok, _, err := s.conn.Exists(fleetLayout{f}.marker())
		if err != nil {
			return s.wrap("check for a fleet at "+f, err)
		}
		if !ok {
			continue
		}
		if f == root {
			return fmt.Errorf("%w: cannot %s %s, a fleet root", ErrFleetTenant, what, root)
		}
		return fmt.Errorf("%w: cannot %s %s, the root of tenant %q of fleet %s", ErrFleetTenant, what, root, tenant, fleet)
	}
	return nil
}

// MovedError is Open's error for a moved root: where the cluster went.
type MovedError struct {
	Root string
	To   MovedRecord
}

func (e *MovedError) Error() string {
	where := e.To.Root
	if e.To.Servers != "" {
		where += " on " + e.To.Servers
	}
	return fmt.Sprintf("%v: %s moved to %s at log entry %d; serve --zk-root %s", ErrMoved, e.Root, where, e.To.FenceLSN, e.To.Root)
}

func (e *MovedError) Unwrap() error { return ErrMoved }

// Move states (MoveRecord.State).
const (
	MoveCopying  = "copying"
	MoveFinished = "finished"
)

// MoveRecord is <dest>/move: the root a move copies from, and whether the
// copy finished.
type MoveRecord struct {
	ClusterID   uint64    `json:"cluster_id"`
	FromServers string    `json:"from_servers"`
	FromRoot    string    `json:"from_root"`
	State       string    `json:"state"`
	FenceLSN    int64     `json:"fence_lsn,omitempty"`
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished,omitzero"`
	// Tenant is the fleet tenant whose data moves (nil: a root move).
	Tenant *TenantRef `json:"tenant,omitempty"`
}

// MovedRecord is <source>/moved: where the cluster continues.
type MovedRecord struct {
	Servers  string    `json:"servers,omitempty"`
	Root     string    `json:"root"`
	FenceLSN int64     `json:"fence_lsn"`
	Moved    time.Time `json:"moved"`
}

func (l layout) move() string  { return l.root + "/move" }
func (l layout) moved() string { return l.root + "/moved" }

// checkMove refuses a root a move copies into (ErrMoveInProgress) or whose
// cluster moved away (*MovedError).
func (s *Store) checkMove() error {
	if data, _, err := s.conn.Get(s.l.moved()); err == nil {
		var r MovedRecord
		if err := decodeJSON(s.l.moved(), data, &r); err != nil {
			return err
		}
		return &MovedError{Root: s.l.root, To: r}
	} else if !errors.Is(err, zk.ErrNoNode) {
		return s.wrap("read "+s.l.moved(), err)
	}
	r, ok, err := s.readMove()
	if err != nil || !ok || r.State == MoveFinished {
		return err
	}
	return fmt.Errorf("%w: %s is being copied from %s%s since %s; it is served once the move finishes",
		ErrMoveInProgress, s.l.root, prefixServers(r.FromServers), r.FromRoot, r.Started.Format(time.RFC3339))
}

func prefixServers(s string) string {
	if s == "" {
		return ""
	}
	return s + ":"
}

func (s *Store) readMove() (MoveRecord, bool, error) { return s.readMoveOf(s.l.root) }

// readMoveOf reads root's move record on s's session (ok false: none).
func (s *Store) readMoveOf(root string) (MoveRecord, bool, error) {
	p := layout{root: root}.move()
	data, _, err := s.conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return MoveRecord{}, false, nil
	}
	if err != nil {
		return MoveRecord{}, false, s.wrap("read "+p, err)
	}
	var r MoveRecord
	return r, true, decodeJSON(p, data, &r)
}

// RootCopy copies a source root into a destination root for a move. It
// holds a session on each (the same ensemble or two). Not safe for
// concurrent use.
type RootCopy struct {
	src, dst *Store
	meta     Meta
	srcMeta  []byte
	tenant   *TenantRef
}

// OpenRootCopy opens sessions on the source root, which must hold a
// cluster (its meta), and on the destination's ensemble. It writes
// nothing. It refuses (ErrFleetTenant) a fleet's root, a tenant's root
// and a destination in a fleet's roots.
func OpenRootCopy(ctx context.Context, src, dst Config) (*RootCopy, error) {
	return openRootCopy(ctx, src, dst, nil)
}

// OpenTenantCopy is OpenRootCopy for the data of a fleet's tenant, in
// src.Root: the caller checked the roots against the fleet's registry.
// The destination's move record names the tenant (so that a root move
// refuses it afterwards).
func OpenTenantCopy(ctx context.Context, src, dst Config, tenant TenantRef) (*RootCopy, error) {
	return openRootCopy(ctx, src, dst, &tenant)
}

func openRootCopy(ctx context.Context, src, dst Config, tenant *TenantRef) (*RootCopy, error) {
	s, err := openRaw(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if tenant == nil {
		if err := s.refuseFleet(src.Root, "move"); err != nil {
			s.Close()
			return nil, err
		}
	}
	data, _, err := s.conn.Get(s.l.meta())
	if err != nil {
		s.Close()
		if errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("source %s: %w", src.Root, ErrNoRoot)
		}
		return nil, s.wrap("read source meta", err)
	}
	if err := s.decodeMeta(data); err != nil {
		s.Close()
		return nil, err
	}
	d, err := openRaw(ctx, dst)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("destination: %w", err)
	}
	if tenant == nil {
		if err := d.refuseFleet(dst.Root, "move into"); err != nil {
			s.Close()
			d.Close()
			return nil, err
		}
	}
	_ = d.decodeMeta(data) // the destination is written in the source's format
	return &RootCopy{src: s, dst: d, meta: s.meta, srcMeta: data, tenant: tenant}, nil
}

// Close ends both sessions.
func (c *RootCopy) Close() {
	c.src.Close()
	c.dst.Close()
}

// Source is the source root's store (its head, entries, commits).
func (c *RootCopy) Source() *Store { return c.src }

// Meta is the source's cluster identity.
func (c *RootCopy) Meta() Meta { return c.meta }

// Moved returns the source's <root>/moved (ok false: none).
func (c *RootCopy) Moved() (MovedRecord, bool, error) {
	data, _, err := c.src.conn.Get(c.src.l.moved())
	if errors.Is(err, zk.ErrNoNode) {
		return MovedRecord{}, false, nil
	}
	if err != nil {
		return MovedRecord{}, false, c.src.wrap("read moved", err)
	}
	var r MovedRecord
	return r, true, decodeJSON(c.src.l.moved(), data, &r)
}

// Claim makes the destination this move's: it creates the root and its
// move record if the root has no children, or resumes if its record names
// the same source and cluster (resumed true). Anything else fails with
// ErrNotFresh.
func (c *RootCopy) Claim(fromServers string) (rec MoveRecord, resumed bool, err error) {
	d := c.dst
	want := MoveRecord{ClusterID: c.meta.ClusterID, FromServers: fromServers, FromRoot: c.src.l.root, Tenant: c.tenant}
	if r, ok, err := d.readMove(); err != nil {
		return MoveRecord{}, false, err
	} else if ok {
		if r.ClusterID != want.ClusterID || r.FromRoot != want.FromRoot || r.FromServers != want.FromServers {
			return MoveRecord{}, false, fmt.Errorf("%w: %s is the destination of a move of cluster %x from %s%s", ErrNotFresh, d.l.root, r.ClusterID, prefixServers(r.FromServers), r.FromRoot)
		}
		return r, true, nil
	}
	if err := d.ensureRootNode(); err != nil {
		return MoveRecord{}, false, err
	}
	kids, _, err := d.conn.Children(d.l.root)
	if err != nil {
		return MoveRecord{}, false, d.wrap("list "+d.l.root, err)
	}
	if len(kids) > 0 {
		return MoveRecord{}, false, fmt.Errorf("%w: %s has %d children and no move record; move into a new root", ErrNotFresh, d.l.root, len(kids))
	}
	want.State, want.Started = MoveCopying, time.Now().UTC().Truncate(time.Second)
	data, _ := json.Marshal(want)
	if _, err := d.conn.Create(d.l.move(), data, 0, d.acl); err != nil {
		return MoveRecord{}, false, d.wrap("claim "+d.l.root, err)
	}
	return want, false, nil
}

// DestHead returns the destination's head (ok false: its layout is not
// created yet).
func (c *RootCopy) DestHead() (Head, bool, error) {
	data, st, err := c.dst.conn.Get(c.dst.l.head())
	if errors.Is(err, zk.ErrNoNode) {
		return Head{}, false, nil
	}
	if err != nil {
		return Head{}, false, c.dst.wrap("read destination head", err)
	}
	h, err := c.dst.decodeHead(data, st)
	return h, err == nil, err
}

// Init writes the destination's layout from the source's current base
// generation: the meta as the source's, the base snapshot under the
// destination's paths, the log entry at the base's position byte for byte
// and the head at it. It returns that head.
func (c *RootCopy) Init(ctx context.Context) (Head, error) {
	s, d := c.src, c.dst
	base, err := s.ReadBase()
	if err != nil {
		return Head{}, err
	}
	at, rev := int64(1), int64(1)
	var snap *revision.Snapshot
	if base.Gen > 0 {
		if snap, err = s.LoadBase(ctx, base); err != nil {
			return Head{}, fmt.Errorf("load the source's base generation %d: %w", base.Gen, err)
		}
		at, rev = base.Gen, snap.State.Rev
	}
	entry, _, err := s.conn.Get(s.l.entry(at))
	if err != nil {
		return Head{}, s.wrap(fmt.Sprintf("read source entry %d", at), err)
	}
	if err := c.copyChunksOf(entry); err != nil {
		return Head{}, err
	}
	for _, p := range []string{d.l.log(), d.l.members(), d.l.election(), d.l.leases(), d.l.chunks(), d.l.base(), d.l.tokens()} {
		if _, err := d.conn.Create(p, nil, 0, d.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return Head{}, d.wrap("create "+p, err)
		}
	}
	compact := []byte(`{"gen":0}`)
	if snap != nil {
		var nb [8]byte
		_, _ = rand.Read(nb[:])
		b, err := d.PrepareBase(ctx, snap, Base{version: -1}, binary.BigEndian.Uint64(nb[:]))
		if err != nil {
			return Head{}, fmt.Errorf("write the destination's base generation: %w", err)
		}
		compact, _ = json.Marshal(b)
	}
	headData, _ := json.Marshal(Head{LSN: at, Rev: rev})
	if err := d.ensureBucket(at); err != nil {
		return Head{}, err
	}
	_, err = d.conn.Multi(
		&zk.CreateRequest{Path: d.l.meta(), Data: c.srcMeta, Acl: d.acl},
		&zk.CreateRequest{Path: d.l.compact(), Data: compact, Acl: d.acl},
		&zk.CreateRequest{Path: d.l.entry(at), Data: entry, Acl: d.acl},
		&zk.CreateRequest{Path: d.l.head(), Data: headData, Acl: d.acl},
	)
	if err != nil {
		return Head{}, d.wrap("create the destination's layout", err)
	}
	return Head{LSN: at, Rev: rev}, nil
}

// Reset deletes what a move copied into the destination, all but its move
// record (the head first), so that Init can copy it again: for a copy the
// source's compaction overtook (ErrEntryMissing), or one a run cut short
// while it reset or initialised it (no head). The destination must be this
// move's and not finished (Claim); nothing serves it until then.
func (c *RootCopy) Reset(ctx context.Context) error {
	d := c.dst
	if r, ok, err := d.readMove(); err != nil {
		return err
	} else if !ok || r.State != MoveCopying || r.ClusterID != c.meta.ClusterID {
		return fmt.Errorf("%s is not a copy in progress of cluster %x: not reset", d.l.root, c.meta.ClusterID)
	}
	// The head goes first: a reset cut short then reads as a destination
	// without a head, which the next run resets again before copying.
	if err := d.conn.Delete(d.l.head(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return d.wrap("reset: delete "+d.l.head(), err)
	}
	kids, _, err := d.conn.Children(d.l.root)
	if err != nil {
		return d.wrap("list "+d.l.root, err)
	}
	var deleted atomic.Int64
	for _, k := range kids {
		if k == path.Base(d.l.move()) || k == path.Base(d.l.head()) {
			continue
		}
		if err := d.deleteTreeCounting(ctx, d.l.root+"/"+k, &deleted); err != nil {
			return fmt.Errorf("reset %s: %w", d.l.root, err)
		}
	}
	d.mu.Lock()
	clear(d.buckets) // deleted with the log
	d.mu.Unlock()
	return nil
}

// copyChunksOf copies the chunks an indirect entry names (none for a
// direct one); chunks are immutable, so one already there is the same.
func (c *RootCopy) copyChunksOf(data []byte) error {
	if len(data) == 0 || data[0] != indirectFormat {
		return nil
	}
	in, err := decodeIndirect(data)
	if err != nil {
		return err
	}
	for _, name := range in.names {
		part, _, err := c.src.conn.Get(c.src.l.chunk(name))
		if err != nil {
			return c.src.wrap("read chunk "+name, err)
		}
		if _, err := c.dst.conn.Create(c.dst.l.chunk(name), part, 0, c.dst.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return c.dst.wrap("copy chunk "+name, err)
		}
	}
	return nil
}

// copyBatchBytes bounds the bytes of one multi that copies entries (their
// data, paths and each op's framing: copyOpBytes), and copyBatchOps its
// ops, well below what one ZooKeeper request may carry (jute.maxbuffer,
// 1 MiB by default, and the client's send buffer): a log of small entries
// is mostly framing.
const (
	copyBatchBytes = 512 << 10
	copyBatchOps   = 2000
	copyOpBytes    = 64
)

// CopyEntries copies the source's entries after the destination's head
// up to lsn, byte for byte, moving the destination's head with each batch;
// a fence is copied as arrived. The destination's head must be an entry
// the source holds, the same (else an error: the copy does not continue
// that log). It returns the destination's new head. Errors wrap
// ErrEntryMissing when the source no longer holds an entry to copy (it was
// compacted away: the copy must start again in a new root).
func (c *RootCopy) CopyEntries(ctx context.Context, from Head, lsn int64) (Head, error) {
	head := from
	var ops []any
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		hd, _ := json.Marshal(Head{LSN: head.LSN, Rev: head.Rev})
		ops = append(ops, &zk.SetDataRequest{Path: c.dst.l.head(), Data: hd, Version: -1})
		if _, err := c.dst.conn.Multi(ops...); err != nil {
			return c.dst.wrap("copy entries", err)
		}
		ops, size = nil, 0
		return nil
	}
	read := c.readAhead(ctx, from.LSN+1, lsn)
	for n := from.LSN + 1; n <= lsn; n++ {
		if err := ctx.Err(); err != nil {
			return from, err
		}
		data, err := read()
		if errors.Is(err, zk.ErrNoNode) {
			return from, fmt.Errorf("%w: source entry %d (compacted away)", ErrEntryMissing, n)
		}
		if err != nil {
			return from, c.src.wrap(fmt.Sprintf("read source entry %d", n), err)
		}
		if err := c.copyChunksOf(data); err != nil {
			return from, err
		}
		full := data
		if len(data) > 0 && data[0] == indirectFormat {
			in, _ := decodeIndirect(data)
			if full, err = c.src.readChunks(in); err != nil {
				return from, err
			}
		}
		e, err := DecodeEntry(full)
		if err != nil {
			return from, fmt.Errorf("source entry %d: %w", n, err)
		}
		if e.Fence() != nil {
			for i := range e.Ops {
				if e.Ops[i].Kind == revision.OpFence {
					e.Ops[i].Move.Arrived = true
				}
			}
			data = EncodeEntry(e)
		}
		if err := c.dst.ensureBucket(n); err != nil {
			return from, err
		}
		ops = append(ops, &zk.CreateRequest{Path: c.dst.l.entry(n), Data: data, Acl: c.dst.acl})
		head = Head{LSN: n, Rev: max(head.Rev, e.LastRev())}
		if size += len(data) + len(c.dst.l.entry(n)) + copyOpBytes; size >= copyBatchBytes || len(ops) >= copyBatchOps {
			if err := flush(); err != nil {
				return from, err
			}
			from = head
		}
	}
	if err := flush(); err != nil {
		return from, err
	}
	return head, nil
}

// copyReadWindow is how many source entries CopyEntries reads ahead: one
// read at a time would copy slower than a busy root commits, and the copy
// would never come close enough to its head to fence it.
const copyReadWindow = 64

// readAhead reads the source's entries from..to, copyReadWindow at a time
// in flight, and returns the reader of the next one's bytes (in order).
// The reads stop with ctx.
func (c *RootCopy) readAhead(ctx context.Context, from, to int64) func() ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	var pending []chan result
	next := from
	launch := func() {
		ch := make(chan result, 1)
		pending = append(pending, ch)
		p := c.src.l.entry(next)
		next++
		go func() {
			data, _, err := c.src.conn.Get(p)
			ch <- result{data, err}
		}()
	}
	return func() ([]byte, error) {
		for next <= to && len(pending) < copyReadWindow {
			launch()
		}
		if len(pending) == 0 {
			return nil, errors.New("read past the copy's end")
		}
		var r result
		select {
		case r = <-pending[0]:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		pending = pending[1:]
		return r.data, r.err
	}
}

// SameEntry reports whether the destination's entry lsn is the source's
// (byte for byte, or its fence's arrived copy).
func (c *RootCopy) SameEntry(lsn int64) (bool, error) {
	a, _, err := c.src.conn.Get(c.src.l.entry(lsn))
	if errors.Is(err, zk.ErrNoNode) {
		return false, fmt.Errorf("%w: source entry %d (compacted away)", ErrEntryMissing, lsn)
	}
	if err != nil {
		return false, c.src.wrap("read source entry", err)
	}
	b, _, err := c.dst.conn.Get(c.dst.l.entry(lsn))
	if err != nil {
		return false, c.dst.wrap("read destination entry", err)
	}
	if bytes.Equal(a, b) {
		return true, nil
	}
	ea, err1 := DecodeEntry(a)
	eb, err2 := DecodeEntry(b)
	return err1 == nil && err2 == nil && ea.Fence() != nil && ea.Writer == eb.Writer, nil
}

// SourceReleased reports whether no instance is left in the source's
// election and none holds its read lease: after a fence, every instance
// has applied it (or its session ended), so none renews leases or answers
// reads from the source's memory any more.
func (c *RootCopy) SourceReleased() (bool, error) {
	kids, _, err := c.src.conn.Children(c.src.l.election())
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return false, c.src.wrap("list source election", err)
	}
	if len(kids) > 0 {
		return false, nil
	}
	ok, _, err := c.src.conn.Exists(c.src.l.readLease())
	if err != nil {
		return false, c.src.wrap("read source read lease", err)
	}
	return !ok, nil
}

// CopyLeaseTokens makes the destination's lease tokens the source's: one
// for each of the source's (renewed once if the source's was, so a new
// leader does not take a checkpointed TTL for the lease's time left), none
// other. Called once the source is fenced and released.
func (c *RootCopy) CopyLeaseTokens() (int, error) {
	src, _, err := c.src.conn.Children(c.src.l.leases())
	if err != nil {
		return 0, c.src.wrap("list source leases", err)
	}
	dst, _, err := c.dst.conn.Children(c.dst.l.leases())
	if err != nil {
		return 0, c.dst.wrap("list destination leases", err)
	}
	have := map[string]bool{}
	for _, k := range dst {
		have[k] = true
	}
	for _, k := range src {
		_, st, err := c.src.conn.Get(c.src.l.root + "/leases/" + k)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return 0, c.src.wrap("read lease token", err)
		}
		p := c.dst.l.root + "/leases/" + k
		if !have[k] {
			if _, err := c.dst.conn.Create(p, nil, 0, c.dst.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return 0, c.dst.wrap("copy lease token", err)
			}
		}
		delete(have, k)
		if st.Version > 0 {
			if _, err := c.dst.conn.Set(p, nil, 0); err != nil && !errors.Is(err, zk.ErrBadVersion) {
				return 0, c.dst.wrap("renew lease token", err)
			}
		}
	}
	for k := range have {
		if err := c.dst.conn.Delete(c.dst.l.root+"/leases/"+k, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return 0, c.dst.wrap("delete lease token", err)
		}
	}
	return len(src), nil
}

// Finish marks the destination finished at the fence's position fenceLSN
// (instances may open it from then on) and leaves <source>/moved naming
// it. Both steps are idempotent.
func (c *RootCopy) Finish(rec MoveRecord, to revision.Move, fenceLSN int64) error {
	rec.State, rec.FenceLSN = MoveFinished, fenceLSN
	if rec.Finished.IsZero() {
		rec.Finished = time.Now().UTC().Truncate(time.Second)
	}
	data, _ := json.Marshal(rec)
	if _, err := c.dst.conn.Set(c.dst.l.move(), data, -1); err != nil {
		return c.dst.wrap("finish the destination", err)
	}
	moved, _ := json.Marshal(MovedRecord{Servers: to.Servers, Root: to.Root, FenceLSN: fenceLSN, Moved: rec.Finished})
	if _, err := c.src.conn.Create(c.src.l.moved(), moved, 0, c.src.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return c.src.wrap("mark the source moved", err)
	}
	return nil
}

// FreeMovedSource deletes everything of a moved root but its
// <root>/moved record, which keeps refusing it to Open. A root that did
// not move is refused.
func FreeMovedSource(ctx context.Context, cfg Config) (MovedRecord, error) {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return MovedRecord{}, err
	}
	defer s.Close()
	data, _, err := s.conn.Get(s.l.moved())
	if errors.Is(err, zk.ErrNoNode) {
		return MovedRecord{}, fmt.Errorf("%s did not move (no %s): nothing freed", cfg.Root, s.l.moved())
	}
	if err != nil {
		return MovedRecord{}, s.wrap("read moved", err)
	}
	var r MovedRecord
	if err := decodeJSON(s.l.moved(), data, &r); err != nil {
		return MovedRecord{}, err
	}
	kids, _, err := s.conn.Children(cfg.Root)
	if err != nil {
		return r, s.wrap("list "+cfg.Root, err)
	}
	for _, k := range kids {
		if k == "moved" {
			continue
		}
		if err := s.deleteTree(ctx, cfg.Root+"/"+k); err != nil {
			return r, err
		}
	}
	return r, nil
}

// JoinServers is a server list as a fence names it.
func JoinServers(servers []string) string { return strings.Join(servers, ",") }

// FenceWriter is the writer tag of a mover's fence: a random nonce, so a
// fence resolved by its tag after a lost answer is this mover's.
func FenceWriter() revision.WriterTag {
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	return revision.WriterTag{Nonce: binary.BigEndian.Uint64(nb[:]), Seq: 1}
}

// moveSummary is a one-line description of a move record for logs.
func (r MoveRecord) String() string {
	return r.State + " from " + prefixServers(r.FromServers) + r.FromRoot + " (fence " + strconv.FormatInt(r.FenceLSN, 10) + ")"
}

// WaitMoveFinished waits until the move copying into root, on this
// store's ensemble, is finished (its move record says so), with a watch on
// the record on this store's session: no session of its own, no polling.
// A root without a record waits for one. Errors: ctx's; the session's
// (the caller tries again); a record that names no cluster.
func (s *Store) WaitMoveFinished(ctx context.Context, root string) error {
	p := layout{root: root}.move()
	type read struct {
		data []byte
		ch   <-chan zk.Event
		err  error
	}
	for {
		// Each read in the background: the caller's ctx ends the wait even
		// while a request is unanswered (a session reconnecting).
		got := make(chan read, 1)
		go func() {
			data, _, ch, err := s.conn.GetW(p)
			if errors.Is(err, zk.ErrNoNode) {
				var ok bool
				ok, _, ch, err = s.conn.ExistsW(p)
				if err == nil && ok { // created meanwhile: read it at once
					now := make(chan zk.Event)
					close(now)
					ch = now
				}
			}
			got <- read{data, ch, err}
		}()
		var r read
		select {
		case r = <-got:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return fmt.Errorf("%w: store closed", ErrUnavailable)
		}
		if r.err != nil && !errors.Is(r.err, zk.ErrNoNode) {
			return s.wrap("watch "+p, r.err)
		}
		if r.data != nil {
			var rec MoveRecord
			if err := decodeJSON(p, r.data, &rec); err != nil {
				return err
			}
			if rec.State == MoveFinished {
				return nil
			}
		}
		select {
		case <-r.ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return fmt.Errorf("%w: store closed", ErrUnavailable)
		}
	}
}

// WaitMoveFinished is Store.WaitMoveFinished for cfg.Root on cfg's
// ensemble, on a session of its own (one, for the whole wait).
func WaitMoveFinished(ctx context.Context, cfg Config) error {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.WaitMoveFinished(ctx, cfg.Root)
}
