package backend

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/compactor"
	"github.com/zketcd/zketcd/revision"
	"github.com/zketcd/zketcd/watchbridge"
	"github.com/zketcd/zketcd/zkstore"
)

// Backend is one zketcd instance's engine. Its methods are safe for
// concurrent use.
type Backend struct {
	cfg      Config
	log      *logrus.Entry
	store    *zkstore.Store
	view     *revision.View
	memberID uint64
	metrics  *metrics

	applyMu sync.Mutex // serializes View.Apply with the hub's notification
	hub     *watchbridge.Hub

	election    *zkstore.Election
	renewals    chan *renewal
	compactKick chan struct{}

	nonce     uint64
	proposals chan *proposal
	barrier   barrier
	kick      chan struct{} // wakes the tailer

	dbSize   atomic.Int64 // bytes of log entries applied (what the root holds)
	lastHead atomic.Pointer[headSeen]
	rb       *rollbackGuard // see rollback.go

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// headSeen is the last head the view was caught up with, and when.
type headSeen struct {
	head zkstore.Head
	at   time.Time
}

// Open connects to ZooKeeper, recovers the view from the log, registers the
// member and starts the tailer, the committer and the watch hub.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := zkstore.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		st.Close()
		return nil, fmt.Errorf("writer nonce: %w", err)
	}
	b := &Backend{
		cfg:         cfg,
		log:         cfg.Logger.WithField("component", "backend"),
		store:       st,
		memberID:    memberID(st.Meta().ClusterID, cfg.Name),
		metrics:     newMetrics(cfg.Registerer),
		nonce:       binary.BigEndian.Uint64(nb[:]),
		proposals:   make(chan *proposal, 4*cfg.MaxBatchRequests),
		renewals:    make(chan *renewal, 1024),
		compactKick: make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
		rb:          newRollbackGuard(cfg.Registerer),
	}
	var auto *compactor.Compactor
	if cfg.AutoCompaction.Enabled() {
		if auto, err = compactor.New(cfg.AutoCompaction, autoCompactTarget{b}, cfg.Logger, cfg.Registerer); err != nil {
			st.Close()
			return nil, err
		}
	}
	b.barrier.sync = b.syncHead
	b.barrier.maxRounds = 1
	b.ctx, b.cancel = context.WithCancel(context.Background())
	start := time.Now()
	if err := b.recover(ctx); err != nil {
		st.Close()
		return nil, err
	}
	s := b.view.State()
	b.log.WithFields(logrus.Fields{
		"lsn": s.LSN, "revision": s.Rev, "keys": b.view.KeyCount(),
		"took": time.Since(start).Round(time.Millisecond),
	}).Info("recovered view from the zookeeper log")
	b.hub = watchbridge.NewHub(b.view)
	if err := st.RegisterMember(zkstore.Member{ID: b.memberID, Name: cfg.Name, ClientURLs: cfg.ClientURLs}); err != nil {
		b.hub.Close()
		st.Close()
		return nil, fmt.Errorf("register member: %w", err)
	}
	b.election = st.Campaign(b.memberID)
	if auto != nil {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); auto.Run(b.ctx) }()
	}
	b.wg.Add(6)
	go b.watchRollback()
	go b.tail()
	go b.commitLoop()
	go b.renewLoop()
	go b.expireLoop()
	go b.compactLoop()
	return b, nil
}

// Close stops the instance and ends its ZooKeeper session. Requests in
// flight fail with ErrStopped.
func (b *Backend) Close() {
	b.cancel()
	b.wg.Wait()
	b.election.Close()
	b.hub.Close()
	b.store.Close()
}

// memberID derives a stable, non-zero member ID from the cluster and name.
func memberID(cluster uint64, name string) uint64 {
	h := fnv.New64a()
	var cb [8]byte
	binary.BigEndian.PutUint64(cb[:], cluster)
	h.Write(cb[:])
	h.Write([]byte(name))
	id := h.Sum64()
	if id == 0 {
		id = 1
	}
	return id
}

// Leader reports whether this instance is the elected leader, and the
// member ID of the current leader (0 if unknown).
func (b *Backend) Leader() (bool, uint64) {
	leader, _, id := b.election.State()
	return leader, id
}

// MemberID returns this instance's member ID.
func (b *Backend) MemberID() uint64 { return b.memberID }

// ClusterID returns the cluster ID stored in the root's meta znode.
func (b *Backend) ClusterID() uint64 { return b.store.Meta().ClusterID }

// Hub returns the watch hub fed by every applied entry.
func (b *Backend) Hub() *watchbridge.Hub { return b.hub }

// View returns the instance's view (for reads that need no barrier).
func (b *Backend) View() *revision.View { return b.view }

// Store returns the ZooKeeper store.
func (b *Backend) Store() *zkstore.Store { return b.store }

// recover builds the view from the sentinel up to the current head.
func (b *Backend) recover(ctx context.Context) error {
	view, head, size, err := Replay(ctx, b.store, b.cfg.ReadWindow, nil)
	if err != nil {
		return err
	}
	b.view = view
	b.dbSize.Store(size)
	b.lastHead.Store(&headSeen{head: head, at: time.Now()})
	return nil
}

// Replay builds a view from the current base generation (if any) and the
// log after it, up to the head read after a sync, reading window entries in
// flight. each, if not nil, sees every log entry before it is applied. It
// returns the view, that head and the bytes read. It starts over when a
// compaction replaces the base or removes entries while it reads.
func Replay(ctx context.Context, st *zkstore.Store, window int, each func(*revision.Entry)) (*revision.View, zkstore.Head, int64, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		view, head, size, err := replayOnce(ctx, st, window, each)
		if err == nil {
			return view, head, size, nil
		}
		if !errors.Is(err, zkstore.ErrBaseChanged) && !errors.Is(err, zkstore.ErrEntryMissing) {
			return nil, zkstore.Head{}, 0, err
		}
		lastErr = err
	}
	return nil, zkstore.Head{}, 0, fmt.Errorf("recovery kept racing compactions: %w", lastErr)
}

