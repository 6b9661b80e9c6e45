package zkstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// ErrNoRoot is returned when the root's meta or head znode does not exist:
// ZooKeeper holds no zketcd data there (a new or wiped ensemble).
var ErrNoRoot = errors.New("no zketcd root in zookeeper")

// OpenInspector opens a Store on a fresh session that creates nothing: it
// reads the root's meta and returns ErrNoRoot (wrapped) if there is none.
// Its reads (Head, SyncHead, ReadEntries, ReadBase) work as on a Store from
// Open; it must not be used to commit.
//
// A fresh session claims to have seen no zxid, so ZooKeeper accepts it even
// when its data is older than what another session of this process saw
// (ZooKeeper refuses such a session, closing its connection, for as long as
// its own last zxid is lower); that is what makes it useful to find out why
// the main session is refused. Close it after use.
func OpenInspector(ctx context.Context, cfg Config) (*Store, error) {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return nil, err
	}
	data, _, err := s.conn.Get(s.l.meta())
	if errors.Is(err, zk.ErrNoNode) {
		s.Close()
		return nil, fmt.Errorf("read meta under %s: %w", s.l.root, ErrNoRoot)
	}
	if errors.Is(err, zk.ErrNoAuth) {
		err = s.noAccess(s.l.meta())
		s.Close()
		return nil, err
	}
	if err != nil {
		s.Close()
		return nil, s.wrap("read meta", err)
	}
	if err := s.decodeMeta(data); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
