package zkstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/revision"
)

// ErrUnavailable wraps failures to reach ZooKeeper (no server, connection
// closed, session expired) on requests with no side effects, or whose
// side effects were resolved: a temporary condition, which etcd clients
// see as "no leader". It marks itself with an Unavailable method, so the gRPC layer
// recognizes it without importing this package.
var ErrUnavailable error = unavailableError{}

type unavailableError struct{}

func (unavailableError) Error() string { return "zookeeper unavailable" }

// Unavailable reports that the error is a temporary unavailability.
func (unavailableError) Unavailable() bool { return true }

// ErrEntryMissing is returned when a log entry below the head does not
// exist: it was compacted away, the reader must reload from a base state.
var ErrEntryMissing = errors.New("log entry missing")

// ErrEntryTooLarge is returned by Commit for an entry above MaxEntryBytes.
var ErrEntryTooLarge = errors.New("log entry too large")

// Config configures a Store.
type Config struct {
	// Servers are ZooKeeper "host:port" addresses.
	Servers []string
	// Root is the znode under which everything lives, e.g. "/zketcd".
	Root string
	// SessionTimeout is the ZooKeeper session timeout.
	SessionTimeout time.Duration
	// Auth holds at most one identity, "scheme:credential": digest:user:password,
	// x509 (the TLS client certificate of TLS) or sasl:user:password (SASL
	// DIGEST-MD5). Every znode zketcd creates gets an ACL granting all
	// permissions to that identity only, and Open re-ACLs a root whose
	// znodes carry another ACL (see ReACL). Without one the znodes are
	// world-readable and writable (ACLReport says so). An unknown scheme
	// is an error (ErrUnknownScheme).
	Auth []string
	// FormerAuth holds identities the session also proves (digest or
	// sasl), to reach znodes ACLed to them when the root moves to Auth's.
	FormerAuth []string
	// MaxEntryBytes bounds one encoded log entry (the byte budget B).
	MaxEntryBytes int
	// BaseChunkBytes is the size of the chunks a base generation is
	// written in (0: 256 KiB, or MaxEntryBytes if smaller; see
	// PrepareBase).
	BaseChunkBytes int
	// TLS, if set, is used for every connection to ZooKeeper (its
	// secureClientPort).
	TLS *tls.Config
	// TickTime is ZooKeeper's tickTime as the operator declares it, for
	// servers that do not allow the conf four-letter word (0: only what
	// conf answers). See Grant.
	TickTime time.Duration
	// Logger receives structured logs (required).
	Logger *logrus.Entry
	// Mirror says the opener is `zketcd mirror` copying into the root:
	// every other Open refuses a root a mirror is copying into
	// (ErrMirrorInProgress; see ClaimMirror).
	Mirror bool

	// tickRelearn is how often the servers are asked for the tick (0:
	// tickRelearn; tests only).
	tickRelearn time.Duration
}

// Defaults for zero Config fields. DefaultMaxEntryBytes is the byte budget
// of one log entry: well below ZooKeeper's default jute.maxbuffer
// (1 MiB - 1).
const (
	DefaultMaxEntryBytes  = 512 << 10
	DefaultSessionTimeout = 10 * time.Second
)

func (c *Config) setDefaults() {
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.MaxEntryBytes <= 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	switch {
	case len(c.Servers) == 0:
		return errors.New("no zookeeper servers given")
	case c.Root == "" || !strings.HasPrefix(c.Root, "/") || strings.HasSuffix(c.Root, "/"):
		return fmt.Errorf("zookeeper root %q must start with / and not end with /", c.Root)
	case c.Logger == nil:
		return errors.New("zkstore: no logger")
	}
	return nil
}

// zkBufferBytes caps what the client sends in one request, so a request the
// server would reject by dropping the connection fails locally instead.
const zkBufferBytes = 1024*1024 - 1

