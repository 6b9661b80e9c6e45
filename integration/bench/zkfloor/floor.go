// Package zkfloor issues, from a raw go-zookeeper session, the ZooKeeper
// requests zketcd's commits and read barriers are made of, so that a
// benchmark can measure what ZooKeeper itself allows: the floor under
// zketcd's put and linearizable get. It backs cmd/zkbudget and the
// harness's zk3-floor rows.
//
// A Floor is one session; its methods are safe for concurrent use (the
// session pipelines the requests of all goroutines), except CommitChained,
// which models one committer.
package zkfloor

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// EntrySize is the size of one log entry of a 256 B put (key, value,
// revision, CRC); HeadSize that of the head znode.
const (
	EntrySize = 330
	HeadSize  = 16
)

// Floor is one ZooKeeper session working under root: root/head (set on
// every commit, read by every barrier) and root/log/<n> (one znode per
// commit).
type Floor struct {
	conn  *zk.Conn
	root  string
	acl   []zk.ACL
	entry []byte
	head  []byte
	lsn   atomic.Int64
}

// Open connects to servers (host:port) and creates root, root/head, root/log
// and root/log/0000000000 if missing.
func Open(servers []string, root string) (*Floor, error) {
	conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zkfloor: connect %v: %w", servers, err)
	}
	f := &Floor{conn: conn, root: root, acl: zk.WorldACL(zk.PermAll),
		entry: make([]byte, EntrySize), head: make([]byte, HeadSize)}
	for _, p := range []string{root, f.headPath(), root + "/log", f.logPath(0)} {
		if _, err := conn.Create(p, nil, 0, f.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			conn.Close()
			return nil, fmt.Errorf("zkfloor: create %s: %w", p, err)
		}
	}
	return f, nil
}

// Close ends the session.
func (f *Floor) Close() { f.conn.Close() }

func (f *Floor) headPath() string       { return f.root + "/head" }
func (f *Floor) logPath(n int64) string { return fmt.Sprintf("%s/log/%010d", f.root, n) }

// commitOps are the writes of one commit: create root/log/<lsn> with an
// entry, set the head.
func (f *Floor) commitOps(lsn int64) []any {
	return []any{
		&zk.CreateRequest{Path: f.logPath(lsn), Data: f.entry, Acl: f.acl},
		&zk.SetDataRequest{Path: f.headPath(), Data: f.head, Version: -1},
	}
}

// Commit is multi(create(log entry of EntrySize B), setData(head)): a
// commit's writes. Concurrent callers create distinct entries.
func (f *Floor) Commit() error {
	_, err := f.conn.Multi(f.commitOps(f.lsn.Add(1))...)
	return err
}

// CommitChained is zketcd's commit multi exactly: a check that the
// previous entry exists, then Commit's writes. It models one committer:
// concurrent callers fail their checks.
func (f *Floor) CommitChained() error {
	lsn := f.lsn.Add(1)
	ops := append([]any{&zk.CheckVersionRequest{Path: f.logPath(lsn - 1), Version: -1}}, f.commitOps(lsn)...)
	_, err := f.conn.Multi(ops...)
	return err
}

// Check is multi(check(head)): a request that goes through the ZooKeeper
// leader and a quorum and writes nothing (zketcd's strict barrier).
func (f *Floor) Check() error {
	_, err := f.conn.Multi(&zk.CheckVersionRequest{Path: f.headPath(), Version: -1})
	return err
}

// Barrier is Check followed by Get on the same session: zketcd's strict
// linearizable read barrier.
func (f *Floor) Barrier() error {
	if err := f.Check(); err != nil {
		return err
	}
	return f.Get()
}

// SyncGet is sync(head) followed by Get: ZooKeeper's own read-after-sync
// (answered by the session's server after it caught up with the leader).
func (f *Floor) SyncGet() error {
	if _, err := f.conn.Sync(f.headPath()); err != nil {
		return err
	}
	return f.Get()
}

// Get reads the head from the session's server.
func (f *Floor) Get() error {
	_, _, err := f.conn.Get(f.headPath())
	return err
}
