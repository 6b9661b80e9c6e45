package forward_test

// Forwarding on a real ZooKeeper: three in-process instances with
// ForwardWrites, their internal endpoints on 127.0.0.1, the clients on
// etcd's clientv3.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// sharedZK is one ZooKeeper shared by the package's tests, each on a root of
// its own.
var sharedZK = zkservertest.NewShared("forward", zkserver.Options{})

func TestMain(m *testing.M) { os.Exit(sharedZK.Run(m)) }

// cluster starts n forwarding instances on one root and returns them with
// the leader first.
func cluster(t *testing.T, n int) []*embedtest.Instance {
	t.Helper()
	var ins []*embedtest.Instance
	root := ""
	for i := 0; i < n; i++ {
		in := embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Root: root, ForwardWrites: true, SessionTimeout: 4 * time.Second,
			// Quick password hashes: logins under the race detector.
			Configure: func(c *embed.Config) { c.GRPC.Auth.BcryptCost = bcrypt.MinCost }})
		root = in.Root()
		ins = append(ins, in)
	}
	return byLeader(t, ins)
}

// byLeader waits until every instance knows the same leader and returns
// the instances with the leader first.
func byLeader(t *testing.T, ins []*embedtest.Instance) []*embedtest.Instance {
	t.Helper()
	var leader *embedtest.Instance
	var others []*embedtest.Instance
	testutil.Eventually(t, 20*time.Second, "the instances agree on a leader", func() bool {
		leader, others = nil, nil
		agree := true
		_, want := ins[0].Engine().Leader()
		for _, in := range ins {
			l, id := in.Engine().Leader()
			agree = agree && id == want && id != 0
			if l {
				leader = in
			} else {
				others = append(others, in)
			}
		}
		return agree && leader != nil
	})
	return append([]*embedtest.Instance{leader}, others...)
}

// logOf reads every entry of root after the sentinel.
func logOf(t *testing.T, root string) []*revision.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg := testutil.Logger(logrus.WarnLevel)
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{sharedZK.Addr(t)}, Root: root, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	head, err := st.SyncHead()
	if err != nil {
		t.Fatal(err)
	}
	var out []*revision.Entry
	if err := st.ReadEntries(ctx, 2, head.LSN, 16, func(e *revision.Entry, _ int) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFollowersWritesAreCommittedByTheLeaderAndReadBack(t *testing.T) {
	ins := cluster(t, 3)
	leader, f1, f2 := ins[0], ins[1], ins[2]
	c1, c2, cl := f1.Client(t), f2.Client(t), leader.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 30
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("ryw/%d", i)
		resp, err := c1.Put(ctx, key, "v")
		if err != nil {
			t.Fatal(err)
		}
		// Read-your-writes on the follower, even serializable.
		got, err := c1.Get(ctx, key, clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != resp.Header.Revision {
			t.Fatalf("%s on the follower right after its put: %v (put at %d)", key, got.Kvs, resp.Header.Revision)
		}
		// A linearizable read on another follower sees a write another
		// instance acknowledged just before.
		other := fmt.Sprintf("lin/%d", i)
		if _, err := cl.Put(ctx, other, "v"); err != nil {
			t.Fatal(err)
		}
		got, err = c2.Get(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 {
			t.Fatalf("a linearizable read on a follower missed %s, acknowledged by the leader before it", other)
		}
		if _, err := c2.Put(ctx, other, "w"); err != nil {
			t.Fatal(err)
		}
		got, err = c1.Get(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "w" {
			t.Fatalf("a linearizable read on a follower missed %s=w, acknowledged by the other follower before it", other)
		}
	}
	lease, err := c1.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	writers := map[uint64]bool{}
	origins := 0
	for _, e := range logOf(t, leader.Root()) {
		writers[e.Writer.Nonce] = true
		for _, op := range e.Ops {
			if op.Kind == revision.OpOrigin {
				origins++
			}
		}
	}
	if len(writers) != 1 {
		t.Errorf("%d writers in the log, want one (the leader)", len(writers))
	}
	if want := 2*n + 2; origins != want {
		t.Errorf("%d forwarded requests in the log, want %d", origins, want)
	}
}

func TestLeaderDeathDuringForwardedWritesLosesAndDoublesNothing(t *testing.T) {
	ins := cluster(t, 3)
	leader, followers := ins[0], ins[1:]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var acked sync.Map
	var nacked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		c := followers[w%2].Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d/%d", w, i)
				pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
				resp, err := c.Put(pctx, key, "v")
				pcancel()
				if err == nil {
					acked.Store(key, resp.Header.Revision)
					nacked.Add(1)
				}
			}
		}()
	}
	testutil.Eventually(t, 30*time.Second, "puts acknowledged through the followers", func() bool { return nacked.Load() >= 50 })
	before := nacked.Load()
	leader.Close()
	testutil.Eventually(t, time.Minute, "puts acknowledged after the leader died", func() bool { return nacked.Load() >= before+50 })
	close(stop)
	wg.Wait()
	after := nacked.Load()
	t.Logf("acknowledged %d puts before the leader's death, %d in all", before, after)
	if after <= before {
		t.Fatal("no write was acknowledged after the leader died")
	}
	ins = byLeader(t, followers)
	c := ins[0].Client(t)
	resp, err := c.Get(ctx, "w", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int64{}
	for _, kv := range resp.Kvs {
		if kv.Version != 1 {
			t.Errorf("%s at version %d: a put committed twice", kv.Key, kv.Version)
		}
		keys[string(kv.Key)] = kv.ModRevision
	}
	acked.Range(func(k, v any) bool {
		rev, ok := keys[k.(string)]
		switch {
		case !ok:
			t.Errorf("acknowledged put %s is lost", k)
		case rev != v.(int64):
			t.Errorf("%s acknowledged at revision %d, stored at %d", k, v, rev)
		}
		return true
	})
	if int64(len(keys)) < after {
		t.Errorf("%d keys, %d puts acknowledged", len(keys), after)
	}
}

func TestPermissionsAreCheckedOnForwardedWrites(t *testing.T) {
	ins := cluster(t, 2)
	leader, follower := ins[0], ins[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := leader.Client(t)
	for i, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "writer"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "writer", "/w/", "/w0", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "bob", "bobpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "bob", "writer"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("setup step %d: %v", i, err)
		}
	}
	login := func(in *embedtest.Instance, user, pw string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{in.Endpoint()}, DialTimeout: 20 * time.Second,
			Username: user, Password: pw, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	bob := login(follower, "bob", "bobpw")
	if _, err := bob.Put(ctx, "/w/a", "1"); err != nil {
		t.Fatalf("bob's permitted put through the follower: %v", err)
	}
	if _, err := bob.Put(ctx, "/x", "1"); err == nil {
		t.Fatal("bob's put outside his permission was committed")
	}
	root := login(leader, "root", "rootpw")
	if _, err := root.RoleRevokePermission(ctx, "writer", "/w/", "/w0"); err != nil {
		t.Fatal(err)
	}
	// The revocation was acknowledged before bob's next write: the leader
	// evaluates it on the new auth state (the follower's may still be the
	// old one), so it is refused at once.
	if _, err := bob.Put(ctx, "/w/b", "1"); err == nil {
		t.Fatal("bob's put through the follower was committed after his permission was revoked")
	}
	resp, err := root.Get(ctx, "/w/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%d keys under /w/, want bob's one permitted put", len(resp.Kvs))
	}
}

