package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// The corruption check (etcd's --corrupt-check-time): every period the
// leader instance asks every instance for etcd's HashKV at its current
// revision and compares the answers with its own; an instance whose hash
// differs at the same compacted revision gets the CORRUPT alarm, raised
// through the log like any alarm (so every instance refuses writes).
//
// Unlike etcd, whose leader calls its followers' HashKV over the peer
// URLs, the request and the answers travel through the member znodes in
// ZooKeeper (zkstore.Member.HashRequest and HashAnswer): instances need no
// network path to each other, no client credentials (the check works with
// authentication on, without a token) and no TLS configuration for each
// other's client URLs. Every instance answers, whatever its own
// --corrupt-check-time; the answer is computed from its own view once it
// has applied the requested revision.
const (
	// hashPoll is how often instances look for a new request, and the
	// leader for answers.
	hashPoll = time.Second
	// hashAnswerWait bounds how long the leader waits for the answers of
	// one round; instances that did not answer by then are skipped.
	hashAnswerWait = 10 * time.Second
	// firstCheckAfter is the delay of the first check (etcd's initial
	// check runs at start; here it runs once leadership and the view have
	// settled).
	firstCheckAfter = 5 * time.Second
)

// corruptChecker runs the corruption check: it answers the other
// instances' requests on every instance (answerLoop) and, on the leader,
// asks for the hashes and raises CORRUPT on a mismatch (run, check). Safe
// for concurrent use.
type corruptChecker struct {
	*core
	member *memberRecord
	rb     *rollbackGuard
	// raise commits an alarm activation (the engine's Alarm).
	raise func(ctx context.Context, req *pb.AlarmRequest) error

	mu       sync.Mutex
	answered map[uint64]bool // requests this instance answered (the latest ones)
	seq      uint64
}

// hashAt computes this instance's answer to req.
func (c *corruptChecker) hashAt(req zkstore.HashRequest) zkstore.HashAnswer {
	ans := zkstore.HashAnswer{Check: req.Check, Rev: req.Rev}
	h, err := etcdformat.HashKV(c.view.Snapshot(), req.Rev)
	if err != nil {
		ans.Err = err.Error()
		return ans
	}
	ans.CompactRev, ans.Hash = h.CompactRevision, h.Hash
	if c.cfg.HashHook != nil {
		ans.Hash = c.cfg.HashHook(ans.Hash)
	}
	return ans
}

// answerLoop answers the other instances' hash requests (the
// leader's periodic check, a starting instance's initial one), on every
// instance.
func (c *corruptChecker) answerLoop() {
	t := time.NewTicker(max(hashPoll, c.cfg.IdlePoll))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		if c.rb.servable() != nil {
			continue
		}
		if err := c.answerOnce(); err != nil && c.ctx.Err() == nil {
			c.log.WithError(err).Debug("answer the corruption check")
		}
	}
}

func (c *corruptChecker) answerOnce() error {
	members, err := c.store.Members()
	if err != nil {
		return err
	}
	var answers []zkstore.HashAnswer
	for _, m := range members {
		if m.ID == c.memberID || m.HashRequest == nil {
			continue
		}
		req := *m.HashRequest
		c.mu.Lock()
		done := c.answered[req.Check]
		c.mu.Unlock()
		if done || c.view.State().Rev < req.Rev {
			continue // answered, or not there yet (the tailer catches up)
		}
		answers = append(answers, c.hashAt(req))
	}
	if len(answers) == 0 {
		return nil
	}
	return c.member.publish(func(self *zkstore.Member) {
		all := append(self.HashAnswers, answers...)
		self.HashAnswers = all[max(0, len(all)-zkstore.MaxHashAnswers):]
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.answered == nil || len(c.answered) > 64 {
			c.answered = map[uint64]bool{}
		}
		for _, a := range answers {
			c.answered[a.Check] = true
		}
	})
}

// run runs the leader's check every CorruptCheckTime.
func (c *corruptChecker) run() {
	lg := c.log.WithField("component", "corrupt-check")
	wait := min(firstCheckAfter, c.cfg.CorruptCheckTime)
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = c.cfg.CorruptCheckTime
		if leader, _, _ := c.election.State(); !leader || c.rb.servable() != nil {
			continue
		}
		if err := c.check(c.ctx); err != nil && c.ctx.Err() == nil {
			lg.WithError(err).Warn("corruption check")
		}
	}
}

// errMismatch is wrapped by the corruption check's errors when an
// instance's hash differed.
var errMismatch = errors.New("hash mismatch")

// hashRound is one round of the check: the request, this instance's own
// answer, the other members' answers by member ID, and the members that
// did not answer in time.
type hashRound struct {
	req     zkstore.HashRequest
	own     zkstore.HashAnswer
	answers map[uint64]zkstore.HashAnswer
	pending []uint64
}

