package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
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

// originEntries counts the entries holding the OpOrigin of req, sent
// under tag without a caller's credential (its bound tag).
func originEntries(t *testing.T, st *memlog.Store, tag revision.WriterTag, req proto.Message) int {
	t.Helper()
	k, ok := kindOf(req)
	if !ok {
		t.Fatalf("%T is not forwarded", req)
	}
	bound, err := boundTag(tag, k.rpc(), req, auth.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range logEntries(t, st) {
		for _, op := range e.Ops {
			if op.Kind == revision.OpOrigin && op.Origin == bound {
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
	if n := originEntries(t, st, first.Origin, &pb.PutRequest{Key: []byte("once"), Value: []byte("v")}); n != 1 {
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
	if n := originEntries(t, st, revision.WriterTag{Nonce: 7, Seq: 1}, &pb.PutRequest{Key: []byte("once"), Value: []byte("v")}); n != 1 {
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

// TestATagAnswersOnlyItsOwnRequestAndCaller: the leader serves, under one
// tag, the request its origin sends and forgeries of it (another kind,
// another request, another caller's credential): each is evaluated and
// committed as itself, with an answer of its own type; only the same
// request of the same caller, sent again, is answered as the one served.
func TestATagAnswersOnlyItsOwnRequestAndCaller(t *testing.T) {
	st, _, a, _, _, _ := forwardingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tag := revision.WriterTag{Nonce: 42, Seq: 7}
	root := auth.Caller{Token: "root's"}
	mine := &pb.PutRequest{Key: []byte("mine"), Value: []byte("v")}
	for _, forged := range []struct {
		name   string
		req    proto.Message
		caller auth.Caller
	}{
		{"an alarm", &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 9, Alarm: pb.AlarmType_NONE}, auth.Caller{}},
		{"another put", &pb.PutRequest{Key: []byte("theirs"), Value: []byte("v")}, root},
		{"the same put by another caller", mine, auth.Caller{Token: "alice's"}},
		{"the same put by another certificate", mine, auth.Caller{CertCN: "root"}},
	} {
		resp, reply, err := a.ServeForward(ctx, ForwardCall{Origin: tag, Caller: forged.caller, Req: forged.req})
		if err != nil || reply.Dup {
			t.Fatalf("%s under the tag: %v (duplicate %v), want it served as itself", forged.name, err, reply.Dup)
		}
		if k, _ := kindOf(forged.req); k.answered(resp) != nil {
			t.Fatalf("%s answered %T", forged.name, resp)
		}
	}
	resp, reply, err := a.ServeForward(ctx, ForwardCall{Origin: tag, Caller: root, Req: mine})
	if err != nil || reply.Dup {
		t.Fatalf("the origin's own put after the forgeries: %v (duplicate %v), want it committed", err, reply.Dup)
	}
	put, ok := resp.(*pb.PutResponse)
	if !ok || put.Header.GetRevision() != keyModRevision(t, a, "mine") {
		t.Fatalf("the origin's put answered %v, its key at revision %d", resp, keyModRevision(t, a, "mine"))
	}
	// Sent again: the answer given (in the last 10 s), then, forgotten,
	// the duplicate found in the log; never a second commit.
	if again, _, err := a.ServeForward(ctx, ForwardCall{Origin: tag, Caller: root, Req: mine}); err != nil || again != resp {
		t.Fatalf("the same put sent again: %v %v, want the answer given", again, err)
	}
	forgetAnswers(a)
	if _, reply, err := a.ServeForward(ctx, ForwardCall{Origin: tag, Caller: root, Req: mine}); err != nil || !reply.Dup {
		t.Fatalf("the same put sent again, its answer forgotten: %v (duplicate %v), want a duplicate", err, reply.Dup)
	}
	if v := keyVersion(t, a, "mine"); v != 3 {
		t.Fatalf("version %d of the key put once by the origin and twice by forgeries, want 3", v)
	}
	n := 0
	for _, e := range logEntries(t, st) {
		for _, op := range e.Ops {
			if op.Kind == revision.OpOrigin && op.Origin.Nonce == tag.Nonce {
				n++
				if op.Origin.Seq&boundSeq == 0 {
					t.Errorf("an unbound tag %v in the log", op.Origin)
				}
			}
		}
	}
	if n != 4 { // the alarm of NONE stages nothing
		t.Errorf("%d entries hold the nonce's tags, want 4 (3 forgeries that wrote, the origin's put)", n)
	}
	bound, _ := boundTag(tag, putKind.rpc(), mine, root)
	if _, _, v := a.origins.lookup(bound, tag, 0); v != tagFound {
		t.Fatalf("the origin's bound tag is not indexed")
	}
}

// keyModRevision is key's mod revision in b's view (0: absent).
func keyModRevision(t *testing.T, b *Engine, key string) int64 {
	t.Helper()
	var rev int64
	if err := b.view.Read(func(r revision.Reader) error {
		_ = r.Range([]byte(key), nil, 0, func(kv *revision.KeyValue) bool { rev = kv.ModRevision; return false })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestAnUnboundTagOfAnOlderLeaderStillFindsItsRequest: an entry an older
// leader wrote holds the tag as its origin sent it, unbound: a re-send of
// that request is found there (never committed twice across a rolling
// upgrade); bound tags are found only by their own request, and a sent tag
// that is itself bound is never looked up unbound.
func TestAnUnboundTagOfAnOlderLeaderStillFindsItsRequest(t *testing.T) {
	var o origins
	sent := revision.WriterTag{Nonce: 5, Seq: 3}
	o.record(&revision.Entry{LSN: 10, Ops: []revision.Op{{Kind: revision.OpOrigin, Origin: sent, Rev: 4}}})
	mine, _ := boundTag(sent, putKind.rpc(), &pb.PutRequest{Key: []byte("k")}, auth.Caller{})
	if lsn, rev, v := o.lookup(mine, sent, 0); v != tagFound || lsn != 10 || rev != 4 {
		t.Fatalf("the re-send of a request an older leader committed: %d %d %v, want found at 10", lsn, rev, v)
	}
	forged, _ := boundTag(sent, putKind.rpc(), &pb.PutRequest{Key: []byte("forged")}, auth.Caller{})
	o.record(&revision.Entry{LSN: 11, Ops: []revision.Op{{Kind: revision.OpOrigin, Origin: forged, Rev: 5}}})
	other := revision.WriterTag{Nonce: 5, Seq: 4}
	theirs, _ := boundTag(other, putKind.rpc(), &pb.PutRequest{Key: []byte("k")}, auth.Caller{})
	if _, _, v := o.lookup(theirs, other, 0); v != tagAbsent {
		t.Fatalf("a request whose tag holds only a forgery: %v, want absent", v)
	}
	if _, _, v := o.lookup(forged, forged, 0); v != tagFound {
		t.Fatalf("the forgery's own bound tag: %v", v)
	}
	if mine.Seq&boundSeq == 0 || mine.Nonce != sent.Nonce {
		t.Fatalf("bound tag %v of %v: want the nonce kept and the bound bit set", mine, sent)
	}
}

// TestAMalformedAnswerOfTheLeaderIsAnErrorNeverPassedOn: a leader's answer
// to a forwarded put that lacks its header (another request's answer
// decoded as a put's) reaches no client: the follower answers etcd's
// "request timed out, possibly due to connection lost".
func TestAMalformedAnswerOfTheLeaderIsAnErrorNeverPassedOn(t *testing.T) {
	_, fw, _, _, b, _ := forwardingPair(t)
	fw.mu.Lock()
	fw.emptyAnswers = 1
	fw.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if !errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost) {
		t.Fatalf("a put answered by the leader without a header: %v %v, want %v", resp, err, rpctypes.ErrGRPCTimeoutDueToConnectionLost)
	}
	if _, err := b.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("the next put: %v", err)
	}
}
