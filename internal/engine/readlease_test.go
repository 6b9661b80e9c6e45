package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

func withReadLease(window time.Duration) func(*Config) {
	return func(c *Config) { c.ReadLease, c.LeaderProofWindow = true, window }
}

// TestReadLeaseAnswersReadsFromMemory: with the read lease, linearizable
// reads at the leader and through the follower's ReadIndex need no barrier
// round while a transaction of the leader's session landed within the
// window, and still see every acknowledged write; once the window passed,
// the next read pays one round, which proves the lease again.
func TestReadLeaseAnswersReadsFromMemory(t *testing.T) {
	st, _, a, _, b, _ := forwardingPairWith(t, withReadLease(time.Hour))
	testutil.Eventually(t, 5*time.Second, "the leader took the read lease", func() bool { return a.reads.held.Load() != nil })
	put(t, a, "k", "0") // a proof sent after the lease was taken
	before := st.QuorumCalls()
	for i := 1; i <= 50; i++ {
		put(t, b, "k", string(rune('0'+i%10)))
		want := string(rune('0' + i%10))
		for _, in := range []*Engine{a, b} {
			if got := get(t, in, "k", false); len(got.Kvs) != 1 || string(got.Kvs[0].Value) != want {
				t.Fatalf("linearizable read after put %d: %v, want %q", i, got.Kvs, want)
			}
		}
	}
	if n := st.QuorumCalls() - before; n != 0 {
		t.Errorf("%d barrier rounds for 100 linearizable reads under the read lease, want 0", n)
	}
	// An old proof does not count: age it past the window.
	p := a.live.proof.Load()
	a.live.proof.Store(&liveProof{session: p.session, sent: time.Now().Add(-2 * time.Hour), lsn: p.lsn})
	before = st.QuorumCalls()
	get(t, a, "k", false)
	if n := st.QuorumCalls() - before; n != 1 {
		t.Errorf("%d barrier rounds for a read past the window, want 1", n)
	}
}

// TestReadLeaseWaitsForCommitsInFlight: a commit of the leader that landed
// is read on the follower (whose tailer applies it) before the leader has
// its answer; a lease read at the leader arriving after that must not
// answer without it. It waits for the commit to settle.
func TestReadLeaseWaitsForCommitsInFlight(t *testing.T) {
	st, _, a, _, b, _ := forwardingPairWith(t, withReadLease(time.Hour))
	testutil.Eventually(t, 5*time.Second, "the leader took the read lease", func() bool { return a.reads.held.Load() != nil })
	put(t, a, "k", "old")
	release := make(chan struct{})
	st.SetAnswerHook(func(zkstore.CommitRequest, zkstore.Outcome) { <-release })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := a.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("new")})
		done <- err
	}()
	testutil.Eventually(t, 5*time.Second, "the follower read the landed put", func() bool {
		got := get(t, b, "k", true)
		return len(got.Kvs) == 1 && string(got.Kvs[0].Value) == "new"
	})
	read := make(chan *pb.RangeResponse, 1)
	go func() { read <- get(t, a, "k", false) }()
	select {
	case got := <-read:
		t.Fatalf("the leader answered a linearizable read with %v while its landed commit was unanswered", got.Kvs)
	case <-time.After(200 * time.Millisecond):
	}
	st.SetAnswerHook(nil)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-read; len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "new" {
		t.Fatalf("the leader's read after the commit settled: %v, want new", got.Kvs)
	}
}

// TestReadLeaseStopsOtherCommitters: while the leader holds the read lease
// a follower that cannot reach it does not commit its write itself (the
// log refuses it; the write waits for the leader), and it commits itself
// once the leader has given the lease up.
func TestReadLeaseStopsOtherCommitters(t *testing.T) {
	st, fw, a, _, b, _ := forwardingPairWith(t, withReadLease(time.Hour))
	testutil.Eventually(t, 5*time.Second, "the leader took the read lease", func() bool { return a.reads.held.Load() != nil })
	fw.mu.Lock()
	delete(fw.peers, "mem://a") // the follower cannot reach the leader
	fw.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := b.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	cancel()
	if err == nil {
		t.Fatal("the follower committed a write around a leader holding the read lease")
	}
	for _, e := range logEntries(t, st) {
		if e.Writer.Nonce == b.nonce {
			t.Fatalf("entry %d written by the follower while the leader held the read lease", e.LSN)
		}
	}
	if got := get(t, a, "k", false); len(got.Kvs) != 0 {
		t.Fatalf("the leader reads %v", got.Kvs)
	}
	// The leader steps down (closes): its lease goes, the follower leads.
	a.Close()
	testutil.Eventually(t, 5*time.Second, "the lease was released", func() bool { return st.ReadLeaseHolder() == 0 || b.reads.held.Load() != nil })
	put(t, b, "k", "v")
	if got := get(t, b, "k", false); len(got.Kvs) != 1 {
		t.Fatal("the follower's write after the leader left is missing")
	}
}

// TestReadLeaseNeedsForwarding: the read lease is refused without write
// forwarding or with the clock-free proof window.
func TestReadLeaseNeedsForwarding(t *testing.T) {
	for _, c := range []Config{
		{Name: "x", ReadLease: true},
		{Name: "x", ReadLease: true, ForwardWrites: true, LeaderProofWindow: -1},
		{Name: "x", ReadLease: true, ForwardWrites: true, RelaxedReads: true},
	} {
		c.Logger = logrus.NewEntry(logrus.New())
		c.setDefaults()
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
