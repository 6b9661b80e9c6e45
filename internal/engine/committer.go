package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// evalFunc evaluates one request inside an open transaction of a batch,
// keeping its typed response where its submitter reads it (see propose). It
// is called again if the batch must be evaluated anew (another writer took
// the log position), so it keeps nothing but the latest response.
type evalFunc func(b *revision.Batch) error

type proposal struct {
	ctx  context.Context
	size int
	eval evalFunc
	// guards, if not nil, makes the proposal exclusive: it is committed in
	// an entry of its own, under the preconditions guards returns.
	guards func() []zkstore.Guard
	// origin, if not nil, is the bound tag (boundTag) of a request
	// forwarded by another instance (or re-proposed by its origin after
	// becoming the leader), which its origin sent under sent: it is
	// committed only by the leader, at most once (a tag already in the log
	// answers as a duplicate), with an OpOrigin op after its own. authFP
	// is the fingerprint of the auth state its origin checked it on.
	origin  *revision.WriterTag
	sent    revision.WriterTag
	authFP  uint64
	checkFP bool // a forwarded request: check authFP in the batch
	// after, for a re-sent origin, is the position its origin had applied
	// before the first send: the tag can only be in an entry after it
	// (0: a first send, which no entry can hold yet; see origins.lookup).
	after int64
	// leaderOnly proposals are committed only while this instance is the
	// leader; otherwise they fail with ErrNotLeader, nothing written.
	leaderOnly bool
	// arrived is the committer's send count when the proposal reached it:
	// only a flight numbered above it was sent after the request arrived
	// (the no-op rule, see launch).
	arrived uint64

	err  error // of the latest evaluation, or the answer
	out  outcome
	done chan struct{}
}

// outcome is what a proposal's answer says beyond its error: the log
// position whose application makes the answer visible, whether the request
// was found committed already (dup, at revision dupRev), and whether its
// error came from its evaluation (final: retrying it cannot change it).
type outcome struct {
	lsn    int64
	dup    bool
	dupRev int64
	final  bool
}