// Store is a connection to one zketcd root in ZooKeeper. It is safe for
// concurrent use.
type Store struct {
	cfg  Config
	l    layout
	conn *zk.Conn
	id   *identity // nil: world-readable znodes
	acl  []zk.ACL
	log  *logrus.Entry
	meta Meta
	// format is the root's meta format as last read (see RaiseFormat): what
	// writers may use.
	format atomic.Int32
	// grants follows what ZooKeeper granted the session (grant.go).
	grants *grants
	// baseAttempts numbers the base generations this store writes
	// (freshGeneration): every attempt gets a path of its own.
	baseAttempts atomic.Uint64

	mu        sync.Mutex
	aclReport ACLReport
	buckets   map[int64]bool // buckets known to exist
	sessionID int64
	connected bool
	member    *Member // re-created after a new session
	sessionCh chan struct{}

	sasl *saslState // nil: no SASL identity
	// parent is the Store whose session this one shares (nil: its own,
	// see session.go); children the Stores sharing this one's.
	parent   *Store
	childMu  sync.Mutex
	children map[*Store]struct{}
	// listed, if not nil, is called by walk once it listed p's children,
	// before it acts on p (tests: a znode created meanwhile).
	listed func(p string)

	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup
}

// openRaw connects to ZooKeeper and waits for a session; it reads and
// writes nothing under the root.
func openRaw(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger.WithField("component", "zkstore")
	id, former, err := parseIdentities(cfg)
	if err != nil {
		return nil, err
	}
	sasl := newSASLState(append([]*identity{id}, former...))
	gs := &grants{}
	conn, events, err := zk.Connect(cfg.Servers, cfg.SessionTimeout, zk.WithLogger(zkLogger{lg}),
		zk.WithMaxConnBufferSize(zkBufferBytes), zk.WithDialer(dialer(cfg.TLS, handshakeTimeout(cfg.SessionTimeout), sasl, gs.connected)))
	if err != nil {
		return nil, fmt.Errorf("connect to zookeeper %v: %w", cfg.Servers, err)
	}
	s := &Store{
		cfg:       cfg,
		l:         layout{root: cfg.Root},
		conn:      conn,
		id:        id,
		grants:    gs,
		acl:       zk.WorldACL(zk.PermAll),
		log:       lg,
		buckets:   map[int64]bool{},
		sessionCh: make(chan struct{}),
		closed:    make(chan struct{}),
		sasl:      sasl,
	}
	if id != nil {
		s.acl = id.acl
	}
	for _, a := range append([]*identity{id}, former...) {
		if a == nil || a.scheme != SchemeDigest {
			continue
		}
		if err := conn.AddAuth(SchemeDigest, []byte(a.user+":"+a.pass)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("add zookeeper auth (digest %s): %w", a.user, err)
		}
	}
	s.wg.Add(1)
	go s.watchSession(events)
	if err := s.waitSession(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.learnTick(ctx)
	return s, nil
}

// Open connects to ZooKeeper, waits for a session, and creates the root
// layout (meta, head, sentinel log entry 1) if it does not exist yet.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// open makes the root usable on s's session: the identity proven, the
// layout created if missing, the ACLs checked (or set), their watch started.
func (s *Store) open(ctx context.Context) error {
	if s.id != nil {
		// Before anything is written with the identity's ACL, prove that
		// ZooKeeper knows the session by it.
		if err := s.ensureRootNode(); err != nil {
			return err
		}
		if err := s.probeIdentity(); err != nil {
			return err
		}
	}
	if err := s.checkMove(); err != nil {
		return err
	}
	if err := s.checkMirror(); err != nil {
		return err
	}
	if err := s.ensureLayout(); err != nil {
		return err
	}
	// Roots created before a directory existed get it now.
	for _, p := range []string{s.l.tokens(), s.l.chunks(), s.l.base(), s.l.leases(), s.l.election()} {
		if _, err := s.conn.Create(p, nil, 0, s.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return s.wrap("create "+p, err)
		}
	}
	if err := s.secureRoot(ctx); err != nil {
		return err
	}
	s.wg.Add(1)
	go s.watchACL()
	return nil
}

// Close ends the session (ephemeral znodes go away at once); a Store
// sharing another's session (Session.Open) deletes its own ephemeral
// znodes instead and leaves the session to its owner. Safe to call more
// than once.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		if s.parent != nil {
			s.closeShared()
			return
		}
		close(s.closed)
		s.conn.Close()
		s.wg.Wait()
	})
}

// Meta returns the cluster identity.
func (s *Store) Meta() Meta { return s.meta }

// MaxEntryBytes returns the byte budget of one log entry (above it Commit
// writes chunks, or fails with ErrEntryTooLarge for a pipelined commit).
func (s *Store) MaxEntryBytes() int { return s.cfg.MaxEntryBytes }

