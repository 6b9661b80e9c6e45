package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/compactor"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/watchbridge"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Open connects to ZooKeeper (cfg.Store) and runs the engine on it (New).
// While the instance's session is refused, it checks for a rollback of
// ZooKeeper's data through fresh sessions on cfg.Store (see rollback.go).
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.OpenMoved == nil {
		cfg.OpenMoved = OpenMovedStore(cfg.Store)
	}
	if cfg.WaitMoved == nil {
		cfg.WaitMoved = WaitMovedStore(cfg.Store)
	}
	st, storeCfg, err := openFollowingMoves(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return start(ctx, cfg, st, func(ctx context.Context) (Log, error) {
		in, err := zkstore.OpenInspector(ctx, storeCfg)
		if err != nil {
			return nil, err
		}
		return in, nil
	})
}

// maxMoveHops bounds how many moves Open follows from the configured root.
const maxMoveHops = 8

// openFollowingMoves opens cfg.Store's root, or, if its cluster moved
// (zkstore.ErrMoved), the root it moved to, and returns the store with
// the configuration it was opened with.
func openFollowingMoves(ctx context.Context, cfg Config) (*zkstore.Store, zkstore.Config, error) {
	sc := cfg.Store
	for hop := 0; ; hop++ {
		st, err := zkstore.Open(ctx, sc)
		var moved *zkstore.MovedError
		if !errors.As(err, &moved) || hop == maxMoveHops {
			return st, sc, err
		}
		cfg.Logger.WithFields(logrus.Fields{"root": sc.Root, "to_root": moved.To.Root, "to_servers": moved.To.Servers}).
			Warn("the root's cluster moved: serving it from where it went (point --zk-root, and --zk if it names other servers, there)")
		sc = MovedConfig(sc, revision.Move{Servers: moved.To.Servers, Root: moved.To.Root})
	}
}

// New runs the engine on st, which it owns from then on (Close closes it,
// and so does a failed New): it recovers the view from the log, registers
// the member and starts the tailer, the committer and the watch hub.
// cfg.Store is not used. ZooKeeper's history is checked against the view
// on st's own sessions only (Open also checks through fresh ones).
func New(ctx context.Context, cfg Config, st Log) (*Engine, error) {
	return start(ctx, cfg, st, nil)
}

// NewInspected is New with inspect, which opens a fresh session on the
// same log for the rollback checks (what Open gives the engine for the
// store it opens): for a store the caller opened, such as one sharing a
// ZooKeeper session with other roots.
func NewInspected(ctx context.Context, cfg Config, st Log, inspect func(context.Context) (Log, error)) (*Engine, error) {
	return start(ctx, cfg, st, inspect)
}

// start is New with inspect (nil: none) for rollback detection. A failed
// start closes what it opened, st included.
func start(ctx context.Context, cfg Config, st Log, inspect inspectFunc) (_ *Engine, err error) {
	var b *Engine
	running := false // b's goroutines started: b.Close undoes it all
	defer func() {
		switch {
		case err == nil:
		case running:
			b.Close()
		default:
			if b != nil {
				b.cancel()
				if b.hub != nil {
					b.hub.Close()
				}
				b.leading.stopRelay()
				b.moving.Close()
			} else {
				st.Close()
			}
		}
	}()
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err = newEngine(cfg, st, inspect)
	if err != nil {
		return nil, err
	}
	var auto *compactor.Compactor
	if cfg.AutoCompaction.Enabled() {
		if auto, err = compactor.New(cfg.AutoCompaction, autoCompactTarget{b}, cfg.Logger, cfg.Registerer); err != nil {
			return nil, err
		}
	}
	began := time.Now()
	rec, err := b.recover(ctx)
	if err != nil {
		return nil, err
	}
	s := b.view.State()
	b.log.WithFields(logrus.Fields{
		"lsn": s.LSN, "revision": s.Rev, "keys": b.view.KeyCount(),
		"generation": rec.base.Gen, "base_took": rec.baseTook.Round(time.Millisecond),
		"log_entries": len(rec.sizes), "log_took": rec.logTook.Round(time.Millisecond),
		"log_apply_took": rec.applyTook.Round(time.Millisecond), "took": time.Since(began).Round(time.Millisecond),
	}).Info("recovered view from the zookeeper log")
	b.hub = watchbridge.NewHub(b.view)
	b.host = cfg.Host
	if b.host == "" {
		b.host = localHost()
	}
	self := zkstore.Member{ID: b.memberID, Name: cfg.Name, ClientURLs: cfg.ClientURLs,
		InternalURL: cfg.InternalURL, InternalToken: b.internalToken, Host: b.host}
	if err := b.member.publish(func(m *zkstore.Member) { *m = self }); err != nil {
		return nil, fmt.Errorf("register member: %w", err)
	}
	if b.fenced() == nil {
		b.leading.start(b.moving.Campaign(b.memberID))
	} else {
		b.leading.start(noLeadership{}) // the tailer moves it first
	}
	b.run(auto)
	running = true
	if cfg.InitialCorruptCheck {
		if err := b.corrupt.initial(ctx); err != nil {
			return nil, err
		}
	}
	b.rekeyAtStart(ctx)
	for _, w := range b.Warnings() {
		b.log.Warn(w)
	}
	b.registerACLGauge(cfg.Registerer)
	b.registerStateMetrics(cfg.Registerer)
	return b, nil
}

