package zkstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/zketcd/zketcd/internal/revision"
)

// ErrNotFresh is returned by ImportBase for a root that already holds
// writes, a base generation, leases or members.
var ErrNotFresh = errors.New("zookeeper root is not fresh")

// importLeaseBatch is how many lease tokens one multi creates.
const importLeaseBatch = 1000

// ImportBase makes snap the state of a fresh root (one whose log holds only
// the sentinel entry 1): snap is stored as the base generation at log
// position 1 (snap.State.LSN must be 1), the renewal token of every lease
// is created, and the compact znode is pointed at the generation in one
// multi that also checks the head is unchanged, so an instance that starts
// on the root afterwards recovers exactly snap and commits its next write
// at entry 2 with revision snap.State.Rev+1. Nothing must serve the root
// meanwhile.
//
// Errors: ErrNotFresh (wrapped, with what was found); ErrUnavailable. On an
// error, chunks and tokens written so far stay: the caller deletes the
// root it imported into.
func (s *Store) ImportBase(ctx context.Context, snap *revision.Snapshot) (Base, error) {
	if snap.State.LSN != 1 {
		return Base{}, fmt.Errorf("import: snapshot at entry %d, want 1", snap.State.LSN)
	}
	headData, headStat, err := s.conn.Get(s.l.head())
	if err != nil {
		return Base{}, s.wrap("import: read head", err)
	}
	head, err := s.decodeHead(headData, headStat)
	if err != nil {
		return Base{}, err
	}
	cur, err := s.ReadBase()
	if err != nil {
		return Base{}, err
	}
	if head.LSN != 1 || cur.Gen != 0 {
		return Base{}, fmt.Errorf("%w: %s has log entries up to %d and base generation %d", ErrNotFresh, s.l.root, head.LSN, cur.Gen)
	}
	for _, dir := range []string{s.l.leases(), s.l.members()} {
		kids, _, err := s.conn.Children(dir)
		if err != nil {
			return Base{}, s.wrap("import: list "+dir, err)
		}
		if len(kids) > 0 {
			return Base{}, fmt.Errorf("%w: %s has %d children", ErrNotFresh, dir, len(kids))
		}
	}
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return Base{}, fmt.Errorf("import: nonce: %w", err)
	}
	b, err := s.PrepareBase(ctx, snap, cur, binary.BigEndian.Uint64(nb[:]))
	if err != nil {
		return Base{}, fmt.Errorf("import: write base generation: %w", err)
	}
	for start := 0; start < len(snap.Leases); start += importLeaseBatch {
		var ops []any
		for _, l := range snap.Leases[start:min(start+importLeaseBatch, len(snap.Leases))] {
			ops = append(ops, &zk.CreateRequest{Path: s.l.lease(l.ID), Acl: s.acl})
		}
		if _, err := s.conn.Multi(ops...); err != nil {
			return Base{}, s.wrap("import: create lease tokens", err)
		}
	}
	meta, _ := json.Marshal(b)
	var flip any = &zk.SetDataRequest{Path: s.l.compact(), Data: meta, Version: cur.version}
	if cur.version < 0 {
		flip = &zk.CreateRequest{Path: s.l.compact(), Data: meta, Acl: s.acl}
	}
	if _, err := s.conn.Multi(&zk.CheckVersionRequest{Path: s.l.head(), Version: headStat.Version}, flip); err != nil {
		return Base{}, s.wrap("import: make base current", err)
	}
	b.version = cur.version + 1
	return b, nil
}

// DeleteRoot deletes everything under the root, deepest first, and the root
// itself unless keepRoot (for an import that failed half-way; nothing may
// use the root). A root that does not exist is not an error.
func DeleteRoot(ctx context.Context, cfg Config, keepRoot bool) error {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	if !keepRoot {
		return s.deleteTree(ctx, cfg.Root)
	}
	kids, _, err := s.conn.Children(cfg.Root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return s.wrap("list "+cfg.Root, err)
	}
	for _, k := range kids {
		if err := s.deleteTree(ctx, cfg.Root+"/"+k); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) deleteTree(ctx context.Context, p string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	kids, _, err := s.conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return s.wrap("list "+p, err)
	}
	for _, k := range kids {
		if err := s.deleteTree(ctx, p+"/"+k); err != nil {
			return err
		}
	}
	if err := s.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return s.wrap("delete "+p, err)
	}
	return nil
}

// RootExists reports whether the root znode exists (with how many children).
func RootExists(ctx context.Context, cfg Config) (exists bool, children int, err error) {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return false, 0, err
	}
	defer s.Close()
	kids, _, err := s.conn.Children(cfg.Root)
	if errors.Is(err, zk.ErrNoNode) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, s.wrap("list "+cfg.Root, err)
	}
	return true, len(kids), nil
}
