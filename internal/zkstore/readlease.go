package zkstore

import (
	"errors"
	"strconv"

	"github.com/go-zookeeper/zk"
)

// ErrLeaseHeld answers TakeReadLease while another session holds the read
// lease znode.
var ErrLeaseHeld = errors.New("zketcd: the read lease is held by another session")

// TakeReadLease creates the read lease znode, ephemeral to the current
// session (data: memberID in hex), and returns that session. While it
// exists every commit without the leader's fence is refused (Held, see
// ReadLeaseAbsent), so a leader that took it and proved its session alive
// afterwards knows that no other instance's commit can land until the
// session ends or ReleaseReadLease. If the znode exists already and is this
// session's, it is kept. Errors: ErrLeaseHeld, or the store's (unavailable).
func (s *Store) TakeReadLease(memberID uint64) (session int64, err error) {
	sid, _ := s.Session()
	_, err = s.conn.Create(s.l.readLease(), []byte(strconv.FormatUint(memberID, 16)), zk.FlagEphemeral, s.acl)
	if errors.Is(err, zk.ErrNodeExists) {
		_, st, gerr := s.conn.Get(s.l.readLease())
		switch {
		case gerr != nil:
			return 0, s.wrap("read the read lease", gerr)
		case st.EphemeralOwner != sid:
			return 0, ErrLeaseHeld
		}
		return sid, nil
	}
	if err != nil {
		return 0, s.wrap("take the read lease", err)
	}
	return sid, nil
}

// ReleaseReadLease deletes the read lease znode if the current session
// owns it (a leader stepping down), so other instances may commit at once
// rather than when the session ends.
func (s *Store) ReleaseReadLease() error {
	sid, _ := s.Session()
	_, st, err := s.conn.Get(s.l.readLease())
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return s.wrap("read the read lease", err)
	}
	if st.EphemeralOwner != sid {
		return nil
	}
	if err := s.conn.Delete(s.l.readLease(), st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return s.wrap("release the read lease", err)
	}
	return nil
}
