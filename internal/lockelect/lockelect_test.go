package lockelect_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/zketcd/zketcd/internal/grpcsrv"
	"github.com/zketcd/zketcd/internal/lockelect"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/memserver"

	"golang.org/x/crypto/bcrypt"
)

// serve starts the lock and election services on an engine on memlog.
func serve(t *testing.T) (*memserver.Server, lpb.LockClient, epb.ElectionClient) {
	t.Helper()
	s := memserver.Start(t, memserver.Options{
		GRPC: grpcsrv.Config{Auth: grpcsrv.AuthConfig{BcryptCost: bcrypt.MinCost}}, // quick logins
		Services: func(srv *grpc.Server, conn *grpc.ClientConn) func() {
			return lockelect.Register(srv, conn)
		},
	})
	return s, lpb.NewLockClient(s.Conn), epb.NewElectionClient(s.Conn)
}

// blocked reports whether call has not returned within a short while (a
// negative: the call is expected to wait for someone else).
func blocked[T any](done <-chan T) bool {
	select {
	case <-done:
		return false
	case <-time.After(300 * time.Millisecond):
		return true
	}
}

// TestLockIsHeldByOneCallerAtATimeUnderItsName: Lock returns a key under
// the name, attached to the caller's lease; a second Lock of the name
// waits until the first key is unlocked, then holds a later key.
func TestLockIsHeldByOneCallerAtATimeUnderItsName(t *testing.T) {
	s, locks, _ := serve(t)
	c := s.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	l1, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	first, err := locks.Lock(ctx, &lpb.LockRequest{Name: []byte("job"), Lease: int64(l1.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(first.Key), "job/") || first.Header.Revision == 0 {
		t.Fatalf("lock key %q at revision %d", first.Key, first.Header.Revision)
	}
	ttl, err := c.TimeToLive(ctx, l1.ID, clientv3.WithAttachedKeys())
	if err != nil || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != string(first.Key) {
		t.Fatalf("lease keys %q %v: the lock's key is not attached to the caller's lease", ttl.Keys, err)
	}
	l2, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan *lpb.LockResponse, 1)
	go func() {
		resp, err := locks.Lock(ctx, &lpb.LockRequest{Name: []byte("job"), Lease: int64(l2.ID)})
		if err != nil {
			t.Error(err)
		}
		second <- resp
	}()
	if !blocked(second) {
		t.Fatal("a second Lock of a held name returned")
	}
	if _, err := locks.Unlock(ctx, &lpb.UnlockRequest{Key: first.Key}); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-second:
		if resp == nil || string(resp.Key) == string(first.Key) || !strings.HasPrefix(string(resp.Key), "job/") || resp.Header.Revision <= first.Header.Revision {
			t.Fatalf("second lock %v after %q", resp, first.Key)
		}
	case <-ctx.Done():
		t.Fatal("the second Lock did not return once the first was unlocked")
	}
}

// TestElectionCampaignProclaimObserveResign walks an election through
// etcd's v3election API: the first campaigner leads, Leader and Observe
// show its value and a proclaimed one, a second campaigner waits until the
// first resigns.
func TestElectionCampaignProclaimObserveResign(t *testing.T) {
	s, _, el := serve(t)
	c := s.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := el.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")}); err == nil || !strings.Contains(err.Error(), "election: no leader") {
		t.Fatalf("leader of an empty election: %v, want etcd's \"election: no leader\"", err)
	}
	la, _ := c.Grant(ctx, 60)
	a, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Lease: int64(la.ID), Value: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if a.Leader == nil || string(a.Leader.Name) != "e" || a.Leader.Lease != int64(la.ID) || a.Leader.Rev == 0 {
		t.Fatalf("leader key %+v", a.Leader)
	}
	value := func() string {
		t.Helper()
		resp, err := el.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")})
		if err != nil {
			t.Fatal(err)
		}
		return string(resp.Kv.Value)
	}
	if v := value(); v != "a" {
		t.Fatalf("leader value %q", v)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := el.Observe(octx, &epb.LeaderRequest{Name: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		resp, err := obs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return string(resp.Kv.Value)
	}
	if v := next(); v != "a" {
		t.Fatalf("observed %q first", v)
	}
	if _, err := el.Proclaim(ctx, &epb.ProclaimRequest{Leader: a.Leader, Value: []byte("a2")}); err != nil {
		t.Fatal(err)
	}
	if v := value(); v != "a2" {
		t.Fatalf("leader value %q after Proclaim", v)
	}
	if v := next(); v != "a2" {
		t.Fatalf("observed %q after Proclaim", v)
	}
	lb, _ := c.Grant(ctx, 60)
	second := make(chan *epb.CampaignResponse, 1)
	go func() {
		resp, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Lease: int64(lb.ID), Value: []byte("b")})
		if err != nil {
			t.Error(err)
		}
		second <- resp
	}()
	if !blocked(second) {
		t.Fatal("a second campaigner was elected while the first leads")
	}
	if _, err := el.Resign(ctx, &epb.ResignRequest{Leader: a.Leader}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-second:
		if b == nil || b.Leader.Lease != int64(lb.ID) {
			t.Fatalf("second campaign %v", b)
		}
	case <-ctx.Done():
		t.Fatal("the second campaigner was not elected after the first resigned")
	}
	if v := next(); v != "b" {
		t.Fatalf("observed %q after the first resigned", v)
	}
}

// TestElectionRequestsWithoutALeaderKeyAreRefusedAsEtcdRefusesThem.
func TestElectionRequestsWithoutALeaderKeyAreRefusedAsEtcdRefusesThem(t *testing.T) {
	_, _, el := serve(t)
	ctx := testutil.Context(t, 30*time.Second)
	for name, call := range map[string]func() error{
		"proclaim": func() error { _, err := el.Proclaim(ctx, &epb.ProclaimRequest{Value: []byte("v")}); return err },
		"resign":   func() error { _, err := el.Resign(ctx, &epb.ResignRequest{}); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), `"leader" field must be provided`) {
			t.Errorf("%s without a leader key: %v", name, err)
		}
	}
}

// TestLockCallsCarryTheCallersToken: the services are clients of the
// server they run in, and a request's auth token travels with their inner
// calls: with auth on, a Lock without a token is refused, with root's it
// is served.
func TestLockCallsCarryTheCallersToken(t *testing.T) {
	s, locks, _ := serve(t)
	c := s.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := c.UserAdd(ctx, "root", "pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Lock(ctx, &lpb.LockRequest{Name: []byte("l")}); err == nil {
		t.Fatal("a Lock without a token was served with auth on")
	}
	auth, err := c.Authenticate(ctx, "root", "pw")
	if err != nil {
		t.Fatal(err)
	}
	tctx := metadata.AppendToOutgoingContext(ctx, "token", auth.Token)
	resp, err := locks.Lock(tctx, &lpb.LockRequest{Name: []byte("l")})
	if err != nil {
		t.Fatalf("a Lock with root's token: %v", err)
	}
	if _, err := locks.Unlock(tctx, &lpb.UnlockRequest{Key: resp.Key}); err != nil {
		t.Fatal(err)
	}
}
