package backend

import (
	"context"
	"errors"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/revision"
	"github.com/zketcd/zketcd/zkstore"
)

// evalFunc evaluates one request inside an open transaction of a batch and
// returns its response. It is called again if the batch must be evaluated
// anew (another writer took the log position), so it must not keep state.
type evalFunc func(b *revision.Batch) (any, error)

type proposal struct {
	ctx  context.Context
	size int
	eval evalFunc
	// guards, if not nil, makes the proposal exclusive: it is committed in
	// an entry of its own, under the preconditions guards returns.
	guards func() []zkstore.Guard

	resp any
	err  error
	done chan struct{}
}

// errRefused answers a guarded proposal whose preconditions did not hold.
var errRefused = errors.New("commit refused: a precondition no longer holds")

// propose queues a write for the committer and waits for its outcome.
func (b *Backend) propose(ctx context.Context, size int, eval evalFunc) (any, error) {
	return b.submit(ctx, &proposal{ctx: ctx, size: size, eval: eval, done: make(chan struct{})})
}

func (b *Backend) submit(ctx context.Context, p *proposal) (any, error) {
	select {
	case b.proposals <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.ctx.Done():
		return nil, rpctypes.ErrGRPCStopped
	}
	select {
	case <-p.done:
		return p.resp, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// commitLoop is the group committer: it takes every queued proposal (up to
// the batch limits), evaluates them in order against the view, and commits
// their writes as one log entry.
func (b *Backend) commitLoop() {
	defer b.wg.Done()
	var seq uint64
	for {
		var first *proposal
		select {
		case first = <-b.proposals:
		case <-b.ctx.Done():
			b.drainProposals()
			return
		}
		batch := []*proposal{first}
		bytes := first.size
	fill:
		for len(batch) < b.cfg.MaxBatchRequests && bytes < b.cfg.Store.MaxEntryBytes {
			select {
			case p := <-b.proposals:
				batch = append(batch, p)
				bytes += p.size
			default:
				break fill
			}
		}
		b.process(batch, &seq)
	}
}

func (b *Backend) drainProposals() {
	for {
		select {
		case p := <-b.proposals:
			p.finish(nil, rpctypes.ErrGRPCStopped)
		default:
			return
		}
	}
}

func (p *proposal) finish(resp any, err error) {
	p.resp, p.err = resp, err
	close(p.done)
}

func finishAll(ps []*proposal, err error) {
	for _, p := range ps {
		if err != nil {
			p.finish(nil, err)
		} else {
			p.finish(p.resp, p.err)
		}
	}
}

// process evaluates and commits proposals until each is answered.
func (b *Backend) process(pending []*proposal, seq *uint64) {
	limit := len(pending)
	for len(pending) > 0 {
		if err := b.view.Err(); err != nil {
			finishAll(pending, rpctypes.ErrGRPCCorrupt)
			return
		}
		if b.ctx.Err() != nil {
			finishAll(pending, rpctypes.ErrGRPCStopped)
			return
		}
		group, rest, st, ops, rev := b.evaluate(pending, limit)
		pending = rest
		if len(ops) == 0 {
			// Nothing to write: the answers hold if the view was the newest
			// state, which a barrier proves.
			lsn, err := b.barrier.wait(b.ctx)
			if err != nil {
				finishAll(group, toUnavailable(err))
				continue
			}
			if lsn == st.LSN {
				finishAll(group, nil)
				continue
			}
			b.kickTailer()
			if err := b.view.WaitApplied(b.ctx, lsn); err != nil {
				finishAll(group, toUnavailable(err))
				continue
			}
			pending = append(group, pending...)
			continue
		}
		*seq++
		entry := &revision.Entry{
			LSN:    st.LSN + 1,
			Writer: revision.WriterTag{Nonce: b.nonce, Seq: *seq},
			Ops:    ops,
		}
		timer := b.metrics.commitTimer()
		var guards []zkstore.Guard
		if len(group) == 1 && group[0].guards != nil {
			guards = group[0].guards()
		}
		res, err := b.store.Commit(b.ctx, st.LSN, entry, rev, guards...)
		timer(res.Outcome, err)
		lg := b.log.WithFields(logrus.Fields{"lsn": entry.LSN, "requests": len(group)})
		switch {
		case errors.Is(err, zkstore.ErrEntryTooLarge):
			if len(group) > 1 {
				limit = max(1, len(group)/2)
				pending = append(group, pending...)
				continue
			}
			finishAll(group, rpctypes.ErrGRPCRequestTooLarge)
		case errors.Is(err, zkstore.ErrUnknownOutcome):
			lg.WithError(err).Warn("commit outcome unknown")
			finishAll(group, rpctypes.ErrGRPCTimeoutDueToConnectionLost)
		case err != nil:
			lg.WithError(err).Warn("commit failed; nothing was written")
			finishAll(group, toUnavailable(err))
		case res.Outcome == zkstore.Committed:
			entry.Zxid = res.Zxid
			if err := b.apply(entry, res.Size); err != nil {
				finishAll(group, rpctypes.ErrGRPCCorrupt)
				continue
			}
			finishAll(group, nil)
			limit = len(pending)
		case res.Outcome == zkstore.Conflict:
			// Another instance took the position: catch up, evaluate again.
			b.metrics.conflicts.Inc()
			b.kickTailer()
			if err := b.view.WaitApplied(b.ctx, entry.LSN); err != nil {
				finishAll(group, toUnavailable(err))
				continue
			}
			pending = append(group, pending...)
		case res.Outcome == zkstore.Refused:
			if guards == nil {
				// A chunk of the entry was collected meanwhile: write anew.
				pending = append(group, pending...)
				continue
			}
			finishAll(group, errRefused)
		case res.Outcome == zkstore.Behind:
			lg.Warn("view is behind a compaction of the log")
			finishAll(group, rpctypes.ErrGRPCTimeout)
		}
	}
}

// evaluate runs up to limit proposals against the view in one batch. It
// returns the proposals evaluated (answered, or to answer once the batch is
// committed) and those left for the next batch.
func (b *Backend) evaluate(pending []*proposal, limit int) (group, rest []*proposal, st revision.State, ops []revision.Op, rev int64) {
	cut := min(limit, len(pending))
	size := 0
	_ = b.view.ReadState(func(r revision.Reader, s revision.State) error {
		st = s
		bt := revision.NewBatch(r)
		for i, p := range pending[:cut] {
			p.resp, p.err = nil, nil
			if err := p.ctx.Err(); err != nil {
				p.err = err
				continue
			}
			if i > 0 && (size+p.size > b.cfg.Store.MaxEntryBytes || p.guards != nil) {
				cut = i
				break
			}
			bt.Begin()
			resp, err := p.eval(bt)
			if errors.Is(err, revision.ErrBatchBoundary) && !bt.Empty() {
				bt.Abort()
				cut = i
				break
			}
			if err != nil {
				bt.Abort()
				if errors.Is(err, revision.ErrBatchBoundary) {
					err = rpctypes.ErrGRPCFutureRev // cannot happen at a batch start
				}
				p.err = err
				continue
			}
			bt.Commit()
			p.resp = resp
			size += p.size
			if p.guards != nil {
				cut = i + 1
				break
			}
		}
		ops, rev = bt.Ops(), bt.Rev()
		return nil
	})
	return pending[:cut], pending[cut:], st, ops, rev
}

// toUnavailable maps infrastructure errors to etcd's retryable errors.
func toUnavailable(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, zkstore.ErrUnavailable):
		return rpctypes.ErrGRPCNoLeader
	}
	return rpctypes.ErrGRPCNoLeader
}
