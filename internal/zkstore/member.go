package zkstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/go-zookeeper/zk"
)

// RegisterMember publishes m as an ephemeral member znode, replacing a stale
// one left by an earlier session of the same member, and keeps it published
// across session expiries. Called again, it replaces the published data.
func (s *Store) RegisterMember(m Member) error {
	s.mu.Lock()
	s.member = &m
	s.mu.Unlock()
	return s.publishMember(m)
}

func (s *Store) publishMember(m Member) error {
	m.ReadsFormat = MetaFormat
	p := s.l.member(m.ID)
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode member: %w", err)
	}
	for attempt := 0; attempt < 3; attempt++ {
		_, err = s.conn.Create(p, data, zk.FlagEphemeral, s.acl)
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return s.wrap("create member znode", err)
		}
		_, st, err := s.conn.Get(p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return s.wrap("read member znode", err)
		}
		if id, _ := s.Session(); st.EphemeralOwner == id {
			_, err := s.conn.Set(p, data, st.Version)
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
				continue
			}
			if err != nil {
				return s.wrap("update member znode", err)
			}
			return nil
		}
		// Left by a previous process or session of this member: it would
		// vanish at that session's expiry; replace it now.
		if err := s.conn.Delete(p, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			return s.wrap("delete stale member znode", err)
		}
	}
	return fmt.Errorf("member znode %s: kept being re-created by another session", p)
}

// Members lists the live members, ordered by ID.
func (s *Store) Members() ([]Member, error) {
	names, _, err := s.conn.Children(s.l.members())
	if err != nil {
		return nil, s.wrap("list members", err)
	}
	out := make([]Member, 0, len(names))
	for _, name := range names {
		if _, err := strconv.ParseUint(name, 16, 64); err != nil {
			continue
		}
		p := child(s.l.members(), name)
		data, _, err := s.conn.Get(p)
		if errors.Is(err, zk.ErrNoNode) {
			continue // went away meanwhile
		}
		if err != nil {
			return nil, s.wrap("read member", err)
		}
		var m Member
		if err := decodeJSON(p, data, &m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