// Root returns the root znode.
func (s *Store) Root() string { return s.l.root }

// Servers returns the ZooKeeper servers the store's session is on (a
// copy).
func (s *Store) Servers() []string { return slices.Clone(s.cfg.Servers) }

// Session reports the current session ID and whether the connection is up
// with a live session.
func (s *Store) Session() (id int64, connected bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessionID, s.connected
}

// SessionChanged returns a channel closed at the next change of connection
// state or session.
func (s *Store) SessionChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessionCh
}

func (s *Store) waitSession(ctx context.Context) error {
	for {
		ch := s.SessionChanged()
		if _, ok := s.Session(); ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if err := s.sasl.err(); err != nil {
				return fmt.Errorf("no session with %v: %w", s.cfg.Servers, err)
			}
			return fmt.Errorf("%w: no session with %v: %v", ErrUnavailable, s.cfg.Servers, ctx.Err())
		case <-s.closed:
			return fmt.Errorf("%w: store closed", ErrUnavailable)
		}
	}
}

// watchSession follows connection state. It never calls ZooKeeper itself
// (that would stall the receive loop); work after a new session runs on its
// own goroutine.
func (s *Store) watchSession(events <-chan zk.Event) {
	defer s.wg.Done()
	for {
		var ev zk.Event
		select {
		case <-s.closed:
			return
		case ev = <-events:
		case <-time.After(time.Second):
			// Events can be dropped; the session ID is the truth.
		}
		if ev.Type != zk.EventSession && ev.Type != 0 {
			continue
		}
		if ev.Type == 0 && time.Since(s.grants.askedAt()) > s.tickEvery() {
			// No server told it yet, and perhaps one that was down does
			// now; or a rolling restart changed it on members this
			// session never reconnected to.
			s.relearnTick()
		}
		state, id := s.conn.State(), s.conn.SessionID()
		for _, st := range s.sharers() {
			st.observeSession(state, id)
		}
	}
}

// observeSession takes the connection's state and session ID: a change
// closes SessionChanged's channel and is logged; a new session after an
// expiry publishes the member znode again. It runs on the session owner's
// watch goroutine, for the owner and every Store sharing its session.
func (s *Store) observeSession(state zk.State, id int64) {
	connected := state == zk.StateHasSession
	s.mu.Lock()
	changed := connected != s.connected || (connected && id != s.sessionID)
	newSession := connected && id != s.sessionID
	prevID := s.sessionID
	if connected {
		s.sessionID = id
	}
	s.connected = connected
	if changed {
		close(s.sessionCh)
		s.sessionCh = make(chan struct{})
	}
	member := s.member
	s.mu.Unlock()
	if !changed {
		return
	}
	lg := s.log.WithFields(logrus.Fields{"state": state.String(), "session": fmt.Sprintf("%x", id)})
	if connected {
		g := s.Grant()
		lg = lg.WithFields(logrus.Fields{"granted_timeout": g.Timeout, "requested_timeout": g.Requested})
	}
	logf := lg.Warn
	if s.parent != nil {
		logf = lg.Debug // the session's owner logs it once
	}
	switch {
	case newSession && prevID != 0:
		logf("new zookeeper session (the previous one expired)")
	case newSession:
		if s.parent == nil {
			lg.Info("zookeeper session established")
		}
	case connected:
		if s.parent == nil {
			lg.Info("zookeeper connection restored")
		}
	default:
		logf("zookeeper connection lost")
	}
	if connected && prevID != 0 && s.parent == nil {
		// A new session, or a connection restored (to a server perhaps
		// restarted, in a rolling restart, with another tickTime): the
		// servers may tick otherwise now.
		s.relearnTick()
	}
	if newSession && prevID != 0 && member != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.publishMember(*member); err != nil {
				lg.WithError(err).Error("re-create member znode after new session")
			}
		}()
	}
}

