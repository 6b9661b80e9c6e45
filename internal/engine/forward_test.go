package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
)

// memForwarder is an in-process Forwarder: peers are backends registered
// by URL. loseAnswers makes that many forwards lose their answer after the
// leader served them (an unknown outcome for the caller).
type memForwarder struct {
	mu          sync.Mutex
	peers       map[string]*Engine
	loseAnswers int
	// served counts ServeForward calls, readIndex ReadIndex calls, reads
	// lease reads answered by the peer, keepAlives keepalives.
	served, readIndex, reads, keepAlives int
	// unsupported makes the lease reads answer as a peer without them.
	unsupported bool
	// afterLoss runs once an answer was lost, before Forward returns.
	afterLoss func()
	// authChanged makes that many forwards answer ErrAuthChanged without
	// serving them; calls records every forward's tag and re-send
	// position.
	authChanged int
	calls       []ForwardCall
	// emptyAnswers makes that many forwards served by the leader answer
	// an empty response (a malformed answer).
	emptyAnswers int
}

func (f *memForwarder) peer(url string) (*Engine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.peers[url]
	if b == nil {
		return nil, fmt.Errorf("no peer at %s", url)
	}
	return b, nil
}

func (f *memForwarder) Forward(ctx context.Context, to Peer, call ForwardCall) (ForwardReply, error) {
	b, err := f.peer(to.URL)
	if err != nil {
		if call.Fresh {
			return ForwardReply{}, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return ForwardReply{}, err
	}
	if to.Token != b.InternalToken() {
		return ForwardReply{}, errors.New("bad token")
	}
	f.mu.Lock()
	f.calls = append(f.calls, ForwardCall{Origin: call.Origin, AuthFP: call.AuthFP, Fresh: call.Fresh, After: call.After})
	changed := f.authChanged > 0
	if changed {
		f.authChanged--
	}
	f.mu.Unlock()
	if changed {
		return ForwardReply{}, ErrAuthChanged
	}
	req := proto.Clone(call.Req)
	resp, reply, err := b.ServeForward(ctx, ForwardCall{Origin: call.Origin, AuthFP: call.AuthFP, Caller: auth.CallerFrom(ctx), Req: req, Entropy: call.Entropy, After: call.After})
	f.mu.Lock()
	f.served++
	lose := f.loseAnswers > 0
	if lose {
		f.loseAnswers--
	}
	after := f.afterLoss
	f.mu.Unlock()
	if lose {
		if after != nil {
			after()
		}
		return ForwardReply{}, errors.New("connection lost")
	}
	if err != nil {
		return ForwardReply{}, err
	}
	f.mu.Lock()
	empty := f.emptyAnswers > 0
	if empty {
		f.emptyAnswers--
	}
	f.mu.Unlock()
	if resp != nil && !empty {
		proto.Merge(call.Resp, resp)
	}
	return reply, nil
}

func (f *memForwarder) Call(ctx context.Context, to Peer, k CallKind, req, resp proto.Message) (int64, error) {
	b, err := f.peer(to.URL)
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	switch {
	case k.Method == readIndexCall.method:
		f.readIndex++
	case k.Method == keepAliveCall.method:
		f.keepAlives++
	case f.unsupported:
		f.mu.Unlock()
		return 0, fmt.Errorf("%w: lease read", ErrUnsupported)
	default:
		f.reads++
	}
	f.mu.Unlock()
	out, lsn, err := b.ServeCall(ctx, k.Method, proto.Clone(req))
	if err != nil {
		return 0, err
	}
	proto.Merge(resp, out)
	return lsn, nil
}

// forwardingPair starts two forwarding instances on one store: a (the
// leader, started first) and b.
func forwardingPair(t *testing.T) (*memlog.Store, *memForwarder, *Engine, *memlog.Client, *Engine, *memlog.Client) {
	t.Helper()
	return forwardingPairWith(t, nil)
}

// forwardingPairWith is forwardingPair with configure applied to both.
func forwardingPairWith(t *testing.T, configure func(*Config)) (*memlog.Store, *memForwarder, *Engine, *memlog.Client, *Engine, *memlog.Client) {
	t.Helper()
	return forwardingPairOn(t, memlog.Options{}, configure)
}

// forwardingPairOn is forwardingPairWith on a store made with opts.
func forwardingPairOn(t *testing.T, opts memlog.Options, configure func(*Config)) (*memlog.Store, *memForwarder, *Engine, *memlog.Client, *Engine, *memlog.Client) {
	t.Helper()
	st := memlog.New(opts)
	fw := &memForwarder{peers: map[string]*Engine{}}
	start := func(name string) (*Engine, *memlog.Client) {
		url := "mem://" + name
		b, c := engine(t, st, name, func(cfg *Config) {
			cfg.ForwardWrites, cfg.Forwarder, cfg.InternalURL = true, fw, url
			if configure != nil {
				configure(cfg)
			}
		})
		fw.mu.Lock()
		fw.peers[url] = b
		fw.mu.Unlock()
		return b, c
	}
	a, ac := start("a")
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { l, _ := a.Leader(); return l })
	b, bc := start("b")
	testutil.Eventually(t, 5*time.Second, "b knows the leader", func() bool { _, id := b.Leader(); return id == a.MemberID() })
	return st, fw, a, ac, b, bc
}

