package zkstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// Session is one ZooKeeper session that the Stores of many roots share:
// the tenants a fleet instance serves. ZooKeeper limits the connections
// of one client host (maxClientCnxns, 60 by default), so a fleet cannot
// give each tenant a session of its own.
//
// A Store opened on a Session is a Store in every way but its end: its
// Close deletes the ephemeral znodes the session holds under its root (its
// member, election and pipeline-marker znodes, the read lease) and leaves
// the session open; the session's expiry ends the ephemeral znodes of
// every Store on it at once, and each publishes its member again on the
// next session, as a Store of its own does. Safe for concurrent use.
type Session struct {
	owner *Store
}

// OpenSession connects to ZooKeeper with cfg and waits for a session. The
// session reads and writes nothing until a Store is opened on it; cfg.Root
// names it in logs only.
func OpenSession(ctx context.Context, cfg Config) (*Session, error) {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Session{owner: s}, nil
}

// Open opens the root at root on the session, as Open does on a session of
// its own: it creates the root's layout if it does not exist and checks or
// sets its ACL.
func (p *Session) Open(ctx context.Context, root string) (*Store, error) {
	o := p.owner
	cfg := o.cfg
	cfg.Root = root
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:       cfg,
		l:         layout{root: root},
		conn:      o.conn,
		id:        o.id,
		grants:    o.grants,
		acl:       o.acl,
		log:       o.cfg.Logger.WithFields(logrus.Fields{"component": "zkstore", "root": root}),
		buckets:   map[int64]bool{},
		sessionCh: make(chan struct{}),
		closed:    make(chan struct{}),
		sasl:      o.sasl,
		parent:    o,
	}
	s.sessionID, s.connected = o.Session()
	o.childMu.Lock()
	if o.children == nil {
		o.children = map[*Store]struct{}{}
	}
	o.children[s] = struct{}{}
	o.childMu.Unlock()
	if err := s.open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close ends the session. Close the Stores opened on it first: their
// calls fail from then on.
func (p *Session) Close() { p.owner.Close() }

// Stores counts the Stores open on the session.
func (p *Session) Stores() int {
	p.owner.childMu.Lock()
	defer p.owner.childMu.Unlock()
	return len(p.owner.children)
}

// Connected reports whether the session is live.
func (p *Session) Connected() bool {
	_, ok := p.owner.Session()
	return ok
}

// sharers is s and every Store sharing its session.
func (s *Store) sharers() []*Store {
	s.childMu.Lock()
	defer s.childMu.Unlock()
	return append([]*Store{s}, slices.Collect(maps.Keys(s.children))...)
}

// closeShared ends a Store that shares its session: it stops following
// the session, deletes the ephemeral znodes the session holds under its
// root and waits for its goroutines.
func (s *Store) closeShared() {
	o := s.parent
	o.childMu.Lock()
	delete(o.children, s)
	o.childMu.Unlock()
	close(s.closed)
	s.wg.Wait()
	if err := s.dropEphemerals(); err != nil {
		s.log.WithError(err).Warn("delete this instance's ephemeral znodes of the root (they go with the session)")
	}
}

// dropEphemerals deletes the ephemeral znodes the session owns under the
// root: the members, election and pipeline-marker znodes, the read lease.
func (s *Store) dropEphemerals() error {
	id, ok := s.parent.Session()
	if !ok {
		return fmt.Errorf("%w: no session (its ephemeral znodes go with it)", ErrUnavailable)
	}
	var paths []string
	for _, dir := range []string{s.l.members(), s.l.election(), s.l.tokens()} {
		kids, _, err := s.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return s.wrap("list "+dir, err)
		}
		for _, k := range kids {
			paths = append(paths, child(dir, k))
		}
	}
	paths = append(paths, s.l.readLease())
	var firstErr error
	for _, p := range paths {
		ok, st, err := s.conn.Exists(p)
		if err != nil {
			firstErr = cmpFirst(firstErr, s.wrap("stat "+p, err))
			continue
		}
		if !ok || st.EphemeralOwner != id {
			continue
		}
		if err := s.conn.Delete(p, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			firstErr = cmpFirst(firstErr, s.wrap("delete "+p, err))
		}
	}
	return firstErr
}

func cmpFirst(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