// submit queues a proposal for the committer and waits for its outcome.
// Safe for concurrent use.
func (c *committer) submit(ctx context.Context, p *proposal) error {
	select {
	case c.proposals <- p:
		c.submitted.Add(1)
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return rpctypes.ErrGRPCStopped
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// propose submits a request of size bytes evaluated by eval, with guards
// (nil: none), and returns eval's response from the evaluation that was
// committed. The response is read only after the committer answered, so it
// never races with a re-evaluation.
//
// A commit refused because the leader holds the read lease answers etcd's
// "not leader" (a client retries); a forwarded write, which can send the
// request to the leader instead, uses proposeHere to tell it apart.
func propose[T any](ctx context.Context, c *committer, size int, eval func(*revision.Batch) (T, error), guards func() []zkstore.Guard) (T, error) {
	resp, err := proposeHere(ctx, c, size, eval, guards)
	if errors.Is(err, errLeaseHeld) {
		return resp, rpctypes.ErrGRPCNotLeader
	}
	return resp, err
}

// proposeHere is propose answering errLeaseHeld as such.
func proposeHere[T any](ctx context.Context, c *committer, size int, eval func(*revision.Batch) (T, error), guards func() []zkstore.Guard) (T, error) {
	resp, _, err := proposeAs(ctx, c, &proposal{size: size, guards: guards}, eval)
	return resp, err
}

// proposeAs is propose for the proposal p describes (its size, guards,
// origin and leadership requirement), returning its outcome too.
func proposeAs[T any](ctx context.Context, c *committer, p *proposal, eval func(*revision.Batch) (T, error)) (T, outcome, error) {
	var resp T
	p.ctx, p.done = ctx, make(chan struct{})
	p.eval = func(bt *revision.Batch) error {
		var err error
		resp, err = eval(bt)
		return err
	}
	if err := c.submit(ctx, p); err != nil {
		var zero T
		select {
		case <-p.done: // answered: p.out is the committer's
			return zero, p.out, err
		default: // ctx ended first: the committer may still hold p
			return zero, outcome{}, err
		}
	}
	if p.out.dup {
		var zero T
		return zero, p.out, nil
	}
	return resp, p.out, nil
}

// flight is one entry being committed.
type flight struct {
	group []*proposal
	// piggy are no-op requests evaluated on top of this flight, all of
	// which arrived before it was sent: its successful commit proves the
	// state they saw was the newest.
	piggy   []*proposal
	batch   *revision.Batch
	entry   *revision.Entry
	req     zkstore.CommitRequest
	guarded bool
	fenced  bool // carries the leader's fence
	// sent numbers the flight among the committer's sends; chained says
	// it was evaluated on the flight before it, and prevLanded that this
	// one committed (a refusal for a missing predecessor is then a
	// reordering: the flight is sent again as it is).
	sent                uint64
	chained, prevLanded bool
	resent              int       // times sent again after being overtaken
	mark                markState // the marker's state if it lands
	start               time.Time
	// reads is the barrier's mark when the multi was sent: its landing
	// answers the linearizable reads that arrived before (barrier.go).
	reads sendMark

	done chan struct{}
	res  zkstore.CommitResult
	err  error
}

// committer is the group committer: it takes every queued proposal (up to
// the batch limits), evaluates them in order against the view, and commits
// their writes as one log entry. Several entries may be in flight at once
// (the pacer chooses how many, pipeline.go): the next batch is evaluated on
// top of the staged state of the one before it, and its commit sets the
// pipeline marker at the version that one left, so it can only land if its
// predecessor did (zkstore.Marker); ZooKeeper groups their fsyncs. submit
// is safe for concurrent use; the rest of its state is run's goroutine's.
type committer struct {
	*core
	tail    *tailer
	rb      *rollbackGuard
	origins *origins
	// marks counts the flights sent and settled (readlease.go).
	marks     *flightMarks
	proposals chan *proposal
	submitted atomic.Int64 // proposals handed to the committer (for tests)
	lingers   atomic.Int64 // waits for more proposals (Config.CommitLinger; for tests)

	seq     uint64
	pending []*proposal
	flights []*flight
	limit   int // most proposals in the next batch (lowered after a too-large entry)
	pace    *pacer
	// sends counts the flights sent (proposal.arrived, flight.sent).
	sends uint64
	// deferred are no-ops evaluated on a flight sent before they arrived:
	// they wait for the flights to land and are evaluated again.
	deferred []*proposal
	// mark is the pipeline marker's state after the newest flight sent,
	// landedMark after the newest that committed; marker names it.
	mark, landedMark markState
	marker           string
	// moves is how many moves the committer has resumed after (the
	// engine's count when it last did; move.go).
	moves int64
	// lastGroup is how many requests the newest entry sent carried
	// (Config.CommitLinger waits only after one of several).
	lastGroup int
}

// newCommitter returns the committer of c, which applies its entries
// through tail; it runs once run is called.
func newCommitter(c *core, tail *tailer, rb *rollbackGuard, origins *origins, marks *flightMarks) *committer {
	m := markState{known: true}
	return &committer{core: c, tail: tail, rb: rb, origins: origins, marks: marks,
		proposals: make(chan *proposal, 4*c.cfg.MaxBatchRequests),
		pace:      newPacer(c.cfg.CommitPipeline), marker: fmt.Sprintf("%016x-m", c.nonce),
		mark: m, landedMark: m}
}

// receive takes a proposal into pending.
func (c *committer) receive(p *proposal) {
	p.arrived = c.sends
	c.pending = append(c.pending, p)
}

// run is the committer's loop, until the engine stops: every proposal
// queued is then answered ErrStopped.
func (c *committer) run() {
	c.metrics.pipelineLimit.Set(float64(c.pace.limit))
	for {
		if c.ctx.Err() != nil {
			c.stop()
			return
		}
		if len(c.pending) == 0 && len(c.flights) == 0 {
			c.drain()
		}
		if len(c.pending) == 0 && len(c.flights) == 0 {
			c.barrier.idle() // reads waiting for a commit get a barrier round
			select {
			case p := <-c.proposals:
				c.receive(p)
			case <-c.ctx.Done():
				continue
			}
		}
		c.drain()
		if c.waitForMove() {
			continue
		}
		c.linger()
		if !c.moveBlocks() && c.pace.mayLaunch(len(c.flights), len(c.pending)) && c.launch() {
			continue
		}
		if len(c.flights) == 0 {
			if len(c.pending) == 0 && len(c.deferred) > 0 {
				c.pending, c.deferred = c.deferred, nil
			}
			continue
		}
		var more <-chan *proposal
		if len(c.flights) < c.pace.limit && len(c.pending) < c.cfg.MaxBatchRequests {
			more = c.proposals
		}
		select {
		case <-c.flights[0].done:
			c.land()
		case p := <-more:
			c.receive(p)
		case <-c.ctx.Done():
		}
	}
}

// waitForMove keeps the committer from evaluating anything on a fenced
// log (move.go): once the flights in the air settled (none can land after
// the fence), it waits until the engine runs on the destination and
// reports true (the loop looks again). Proposals queue meanwhile.
func (c *committer) waitForMove() bool {
	f := c.fenced()
	if f == nil || len(c.flights) > 0 {
		return false
	}
	c.barrier.idle() // reads must not wait for a commit
	select {
	case <-f.done:
	case <-c.ctx.Done():
	}
	return true
}

// moveBlocks reports whether nothing may be launched because of a move:
// the log is fenced, or the engine switched logs and flights sent to the
// old one still settle. Once none is left after a switch, the pipeline
// marker starts anew (it does not exist on the destination).
func (c *committer) moveBlocks() bool {
	if c.fenced() != nil {
		return true
	}
	n := c.core.moves.Load()
	if n == c.moves {
		return false
	}
	if len(c.flights) > 0 {
		return true
	}
	c.moves = n
	c.mark, c.landedMark = markState{known: true}, markState{known: true}
	return false
}

// drain moves queued proposals to pending, within the batch limits.
func (c *committer) drain() {
	bytes := 0
	for _, p := range c.pending {
		bytes += p.size
	}
	for len(c.pending) < c.cfg.MaxBatchRequests && bytes < c.maxEntryBytes {
		select {
		case p := <-c.proposals:
			c.receive(p)
			bytes += p.size
		default:
			return
		}
	}
}

// linger waits up to Config.CommitLinger for more proposals before an
// entry is sent with nothing in flight, while the previous entry carried
// several requests and pending holds fewer than it did: clients answered
// together by one entry come back a little apart, and without the wait
// the first of them would leave alone and split the rest into more
// entries. It returns at once otherwise, and as soon as pending holds as
// many as the previous entry, the batch limit is reached or the engine
// stops.
func (c *committer) linger() {
	if c.cfg.CommitLinger <= 0 || len(c.flights) > 0 || c.lastGroup < 2 ||
		len(c.pending) == 0 || len(c.pending) >= c.lastGroup {
		return
	}
	c.lingers.Add(1)
	t := time.NewTimer(c.cfg.CommitLinger)
	defer t.Stop()
	for len(c.pending) < c.lastGroup && len(c.pending) < c.cfg.MaxBatchRequests {
		select {
		case p := <-c.proposals:
			c.receive(p)
		case <-t.C:
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// stop answers everything with ErrStopped once in-flight commits ended.
func (c *committer) stop() {
	for _, f := range c.flights {
		<-f.done
		c.barrier.landed(f.reads, 0, false)
		finishAll(f.group, rpctypes.ErrGRPCStopped)
		finishAll(f.piggy, rpctypes.ErrGRPCStopped)
		c.marks.settle()
	}
	finishAll(c.pending, rpctypes.ErrGRPCStopped)
	finishAll(c.deferred, rpctypes.ErrGRPCStopped)
	c.pending, c.deferred = nil, nil
	c.drainProposals()
	c.barrier.idle()
}

// launch evaluates a batch from pending and starts committing it. It
// reports false when nothing could be launched before the flights land.
func (c *committer) launch() bool {
	if err := c.view.Err(); err != nil {
		finishAll(c.pending, rpctypes.ErrGRPCCorrupt)
		c.pending = nil
		return true
	}
	if err := c.rb.wait(); err != nil { // never commit on another history
		if s := c.rb.servable(); s != nil {
			err = s // halted: etcd's corrupt-cluster error
		}
		finishAll(c.pending, err) // or ErrStopped: never nil, nothing was evaluated
		c.pending = nil
		return true
	}
	leader, fence, _ := c.election.State()
	if c.cfg.ForwardWrites && !leader {
		c.pending = failNotLeader(c.pending)
		if len(c.pending) == 0 {
			return true
		}
	}
	var last *flight
	if n := len(c.flights); n > 0 {
		last = c.flights[n-1]
		if c.pending[0].guards != nil || last.guarded || last.req.Marker == nil || !c.mark.known {
			// Guarded proposals are committed alone, unchained; nothing
			// is chained on a flight without the marker op, or one that
			// set the marker at an unknown version.
			return false
		}
	}
	limit := c.limit
	if limit <= 0 {
		limit = len(c.pending)
	}
	moves := c.core.moves.Load()
	group, rest, st, batch := c.evaluate(c.pending, limit, last)
	if c.fenced() != nil || c.core.moves.Load() != moves {
		// The view applied a fence meanwhile (noted before it applies
		// it), or the engine switched logs: nothing evaluated on it is
		// sent, the fence is the log's last entry. Evaluated again once
		// the engine runs on the destination.
		return true
	}
	if len(group) == 0 {
		return false // must start on the view: wait for the flights
	}
	c.pending = rest
	prev := st.LSN
	if last != nil {
		prev = last.entry.LSN
	}
	if batch.Empty() {
		c.noOps(group, last, st.LSN)
		return true
	}
	c.lastGroup = len(group)
	f := c.newFlight(group, batch, last, prev, leader, fence)
	c.flights = append(c.flights, f)
	c.metrics.pipelineInFlight.Set(float64(len(c.flights)))
	c.marks.send()
	f.reads = c.barrier.sending()
	c.send(f)
	return true
}

// noOps settles a batch that writes nothing, evaluated on last (nil: on
// the view at lsn).
func (c *committer) noOps(group []*proposal, last *flight, lsn int64) {
	if last == nil {
		setLSN(group, lsn)
		c.answerNoOps(group, lsn)
		return
	}
	// The no-op rule: linearized by the commit of the flight they were
	// evaluated on if it was sent after they arrived; any other waits for
	// the flights to land and is evaluated again (on a newer flight, or on
	// the view with a barrier): a commit of another instance may come
	// between that flight's send and a request's arrival.
	for _, p := range group {
		if p.arrived < last.sent {
			last.piggy = append(last.piggy, p)
		} else {
			c.deferred = append(c.deferred, p)
		}
	}
}

// newFlight is the flight of a batch evaluated on last (nil: on the view,
// at prev), with the marker op, the guards and the fence its commit
// carries: leader and fence are the election's state the batch was
// evaluated under.
func (c *committer) newFlight(group []*proposal, batch *revision.Batch, last *flight, prev int64, leader bool, fence zkstore.Fence) *flight {
	c.seq++
	c.sends++
	f := &flight{
		group: group, batch: batch, sent: c.sends, chained: last != nil,
		entry: &revision.Entry{
			LSN:    prev + 1,
			Writer: revision.WriterTag{Nonce: c.nonce, Seq: c.seq},
			Ops:    batch.Ops(),
		},
	}
	f.req = zkstore.CommitRequest{Prev: prev, Entry: f.entry, Rev: batch.Rev(), Pipelined: last != nil}
	if c.pace.limit > 1 {
		// The marker chains pipelined commits. A flight sent while the
		// limit is 1 (a fixed depth of 1, or the automatic depth at 1)
		// has nothing chained on it and goes without: its multi is what
		// versions without a pipeline wrote, and the marker keeps its
		// version — and so does what the committer knows of it (c.mark
		// is left as it is): the automatic depth going back to 2 chains
		// on the version it knew, never on a guess.
		f.req.Marker, f.mark = c.mark.op(c.marker)
		c.mark = f.mark
	}
	if len(group) == 1 && group[0].guards != nil {
		f.guarded = true
		f.req.Guards = group[0].guards()
	}
	if c.cfg.ForwardWrites && leader {
		// Only the leader commits: its fence makes a deposed leader's
		// commit fail, so a new leader that caught up with the log has seen
		// every forwarded request its predecessor committed. The fence is
		// the last guard (settle looks for it there). A proposal guarded
		// by this same fence already (auto-compaction) carries it once.
		f.fenced = true
		if n := len(f.req.Guards); n == 0 || f.req.Guards[n-1].Path() != fence.Path() {
			f.req.Guards = append(f.req.Guards, fence.Guard())
		}
	} else {
		// Any other commit is refused while a leader holds the read lease
		// (readlease.go): it never lands behind reads served from memory.
		f.req.Guards = append(f.req.Guards, c.store.ReadLeaseAbsent())
	}
	if last != nil {
		// ZooKeeper should receive the flights in order: this one's multi
		// waits for the one before to be handed to the connection, and,
		// sent again after a lost connection, for its outcome.
		f.req.After, f.req.Predecessor = last.req.Sending, last.predecessor()
	}
	f.req.Sending = make(chan struct{})
	return f
}

// predecessor is f as the flight chained on it knows it
// (zkstore.CommitRequest.Predecessor), for f's current send: Landed reads
// f's result only once that send returned, and f is sent again only after
// every flight behind it returned (resend).
func (f *flight) predecessor() *zkstore.Predecessor {
	return &zkstore.Predecessor{Done: f.done, Landed: func() (bool, bool) { return zkstore.Landed(f.res, f.err) }}
}

// send hands f's commit to the log; f.done closes when it returned.
func (c *committer) send(f *flight) {
	f.done, f.start = make(chan struct{}), time.Now()
	go func() {
		timer := c.metrics.commitTimer()
		f.res, f.err = c.store.Commit(c.ctx, f.req)
		timer(f.res.Outcome, f.err)
		close(f.done)
	}()
}

// answerNoOps answers a batch that writes nothing, evaluated on the view at
// lsn: the answers hold if that was the newest state, which a barrier
// proves; otherwise the batch is evaluated again after catching up.
func (c *committer) answerNoOps(group []*proposal, lsn int64) {
	c.barrier.idle() // no commit comes before this barrier: never wait for one
	head, err := c.barrier.wait(c.ctx)
	if err != nil {
		finishAll(group, stopped(err))
		return
	}
	if head == lsn {
		setLSN(group, lsn)
		finishAll(group, nil)
		return
	}
	c.kickTailer()
	if err := c.view.WaitApplied(c.ctx, head); err != nil {
		finishAll(group, stopped(err))
		return
	}
	c.pending = append(group, c.pending...)
}

// land handles the oldest flight, which has completed. When it did not
// commit, every flight after it (chained on it) is awaited too, so that
// their proposals go back to pending in their original order.
//
// A chained flight refused only because ZooKeeper received it before the
// flight it is chained on (that one committed since) is sent again as it
// is: its evaluation still holds (see resend).
func (c *committer) land() {
	f := c.flights[0]
	if f.chained && f.prevLanded && reordered(f) && f.resent < maxResends {
		c.resend()
		return
	}
	c.flights = c.flights[1:]
	var requeue []*proposal
	ok := c.settle(f, &requeue)
	c.marks.settle()
	if ok {
		c.pace.landed(time.Now(), len(f.group)+len(f.piggy), time.Since(f.start), len(c.flights), len(c.pending))
		if len(c.flights) > 0 && c.flights[0].chained {
			c.flights[0].prevLanded = true
		}
	} else {
		if len(c.flights) > 0 {
			c.pace.refused()
		}
		for _, g := range c.flights {
			<-g.done
			c.settle(g, &requeue)
			c.marks.settle()
		}
		c.flights = nil
	}
	c.metrics.pipelineLimit.Set(float64(c.pace.limit))
	c.metrics.pipelineInFlight.Set(float64(len(c.flights)))
	if len(requeue) > 0 {
		c.pending = append(requeue, c.pending...)
	}
	if len(c.deferred) > 0 {
		// Evaluated again: on a flight sent after they arrived, on one
		// sent before (deferred again, until the flights drain), or on
		// the view (answerNoOps' barrier).
		c.pending, c.deferred = append(c.deferred, c.pending...), nil
	}
}

// maxResends bounds how often a flight is sent again after being
// overtaken: past it, its refusal is taken as it comes (requeued).
const maxResends = 3

// reordered reports whether a completed chained flight was refused for a
// missing predecessor: the entry it follows or the marker's version.
func reordered(f *flight) bool {
	return f.err == nil && f.res.Outcome == zkstore.Refused && (f.res.PrevMissing || f.res.MarkerMissed)
}

// resend sends the oldest flight again, overtaken by nothing now that its
// predecessor landed. Every flight after it was sent before it and so was
// refused too (none can land before it): they are awaited and sent again
// behind it in order, as far as each was refused for the same reason;
// from the first that was not, the rest is settled as failed (requeued).
func (c *committer) resend() {
	for _, g := range c.flights[1:] {
		<-g.done
	}
	n := 1
	for n < len(c.flights) && reordered(c.flights[n]) {
		n++
	}
	var requeue []*proposal
	for _, g := range c.flights[n:] {
		c.settle(g, &requeue)
		c.marks.settle()
	}
	c.flights = c.flights[:n]
	var prev *flight // the first's predecessor landed
	for _, g := range c.flights {
		c.metrics.pipelineRefusals.WithLabelValues("reordered").Inc()
		g.resent++
		g.req.After, g.req.Predecessor, g.req.Sending = nil, nil, make(chan struct{})
		if prev != nil {
			g.req.After, g.req.Predecessor = prev.req.Sending, prev.predecessor()
		}
		c.send(g)
		prev = g
	}
	c.mark = c.flights[n-1].mark
	if len(requeue) > 0 {
		c.pending = append(requeue, c.pending...)
	}
}

// settle answers or requeues the proposals of a completed flight and
// reports whether it committed.
func (c *committer) settle(f *flight, requeue *[]*proposal) bool {
	lg := c.log.WithFields(logrus.Fields{"lsn": f.entry.LSN, "requests": len(f.group)})
	again := func() { *requeue = append(*requeue, append(f.group, f.piggy...)...) }
	failed := func(err error) {
		finishAll(f.group, err)
		finishAll(f.piggy, err)
	}
	err, res := f.err, f.res
	if err != nil || res.Outcome != zkstore.Committed {
		c.barrier.landed(f.reads, 0, false)
		// Nothing of this flight was written (or it is unknown): the next
		// commit follows the newest that committed.
		switch {
		case f.req.Marker == nil:
		case errors.Is(err, zkstore.ErrUnknownOutcome):
			c.landedMark = markState{} // it may have set the marker
		case res.MarkerGone:
			c.landedMark = markState{known: true} // vanished with an expired session
		case res.MarkerMissed && !f.chained:
			c.landedMark = markState{} // not where we thought: learn it again
		}
		c.mark = c.landedMark
		if res.Outcome == zkstore.Refused && f.chained && (res.PrevMissing || res.MarkerMissed) {
			c.metrics.pipelineRefusals.WithLabelValues("predecessor").Inc()
		} else if res.Outcome == zkstore.Refused {
			c.metrics.pipelineRefusals.WithLabelValues("guard").Inc()
		}
	}
	switch {
	case errors.Is(err, zkstore.ErrEntryTooLarge):
		if len(f.group) > 1 {
			c.limit = max(1, len(f.group)/2)
			again()
			return false
		}
		failed(rpctypes.ErrGRPCRequestTooLarge)
	case errors.Is(err, zkstore.ErrUnknownOutcome):
		lg.WithError(err).Warn("commit outcome unknown")
		failed(rpctypes.ErrGRPCTimeoutDueToConnectionLost)
	case err != nil:
		lg.WithError(err).Warn("commit failed; nothing was written")
		failed(stopped(err))
	case res.Outcome == zkstore.Committed:
		c.tail.landed() // see deferRearm
		if f.req.Marker != nil {
			c.markLanded(f, res, lg)
		}
		f.entry.Zxid = res.Zxid
		if err := c.applyOwn(f); err != nil {
			c.barrier.landed(f.reads, 0, false)
			failed(rpctypes.ErrGRPCCorrupt)
			return true
		}
		setLSN(f.group, f.entry.LSN)
		setLSN(f.piggy, f.entry.LSN)
		c.barrier.landed(f.reads, f.entry.LSN, true)
		finishAll(f.group, nil)
		finishAll(f.piggy, nil)
		c.limit = 0
		return true
	case res.Outcome == zkstore.Conflict:
		// Another instance took the position: catch up, evaluate again.
		c.metrics.conflicts.Inc()
		c.kickTailer()
		if err := c.view.WaitApplied(c.ctx, f.entry.LSN); err != nil {
			failed(stopped(err))
			return false
		}
		again()
	case res.Outcome == zkstore.Held:
		// The leader holds the read lease: only it may commit. Nothing was
		// written; a forwarded write's origin sends it to the leader again.
		failed(errLeaseHeld)
	case res.Outcome == zkstore.Refused:
		if f.guarded {
			failed(errRefused)
			return false
		}
		if f.fenced && !res.PrevMissing && !res.MarkerMissed && !res.MarkerGone {
			if leader, fence, _ := c.election.State(); leader && fence.Path() == f.req.Guards[len(f.req.Guards)-1].Path() {
				// Our election znode is gone and the election has not
				// noticed yet: do not spin on ZooKeeper meanwhile.
				select {
				case <-c.election.Changed():
				case <-time.After(50 * time.Millisecond):
				case <-c.ctx.Done():
				}
			}
		}
		// The flight before failed, a chunk was collected, or our marker
		// vanished with an expired session: write anew.
		again()
	case res.Outcome == zkstore.Behind:
		lg.Warn("view is behind a compaction of the log")
		failed(rpctypes.ErrGRPCTimeout)
	}
	return false
}

// markLanded records the marker's version a committed flight left. A
// version the log could not tell (a commit at any version found by its
// writer tag after its answer was lost) is unknown, never a guess: the
// next flight sets the marker at any version, unchained, and nothing is
// chained until one of them reports the version (launch). A version other
// than the one the flights behind f were chained on cannot happen while
// the committer's belief follows the log; should it, nothing more is
// chained until the flights drained.
func (c *committer) markLanded(f *flight, res zkstore.CommitResult, lg *logrus.Entry) {
	if res.MarkerUnknown {
		c.landedMark = markState{}
	} else {
		c.landedMark = markState{known: true, exists: true, version: res.MarkerVersion}
	}
	switch {
	case !f.mark.known:
		c.mark = c.landedMark // nothing was chained on it
	case c.landedMark != f.mark:
		lg.WithFields(logrus.Fields{"marker_version": res.MarkerVersion, "marker_unknown": res.MarkerUnknown,
			"expected": f.mark.version}).Error("pipeline marker not at the version the next flights were chained on; chaining stops until they land")
		c.landedMark, c.mark = markState{}, markState{}
	}
}

// applyOwn applies a committed flight's entry: directly if the view is
// right before it, else by waiting for the tailer (it may have applied it
// already, or an earlier flight of unknown outcome that did land).
func (c *committer) applyOwn(f *flight) error {
	if c.view.State().LSN == f.entry.LSN-1 {
		return c.tail.apply(f.entry, f.res.Size)
	}
	c.kickTailer()
	return c.view.WaitApplied(c.ctx, f.entry.LSN)
}

// evaluate runs up to limit proposals in one batch, on top of the view or,
// if last is not nil, of last's staged state. It returns the proposals
// evaluated (answered, or to answer once the batch is committed), those
// left for the next batch, the view's state and the batch. An empty group
// means the first proposal cannot be evaluated on top of last.
func (c *committer) evaluate(pending []*proposal, limit int, last *flight) (group, rest []*proposal, st revision.State, bt *revision.Batch) {
	cut := min(limit, len(pending))
	size := 0
	_ = c.view.ReadState(func(r revision.Reader, s revision.State) error {
		st = s
		var base revision.Reader = r
		if last != nil {
			base = last.batch
		}
		bt = revision.NewBatch(base)
		for i, p := range pending[:cut] {
			p.err, p.out = nil, outcome{}
			if err := p.ctx.Err(); err != nil {
				p.err = err
				continue
			}
			if i > 0 && (size+p.size > c.maxEntryBytes || p.guards != nil) {
				cut = i
				break
			}
			if p.origin != nil {
				switch lsn, rev, v := c.origins.lookup(*p.origin, p.sent, p.after); v {
				case tagFound:
					// Committed before (by a leader since deposed, or
					// before its answer was lost): never twice.
					p.out = outcome{lsn: lsn, dup: true, dupRev: rev}
					continue
				case tagUnknown:
					// It may be in an entry the index no longer holds:
					// never evaluated again; its outcome stays unknown.
					p.err, p.out.final = rpctypes.ErrGRPCTimeoutDueToConnectionLost, true
					continue
				}
				if p.checkFP && authFingerprint(bt.AuthState()) != p.authFP {
					p.err, p.out.final = ErrAuthChanged, true
					continue
				}
			}
			ops := len(bt.Ops())
			bt.Begin()
			if err := checkAuth(p.ctx, bt); err != nil {
				bt.Abort()
				p.err, p.out.final = err, true
				continue
			}
			err := p.eval(bt)
			if errors.Is(err, revision.ErrBatchBoundary) && (!bt.Empty() || bt.Chained()) {
				bt.Abort()
				cut = i
				break
			}
			if err != nil {
				bt.Abort()
				if errors.Is(err, revision.ErrBatchBoundary) {
					err = rpctypes.ErrGRPCFutureRev // cannot happen at a batch start
				}
				p.err, p.out.final = err, true
				continue
			}
			rev, changed := bt.Commit()
			if p.origin != nil && len(bt.Ops()) > ops {
				if !changed {
					rev = 0
				}
				bt.Origin(*p.origin, rev)
			}
			size += p.size
			if p.guards != nil {
				cut = i + 1
				break
			}
		}
		return nil
	})
	return pending[:cut], pending[cut:], st, bt
}

func (c *committer) drainProposals() {
	for {
		select {
		case p := <-c.proposals:
			p.finish(rpctypes.ErrGRPCStopped)
		default:
			return
		}
	}
}

func (p *proposal) finish(err error) {
	p.err = err
	close(p.done)
}

// setLSN records lsn as the position that makes the answers of ps visible
// (a duplicate keeps the position it was found committed at).
func setLSN(ps []*proposal, lsn int64) {
	for _, p := range ps {
		if !p.out.dup {
			p.out.lsn = lsn
		}
	}
}

// failNotLeader answers the proposals that need the leadership with
// ErrNotLeader (nothing of them was written) and returns the others.
func failNotLeader(ps []*proposal) []*proposal {
	kept := ps[:0]
	for _, p := range ps {
		if p.origin != nil || p.leaderOnly {
			p.out = outcome{}
			p.finish(ErrNotLeader)
			continue
		}
		kept = append(kept, p)
	}
	return kept
}

// finishAll answers every proposal: with err if not nil, else with what
// its evaluation produced.
func finishAll(ps []*proposal, err error) {
	for _, p := range ps {
		if err != nil {
			p.out.final = errors.Is(err, rpctypes.ErrGRPCRequestTooLarge)
			p.finish(err)
		} else {
			p.finish(p.err)
		}
	}
}

// writeGuarded queues a validated request (its size checked by the
// caller) for this instance's committer and returns its typed response;
// the active alarms may refuse req when it is evaluated
// (translate.AlarmGate). With guards not nil, the request is committed in
// an entry of its own under the preconditions guards returns.
func writeGuarded[T any](ctx context.Context, c *committer, req proto.Message, eval func(*revision.Batch) (T, error), guards func() []zkstore.Guard) (T, error) {
	if err := c.rb.servable(); err != nil {
		var zero T
		return zero, err
	}
	return propose(ctx, c, proto.Size(req), gated(req, eval), guards)
}

// gated is eval behind the active alarms' gate (translate.AlarmGate),
// checked on the state the committer evaluates req on: every path that
// commits a client's request (local, or forwarded to the leader) goes
// through it.
func gated[T any](req any, eval func(*revision.Batch) (T, error)) func(*revision.Batch) (T, error) {
	return func(bt *revision.Batch) (T, error) {
		if err := translate.AlarmGate(bt.Alarms(), req); err != nil {
			var zero T
			return zero, err
		}
		return eval(bt)
	}
}

// checkAuth is the in-batch auth check of a proposal: its context's
// (auth.WithCheck), on the auth state the batch evaluates it on.
func checkAuth(ctx context.Context, bt *revision.Batch) error {
	check := auth.CheckFrom(ctx)
	if check == nil {
		return nil
	}
	return check(bt.AuthState())
}