// TestLeaseReadsThroughAFollowerSeeKeepalivesInTheLeadersMemory keeps a
// lease alive through a follower past its TTL (the leader renews it in
// memory; its token in ZooKeeper stays as granted): the follower's
// TimeToLive is not decayed and its Leases lists the lease.
func TestLeaseReadsThroughAFollowerSeeKeepalivesInTheLeadersMemory(t *testing.T) {
	ins := cluster(t, 2)
	follower := ins[1].Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := follower.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.Put(ctx, "leased", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	ka, err := follower.KeepAlive(kctx, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	// Real time, past the TTL: the token's age on the wall clock, which a
	// follower's own estimate would show, is what the answer must not.
	time.Sleep(7 * time.Second)
	ttl, err := follower.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("time to live through the follower after 7 s of keepalives: %d of %d, keys %q", ttl.TTL, ttl.GrantedTTL, ttl.Keys)
	if ttl.TTL < 3 || ttl.GrantedTTL != 5 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "leased" {
		t.Fatalf("time to live through the follower: TTL %d, granted %d, keys %q", ttl.TTL, ttl.GrantedTTL, ttl.Keys)
	}
	if ttl.ResponseHeader.MemberId != ins[1].Engine().MemberID() || ttl.ResponseHeader.Revision == 0 {
		t.Fatalf("header %v: want the follower's", ttl.ResponseHeader)
	}
	leases, err := follower.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range leases.Leases {
		found = found || l.ID == lease.ID
	}
	if !found {
		t.Fatalf("leases through the follower %v, without %x", leases.Leases, lease.ID)
	}
	kcancel()
	if _, err := ins[0].Client(t).Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if ttl, err := follower.TimeToLive(ctx, lease.ID); err != nil || ttl.TTL != -1 {
		t.Fatalf("time to live of the revoked lease through the follower: %+v %v", ttl, err)
	}
}

// TestAuthAndAlarmChangesThroughAFollowerAreTheLeaders: an administrator on
// a follower sets up auth and raises and disarms an alarm; every change is
// committed by the leader (one writer in the log), and a user created
// through the follower logs in on either instance.
func TestAuthAndAlarmChangesThroughAFollowerAreTheLeaders(t *testing.T) {
	ins := cluster(t, 2)
	leader, follower := ins[0], ins[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := follower.Client(t)
	for i, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "carol", "carolpw"); return err },
		func() error {
			_, err := pb.NewMaintenanceClient(admin.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
				Action: pb.AlarmRequest_ACTIVATE, MemberID: follower.Engine().MemberID(), Alarm: pb.AlarmType_NOSPACE})
			return err
		},
		func() error {
			_, err := admin.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: follower.Engine().MemberID(), Alarm: pb.AlarmType_NOSPACE})
			return err
		},
		func() error {
			if _, err := admin.RoleAdd(ctx, "root"); !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
				return fmt.Errorf("adding an existing role: %v, want %v", err, rpctypes.ErrRoleAlreadyExist)
			}
			return nil
		},
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("step %d through the follower: %v", i, err)
		}
	}
	for _, in := range []*embedtest.Instance{leader, follower} {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{in.Endpoint()}, DialTimeout: 20 * time.Second,
			Username: "carol", Password: "carolpw", Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("carol's login: %v", err)
		}
		_, err = c.Get(ctx, "anything")
		c.Close()
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("carol, with no role, reading: %v, want permission denied (auth enabled everywhere)", err)
		}
	}
	writers := map[uint64]bool{}
	for _, e := range logOf(t, leader.Root()) {
		writers[e.Writer.Nonce] = true
	}
	if len(writers) != 1 {
		t.Errorf("%d writers in the log, want one (the leader)", len(writers))
	}
}
