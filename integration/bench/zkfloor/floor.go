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
	// tailing is closed to stop the tailer (Tail).
	tailing chan struct{}
	tailErr atomic.Value
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

// Close stops the tailer, if any, and ends the session.
func (f *Floor) Close() {
	if f.tailing != nil {
		close(f.tailing)
	}
	f.conn.Close()
}

// SetEntrySize makes the entries of later commits n bytes long (EntrySize
// by default). Not safe for use concurrently with commits.
func (f *Floor) SetEntrySize(n int) { f.entry = make([]byte, n) }

// Tail starts a tailer on the floor's session, as a zketcd instance's:
// it reads the head with a watch (getW), and on every watch event reads
// it again with a new watch, until Close. Every setData of the head then
// fires one watch and costs one read.
func (f *Floor) Tail() error {
	if f.tailing != nil {
		return errors.New("zkfloor: already tailing")
	}
	_, _, ev, err := f.conn.GetW(f.headPath())
	if err != nil {
		return fmt.Errorf("zkfloor: watch head: %w", err)
	}
	f.tailing = make(chan struct{})
	go func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-ev:
			}
			var err error
			if _, _, ev, err = f.conn.GetW(f.headPath()); err != nil {
				f.tailErr.Store(err)
				return
			}
		}
	}(f.tailing)
	return nil
}

// TailErr returns the error that stopped the tailer, if any.
func (f *Floor) TailErr() error {
	if err, ok := f.tailErr.Load().(error); ok {
		return err
	}
	return nil
}

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

// zketcdOps are the ops of zketcd's default commit multi besides
// commitOps: a check that an entry exists, and the read-lease guard, a
// create and a delete of one znode (ZooKeeper has no "absent" check).
func (f *Floor) zketcdOps() []any {
	guard := f.root + "/readlease"
	return []any{
		&zk.CheckVersionRequest{Path: f.logPath(0), Version: -1},
		&zk.CreateRequest{Path: guard, Acl: f.acl},
		&zk.DeleteRequest{Path: guard, Version: -1},
	}
}

// CommitZketcd is the shape of zketcd's default commit multi (an instance
// that does not forward writes, pipeline depth 1): check(an entry),
// create(log entry), setData(head), create and delete of the read-lease
// guard. The check names an entry that always exists, so that concurrent
// callers all land (zketcd's names the predecessor).
func (f *Floor) CommitZketcd() error {
	ops := append(f.commitOps(f.lsn.Add(1)), f.zketcdOps()...)
	_, err := f.conn.Multi(ops...)
	return err
}

// ZketcdExtraBytes is how many more bytes CommitZketcd's request carries
// than Commit's with the same entry: pad Commit's entry by this much to
// send a minimal multi of the same size.
func (f *Floor) ZketcdExtraBytes() int { return requestBytes(f.zketcdOps()) }

// requestBytes is the encoded size of ops inside a multi request (jute:
// each op's header, then its fields).
func requestBytes(ops []any) int {
	str := func(s string) int { return 4 + len(s) }
	acl := func(a []zk.ACL) int {
		n := 4
		for _, x := range a {
			n += 4 + str(x.Scheme) + str(x.ID)
		}
		return n
	}
	n := 0
	for _, op := range ops {
		n += 4 + 1 + 4 // type, done, err
		switch o := op.(type) {
		case *zk.CreateRequest:
			n += str(o.Path) + 4 + len(o.Data) + acl(o.Acl) + 4
		case *zk.SetDataRequest:
			n += str(o.Path) + 4 + len(o.Data) + 4
		case *zk.CheckVersionRequest:
			n += str(o.Path) + 4
		case *zk.DeleteRequest:
			n += str(o.Path) + 4
		}
	}
	return n
}

// CommitChained is zketcd's commit multi without its guards: a check that
// the previous entry exists, then Commit's writes. It models one committer:
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
