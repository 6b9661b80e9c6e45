package zkstore

import (
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// LeaseToken is the renewal token of a lease: its data version advances at
// every renewal.
type LeaseToken struct {
	Version int32
	// Renewed is when the token was last written (grant or renewal), by the
	// ZooKeeper leader's wall clock. Only for estimates shown to users;
	// expiry never compares wall clocks.
	Renewed time.Time
}

// ReadLeaseToken reads lease id's token; ok is false if it does not exist.
func (s *Store) ReadLeaseToken(id int64) (tok LeaseToken, ok bool, err error) {
	_, st, err := s.conn.Get(s.l.lease(id))
	if errors.Is(err, zk.ErrNoNode) {
		return LeaseToken{}, false, nil
	}
	if err != nil {
		return LeaseToken{}, false, s.wrap("read lease token", err)
	}
	return LeaseToken{Version: st.Version, Renewed: time.UnixMilli(st.Mtime)}, true, nil
}

// RenewLeases advances the tokens of ids in one multi, or one by one if
// some no longer exist. It returns the leases that were renewed.
func (s *Store) RenewLeases(ids []int64) (map[int64]bool, error) {
	renewed := make(map[int64]bool, len(ids))
	if len(ids) == 0 {
		return renewed, nil
	}
	ops := make([]any, len(ids))
	for i, id := range ids {
		ops[i] = &zk.SetDataRequest{Path: s.l.lease(id), Version: -1}
	}
	_, err := s.conn.Multi(ops...)
	if err == nil {
		for _, id := range ids {
			renewed[id] = true
		}
		return renewed, nil
	}
	if !errors.Is(err, zk.ErrNoNode) {
		// A renewal that may or may not have happened is harmless: it only
		// ever postpones an expiry. Report the failure, renew nothing.
		return renewed, s.wrap("renew leases", err)
	}
	for _, id := range ids {
		_, err := s.conn.Set(s.l.lease(id), nil, -1)
		switch {
		case err == nil:
			renewed[id] = true
		case errors.Is(err, zk.ErrNoNode):
		default:
			return renewed, s.wrap("renew lease", err)
		}
	}
	return renewed, nil
}
