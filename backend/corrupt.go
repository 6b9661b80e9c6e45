package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/etcdformat"
	"github.com/zketcd/zketcd/zkstore"
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

// corruptCheck is this instance's published member record and the state of
// the check.
type corruptCheck struct {
	mu       sync.Mutex // serializes changes to self and their publication
	self     zkstore.Member
	answered uint64 // the request this instance answered last
	seq      uint64
}

// publishSelf changes this instance's member record with update and
// publishes it.
func (b *Backend) publishSelf(update func(m *zkstore.Member)) error {
	b.check.mu.Lock()
	defer b.check.mu.Unlock()
	update(&b.check.self)
	return b.store.RegisterMember(b.check.self)
}

// hashAt computes this instance's answer to req.
func (b *Backend) hashAt(req zkstore.HashRequest) zkstore.HashAnswer {
	ans := zkstore.HashAnswer{Check: req.Check, Rev: req.Rev}
	h, err := etcdformat.HashKV(b.view.Snapshot(), req.Rev)
	if err != nil {
		ans.Err = err.Error()
		return ans
	}
	ans.CompactRev, ans.Hash = h.CompactRevision, h.Hash
	if b.cfg.HashHook != nil {
		ans.Hash = b.cfg.HashHook(ans.Hash)
	}
	return ans
}

// answerHashChecks answers the leader's hash requests, on every instance.
func (b *Backend) answerHashChecks() {
	defer b.wg.Done()
	t := time.NewTicker(hashPoll)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		leader, _, leaderID := b.election.State()
		if leader || leaderID == 0 || b.servable() != nil {
			continue
		}
		if err := b.answerOnce(leaderID); err != nil && b.ctx.Err() == nil {
			b.log.WithError(err).Debug("answer the corruption check")
		}
	}
}

func (b *Backend) answerOnce(leaderID uint64) error {
	members, err := b.store.Members()
	if err != nil {
		return err
	}
	for _, m := range members {
		if m.ID != leaderID || m.HashRequest == nil {
			continue
		}
		req := *m.HashRequest
		b.check.mu.Lock()
		done := b.check.answered == req.Check
		b.check.mu.Unlock()
		if done || b.view.State().Rev < req.Rev {
			return nil // answered, or not there yet (the tailer catches up)
		}
		ans := b.hashAt(req)
		return b.publishSelf(func(self *zkstore.Member) {
			self.HashAnswer = &ans
			b.check.answered = req.Check
		})
	}
	return nil
}

// corruptCheckLoop runs the leader's check every CorruptCheckTime.
func (b *Backend) corruptCheckLoop() {
	defer b.wg.Done()
	lg := b.log.WithField("component", "corrupt-check")
	wait := min(firstCheckAfter, b.cfg.CorruptCheckTime)
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = b.cfg.CorruptCheckTime
		if leader, _, _ := b.election.State(); !leader || b.servable() != nil {
			continue
		}
		if err := b.CheckCorruption(b.ctx); err != nil && b.ctx.Err() == nil {
			lg.WithError(err).Warn("corruption check")
		}
	}
}

// errMismatch is wrapped by CheckCorruption's error when an instance's hash
// differed (its CORRUPT alarm has been raised).
var errMismatch = errors.New("hash mismatch")

// CheckCorruption runs one round of the corruption check as the leader
// instance: it publishes a request for the HashKV at the view's revision,
// waits for the other instances' answers (at most hashAnswerWait), and,
// as etcd, raises the CORRUPT alarm for one instance whose hash differs
// from its own at the same compacted revision (the lowest member ID; all
// are logged). Answers at another compacted
// revision (a compaction landed between the two computations) and
// instances that did not answer are skipped, as etcd skips them. Errors:
// the log's, errNotLeader, or one wrapping errMismatch after raising
// alarms.
func (b *Backend) CheckCorruption(ctx context.Context) error {
	leader, _, _ := b.election.State()
	if !leader {
		return errNotLeader
	}
	b.check.mu.Lock()
	b.check.seq++
	req := zkstore.HashRequest{Check: b.nonce ^ b.check.seq<<1 | 1, Rev: b.view.State().Rev}
	b.check.mu.Unlock()
	own := b.hashAt(req)
	if own.Err != "" {
		return fmt.Errorf("own hash at %d: %s", req.Rev, own.Err)
	}
	if err := b.publishSelf(func(self *zkstore.Member) { self.HashRequest, self.HashAnswer = &req, &own }); err != nil {
		return err
	}
	answers := map[uint64]zkstore.HashAnswer{}
	var pending []uint64
	deadline := time.Now().Add(hashAnswerWait)
	for {
		members, err := b.store.Members()
		if err != nil {
			return err
		}
		pending = pending[:0]
		for _, m := range members {
			if m.ID == b.memberID {
				continue
			}
			if m.HashAnswer != nil && m.HashAnswer.Check == req.Check {
				answers[m.ID] = *m.HashAnswer
			} else if _, ok := answers[m.ID]; !ok {
				pending = append(pending, m.ID)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(hashPoll / 4):
		}
	}
	lg := b.log.WithFields(logrus.Fields{"component": "corrupt-check", "revision": req.Rev, "compact_revision": own.CompactRev})
	for _, id := range pending {
		lg.WithField("member", memberHex(id)).Warn("corruption check: no answer from member; skipped")
	}
	b.metrics.corruptChecks.Inc()
	var bad []uint64
	for id, a := range answers {
		switch {
		case a.Err != "":
			lg.WithFields(logrus.Fields{"member": memberHex(id), "error": a.Err}).Info("corruption check: member could not hash; skipped")
		case a.CompactRev != own.CompactRev:
			lg.WithFields(logrus.Fields{"member": memberHex(id), "member_compact_revision": a.CompactRev}).Info("corruption check: compacted revisions differ; skipped")
		case a.Hash != own.Hash:
			lg.WithFields(logrus.Fields{"member": memberHex(id), "hash": own.Hash, "member_hash": a.Hash}).
				Error("corruption check: HashKV differs; raising the CORRUPT alarm for the member")
			bad = append(bad, id)
		}
	}
	b.metrics.corruptMismatches.Add(float64(len(bad)))
	if len(bad) > 0 {
		// As etcd, one alarm per round: for the first member found.
		slices.Sort(bad)
		raise := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: bad[0], Alarm: pb.AlarmType_CORRUPT}
		if _, err := b.Alarm(ctx, raise); err != nil {
			return fmt.Errorf("raise CORRUPT for %s: %w", memberHex(bad[0]), err)
		}
		return fmt.Errorf("%w with %d member(s) at revision %d", errMismatch, len(bad), req.Rev)
	}
	lg.WithField("members", len(answers)).Debug("corruption check: hashes agree")
	return nil
}
