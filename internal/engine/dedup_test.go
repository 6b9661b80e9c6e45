package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
)

// forgetAnswers makes leader a forget the forwarded calls it answered, as
// it does 10 s after answering them.
func forgetAnswers(a *Engine) {
	a.fwd.mu.Lock()
	a.fwd.calls, a.fwd.done = nil, nil
	a.fwd.mu.Unlock()
}

// originEntries counts the entries holding tag's OpOrigin.
func originEntries(t *testing.T, st *memlog.Store, tag revision.WriterTag) int {
	t.Helper()
	n := 0
	for _, e := range logEntries(t, st) {
		for _, op := range e.Ops {
			if op.Kind == revision.OpOrigin && op.Origin == tag {
				n++
			}
		}
	}
	return n
}

// TestReSentForwardTheTagIndexNoLongerHoldsIsNotCommittedAgain: a put
// committed at the leader whose answer was lost, then other forwarded
// writes push its tag out of the leader's index (2 tags a generation
// here), and the leader forgets its answer: the re-send must not be
// evaluated again. It is answered etcd's "request timed out, possibly due
// to connection lost", and the put is in the log once. (Before the index
// knew what it no longer holds, the re-send was committed a second time.)
func TestReSentForwardTheTagIndexNoLongerHoldsIsNotCommittedAgain(t *testing.T) {
	st, fw, a, _, b, _ := forwardingPairWith(t, func(c *Config) { c.OriginGeneration = 2 })
	fw.loseAnswers = 1
	fw.afterLoss = func() {
		for _, k := range []string{"p1", "p2", "p3", "p4", "p5"} {
			put(t, b, k, "v")
		}
		forgetAnswers(a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := b.Put(ctx, &pb.PutRequest{Key: []byte("once"), Value: []byte("v")})
	if !errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost) {
		t.Fatalf("re-send of a tag the index dropped: %v, want %v", err, rpctypes.ErrGRPCTimeoutDueToConnectionLost)
	}
	if v := keyVersion(t, b, "once"); v != 1 {
		t.Fatalf("version %d after one put: committed twice", v)
	}
	first := fw.calls[0]
	if n := originEntries(t, st, first.Origin); n != 1 {
		t.Fatalf("%d entries hold the put's tag, want 1", n)
	}
	// A re-send the index can still tell about is resolved as before.
	fw.loseAnswers = 1
	fw.afterLoss = func() { forgetAnswers(a) }
	if _, err := b.Put(ctx, &pb.PutRequest{Key: []byte("recent"), Value: []byte("v")}); err != nil {
		t.Fatalf("re-send of a tag the index holds: %v", err)
	}
	if v := keyVersion(t, b, "recent"); v != 1 {
		t.Fatalf("version %d after one put: committed twice", v)
	}
}

// TestReSentForwardToALeaderRestartedFromABaseIsNotCommittedAgain: the
// leader commits a forwarded put, a physical compaction writes a base
// generation after it, and the leader restarts: its tag index starts at the
// base, so a re-send of the put (from an origin that had applied less than
// the base before sending it) is answered "request timed out", not
// committed again; a re-send from after the base is decided by the index.
func TestReSentForwardToALeaderRestartedFromABaseIsNotCommittedAgain(t *testing.T) {
	st := memlog.New(memlog.Options{})
	fw := &memForwarder{peers: map[string]*Engine{}}
	configure := func(c *Config) {
		c.ForwardWrites, c.Forwarder, c.InternalURL = true, fw, "mem://a"
		c.LogGenerationLimit = -1 // a base, though the log holds little but live keys
	}
	a, _ := engine(t, st, "a", configure)
	testutil.Eventually(t, 5*time.Second, "a leads", leads(a))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serve := func(b *Engine, seq uint64, key string, after int64) error {
		_, _, err := b.ServeForward(ctx, ForwardCall{Origin: revision.WriterTag{Nonce: 7, Seq: seq},
			Req: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}, After: after})
		return err
	}
	before := a.view.State().LSN
	if err := serve(a, 1, "once", 0); err != nil {
		t.Fatal(err)
	}
	put(t, a, "filler", "v")
	rev := a.view.State().Rev
	if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	a2, _ := engine(t, st, "a", configure)
	testutil.Eventually(t, 5*time.Second, "a leads again", leads(a2))
	err := serve(a2, 1, "once", before)
	var final *FinalError
	if !errors.As(err, &final) || !errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost) {
		t.Fatalf("re-send to a leader restarted from a base after it: %v, want a final %v", err, rpctypes.ErrGRPCTimeoutDueToConnectionLost)
	}
	if v := keyVersion(t, a2, "once"); v != 1 {
		t.Fatalf("version %d after one put: committed twice", v)
	}
	if n := originEntries(t, st, revision.WriterTag{Nonce: 7, Seq: 1}); n != 1 {
		t.Fatalf("%d entries hold the put's tag, want 1", n)
	}
	// A request first sent after the base: the index holds everything it
	// could be in, so a miss means it never landed.
	if err := serve(a2, 2, "later", a2.view.State().LSN); err != nil {
		t.Fatalf("re-send from after the base: %v", err)
	}
	if v := keyVersion(t, a2, "later"); v != 1 {
		t.Fatalf("version %d", v)
	}
}

// TestAuthChangedReSendKeepsTheTag: a forward answered "auth changed" is
// sent again under the same tag (an earlier send of it may still land),
// as a re-send, with the newer auth state's fingerprint. (It used to get a
// new tag: two tags for one request that may have landed.)
func TestAuthChangedReSendKeepsTheTag(t *testing.T) {
	_, fw, _, _, b, _ := forwardingPair(t)
	fw.authChanged = 1
	put(t, b, "k", "v")
	if len(fw.calls) != 2 {
		t.Fatalf("%d forwards, want 2", len(fw.calls))
	}
	first, again := fw.calls[0], fw.calls[1]
	if again.Origin != first.Origin || again.Fresh || again.After == 0 || !first.Fresh || first.After != 0 {
		t.Fatalf("first send %+v, after auth changed %+v: want the same tag, re-sent with its position", first, again)
	}
	if v := keyVersion(t, b, "k"); v != 1 {
		t.Fatalf("version %d", v)
	}
}

// TestForwardOfUnknownOutcomeStopsAtTheResendLimit: every answer is lost;
// a client without a deadline gets etcd's "request timed out, possibly due
// to connection lost" once the re-sends' limit passed, and the put is
// applied once.
func TestForwardOfUnknownOutcomeStopsAtTheResendLimit(t *testing.T) {
	const limit = 300 * time.Millisecond
	_, fw, _, _, b, _ := forwardingPairWith(t, func(c *Config) { c.ForwardResendLimit = limit })
	fw.loseAnswers = 1 << 20
	start := time.Now()
	_, err := b.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	took := time.Since(start)
	if !errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost) {
		t.Fatalf("put with every answer lost: %v, want %v", err, rpctypes.ErrGRPCTimeoutDueToConnectionLost)
	}
	if took < limit || took > limit+5*time.Second {
		t.Fatalf("answered after %v, want about %v", took, limit)
	}
	fw.loseAnswers = 0
	if v := keyVersion(t, b, "k"); v != 1 {
		t.Fatalf("version %d after one put re-sent %d times: committed more than once", v, fw.served)
	}
	if n := counterValue(t, b.fwd.metrics.requests.WithLabelValues("put", "timeout")); n != 1 {
		t.Errorf("zketcd_forward_requests_total{outcome=timeout} %v, want 1", n)
	}
}