// logEntries reads every entry of the store through a fresh client.
func logEntries(t *testing.T, st *memlog.Store) []*revision.Entry {
	t.Helper()
	c := st.Client()
	defer c.Close()
	head, err := c.Head()
	if err != nil {
		t.Fatal(err)
	}
	var out []*revision.Entry
	err = c.ReadEntries(context.Background(), 2, head.LSN, 1, func(e *revision.Entry, _ int) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// entriesBy counts the store's log entries b committed.
func entriesBy(t *testing.T, st *memlog.Store, b *Engine) int {
	t.Helper()
	n := 0
	for _, e := range logEntries(t, st) {
		if e.Writer.Nonce == b.nonce {
			n++
		}
	}
	return n
}

func keyVersion(t *testing.T, b *Engine, key string) int64 {
	t.Helper()
	resp := get(t, b, key, false)
	if len(resp.Kvs) != 1 {
		t.Fatalf("%s: %d keys", key, len(resp.Kvs))
	}
	return resp.Kvs[0].Version
}

func TestForwardedWritesAreCommittedByTheLeaderAndReadOnTheFollower(t *testing.T) {
	st, fw, a, _, b, _ := forwardingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("k%d", i)
		resp, err := b.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		// Read-your-writes on the follower, without a barrier.
		got := get(t, b, key, true)
		if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != resp.Header.Revision {
			t.Fatalf("%s on the follower right after its put: %v (put at %d)", key, got.Kvs, resp.Header.Revision)
		}
	}
	if _, err := b.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{
		RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k0")}}}}}); err != nil {
		t.Fatal(err)
	}
	lease, err := b.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lease.ID}); err != nil {
		t.Fatal(err)
	}
	if fw.served != 23 {
		t.Errorf("leader served %d forwards, want 23", fw.served)
	}
	origins := 0
	for _, e := range logEntries(t, st) {
		if e.Writer.Nonce != a.nonce {
			t.Fatalf("entry %d written by %x, want only the leader %x", e.LSN, e.Writer.Nonce, a.nonce)
		}
		for _, op := range e.Ops {
			if op.Kind == revision.OpOrigin {
				if op.Origin.Nonce != b.nonce {
					t.Fatalf("entry %d: origin %x, want the follower %x", e.LSN, op.Origin.Nonce, b.nonce)
				}
				origins++
			}
		}
	}
	if origins != 23 {
		t.Errorf("%d origin ops in the log, want 23", origins)
	}
	// A linearizable read on the follower asks the leader for its position.
	put(t, a, "from-a", "1")
	if got := get(t, b, "from-a", false); len(got.Kvs) != 1 {
		t.Fatal("a linearizable read on the follower missed a write acknowledged by the leader")
	}
	if fw.readIndex == 0 {
		t.Error("the follower's linearizable read did not use the leader's read index")
	}
}