// ensureLayout creates the root, meta, head, log, members and the sentinel
// entry 1 (revision 1, empty store) in one multi, unless meta exists.
func (s *Store) ensureLayout() error {
	data, _, err := s.conn.Get(s.l.meta())
	if err == nil {
		return s.decodeMeta(data)
	}
	if errors.Is(err, zk.ErrNoAuth) {
		return s.noAccess(s.l.meta())
	}
	if !errors.Is(err, zk.ErrNoNode) {
		return s.wrap("read meta", err)
	}
	if err := s.ensureRootNode(); err != nil {
		return err
	}
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return fmt.Errorf("cluster id: %w", err)
	}
	meta := Meta{Format: MetaFormat, ClusterID: binary.BigEndian.Uint64(idb[:]) >> 1}
	metaData, _ := json.Marshal(meta)
	headData, _ := json.Marshal(Head{LSN: 1, Rev: 1})
	sentinel := EncodeEntry(&revision.Entry{LSN: 1})
	_, err = s.conn.Multi(
		&zk.CreateRequest{Path: s.l.meta(), Data: metaData, Acl: s.acl},
		&zk.CreateRequest{Path: s.l.head(), Data: headData, Acl: s.acl},
		&zk.CreateRequest{Path: s.l.log(), Acl: s.acl},
		&zk.CreateRequest{Path: s.l.bucket(1), Acl: s.acl},
		&zk.CreateRequest{Path: s.l.entry(1), Data: sentinel, Acl: s.acl},
		&zk.CreateRequest{Path: s.l.members(), Acl: s.acl},
		&zk.CreateRequest{Path: s.l.election(), Acl: s.acl},
		&zk.CreateRequest{Path: s.l.leases(), Acl: s.acl},
		&zk.CreateRequest{Path: s.l.chunks(), Acl: s.acl},
		&zk.CreateRequest{Path: s.l.base(), Acl: s.acl},
		&zk.CreateRequest{Path: s.l.compact(), Data: []byte(`{"gen":0}`), Acl: s.acl},
	)
	switch {
	case err == nil:
		s.log.WithFields(logrus.Fields{"root": s.l.root, "cluster_id": fmt.Sprintf("%x", meta.ClusterID)}).Info("created zketcd layout")
	case errors.Is(err, zk.ErrNodeExists):
		// Another instance created it first (or our own attempt landed
		// before a disconnect); read what is there.
	default:
		return s.wrap("create layout", err)
	}
	data, _, err = s.conn.Get(s.l.meta())
	if err != nil {
		return s.wrap("read meta", err)
	}
	return s.decodeMeta(data)
}

// decodeMeta reads the root's meta; a root of a newer format is refused.
func (s *Store) decodeMeta(data []byte) error {
	if err := decodeJSON(s.l.meta(), data, &s.meta); err != nil {
		return err
	}
	if s.meta.Format > MetaFormat {
		return &FormatError{What: "zketcd root " + s.l.root, Got: s.meta.Format, Known: MetaFormat}
	}
	s.format.Store(int32(s.meta.Format))
	return nil
}