func replayOnce(ctx context.Context, st *zkstore.Store, window int, each func(*revision.Entry)) (*revision.View, zkstore.Head, int64, error) {
	head, err := st.SyncHead()
	if err != nil {
		return nil, zkstore.Head{}, 0, fmt.Errorf("read head: %w", err)
	}
	base, err := st.ReadBase()
	if err != nil {
		return nil, zkstore.Head{}, 0, err
	}
	view := revision.NewView(1, 1)
	from := int64(2)
	var size int64
	if base.Gen > 0 {
		snap, err := st.LoadBase(ctx, base)
		if err != nil {
			return nil, zkstore.Head{}, 0, fmt.Errorf("load base generation %d: %w", base.Gen, err)
		}
		if view, err = revision.FromSnapshot(snap); err != nil {
			return nil, zkstore.Head{}, 0, fmt.Errorf("base generation %d: %w", base.Gen, err)
		}
		from = base.Gen + 1
		size = int64(base.Size)
	}
	err = st.ReadEntries(ctx, from, head.LSN, window, func(e *revision.Entry, n int) error {
		size += int64(n)
		if each != nil {
			each(e)
		}
		_, err := view.Apply(e)
		return err
	})
	if err != nil {
		return nil, zkstore.Head{}, 0, fmt.Errorf("replay log from entry %d: %w", from, err)
	}
	return view, head, size, nil
}

// apply applies e to the view and tells the observer, once per entry.
func (b *Backend) apply(e *revision.Entry, size int) error {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	prev := b.view.State()
	if e.LSN <= prev.LSN {
		return nil
	}
	if err := b.rolledBack(); err != nil {
		return err
	}
	events, err := b.view.Apply(e)
	if err != nil {
		b.log.WithError(err).WithField("lsn", e.LSN).Error("cannot apply log entry; this instance stops serving")
		return err
	}
	b.rb.record(e, prev.Rev, b.view.State().Rev)
	b.dbSize.Add(int64(size))
	b.metrics.applied(e)
	b.hub.Notify(e, events)
	return nil
}

// tail follows the head znode and applies new entries. A watch on the head
// is the trigger; a one-second probe and kicks from barriers back it up.
func (b *Backend) tail() {
	defer b.wg.Done()
	probe := time.NewTicker(time.Second)
	defer probe.Stop()
	var fired <-chan struct{}
	backoff := 50 * time.Millisecond
	for {
		var head zkstore.Head
		var err error
		applied := b.view.State().LSN
		if fired == nil {
			head, fired, err = b.store.WatchHead()
		} else {
			head, err = b.store.Head()
		}
		if err == nil {
			if head.LSN < applied {
				b.recheckHistory() // ZooKeeper's head went back?
			}
			err = b.checkHistory()
		}
		if err == nil {
			err = b.catchUp(head.LSN)
			if err == nil {
				b.lastHead.Store(&headSeen{head: head, at: time.Now()})
			}
		}
		if err != nil {
			if b.ctx.Err() != nil || b.rolledBack() != nil {
				return
			}
			if errors.Is(err, zkstore.ErrNewerFormat) {
				b.halt(err) // never misread a newer zketcd's data
				return
			}
			if b.view.Err() != nil {
				return // broken view: nothing more can be applied
			}
			b.log.WithError(err).Warn("tailer")
			select {
			case <-b.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		select {
		case <-b.ctx.Done():
			return
		case <-fired:
			fired = nil
		case <-b.kick:
		case <-probe.C:
		}
	}
}

// catchUp applies every entry up to lsn.
func (b *Backend) catchUp(lsn int64) error {
	from := b.view.State().LSN + 1
	if from > lsn {
		return nil
	}
	err := b.store.ReadEntries(b.ctx, from, lsn, b.cfg.ReadWindow, func(e *revision.Entry, size int) error {
		return b.apply(e, size)
	})
	if errors.Is(err, zkstore.ErrEntryMissing) {
		return b.reload()
	}
	return err
}

// kickTailer asks the tailer to read the head now.
func (b *Backend) kickTailer() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Health reports nil when the instance has a live ZooKeeper session and its
// view is caught up with the head it last saw; otherwise why not (for a
// halted instance, an error wrapping ErrHalted).
func (b *Backend) Health() error {
	if err := b.rolledBack(); err != nil {
		return err
	}
	if err := b.view.Err(); err != nil {
		return err
	}
	if _, ok := b.store.Session(); !ok {
		return errors.New("no zookeeper session")
	}
	hs := b.lastHead.Load()
	if hs == nil {
		return errors.New("head not read yet")
	}
	if since := time.Since(hs.at); since > b.cfg.StaleAfter {
		return fmt.Errorf("view last caught up with the head %s ago", since.Round(time.Millisecond))
	}
	return nil
}

// Lag returns how many log entries the view is behind the last seen head.
func (b *Backend) Lag() int64 {
	hs := b.lastHead.Load()
	if hs == nil {
		return 0
	}
	return max(0, hs.head.LSN-b.view.State().LSN)
}

// DBSize returns the bytes of log data under the root that this instance has
// read or written.
func (b *Backend) DBSize() int64 { return b.dbSize.Load() }

// Head returns the last head the tailer saw.
func (b *Backend) Head() zkstore.Head {
	if hs := b.lastHead.Load(); hs != nil {
		return hs.head
	}
	return zkstore.Head{}
}
