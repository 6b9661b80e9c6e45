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
	st, err := zkstore.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	storeCfg := cfg.Store
	return start(ctx, cfg, st, func(ctx context.Context) (Log, error) {
		in, err := zkstore.OpenInspector(ctx, storeCfg)
		if err != nil {
			return nil, err
		}
		return in, nil
	})
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
			}
			st.Close()
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
	b.check.self = zkstore.Member{ID: b.memberID, Name: cfg.Name, ClientURLs: cfg.ClientURLs,
		InternalURL: cfg.InternalURL, InternalToken: b.internalToken, Host: b.host}
	if err := st.RegisterMember(b.check.self); err != nil {
		return nil, fmt.Errorf("register member: %w", err)
	}
	b.election = st.Campaign(b.memberID)
	b.run(auto)
	running = true
	if cfg.InitialCorruptCheck {
		if err := b.initialCheck(ctx); err != nil {
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
// identity (member ID, writer nonce, internal token), queues, metrics and
// read barrier.
func newEngine(cfg Config, st Log, inspect inspectFunc) (*Engine, error) {
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, fmt.Errorf("writer nonce: %w", err)
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("internal token: %w", err)
	}
	b := &Engine{
		opened:        time.Now(),
		cfg:           cfg,
		log:           cfg.Logger.WithField("component", "engine"),
		store:         st,
		memberID:      memberID(st.Meta().ClusterID, cfg.Name),
		maxEntryBytes: st.MaxEntryBytes(),
		metrics:       newMetrics(cfg.Registerer),
		sizing:        newSizing(cfg.Registerer),
		nonce:         binary.BigEndian.Uint64(nb[:]),
		proposals:     make(chan *proposal, 4*cfg.MaxBatchRequests),
		renewals:      make(chan *renewal, 1024),
		compactKick:   make(chan struct{}, 1),
		releaseKick:   make(chan struct{}, 1),
		kick:          make(chan struct{}, 1),
		rb:            newRollbackGuard(cfg.Registerer),
		inspect:       inspect,
		internalToken: hex.EncodeToString(tok[:]),
	}
	b.fwd.metrics = newFwdMetrics(cfg.Registerer)
	b.origins.gen = cfg.OriginGeneration
	b.barrier.sync = func() (int64, error) {
		b.metrics.barrierTrips.Inc()
		sent := time.Now()
		lsn, err := b.syncHead()
		if err == nil && !cfg.RelaxedReads {
			b.proveLive(sent, lsn)
		}
		return lsn, err
	}
	b.barrier.proved = b.proveLive
	b.barrier.maxRounds = 1
	b.barrier.observe = func(byCommit bool, reads int) {
		via := "barrier"
		if byCommit {
			via = "commit"
		}
		b.metrics.linearizableReads.WithLabelValues(via).Add(float64(reads))
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// run starts the engine's goroutines (auto, if set, is the
// auto-compactor); Close stops them and waits for every one.
func (b *Engine) run(auto *compactor.Compactor) {
	if auto != nil {
		b.wg.Go(func() { auto.Run(b.ctx) })
	}
	b.wg.Go(b.answerHashChecks)
	b.wg.Go(b.rekeyLoop)
	if b.cfg.CorruptCheckTime > 0 {
		b.wg.Go(b.corruptCheckLoop)
	}
	b.wg.Go(b.watchRollback)
	b.wg.Go(b.followLeaderAndSession)
	b.wg.Go(b.tail)
	b.wg.Go(b.commitLoop)
	b.wg.Go(b.renewLoop)
	b.wg.Go(b.expireLoop)
	b.wg.Go(b.compactLoop)
	if b.cfg.ReadLease {
		b.wg.Go(b.readLeaseLoop)
	}
	if !b.cfg.RelaxedReads {
		b.wg.Go(b.windowLoop)
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
	view, head, _, err := replay(ctx, b.store, b.cfg.ReadWindow, b.origins.record, &rec)
	if err != nil {
		return nil, err
	}
	b.origins.setFrom(rec.base.Gen + 1) // the tags of the entries in the base were not read
	b.view = view
	rec.account(&b.space)
	b.lastHead.Store(&headSeen{head: head, at: time.Now()})
	return &rec, nil
}

// Replay builds a view from the current base generation (if any) and the
// log after it, up to the head read after a sync, reading window entries in
// flight. each, if not nil, sees every log entry before it is applied. It
// returns the view, that head and the bytes read. It starts over when a
// compaction replaces the base or removes entries while it reads.
func Replay(ctx context.Context, st History, window int, each func(*revision.Entry)) (*revision.View, zkstore.Head, int64, error) {
	return replay(ctx, st, window, each, nil)
}

// replayed is what a replay read, for the space accounting: the base
// generation and the size of each entry after it.
type replayed struct {
	base     zkstore.Base
	sizes    []int
	logicals []int64 // each entry's zkstore.RecordBytes
	raws     []int64 // each entry's Entry.DataBytes
	// baseTook is the base generation's load into a view; logTook the
	// log's replay after it, of which applyTook was spent applying
	// entries (the rest waiting for ZooKeeper and decoding, which run
	// window entries ahead of the apply).
	baseTook, logTook, applyTook time.Duration
}

// account records rec in sp: the entry sizes, then the generation.
func (rec *replayed) account(sp *space) {
	sp.reset()
	for i, n := range rec.sizes {
		sp.applied(rec.base.Gen+1+int64(i), n, rec.logicals[i], rec.raws[i])
	}
	sp.setBase(rec.base)
}

// replay is Replay; rec, if not nil, receives what it read.
func replay(ctx context.Context, st History, window int, each func(*revision.Entry), rec *replayed) (*revision.View, zkstore.Head, int64, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if rec != nil {
			*rec = replayed{}
		}
		view, head, size, err := replayOnce(ctx, st, window, each, rec)
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

func replayOnce(ctx context.Context, st History, window int, each func(*revision.Entry), rec *replayed) (*revision.View, zkstore.Head, int64, error) {
	head, err := st.SyncHead()
	if err != nil {
		return nil, zkstore.Head{}, 0, fmt.Errorf("read head: %w", err)
	}
	base, err := st.ReadBase()
	if err != nil {
		return nil, zkstore.Head{}, 0, err
	}
	if rec != nil {
		rec.base = base
	}
	view := revision.NewView(1, 1)
	from := int64(2)
	var size int64
	began := time.Now()
	if base.Gen > 0 {
		snap, err := st.LoadBase(ctx, base)
		if err != nil {
			return nil, zkstore.Head{}, 0, fmt.Errorf("load base generation %d: %w", base.Gen, err)
		}
		if view, err = revision.FromSnapshot(snap); err != nil {
			return nil, zkstore.Head{}, 0, fmt.Errorf("base generation %d: %w", base.Gen, err)
		}
		from = base.Gen + 1
		size = int64(base.StoredSize())
	}
	if rec != nil {
		rec.baseTook = time.Since(began)
		began = time.Now()
		defer func() { rec.logTook = time.Since(began) }()
	}
	err = st.ReadEntries(ctx, from, head.LSN, window, func(e *revision.Entry, n int) error {
		size += int64(n)
		if rec != nil {
			defer func(at time.Time) { rec.applyTook += time.Since(at) }(time.Now())
		}
		if rec != nil {
			rec.sizes = append(rec.sizes, n)
			rec.logicals = append(rec.logicals, int64(zkstore.RecordBytes(e)))
			rec.raws = append(rec.raws, e.DataBytes())
		}
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

// reload rebuilds the view from the current base generation and the log,
// for an instance that fell behind a physical compaction; watchers catch up
// from the new view's history or are canceled as compacted.
func (b *Engine) reload() error {
	start := time.Now()
	var rec replayed
	view, head, _, err := replay(b.ctx, b.store, b.cfg.ReadWindow, b.origins.record, &rec)
	if err != nil {
		return err
	}
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	if view.State().LSN <= b.view.State().LSN {
		return nil // caught up meanwhile
	}
	b.origins.setFrom(rec.base.Gen + 1) // the entries skipped by the base were not read
	b.view.Reset(view)
	b.hub.Resync()
	rec.account(&b.space)
	b.lastHead.Store(&headSeen{head: head, at: time.Now()})
	b.log.WithFields(logrus.Fields{"lsn": head.LSN, "took": time.Since(start).Round(time.Millisecond)}).
		Warn("reloaded the view: this instance fell behind a compaction of the log")
	return nil
}