// askHashes publishes a request for the HashKV at the view's revision in
// this instance's member znode and waits for the other instances' answers
// (at most hashAnswerWait).
func (c *corruptChecker) askHashes(ctx context.Context) (*hashRound, error) {
	c.mu.Lock()
	c.seq++
	req := zkstore.HashRequest{Check: c.nonce ^ c.seq<<1 | 1, Rev: c.view.State().Rev}
	c.mu.Unlock()
	r := &hashRound{req: req, own: c.hashAt(req), answers: map[uint64]zkstore.HashAnswer{}}
	if r.own.Err != "" {
		return nil, fmt.Errorf("own hash at %d: %s", req.Rev, r.own.Err)
	}
	if err := c.member.publish(func(self *zkstore.Member) { self.HashRequest = &req }); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(hashAnswerWait)
	for {
		members, err := c.store.Members()
		if err != nil {
			return nil, err
		}
		r.pending = r.pending[:0]
		for _, m := range members {
			if m.ID == c.memberID {
				continue
			}
			for _, a := range m.HashAnswers {
				if a.Check == req.Check {
					r.answers[m.ID] = a
				}
			}
			if _, ok := r.answers[m.ID]; !ok {
				r.pending = append(r.pending, m.ID)
			}
		}
		if len(r.pending) == 0 || time.Now().After(deadline) {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(hashPoll / 4):
		}
	}
}

// mismatches logs the round's outcome and returns the members whose hash
// differs from this instance's at the same compacted revision, ascending.
// Answers at another compacted revision (a compaction landed between the
// two computations), errors and members that did not answer are skipped,
// as etcd skips them.
func (c *corruptChecker) mismatches(r *hashRound, lg *logrus.Entry) []uint64 {
	lg = lg.WithFields(logrus.Fields{"revision": r.req.Rev, "compact_revision": r.own.CompactRev})
	for _, id := range r.pending {
		lg.WithField("member", memberHex(id)).Warn("corruption check: no answer from member; skipped")
	}
	var bad []uint64
	for id, a := range r.answers {
		switch {
		case a.Err != "":
			lg.WithFields(logrus.Fields{"member": memberHex(id), "error": a.Err}).Info("corruption check: member could not hash; skipped")
		case a.CompactRev != r.own.CompactRev:
			lg.WithFields(logrus.Fields{"member": memberHex(id), "member_compact_revision": a.CompactRev}).Info("corruption check: compacted revisions differ; skipped")
		case a.Hash != r.own.Hash:
			lg.WithFields(logrus.Fields{"member": memberHex(id), "hash": r.own.Hash, "member_hash": a.Hash}).
				Error("corruption check: HashKV differs")
			bad = append(bad, id)
		}
	}
	slices.Sort(bad)
	c.metrics.corruptMismatches.Add(float64(len(bad)))
	return bad
}

// check runs one round of the corruption check as the leader
// instance: it asks every other instance for its HashKV at the view's
// revision and, as etcd, raises the CORRUPT alarm for one instance whose
// hash differs from its own at the same compacted revision (the lowest
// member ID; all are logged). Errors: the log's, ErrNotLeader, or one
// wrapping errMismatch after raising the alarm.
func (c *corruptChecker) check(ctx context.Context) error {
	if leader, _, _ := c.election.State(); !leader {
		return ErrNotLeader
	}
	r, err := c.askHashes(ctx)
	if err != nil {
		return err
	}
	c.metrics.corruptChecks.Inc()
	bad := c.mismatches(r, c.log.WithField("component", "corrupt-check"))
	if len(bad) == 0 {
		return nil
	}
	raise := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: bad[0], Alarm: pb.AlarmType_CORRUPT}
	if err := c.raise(ctx, raise); err != nil {
		return fmt.Errorf("raise CORRUPT for %s: %w", memberHex(bad[0]), err)
	}
	return fmt.Errorf("%w with %d member(s) at revision %d: CORRUPT raised for %s", errMismatch, len(bad), r.req.Rev, memberHex(bad[0]))
}

// initial is etcd's initial corruption check (the InitialCorruptCheck
// feature gate): before the instance serves, it compares its HashKV with
// every other instance's at its own revision; a mismatch at the same
// compacted revision fails the start, raising no alarm, as in etcd.
func (c *corruptChecker) initial(ctx context.Context) error {
	start := time.Now()
	r, err := c.askHashes(ctx)
	if err != nil {
		return fmt.Errorf("initial corruption check: %w", err)
	}
	lg := c.log.WithField("component", "corrupt-check")
	if bad := c.mismatches(r, lg); len(bad) > 0 {
		return fmt.Errorf("initial corruption check: %w: this instance's HashKV at revision %d differs from %d other instance(s)' (first %s)",
			errMismatch, r.req.Rev, len(bad), memberHex(bad[0]))
	}
	lg.WithFields(logrus.Fields{"revision": r.req.Rev, "members": len(r.answers), "took": time.Since(start).Round(time.Millisecond)}).
		Info("initial corruption check passed")
	return nil
}