// TestAuthAndAlarmChangesThroughTheFollowerAreCommittedByTheLeader: auth
// changes (with the entropy drawn at their origin) and alarm changes are
// forwarded like the KV writes, so the leader is the only writer of the
// log and both instances hold the same auth state, secret included.
func TestAuthAndAlarmChangesThroughTheFollowerAreCommittedByTheLeader(t *testing.T) {
	st, fw, a, _, b, _ := forwardingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entropy := []byte("0123456789abcdef0123456789abcdef")
	for _, req := range []proto.Message{
		&pb.AuthUserAddRequest{Name: "root", Options: &authpb.UserAddOptions{NoPassword: true}},
		&pb.AuthRoleAddRequest{Name: "root"},
		&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"},
		&pb.AuthEnableRequest{},
	} {
		resp, err := b.AuthWrite(ctx, req, entropy)
		if err != nil {
			t.Fatalf("%T through the follower: %v", req, err)
		}
		if k, _ := WriteKindOf(req); proto.MessageName(resp) != proto.MessageName(k.NewResponse()) {
			t.Fatalf("%T answered with %T", req, resp)
		}
	}
	// A change the leader refuses comes back with its error, unchanged.
	if _, err := b.AuthWrite(ctx, &pb.AuthRoleAddRequest{Name: "root"}, nil); !errors.Is(err, rpctypes.ErrGRPCRoleAlreadyExist) {
		t.Fatalf("adding an existing role through the follower: %v, want %v", err, rpctypes.ErrGRPCRoleAlreadyExist)
	}
	if _, err := b.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: b.MemberID(), Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if err := a.Linearize(ctx); err != nil {
		t.Fatal(err)
	}
	sa, _ := a.AuthState()
	sb, _ := b.AuthState()
	if st, err := auth.Decode(sb); err != nil || !st.Enabled || !bytes.Equal(sa, sb) {
		t.Fatalf("auth state on the follower: enabled %v (%v), equal to the leader's: %v", st != nil && st.Enabled, err, bytes.Equal(sa, sb))
	}
	if alarms := a.Alarms(); len(alarms) != 1 || alarms[0].MemberID != b.MemberID() {
		t.Fatalf("leader's alarms: %v", alarms)
	}
	if fw.served != 6 {
		t.Errorf("leader served %d forwards, want 6", fw.served)
	}
	for _, e := range logEntries(t, st) {
		if e.Writer.Nonce != a.nonce {
			t.Fatalf("entry %d written by %x, want only the leader %x", e.LSN, e.Writer.Nonce, a.nonce)
		}
	}
}

