package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/zkstore"
)

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