// wrap turns ZooKeeper errors into errors callers can classify.
func (s *Store) wrap(what string, err error) error {
	switch {
	case errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrConnectionClosed),
		errors.Is(err, zk.ErrSessionExpired), errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%s: %w: %v", what, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Head reads the head znode (no barrier: it may lag other servers).
func (s *Store) Head() (Head, error) {
	type got struct {
		data []byte
		st   *zk.Stat
	}
	g, err := bounded(s, func() (got, error) {
		data, st, err := s.conn.Get(s.l.head())
		return got{data, st}, err
	})
	data, st := g.data, g.st
	if errors.Is(err, zk.ErrNoNode) {
		return Head{}, fmt.Errorf("read head: %w", ErrNoRoot)
	}
	if err != nil {
		return Head{}, s.wrap("read head", err)
	}
	return s.decodeHead(data, st)
}

func (s *Store) decodeHead(data []byte, st *zk.Stat) (Head, error) {
	var h Head
	if err := decodeJSON(s.l.head(), data, &h); err != nil {
		return Head{}, err
	}
	h.Zxid = st.Mzxid
	return h, nil
}

// SyncHead is the read barrier: it syncs the session's server with the
// ZooKeeper leader, then reads the head. Every commit acknowledged before
// SyncHead was called is at or below the returned head.
func (s *Store) SyncHead() (Head, error) {
	if _, err := bounded(s, func() (string, error) { return s.conn.Sync(s.l.head()) }); err != nil {
		return Head{}, s.wrap("sync", err)
	}
	return s.Head()
}

// QuorumHead is the strict read barrier: a multi holding only a check of
// the head goes through the ZooKeeper leader and a quorum (unlike sync, which
// a partitioned server that still believes it leads can answer alone), and
// the head read after it on the same session reflects every commit
// acknowledged before QuorumHead was called.
func (s *Store) QuorumHead() (Head, error) {
	if _, err := bounded(s, func() ([]zk.MultiResponse, error) {
		return s.conn.Multi(&zk.CheckVersionRequest{Path: s.l.head(), Version: -1})
	}); err != nil {
		return Head{}, s.wrap("quorum barrier", err)
	}
	return s.Head()
}

// WatchHead reads the head and sets a watch on it. The returned channel
// receives one value when the head changes or the watch is lost (session
// expiry, close); either way the caller should read again.
func (s *Store) WatchHead() (Head, <-chan struct{}, error) {
	type got struct {
		data []byte
		st   *zk.Stat
		ev   <-chan zk.Event
	}
	g, err := bounded(s, func() (got, error) {
		data, st, ev, err := s.conn.GetW(s.l.head())
		return got{data, st, ev}, err
	})
	data, st, ev := g.data, g.st, g.ev
	if err != nil {
		return Head{}, nil, s.wrap("watch head", err)
	}
	h, err := s.decodeHead(data, st)
	if err != nil {
		return Head{}, nil, err
	}
	fired := make(chan struct{}, 1)
	go func() {
		select {
		case <-ev:
		case <-s.closed:
		}
		fired <- struct{}{}
	}()
	return h, fired, nil
}

// ReadEntries reads entries from..to (inclusive) with up to window reads in
// flight and calls fn for each in LSN order. It stops at fn's first error.
// A missing entry gives ErrEntryMissing.
func (s *Store) ReadEntries(ctx context.Context, from, to int64, window int, fn func(e *revision.Entry, size int) error) error {
	if from > to {
		return nil
	}
	if window < 1 {
		window = 1
	}
	type result struct {
		e    *revision.Entry
		size int
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]chan result, 0, window)
	next := from
	launch := func() {
		lsn := next
		next++
		ch := make(chan result, 1)
		results = append(results, ch)
		go func() {
			e, size, err := s.readEntry(lsn)
			ch <- result{e, size, err}
		}()
	}
	for next <= to && len(results) < window {
		launch()
	}
	for len(results) > 0 {
		var r result
		select {
		case r = <-results[0]:
		case <-ctx.Done():
			return ctx.Err()
		}
		results = results[1:]
		if r.err != nil {
			return r.err
		}
		if next <= to {
			launch()
		}
		if err := fn(r.e, r.size); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) readEntry(lsn int64) (*revision.Entry, int, error) {
	p := s.l.entry(lsn)
	type got struct {
		data []byte
		st   *zk.Stat
	}
	g, err := bounded(s, func() (got, error) {
		data, st, err := s.conn.Get(p)
		return got{data, st}, err
	})
	data, st := g.data, g.st
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, fmt.Errorf("%w: %s", ErrEntryMissing, p)
	}
	if err != nil {
		return nil, 0, s.wrap("read "+p, err)
	}
	size := len(data)
	if len(data) > 0 && data[0] == indirectFormat {
		in, err := decodeIndirect(data)
		if err != nil {
			return nil, 0, fmt.Errorf("znode %s: %w", p, err)
		}
		if data, err = s.readChunks(in); err != nil {
			return nil, 0, fmt.Errorf("entry %d: %w", lsn, err)
		}
		size += len(data)
	}
	e, err := DecodeEntry(data)
	if err != nil {
		return nil, 0, fmt.Errorf("znode %s: %w", p, err)
	}
	e.LSN, e.Zxid = lsn, st.Czxid
	return e, size, nil
}

// EntryZxid returns the zxid of the transaction that committed entry lsn.
func (s *Store) EntryZxid(lsn int64) (int64, error) {
	_, st, err := s.conn.Exists(s.l.entry(lsn))
	if err != nil {
		return 0, s.wrap("stat entry", err)
	}
	if st == nil {
		return 0, ErrEntryMissing
	}
	return st.Czxid, nil
}

type zkLogger struct{ lg *logrus.Entry }

func (z zkLogger) Printf(format string, args ...any) {
	z.lg.Debugf("zk client: "+format, args...)
}