func TestForwardWithALostAnswerIsResolvedByItsTagNotRepeated(t *testing.T) {
	for _, tc := range []struct {
		name string
		// forget makes the leader forget its answers, as a new leader has
		// none: the request is then found in the log.
		forget bool
	}{{"same leader answers again", false}, {"found in the log", true}} {
		t.Run(tc.name, func(t *testing.T) {
			_, fw, a, _, b, _ := forwardingPair(t)
			fw.loseAnswers = 1
			if tc.forget {
				fw.afterLoss = func() {
					a.fwd.mu.Lock()
					a.fwd.calls, a.fwd.done = nil, nil
					a.fwd.mu.Unlock()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := b.Put(ctx, &pb.PutRequest{Key: []byte("once"), Value: []byte("v"), PrevKv: true})
			if err != nil {
				t.Fatal(err)
			}
			if fw.served != 2 {
				t.Errorf("leader served %d forwards, want 2 (the lost one and the re-send)", fw.served)
			}
			if v := keyVersion(t, b, "once"); v != 1 {
				t.Fatalf("version %d after one put: committed twice", v)
			}
			if got := get(t, b, "once", true); got.Kvs[0].ModRevision != resp.Header.Revision {
				t.Fatalf("answered revision %d, key at %d", resp.Header.Revision, got.Kvs[0].ModRevision)
			}
		})
	}
}

func TestForwardsOfADeadLeaderAreResolvedByTheNextLeader(t *testing.T) {
	_, fw, a, ac, b, _ := forwardingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The leader commits the put and dies before answering: the follower,
	// now the leader, finds the put's tag in the log.
	fw.loseAnswers = 1
	fw.afterLoss = func() {
		fw.mu.Lock()
		delete(fw.peers, "mem://a")
		fw.mu.Unlock()
		ac.ExpireSession()
		a.election.Close()
	}
	resp, err := b.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := b.Leader(); !l {
		t.Fatal("b did not take over")
	}
	if v := keyVersion(t, b, "k"); v != 1 {
		t.Fatalf("version %d after one put: committed twice", v)
	}
	if got := get(t, b, "k", true); got.Kvs[0].ModRevision != resp.Header.Revision {
		t.Fatalf("answered revision %d, key at %d", resp.Header.Revision, got.Kvs[0].ModRevision)
	}
	// And the new leader commits new writes itself.
	put(t, b, "k2", "v")
}

func TestFollowerCommitsItselfWhenTheLeaderCannotBeReached(t *testing.T) {
	st, fw, a, _, b, _ := forwardingPair(t)
	fw.mu.Lock()
	delete(fw.peers, "mem://a")
	fw.mu.Unlock()
	put(t, b, "k", "v")
	if foreign := entriesBy(t, st, b); foreign != 1 {
		t.Fatalf("%d entries of the follower, want 1 (committed itself before sending anything)", foreign)
	}
	if got := get(t, a, "k", false); len(got.Kvs) != 1 {
		t.Fatal("the leader does not see the follower's own commit")
	}
}

func TestDeposedLeaderRefusesForwardsAndItsOwnLeaderOnlyWrites(t *testing.T) {
	_, _, a, _, b, _ := forwardingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := b.ServeForward(ctx, ForwardCall{Origin: revision.WriterTag{Nonce: 1, Seq: 1}, Req: &pb.PutRequest{Key: []byte("x")}})
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower served a forward: %v", err)
	}
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("y"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ErrNotLeader.Error(), "not the leader") {
		t.Fatal(ErrNotLeader)
	}
}

func TestConcurrentWritesThroughBothInstancesArePipelinedByTheLeaderOnce(t *testing.T) {
	st, _, a, _, b, _ := forwardingPairWith(t, func(c *Config) { c.CommitPipeline = 4; c.CommitLinger = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 16; w++ {
		in := a
		if w%2 == 1 {
			in = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				if _, err := in.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("w%d/%d", w, i)), Value: []byte("v")}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	resp, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("w"), RangeEnd: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 400 {
		t.Fatalf("%d keys, want 400", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if kv.Version != 1 {
			t.Fatalf("%s at version %d", kv.Key, kv.Version)
		}
	}
	for _, e := range logEntries(t, st) {
		if e.Writer.Nonce != a.nonce {
			t.Fatalf("entry %d written by %x, want only the leader", e.LSN, e.Writer.Nonce)
		}
	}
}

// TestLeaderEndpointOnAnotherHostsLoopbackIsNeverDialed: instances on
// several hosts left with the default loopback internal endpoint. What
// answers at the leader's loopback address on another host is not the
// leader (here it would be, to show the dial), so the follower never
// sends anything there: not a write (with its client's token), a read
// index, a keepalive or a lease read; it commits and reads on its own.
// An instance of the leader's host forwards to it as before.
func TestLeaderEndpointOnAnotherHostsLoopbackIsNeverDialed(t *testing.T) {
	st := memlog.New(memlog.Options{})
	fw := &memForwarder{peers: map[string]*Engine{}}
	start := func(name, host, url string) *Engine {
		b, _ := engine(t, st, name, func(cfg *Config) {
			cfg.ForwardWrites, cfg.Forwarder, cfg.InternalURL, cfg.Host = true, fw, url, host
		})
		fw.mu.Lock()
		fw.peers[url] = b
		fw.mu.Unlock()
		return b
	}
	a := start("a", "host-a", "http://127.0.0.1:2380")
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { l, _ := a.Leader(); return l })
	b := start("b", "host-b", "http://127.0.0.1:2381")
	testutil.Eventually(t, 5*time.Second, "b knows the leader", func() bool { _, id := b.Leader(); return id == a.MemberID() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	put(t, b, "k", "v")
	lease, err := b.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LeaseRenew(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: lease.ID}); err != nil {
		t.Fatal(err)
	}
	put(t, a, "from-a", "1")
	if got := get(t, b, "from-a", false); len(got.Kvs) != 1 {
		t.Fatal("a linearizable read on b missed a's write")
	}
	fw.mu.Lock()
	served, readIndex, reads, keepAlives := fw.served, fw.readIndex, fw.reads, fw.keepAlives
	fw.mu.Unlock()
	if served != 0 || readIndex != 0 || reads != 0 || keepAlives != 0 {
		t.Fatalf("b sent the leader's loopback endpoint on another host %d writes, %d read indexes, %d lease reads and %d keepalives, want none",
			served, readIndex, reads, keepAlives)
	}
	if own := entriesBy(t, st, b); own != 2 {
		t.Fatalf("%d entries committed by b itself, want 2 (its put and its grant)", own)
	}

	c := start("c", "host-a", "http://127.0.0.1:2382")
	testutil.Eventually(t, 5*time.Second, "c knows the leader", func() bool { _, id := c.Leader(); return id == a.MemberID() })
	put(t, c, "from-c", "1")
	fw.mu.Lock()
	served = fw.served
	fw.mu.Unlock()
	if served != 1 {
		t.Fatalf("the leader served %d forwards from an instance of its own host, want 1", served)
	}
}

func TestLoopbackInternalURLs(t *testing.T) {
	for url, want := range map[string]bool{
		"http://127.0.0.1:2380": true, "https://localhost:2380": true, "http://[::1]:2380": true, "http://127.1.2.3:1": true,
		"https://10.0.0.1:2380": false, "https://zketcd-1.example:2380": false, "http://0.0.0.0:2380": false, "": false,
	} {
		if got := loopbackURL(url); got != want {
			t.Errorf("loopbackURL(%q) = %v, want %v", url, got, want)
		}
	}
	if localHost() == "" {
		t.Error("this host has no identity")
	}
}