// newEngine returns the engine of cfg on st, not running yet: its
// identity (member ID, writer nonce, internal token), its concerns, their
// queues and metrics, and the read barrier.
func newEngine(cfg Config, st Log, inspect inspectFunc) (*Engine, error) {
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, fmt.Errorf("writer nonce: %w", err)
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("internal token: %w", err)
	}
	moving := newMovingLog(st, inspect)
	inspect = moving.inspector()
	leading := newMovingLeadership()
	c := &core{
		opened:        time.Now(),
		cfg:           cfg,
		log:           cfg.Logger.WithField("component", "engine"),
		store:         moving,
		election:      leading,
		memberID:      memberID(st.Meta().ClusterID, cfg.Name),
		maxEntryBytes: st.MaxEntryBytes(),
		metrics:       newMetrics(cfg.Registerer),
		barrier:       &barrier{maxRounds: 1},
		nonce:         binary.BigEndian.Uint64(nb[:]),
		kick:          make(chan struct{}, 1),
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.ctx = ctx
	b := &Engine{core: c, cancel: cancel, internalToken: hex.EncodeToString(tok[:]),
		origins: &origins{gen: cfg.OriginGeneration}, space: &space{}, member: &memberRecord{store: moving},
		moving: moving, leading: leading}
	b.quota.Store(cfg.QuotaBackendBytes)
	b.rb = newRollbackGuard(c, inspect, cfg.Registerer)
	b.live = &liveness{core: c}
	b.tail = &tailer{core: c, origins: b.origins, space: b.space, rb: b.rb, handoff: b.handoff}
	marks := &flightMarks{}
	b.commit = newCommitter(c, b.tail, b.rb, b.origins, marks)
	b.reads = &readLease{core: c, live: b.live, marks: marks, rb: b.rb}
	b.fwd = &forwarder{core: c, commit: b.commit, tail: b.tail, rb: b.rb, linearize: b.Linearize,
		metrics: newFwdMetrics(cfg.Registerer)}
	b.leases = &lessor{core: c, commit: b.commit, live: b.live, renewals: make(chan *renewal, 1024)}
	b.compaction = &compaction{core: c, space: b.space, sizing: newSizing(cfg.Registerer),
		kick: make(chan struct{}, 1), release: make(chan struct{}, 1)}
	b.corrupt = &corruptChecker{core: c, member: b.member, rb: b.rb, raise: func(ctx context.Context, req *pb.AlarmRequest) error {
		_, err := b.Alarm(ctx, req)
		return err
	}}
	c.barrier.sync = func() (int64, error) {
		// A fenced log's head may be outdated by the destination's: the
		// barrier is taken there, once the engine runs on it.
		if err := c.waitMoved(c.ctx); err != nil {
			return 0, fmt.Errorf("barrier: %w", err)
		}
		c.metrics.barrierTrips.Inc()
		sent := time.Now()
		read := moving.QuorumHead
		if cfg.RelaxedReads {
			read = moving.SyncHead
		}
		h, err := read()
		if err == nil && !cfg.RelaxedReads {
			b.live.prove(sent, h.LSN)
		}
		return h.LSN, err
	}
	c.barrier.proved = b.live.prove
	c.barrier.observe = func(byCommit bool, reads int) {
		via := "barrier"
		if byCommit {
			via = "commit"
		}
		c.metrics.linearizableReads.WithLabelValues(via).Add(float64(reads))
	}
	return b, nil
}

// run starts the engine's goroutines (auto, if set, is the
// auto-compactor); Close stops them and waits for every one.
func (b *Engine) run(auto *compactor.Compactor) {
	if auto != nil {
		b.wg.Go(func() { auto.Run(b.ctx) })
	}
	b.wg.Go(b.corrupt.answerLoop)
	b.wg.Go(b.rekeyLoop)
	if b.cfg.CorruptCheckTime > 0 {
		b.wg.Go(b.corrupt.run)
	}
	b.wg.Go(b.rb.watch)
	b.wg.Go(b.followLeaderAndSession)
	b.wg.Go(b.tail.run)
	b.wg.Go(b.commit.run)
	b.wg.Go(b.leases.renewLoop)
	b.wg.Go(b.leases.run)
	b.wg.Go(b.compaction.run)
	if b.cfg.ReadLease {
		b.wg.Go(b.reads.run)
	}
	if !b.cfg.RelaxedReads {
		b.wg.Go(b.live.run)
	}
}

// Close stops the instance and ends its ZooKeeper session. Requests in
// flight fail with ErrStopped.
func (b *Engine) Close() {
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

// recordReplayed is what a replay of the log does with each entry before
// the view applies it: its forwarded tags indexed, a fence noted.
func (b *Engine) recordReplayed(e *revision.Entry) {
	b.origins.record(e)
	b.noteFence(e)
}

// unrecordedRawPerStored estimates a base generation's bytes before
// compression per byte stored, where its description did not record them:
// kube-like objects compress about 3.3-fold.
const unrecordedRawPerStored = 4

// recover builds the view from the sentinel up to the current head, and
// returns what the replay read and how long its parts took.
func (b *Engine) recover(ctx context.Context) (*replayed, error) {
	if prepare := b.cfg.BeforeRecovery; prepare != nil {
		if base, err := b.store.ReadBase(); err == nil && (base.Gen > 0 || base.Raw > 0) {
			data := base.RawSize()
			if data == 0 {
				data = unrecordedRawPerStored * int64(base.StoredSize())
			}
			defer prepare(data)()
		}
	}
	var rec replayed
	view, head, _, err := replay(ctx, b.store, b.cfg.ReadWindow, b.recordReplayed, &rec)
	if err != nil {
		return nil, err
	}
	b.origins.setFrom(rec.base.Gen + 1) // the tags of the entries in the base were not read
	b.view = view
	rec.account(b.space)
	b.tail.caughtUp(head)
	return &rec, nil
}
