// Package logtest is the contract of the engine's log (engine.Log) as
// tests: one suite of behaviour that every implementation must show, run
// against zkstore on a real ZooKeeper and against memlog, so the in-memory
// log the engine's unit tests run on cannot drift from ZooKeeper's: the
// commit's compare-and-swap on the position and its outcomes, a commit
// found in the log already resolved by its writer tag, guards and pipeline
// tokens, lease tokens created and deleted with their entries, the head and
// its barriers and watch, reading entries, members, the election's order
// and fencing, the read lease, base generations and truncation, and large
// entries.
//
// An implementation's test calls [Run] with an [Open] that returns a
// fresh, empty log per test: memlog's and zkstore's TestTheLogContract.
// What only one implementation can show (ZooKeeper's sessions expiring,
// connections dropping mid-commit, memlog's injected faults) is tested
// beside it, in each package.
package logtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// Open returns a new, empty log for one test — what a fresh root holds:
// the sentinel entry 1 at revision 1, no base generation, no members — and
// connect, which opens another client (a session of its own) on that log
// each time it is called. The clients are closed at the end of the test
// (t.Cleanup); a test may close one earlier.
type Open func(t *testing.T) (connect func() engine.Log)

// Run runs the whole contract as subtests of t.
func Run(t *testing.T, open Open) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, connect func() engine.Log)
	}{
		{"AFreshLogHoldsTheSentinelEntryAndNothingElse", freshLog},
		{"ACommitAppendsTheEntryAndMovesTheHead", commitAppends},
		{"CommitIsACompareAndSwapOnThePosition", commitCAS},
		{"ConcurrentCommitsAtOnePositionLandOnce", concurrentCAS},
		{"AnEntryFoundInTheLogIsResolvedByItsWriterTag", resolvedByWriterTag},
		{"ACommitAfterAMissingEntryIsBehindOrRefusedWhenPipelined", behind},
		{"ACommitMustFollowItsPredecessor", lsnFollowsPrev},
		{"PipelineMarkerChainsCommitsAndGoesWithTheSession", pipelineMarker},
		{"ACommitFoundAgainReportsTheMarkerVersionItLeftOrUnknown", markerFoundAgain},
		{"LeaseTokensAreCreatedAndDeletedWithTheirEntries", leaseTokens},
		{"TheReadLeaseHoldsEveryCommitWithoutTheFence", readLease},
		{"BarriersAndTheWatchSeeAnotherClientsCommit", barriersAndWatch},
		{"ReadEntriesReadsInOrderAndStopsAtAMissingEntry", readEntries},
		{"MembersAreListedByIDWhileTheirSessionLives", members},
		{"TheElectionLeadsInOrderAndItsFenceEndsWithTheCandidacy", election},
		{"ABaseGenerationIsPreparedPublishedUnderTheFenceAndLoaded", bases},
		{"EachAttemptAtABaseGenerationWritesAPathOfItsOwn", baseAttempts},
		{"TruncationAndCollectionFreeOnlyWhatTheBaseMadeObsolete", truncation},
		{"AnEntryAboveTheBudgetCommitsAndReadsBackWhole", largeEntries},
		{"AClosedClientFailsUnavailable", closedClient},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// wait bounds every wait of the suite for something another client or the
// log's own machinery does.
const wait = 20 * time.Second

var nonces atomic.Uint64

// writer commits entries with one writer tag nonce.
type writer struct {
	engine.Log
	nonce uint64
	seq   uint64
}

func newWriter(l engine.Log) *writer { return &writer{Log: l, nonce: 0x1000 + nonces.Add(1)} }

// entry returns the next entry of w at lsn holding ops.
func (w *writer) entry(lsn int64, ops ...revision.Op) *revision.Entry {
	w.seq++
	return &revision.Entry{LSN: lsn, Writer: revision.WriterTag{Nonce: w.nonce, Seq: w.seq}, Ops: ops}
}

// request is a commit of w's next entry after prev, at revision rev.
func (w *writer) request(prev, rev int64, ops ...revision.Op) zkstore.CommitRequest {
	return zkstore.CommitRequest{Prev: prev, Entry: w.entry(prev+1, ops...), Rev: rev}
}

func put(rev int64, key, value string) revision.Op {
	return revision.Op{Kind: revision.OpTxn, Rev: rev, Changes: []revision.Change{{Key: []byte(key), Value: []byte(value)}}}
}

func grant(id, ttl int64) revision.Op {
	return revision.Op{Kind: revision.OpLeaseGrant, Lease: id, TTL: ttl}
}
func revoke(id int64) revision.Op { return revision.Op{Kind: revision.OpLeaseRevoke, Lease: id} }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// commit sends req and fails the test on an error.
func commit(t *testing.T, l engine.Log, req zkstore.CommitRequest) zkstore.CommitResult {
	t.Helper()
	res, err := l.Commit(ctxT(t), req)
	if err != nil {
		t.Fatalf("commit of entry %d: %v", req.Entry.LSN, err)
	}
	return res
}

// expect commits req and fails the test unless the outcome is want.
func expect(t *testing.T, l engine.Log, req zkstore.CommitRequest, want zkstore.Outcome) zkstore.CommitResult {
	t.Helper()
	res := commit(t, l, req)
	if res.Outcome != want {
		t.Fatalf("commit of entry %d: %v, want %v", req.Entry.LSN, res.Outcome, want)
	}
	return res
}

// appendPuts commits one put per key after the head, each its own entry
// and revision, and returns the head after them.
func appendPuts(t *testing.T, w *writer, keys ...string) zkstore.Head {
	t.Helper()
	h := head(t, w)
	for _, k := range keys {
		expect(t, w, w.request(h.LSN, h.Rev+1, put(h.Rev+1, k, k)), zkstore.Committed)
		h.LSN, h.Rev = h.LSN+1, h.Rev+1
	}
	return head(t, w)
}

func head(t *testing.T, l engine.Log) zkstore.Head {
	t.Helper()
	h, err := l.SyncHead()
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	return h
}

// entries reads entries from..to.
func entries(t *testing.T, l engine.Log, from, to int64) []*revision.Entry {
	t.Helper()
	var out []*revision.Entry
	if err := l.ReadEntries(ctxT(t), from, to, 4, func(e *revision.Entry, _ int) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatalf("read entries %d..%d: %v", from, to, err)
	}
	return out
}

func sameEntry(a, b *revision.Entry) bool {
	return a.LSN == b.LSN && a.Writer == b.Writer && fmt.Sprint(a.Ops) == fmt.Sprint(b.Ops)
}

func freshLog(t *testing.T, connect func() engine.Log) {
	a, b := connect(), connect()
	h, err := a.Head()
	if err != nil {
		t.Fatal(err)
	}
	if h.LSN != 1 || h.Rev != 1 || h.Zxid == 0 {
		t.Fatalf("head of a fresh log %+v, want entry 1 at revision 1 with its zxid", h)
	}
	got := entries(t, a, 1, 1)
	if len(got) != 1 || got[0].LSN != 1 || len(got[0].Ops) != 0 {
		t.Fatalf("entry 1 of a fresh log: %+v, want the empty sentinel", got)
	}
	if base, err := a.ReadBase(); err != nil || base.Gen != 0 {
		t.Fatalf("base of a fresh log: %+v %v, want none", base, err)
	}
	if ms, err := a.Members(); err != nil || len(ms) != 0 {
		t.Fatalf("members of a fresh log: %v %v", ms, err)
	}
	if a.Meta().ClusterID == 0 || a.Meta() != b.Meta() {
		t.Fatalf("meta %+v and %+v: want one non-zero cluster ID", a.Meta(), b.Meta())
	}
	if a.Root() == "" || a.Root() != b.Root() || a.MaxEntryBytes() <= 0 {
		t.Fatalf("root %q and %q, entry budget %d", a.Root(), b.Root(), a.MaxEntryBytes())
	}
	sa, okA := a.Session()
	sb, okB := b.Session()
	if !okA || !okB || sa == 0 || sa == sb {
		t.Fatalf("sessions %x (%v) and %x (%v): want two live, distinct ones", sa, okA, sb, okB)
	}
	if g := a.Grant(); g.Session != sa || g.Timeout <= 0 || g.MinTimeout <= 0 || g.MinTimeout > g.Timeout || g.Since.IsZero() {
		t.Fatalf("grant %+v of session %x: want the session's, with its timeouts and since when", g, sa)
	}
}

func commitAppends(t *testing.T, connect func() engine.Log) {
	w := newWriter(connect())
	before := head(t, w)
	req := w.request(1, 2, put(2, "k", "v"))
	res := expect(t, w, req, zkstore.Committed)
	if res.Zxid <= before.Zxid || res.Size <= 0 {
		t.Fatalf("result %+v after a head at zxid %d: want a later zxid and the entry's size", res, before.Zxid)
	}
	if h := head(t, w); h.LSN != 2 || h.Rev != 2 || h.Zxid != res.Zxid {
		t.Fatalf("head %+v after the commit (zxid %d), want entry 2 at revision 2", h, res.Zxid)
	}
	got := entries(t, w, 2, 2)
	if len(got) != 1 || !sameEntry(got[0], req.Entry) || got[0].Zxid != res.Zxid {
		t.Fatalf("entry 2 read back %+v, committed %+v at zxid %d", got, req.Entry, res.Zxid)
	}
}

func commitCAS(t *testing.T, connect func() engine.Log) {
	a, b := newWriter(connect()), newWriter(connect())
	expect(t, a, a.request(1, 2, put(2, "a", "1")), zkstore.Committed)
	// b evaluated on the same head: the position is a's now.
	expect(t, b, b.request(1, 2, put(2, "b", "1")), zkstore.Conflict)
	if h := head(t, b); h.LSN != 2 || h.Rev != 2 {
		t.Fatalf("head %+v after a conflict, want a's entry 2", h)
	}
	// Caught up, it commits after a's entry.
	expect(t, b, b.request(2, 3, put(3, "b", "1")), zkstore.Committed)
	got := entries(t, a, 2, 3)
	if len(got) != 2 || got[0].Writer.Nonce != a.nonce || got[1].Writer.Nonce != b.nonce {
		t.Fatalf("entries 2..3: %+v, want a's then b's", got)
	}
}

func concurrentCAS(t *testing.T, connect func() engine.Log) {
	const n = 6
	ws := make([]*writer, n)
	for i := range ws {
		ws[i] = newWriter(connect())
	}
	outcomes := make([]zkstore.Outcome, n)
	var wg sync.WaitGroup
	for i, w := range ws {
		req := w.request(1, 2, put(2, fmt.Sprint("k", i), "v"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := w.Commit(context.Background(), req)
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
				return
			}
			outcomes[i] = res.Outcome
		}()
	}
	wg.Wait()
	won := -1
	for i, o := range outcomes {
		switch o {
		case zkstore.Committed:
			if won >= 0 {
				t.Fatalf("writers %d and %d both committed entry 2", won, i)
			}
			won = i
		case zkstore.Conflict:
		default:
			t.Fatalf("writer %d: %v, want committed or conflict", i, o)
		}
	}
	if won < 0 {
		t.Fatal("no writer committed entry 2")
	}
	if got := entries(t, ws[0], 2, 2); got[0].Writer.Nonce != ws[won].nonce {
		t.Fatalf("entry 2 written by nonce %x, the winner was %x", got[0].Writer.Nonce, ws[won].nonce)
	}
}

func resolvedByWriterTag(t *testing.T, connect func() engine.Log) {
	a, b := newWriter(connect()), newWriter(connect())
	req := a.request(1, 2, put(2, "k", "v"))
	first := expect(t, a, req, zkstore.Committed)
	// The same commit again (its answer lost, say): it is found, not
	// written twice — also once the log moved on, and from another client
	// of the same writer.
	if again := expect(t, a, req, zkstore.Committed); again.Zxid != first.Zxid {
		t.Fatalf("the commit found again at zxid %d, it landed at %d", again.Zxid, first.Zxid)
	}
	expect(t, b, b.request(2, 3, put(3, "x", "y")), zkstore.Committed)
	other := &writer{Log: b, nonce: a.nonce}
	if again := expect(t, other, req, zkstore.Committed); again.Zxid != first.Zxid {
		t.Fatalf("the commit found by another client at zxid %d, it landed at %d", again.Zxid, first.Zxid)
	}
	if h := head(t, a); h.LSN != 3 {
		t.Fatalf("head %+v: a commit found again moved it", h)
	}
	// Another writer's entry at the position is a conflict, whatever it holds.
	clone := *req.Entry
	clone.Writer.Seq++
	expect(t, a, zkstore.CommitRequest{Prev: 1, Entry: &clone, Rev: 2}, zkstore.Conflict)
}

func behind(t *testing.T, connect func() engine.Log) {
	w := newWriter(connect())
	expect(t, w, w.request(5, 6, put(6, "k", "v")), zkstore.Behind)
	req := w.request(5, 6, put(6, "k", "v"))
	req.Pipelined = true
	expect(t, w, req, zkstore.Refused)
	if h := head(t, w); h.LSN != 1 {
		t.Fatalf("head %+v after commits that could not land", h)
	}
}

func lsnFollowsPrev(t *testing.T, connect func() engine.Log) {
	w := newWriter(connect())
	req := zkstore.CommitRequest{Prev: 1, Entry: w.entry(3, put(2, "k", "v")), Rev: 2}
	if _, err := w.Commit(ctxT(t), req); err == nil {
		t.Fatal("a commit of entry 3 after entry 1 was accepted")
	}
}

func pipelineMarker(t *testing.T, connect func() engine.Log) {
	a, b := newWriter(connect()), newWriter(connect())
	name := fmt.Sprintf("%016x-m", a.nonce)
	// The first commit creates the marker at version 0; the next, chained
	// on it, requires version 0 and leaves 1.
	r := a.request(1, 2, put(2, "k", "1"))
	r.Marker = &zkstore.Marker{Name: name, Create: true}
	if res := expect(t, a, r, zkstore.Committed); res.MarkerVersion != 0 {
		t.Fatalf("created marker at version %d, want 0", res.MarkerVersion)
	}
	// A marker that exists cannot be created again.
	r = a.request(2, 3, put(3, "k", "2"))
	r.Marker = &zkstore.Marker{Name: name, Create: true}
	if res := expect(t, a, r, zkstore.Refused); !res.MarkerMissed {
		t.Fatal("a commit creating an existing marker does not say it missed the marker")
	}
	// Two commits chained on 0 -> 1 -> 2, the second sent first: it is
	// refused (its predecessor had not landed), then lands as it is.
	first, second := a.request(2, 3, put(3, "k", "2")), a.request(3, 4, put(4, "k", "3"))
	first.Marker = &zkstore.Marker{Name: name, Version: 0}
	second.Marker, second.Pipelined = &zkstore.Marker{Name: name, Version: 1}, true
	if res := expect(t, a, second, zkstore.Refused); !res.PrevMissing || res.MarkerMissed || res.MarkerGone {
		t.Fatalf("a pipelined commit whose predecessor entry is missing: %+v, want refused for the missing entry", res)
	}
	if res := expect(t, a, first, zkstore.Committed); res.MarkerVersion != 1 {
		t.Fatalf("marker at version %d, want 1", res.MarkerVersion)
	}
	if res := expect(t, a, second, zkstore.Committed); res.MarkerVersion != 2 {
		t.Fatalf("marker at version %d, want 2", res.MarkerVersion)
	}
	// The chain holds whoever else writes: b takes position 5 while a's
	// commit chained on a lost one (marker 2 -> 3, never sent) would
	// follow it; a's commit at 6 requiring version 3 is refused, and says
	// it missed the marker.
	appendPuts(t, b, "other")
	r = a.request(5, 6, put(6, "k", "4"))
	r.Marker = &zkstore.Marker{Name: name, Version: 3}
	if res := expect(t, a, r, zkstore.Refused); !res.MarkerMissed {
		t.Fatalf("a commit chained on one that never landed: %+v, want refused on the marker", res)
	}
	// Any version: the commit reports the version it left.
	r.Marker = &zkstore.Marker{Name: name, Version: zkstore.AnyVersion}
	if res := expect(t, a, r, zkstore.Committed); res.MarkerVersion != 3 {
		t.Fatalf("marker at version %d, want 3", res.MarkerVersion)
	}
	// The marker is ephemeral: it goes with a's session.
	a.Close()
	r = b.request(6, 7, put(7, "k", "5"))
	r.Marker = &zkstore.Marker{Name: name, Version: zkstore.AnyVersion}
	testutil.Eventually(t, wait, "a's marker gone with its session", func() bool {
		res := commit(t, b, r)
		return res.Outcome == zkstore.Refused && res.MarkerGone
	})
	if h := head(t, b); h.LSN != 6 {
		t.Fatalf("head %+v: a refused commit wrote", h)
	}
}

// markerFoundAgain: a commit sent again after its answer was lost is
// found in the log by its writer tag; what it reports of the pipeline
// marker is the version that commit left — never a guess a writer would
// chain its next commit on — or that the version is unknown.
func markerFoundAgain(t *testing.T, connect func() engine.Log) {
	a := newWriter(connect())
	name := fmt.Sprintf("%016x-m", a.nonce)
	// left checks what a commit found again says of the marker: want, or
	// unknown if unknownOK.
	left := func(what string, res zkstore.CommitResult, want int32, unknownOK bool) {
		t.Helper()
		switch {
		case res.MarkerUnknown && !unknownOK:
			t.Fatalf("%s found again: marker version unknown, want %d", what, want)
		case !res.MarkerUnknown && res.MarkerVersion != want:
			t.Fatalf("%s found again: marker at version %d, it left %d (or unknown)", what, res.MarkerVersion, want)
		}
	}
	create := a.request(1, 2, put(2, "k", "1"))
	create.Marker = &zkstore.Marker{Name: name, Create: true}
	expect(t, a, create, zkstore.Committed)
	left("the commit creating the marker", expect(t, a, create, zkstore.Committed), 0, true)

	// 0 -> 1, then chained 1 -> 2: each found again says what it left,
	// not the marker's version now, and not 0.
	first, second := a.request(2, 3, put(3, "k", "2")), a.request(3, 4, put(4, "k", "3"))
	first.Marker = &zkstore.Marker{Name: name, Version: 0}
	second.Marker, second.Pipelined = &zkstore.Marker{Name: name, Version: 1}, true
	if res := expect(t, a, first, zkstore.Committed); res.MarkerVersion != 1 || res.MarkerUnknown {
		t.Fatalf("marker at version %d (unknown %v), want 1", res.MarkerVersion, res.MarkerUnknown)
	}
	left("a commit setting the marker 0 -> 1", expect(t, a, first, zkstore.Committed), 1, true)
	expect(t, a, second, zkstore.Committed)
	left("a commit setting the marker 1 -> 2", expect(t, a, second, zkstore.Committed), 2, true)
	left("an older commit setting the marker 0 -> 1, after the next", expect(t, a, first, zkstore.Committed), 1, true)

	// Any version: it left 3, which its answer said; found again, the
	// version is 3 or unknown.
	anyv := a.request(4, 5, put(5, "k", "4"))
	anyv.Marker = &zkstore.Marker{Name: name, Version: zkstore.AnyVersion}
	if res := expect(t, a, anyv, zkstore.Committed); res.MarkerVersion != 3 || res.MarkerUnknown {
		t.Fatalf("marker at version %d (unknown %v), want 3", res.MarkerVersion, res.MarkerUnknown)
	}
	left("a commit setting the marker at any version", expect(t, a, anyv, zkstore.Committed), 3, true)

	// The chain still holds at the marker's real version: 3 -> 4 lands.
	next := a.request(5, 6, put(6, "k", "5"))
	next.Marker = &zkstore.Marker{Name: name, Version: 3}
	if res := expect(t, a, next, zkstore.Committed); res.MarkerVersion != 4 {
		t.Fatalf("marker at version %d, want 4", res.MarkerVersion)
	}
}

func leaseTokens(t *testing.T, connect func() engine.Log) {
	w := newWriter(connect())
	const id = 0x10
	tokenOf := func() (zkstore.LeaseToken, bool) {
		t.Helper()
		tok, ok, err := w.ReadLeaseToken(id)
		if err != nil {
			t.Fatal(err)
		}
		return tok, ok
	}
	if _, ok := tokenOf(); ok {
		t.Fatal("a token before the grant")
	}
	// A guard on a lease that has no token fails.
	r := w.request(1, 2, put(2, "k", "v"))
	r.Guards = []zkstore.Guard{w.LeaseGuard(id, 0)}
	expect(t, w, r, zkstore.Refused)

	h := head(t, w)
	expect(t, w, w.request(h.LSN, h.Rev, grant(id, 60)), zkstore.Committed)
	tok, ok := tokenOf()
	if !ok || tok.Version != 0 || tok.Renewed.IsZero() {
		t.Fatalf("token after the grant: %+v %v, want version 0 with its time", tok, ok)
	}
	// Its time is the log's wall clock in milliseconds, with no monotonic
	// reading: an estimate for users, never compared on the monotonic clock.
	if r := tok.Renewed; strings.Contains(r.String(), "m=") || r.UnixNano()%int64(time.Millisecond) != 0 {
		t.Fatalf("token time %v: want a wall-clock reading in milliseconds", r)
	}
	renewed, err := w.RenewLeases([]int64{id, 0x11})
	if err != nil || !renewed[id] || renewed[0x11] || len(renewed) != 1 {
		t.Fatalf("renew %x and a lease without a token: %v %v", id, renewed, err)
	}
	if tok, _ := tokenOf(); tok.Version != 1 {
		t.Fatalf("token version %d after a renewal, want 1", tok.Version)
	}
	// The guard holds only at the token's version.
	h = head(t, w)
	r = w.request(h.LSN, h.Rev+1, put(h.Rev+1, "k", "v"))
	r.Guards = []zkstore.Guard{w.LeaseGuard(id, 0)}
	expect(t, w, r, zkstore.Refused)
	r.Guards = []zkstore.Guard{w.LeaseGuard(id, 1)}
	expect(t, w, r, zkstore.Committed)
	// A lease granted twice, or revoked without a token, is refused.
	h = head(t, w)
	expect(t, w, w.request(h.LSN, h.Rev, grant(id, 60)), zkstore.Refused)
	expect(t, w, w.request(h.LSN, h.Rev, revoke(0x11)), zkstore.Refused)
	expect(t, w, w.request(h.LSN, h.Rev, revoke(id)), zkstore.Committed)
	if _, ok := tokenOf(); ok {
		t.Fatal("the token outlived the revocation")
	}
	// Granted and revoked in one entry: no token left.
	h = head(t, w)
	expect(t, w, w.request(h.LSN, h.Rev, grant(0x12, 60), revoke(0x12)), zkstore.Committed)
	if _, ok, _ := w.ReadLeaseToken(0x12); ok {
		t.Fatal("a token left by a grant revoked in the same entry")
	}
	if renewed, err := w.RenewLeases(nil); err != nil || len(renewed) != 0 {
		t.Fatalf("renew nothing: %v %v", renewed, err)
	}
}

func readLease(t *testing.T, connect func() engine.Log) {
	a, b := newWriter(connect()), newWriter(connect())
	sid, _ := a.Session()
	if got, err := a.TakeReadLease(1); err != nil || got != sid {
		t.Fatalf("take the read lease: session %x %v, want %x", got, err, sid)
	}
	if got, err := a.TakeReadLease(1); err != nil || got != sid {
		t.Fatalf("take the read lease again: %x %v", got, err)
	}
	if _, err := b.TakeReadLease(2); !errors.Is(err, zkstore.ErrLeaseHeld) {
		t.Fatalf("take a held read lease: %v, want %v", err, zkstore.ErrLeaseHeld)
	}
	guarded := func(w *writer) zkstore.CommitRequest {
		h := head(t, w)
		r := w.request(h.LSN, h.Rev+1, put(h.Rev+1, "k", "v"))
		r.Guards = []zkstore.Guard{w.ReadLeaseAbsent()}
		return r
	}
	expect(t, b, guarded(b), zkstore.Held)
	expect(t, a, guarded(a), zkstore.Held) // the holder's own, too
	// Only the holder's release counts.
	if err := b.ReleaseReadLease(); err != nil {
		t.Fatal(err)
	}
	expect(t, b, guarded(b), zkstore.Held)
	if err := a.ReleaseReadLease(); err != nil {
		t.Fatal(err)
	}
	expect(t, b, guarded(b), zkstore.Committed)
	// It goes with the holder's session.
	if _, err := a.TakeReadLease(1); err != nil {
		t.Fatal(err)
	}
	a.Close()
	testutil.Eventually(t, wait, "the read lease gone with its holder's session", func() error {
		_, err := b.TakeReadLease(2)
		return err
	})
	expect(t, b, guarded(b), zkstore.Held) // b holds it now
}

func barriersAndWatch(t *testing.T, connect func() engine.Log) {
	a, b := newWriter(connect()), newWriter(connect())
	h, fired, err := b.WatchHead()
	if err != nil || h.LSN != 1 {
		t.Fatalf("watch head: %+v %v", h, err)
	}
	res := expect(t, a, a.request(1, 2, put(2, "k", "v")), zkstore.Committed)
	select {
	case <-fired:
	case <-time.After(wait):
		t.Fatal("the head watch did not fire at another client's commit")
	}
	for name, read := range map[string]func() (zkstore.Head, error){"sync": b.SyncHead, "quorum": b.QuorumHead} {
		if h, err := read(); err != nil || h.LSN != 2 || h.Zxid != res.Zxid {
			t.Fatalf("%s head after an acknowledged commit: %+v %v, want entry 2 at zxid %d", name, h, err, res.Zxid)
		}
	}
	testutil.Eventually(t, wait, "the plain head read catches up", func() bool {
		h, err := b.Head()
		return err == nil && h.LSN == 2
	})
}

func readEntries(t *testing.T, connect func() engine.Log) {
	w := newWriter(connect())
	h := appendPuts(t, w, "a", "b", "c", "d", "e")
	for _, window := range []int{1, 3, 16} {
		var lsns []int64
		var sizes []int
		err := w.ReadEntries(ctxT(t), 2, h.LSN, window, func(e *revision.Entry, size int) error {
			lsns = append(lsns, e.LSN)
			sizes = append(sizes, size)
			if e.Zxid == 0 {
				return fmt.Errorf("entry %d without its zxid", e.LSN)
			}
			return nil
		})
		if err != nil || fmt.Sprint(lsns) != "[2 3 4 5 6]" {
			t.Fatalf("window %d: entries %v, %v", window, lsns, err)
		}
		for i, n := range sizes {
			if n <= 0 {
				t.Fatalf("window %d: entry %d of size %d", window, lsns[i], n)
			}
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := w.ReadEntries(ctxT(t), 2, h.LSN, 4, func(*revision.Entry, int) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("a callback's error: %v after %d calls, want it after 1", err, calls)
	}
	if err := w.ReadEntries(ctxT(t), h.LSN+1, h.LSN, 4, func(*revision.Entry, int) error { return stop }); err != nil {
		t.Fatalf("an empty range: %v", err)
	}
	if err := w.ReadEntries(ctxT(t), h.LSN, h.LSN+1, 2, func(*revision.Entry, int) error { return nil }); !errors.Is(err, zkstore.ErrEntryMissing) {
		t.Fatalf("past the head: %v, want %v", err, zkstore.ErrEntryMissing)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.ReadEntries(ctx, 2, h.LSN, 2, func(*revision.Entry, int) error { return nil }); err == nil {
		t.Fatal("a read with its context ended succeeded")
	}
}

func members(t *testing.T, connect func() engine.Log) {
	a, b := connect(), connect()
	list := func(l engine.Log) string {
		t.Helper()
		ms, err := l.Members()
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, m := range ms {
			out += fmt.Sprintf("%d:%s ", m.ID, m.Name)
		}
		return out
	}
	if err := b.RegisterMember(zkstore.Member{ID: 9, Name: "b", ClientURLs: []string{"http://b"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterMember(zkstore.Member{ID: 3, Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := list(b); got != "3:a 9:b " {
		t.Fatalf("members %q, want a and b by ID", got)
	}
	if err := a.RegisterMember(zkstore.Member{ID: 3, Name: "a2"}); err != nil {
		t.Fatal(err)
	}
	if got := list(b); got != "3:a2 9:b " {
		t.Fatalf("members %q after a published again", got)
	}
	ms, _ := a.Members()
	if len(ms) != 2 || len(ms[1].ClientURLs) != 1 || ms[1].ClientURLs[0] != "http://b" {
		t.Fatalf("members %+v: b's URLs lost", ms)
	}
	a.Close()
	testutil.Eventually(t, wait, "a's member gone with its session", func() bool { return list(b) == "9:b " })
}

func election(t *testing.T, connect func() engine.Log) {
	a, b, c := newWriter(connect()), newWriter(connect()), newWriter(connect())
	state := func(e zkstore.Leadership) string {
		l, f, id := e.State()
		return fmt.Sprintf("leader=%v fence=%v leaderID=%d", l, f.Valid(), id)
	}
	ea := a.Campaign(1)
	testutil.Eventually(t, wait, "the first candidate leads", func() bool { return state(ea) == "leader=true fence=true leaderID=1" })
	changed := ea.Changed()
	// A candidate joins once its campaign has looked at the election (a
	// log may join asynchronously): b's before c's.
	eb := b.Campaign(2)
	testutil.Eventually(t, wait, "the second candidate follows the first", func() bool { return state(eb) == "leader=false fence=true leaderID=1" })
	ec := c.Campaign(3)
	testutil.Eventually(t, wait, "the third candidate follows the first", func() bool { return state(ec) == "leader=false fence=true leaderID=1" })
	_, fa, _ := ea.State()
	fenced := func(w *writer, f zkstore.Fence) zkstore.CommitRequest {
		h := head(t, w)
		r := w.request(h.LSN, h.Rev+1, put(h.Rev+1, "k", "v"))
		r.Guards = []zkstore.Guard{f.Guard()}
		return r
	}
	expect(t, a, fenced(a, fa), zkstore.Committed)
	// The leader withdraws: the next in order leads, and the old fence no
	// longer holds, for anyone.
	ea.Close()
	select {
	case <-changed:
	case <-time.After(wait):
		t.Fatal("the leader's withdrawal did not change its state")
	}
	if l, _, _ := ea.State(); l {
		t.Fatal("a withdrawn candidate still leads")
	}
	testutil.Eventually(t, wait, "the second candidate leads", func() bool { return state(eb) == "leader=true fence=true leaderID=2" })
	testutil.Eventually(t, wait, "the third follows the second", func() bool { return state(ec) == "leader=false fence=true leaderID=2" })
	expect(t, a, fenced(a, fa), zkstore.Refused)
	expect(t, c, fenced(c, fa), zkstore.Refused)
	_, fb, _ := eb.State()
	expect(t, c, fenced(c, fb), zkstore.Committed)
	// The leader's session ends: its candidacy goes with it.
	b.Close()
	testutil.Eventually(t, wait, "the third candidate leads once the second's session ended", func() bool { return state(ec) == "leader=true fence=true leaderID=3" })
	expect(t, c, fenced(c, fb), zkstore.Refused)
	ec.Close()
}

// view replays the log of l up to its head into a view.
func view(t *testing.T, l engine.Log) *revision.View {
	t.Helper()
	v := revision.NewView(1, 1)
	h := head(t, l)
	for _, e := range entries(t, l, 2, h.LSN) {
		if _, err := v.Apply(e); err != nil {
			t.Fatalf("apply entry %d: %v", e.LSN, err)
		}
	}
	return v
}

// keysOf lists a snapshot's key versions.
func keysOf(s *revision.Snapshot) string {
	out := ""
	s.Each(func(k revision.KeyHistory) bool {
		for _, kv := range k.Versions {
			out += fmt.Sprintf("%s=%s@%d/%d v%d; ", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
		}
		return true
	})
	return out
}

// leader campaigns on l and returns its fence once it leads.
func leader(t *testing.T, l engine.Log) (zkstore.Leadership, zkstore.Fence) {
	t.Helper()
	e := l.Campaign(1)
	t.Cleanup(e.Close)
	testutil.Eventually(t, wait, "the only candidate leads", func() bool { ok, _, _ := e.State(); return ok })
	_, f, _ := e.State()
	return e, f
}

func bases(t *testing.T, connect func() engine.Log) {
	w, other := newWriter(connect()), newWriter(connect())
	e, fence := leader(t, w)
	ctx := ctxT(t)
	appendPuts(t, w, "a", "b", "c")
	snap := view(t, w).Snapshot()
	cur, err := w.ReadBase()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.LoadBase(ctx, cur); err == nil || errors.Is(err, zkstore.ErrBaseChanged) {
		t.Fatalf("load without a generation: %v, want an error other than %v", err, zkstore.ErrBaseChanged)
	}
	nb, err := w.PrepareBase(ctx, snap, cur, 1)
	if err != nil {
		t.Fatal(err)
	}
	if nb.Gen != snap.State.LSN || nb.Rev != snap.State.Rev || nb.Path == "" || nb.PrevGen != 0 {
		t.Fatalf("prepared %+v for a snapshot at %+v", nb, snap.State)
	}
	if got, _ := other.ReadBase(); got.Gen != 0 {
		t.Fatalf("a prepared generation is current before it is published: %+v", got)
	}
	// Published only under the leader's fence.
	if _, err := other.PublishBase(zkstore.NewFence(""), nb); err == nil {
		t.Fatal("published without a fence")
	}
	pub, err := w.PublishBase(fence, nb)
	if err != nil {
		t.Fatal(err)
	}
	got, err := other.ReadBase()
	if err != nil || got.Gen != nb.Gen || got.Path != nb.Path || got.Rev != nb.Rev {
		t.Fatalf("base after publishing %+v: %+v %v", nb, got, err)
	}
	loaded, err := other.LoadBase(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.State != snap.State || keysOf(loaded) != keysOf(snap) {
		t.Fatalf("loaded %+v, prepared %+v", loaded.State, snap.State)
	}
	// A generation prepared after a description no longer current is not
	// published: the one prepared after the empty one, now.
	late, err := w.PrepareBase(ctx, snap, cur, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.PublishBase(fence, late); err == nil {
		t.Fatal("published a generation prepared after a description since replaced")
	}
	// Nor one prepared after a description that was rewritten since, even
	// at the same generation (FreeCompacted rewrites it).
	appendPuts(t, w, "d")
	snap2 := view(t, w).Snapshot()
	stale, err := w.PrepareBase(ctx, snap2, pub, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.FreeCompacted(ctx, pub); err != nil {
		t.Fatal(err)
	}
	if _, err := w.PublishBase(fence, stale); err == nil {
		t.Fatal("published a generation prepared after a description since rewritten")
	}
	// The fence lost: nothing is published.
	cur, _ = w.ReadBase()
	next, err := w.PrepareBase(ctx, snap2, cur, 4)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := w.PublishBase(fence, next); err == nil {
		t.Fatal("published under a lost fence")
	}
	if got, _ := other.ReadBase(); got.Gen != nb.Gen {
		t.Fatalf("base %+v after refused publications, want generation %d", got, nb.Gen)
	}
}

// baseAttempts: a generation prepared again at the same log position by
// the same writer (an attempt that failed before publishing, retried) is
// written to a path of its own, so what recovery loads is never a mixture
// of two attempts' chunks.
func baseAttempts(t *testing.T, connect func() engine.Log) {
	w := newWriter(connect())
	_, fence := leader(t, w)
	ctx := ctxT(t)
	appendPuts(t, w, "a", "b", "c")
	snap := view(t, w).Snapshot()
	cur, err := w.ReadBase()
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.PrepareBase(ctx, snap, cur, 7)
	if err != nil {
		t.Fatal(err)
	}
	again, err := w.PrepareBase(ctx, snap, cur, 7)
	if err != nil {
		t.Fatal(err)
	}
	if first.Path == again.Path {
		t.Fatalf("two attempts at generation %d by one writer share the path %s", again.Gen, again.Path)
	}
	pub, err := w.PublishBase(fence, again)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := w.LoadBase(ctx, pub)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.State != snap.State || keysOf(loaded) != keysOf(snap) {
		t.Fatalf("loaded %+v %s, prepared %+v %s", loaded.State, keysOf(loaded), snap.State, keysOf(snap))
	}
}

func truncation(t *testing.T, connect func() engine.Log) {
	w, other := newWriter(connect()), newWriter(connect())
	e, fence := leader(t, w)
	ctx := ctxT(t)
	// Two generations: at entry 4, then at entry 7.
	appendPuts(t, w, "a", "b", "c")
	cur, _ := w.ReadBase()
	g1, err := w.PrepareBase(ctx, view(t, w).Snapshot(), cur, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g1, err = w.PublishBase(fence, g1); err != nil {
		t.Fatal(err)
	}
	appendPuts(t, w, "d", "e", "f")
	g2, err := w.PrepareBase(ctx, view(t, w).Snapshot(), g1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if g2, err = w.PublishBase(fence, g2); err != nil {
		t.Fatal(err)
	}
	if g2.PrevGen != g1.Gen || g2.PrevPath != g1.Path {
		t.Fatalf("generation %+v does not follow %+v", g2, g1)
	}
	// An abandoned generation (prepared, never published) is collected;
	// the current one and the one before it are kept.
	abandoned, err := w.PrepareBase(ctx, view(t, w).Snapshot(), g2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.CollectBases(ctx, fence, g2); err != nil || n != 1 {
		t.Fatalf("collect bases: %d %v, want the abandoned one", n, err)
	}
	if _, err := w.LoadBase(ctx, abandoned); !errors.Is(err, zkstore.ErrBaseChanged) {
		t.Fatalf("load a collected generation: %v, want %v", err, zkstore.ErrBaseChanged)
	}
	for _, g := range []zkstore.Base{g1, g2} {
		if _, err := other.LoadBase(ctx, g); err != nil {
			t.Fatalf("load kept generation %d: %v", g.Gen, err)
		}
	}
	// The log below the previous generation goes, under the fence.
	if _, err := other.TruncateLog(ctx, zkstore.NewFence(""), g1.Gen); err == nil {
		t.Fatal("truncated without a fence")
	}
	if n, err := w.TruncateLog(ctx, fence, g1.Gen); err != nil || n != int(g1.Gen-1) {
		t.Fatalf("truncate below %d: %d %v, want %d entries", g1.Gen, n, err, g1.Gen-1)
	}
	if err := other.ReadEntries(ctx, 1, 1, 1, func(*revision.Entry, int) error { return nil }); !errors.Is(err, zkstore.ErrEntryMissing) {
		t.Fatalf("read a truncated entry: %v, want %v", err, zkstore.ErrEntryMissing)
	}
	h := head(t, other)
	if got := entries(t, other, g1.Gen, h.LSN); len(got) != int(h.LSN-g1.Gen+1) {
		t.Fatalf("%d entries from %d to the head %d after the truncation", len(got), g1.Gen, h.LSN)
	}
	// Commits go on after a truncation.
	h = appendPuts(t, w, "g")
	// FreeCompacted (any instance) frees the log below the current
	// generation and the one before it, and records that.
	freed, n, err := other.FreeCompacted(ctx, g2)
	if err != nil || n != int(g2.Gen-g1.Gen) {
		t.Fatalf("free compacted: %d entries, %v; want %d", n, err, g2.Gen-g1.Gen)
	}
	if freed.Gen != g2.Gen || freed.PrevGen != g2.Gen || freed.PrevPath != "" {
		t.Fatalf("description after freeing: %+v", freed)
	}
	if got, _ := w.ReadBase(); got.Gen != g2.Gen || got.PrevGen != g2.Gen || got.PrevPath != "" {
		t.Fatalf("base read after freeing: %+v", got)
	}
	if _, err := w.LoadBase(ctx, g1); !errors.Is(err, zkstore.ErrBaseChanged) {
		t.Fatalf("load the freed previous generation: %v, want %v", err, zkstore.ErrBaseChanged)
	}
	if got := entries(t, w, g2.Gen, h.LSN); len(got) != int(h.LSN-g2.Gen+1) {
		t.Fatalf("%d entries from the generation %d to the head %d", len(got), g2.Gen, h.LSN)
	}
	// A description no longer current is not rewritten.
	if _, _, err := other.FreeCompacted(ctx, g2); !errors.Is(err, zkstore.ErrBaseChanged) {
		t.Fatalf("free with a stale description: %v, want %v", err, zkstore.ErrBaseChanged)
	}
	if got, n, err := other.FreeCompacted(ctx, zkstore.Base{}); err != nil || n != 0 || got.Gen != 0 {
		t.Fatalf("free without a generation: %+v %d %v", got, n, err)
	}
	// A lost fence truncates nothing.
	e.Close()
	if _, err := w.TruncateLog(ctx, fence, h.LSN); err == nil {
		t.Fatal("truncated under a lost fence")
	}
	if got := entries(t, w, g2.Gen, h.LSN); len(got) != int(h.LSN-g2.Gen+1) {
		t.Fatal("a refused truncation deleted entries")
	}
}

func largeEntries(t *testing.T, connect func() engine.Log) {
	w, other := newWriter(connect()), newWriter(connect())
	_, fence := leader(t, w)
	// Incompressible (a log may compress entries), and the same every run.
	value := make([]byte, w.MaxEntryBytes()+w.MaxEntryBytes()/2)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range value {
		value[i] = byte(rnd.Uint32())
	}
	big := func(rev int64) revision.Op {
		return revision.Op{Kind: revision.OpTxn, Rev: rev, Changes: []revision.Change{{Key: []byte("big"), Value: value}}}
	}
	// One that loses its position, then one that lands.
	expect(t, other, other.request(1, 2, put(2, "small", "v")), zkstore.Committed)
	expect(t, w, w.request(1, 2, big(2)), zkstore.Conflict)
	req := w.request(2, 3, big(3))
	res := expect(t, w, req, zkstore.Committed)
	if res.Size <= w.MaxEntryBytes() {
		t.Fatalf("a %d-byte value committed as %d bytes", len(value), res.Size)
	}
	check := func(what string) {
		t.Helper()
		got := entries(t, other, 3, 3)
		if len(got) != 1 || !sameEntry(got[0], req.Entry) {
			t.Fatalf("%s: the large entry did not read back whole", what)
		}
	}
	check("after its commit")
	// Collecting chunks never takes one an entry references.
	if _, err := w.CollectChunks(ctxT(t), fence, 0); err != nil {
		t.Fatal(err)
	}
	check("after collecting chunks")
}

func closedClient(t *testing.T, connect func() engine.Log) {
	w := newWriter(connect())
	w.Close()
	w.Close() // twice is fine
	if _, err := w.Head(); !errors.Is(err, zkstore.ErrUnavailable) {
		t.Fatalf("head on a closed client: %v, want %v", err, zkstore.ErrUnavailable)
	}
	if _, err := w.Commit(ctxT(t), w.request(1, 2, put(2, "k", "v"))); !errors.Is(err, zkstore.ErrUnavailable) {
		t.Fatalf("commit on a closed client: %v, want %v", err, zkstore.ErrUnavailable)
	}
}
