package embed_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/tenant"
	"github.com/zketcd/zketcd/internal/testutil"
)

// secret is what tenant B stores: no answer to tenant A may contain it.
const secret = "b-secret-value"

// hostileFleet is a fleet with tenants a and b, b holding keys (under
// several prefixes, one with a \x00 byte), a lease with a key, a user.
type hostileFleet struct {
	fx     *fleetFixture
	f      *embed.Fleet
	a, b   *clientv3.Client
	lease  clientv3.LeaseID
	bRev   int64
	bClust uint64
}

func newHostileFleet(t *testing.T, limits tenant.Limits) *hostileFleet {
	fx := newFleetFixture(t)
	fx.create("a", limits)
	fx.create("b", tenant.Limits{})
	f := fx.start("i1", nil)
	h := &hostileFleet{fx: fx, f: f, a: fx.client(f, "a"), b: fx.client(f, "b")}
	ctx := testutil.Context(t, 30*time.Second)
	for _, k := range []string{"/registry/secrets/x", "\x00", "z\x00z", "\xff\xff"} {
		if _, err := h.b.Put(ctx, k, secret); err != nil {
			t.Fatal(err)
		}
	}
	g, err := h.b.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	h.lease = g.ID
	p, err := h.b.Put(ctx, "/registry/leased", secret, clientv3.WithLease(g.ID))
	if err != nil {
		t.Fatal(err)
	}
	h.bRev, h.bClust = p.Header.Revision, p.Header.ClusterId
	if _, err := h.b.UserAdd(ctx, "b-user", "b-password"); err != nil {
		t.Fatal(err)
	}
	return h
}

// noSecret fails the test if v (a response, rendered) holds b's data.
func noSecret(t *testing.T, what string, v any) {
	t.Helper()
	s := fmt.Sprintf("%q", v)
	if m, ok := v.(interface{ String() string }); ok {
		s = m.String()
	}
	if strings.Contains(s, secret) || strings.Contains(s, "b-user") {
		t.Errorf("%s: tenant a sees tenant b's data: %s", what, s)
	}
}

// TestTenantCannotReadOrWriteAnotherTenantsKeys: every range form a's
// client can send, and every write, stays inside a's own cluster.
func TestTenantCannotReadOrWriteAnotherTenantsKeys(t *testing.T) {
	h := newHostileFleet(t, tenant.Limits{})
	ctx := testutil.Context(t, 30*time.Second)
	kv := pb.NewKVClient(h.a.ActiveConnection())
	for _, r := range []*pb.RangeRequest{
		{Key: []byte{0}, RangeEnd: []byte{0}}, // every key
		{Key: []byte("/registry/"), RangeEnd: []byte("/registry0")},
		{Key: []byte("/registry/secrets/x")}, // b's exact key
		{Key: []byte{0}},                     // b's "\x00" key
		{Key: []byte("z\x00z")},              // a key with a NUL inside
		{Key: []byte{0xff, 0xff}},            // the last key
		{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 0, Serializable: true},
		{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true},
	} {
		resp, err := kv.Range(ctx, r)
		if err != nil {
			t.Fatalf("Range %q..%q: %v", r.Key, r.RangeEnd, err)
		}
		if resp.Count != 0 || len(resp.Kvs) != 0 {
			t.Errorf("Range %q..%q found %d keys in a's empty cluster", r.Key, r.RangeEnd, resp.Count)
		}
		noSecret(t, "Range", resp)
	}
	// b's revision does not exist in a's cluster.
	if _, err := h.a.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(h.bRev)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Errorf("Range at b's revision %d in a: %v, want future revision", h.bRev, err)
	}
	// A compare on b's key sees no such key; a delete of everything deletes
	// nothing of b's.
	tx, err := h.a.Txn(ctx).If(clientv3.Compare(clientv3.Value("/registry/secrets/x"), "=", secret)).
		Then(clientv3.OpGet("/registry/secrets/x")).Else(clientv3.OpGet("", clientv3.WithFromKey())).Commit()
	if err != nil || tx.Succeeded {
		t.Errorf("Txn comparing b's value in a: succeeded %v, %v", tx != nil && tx.Succeeded, err)
	}
	noSecret(t, "Txn", tx)
	d, err := h.a.Delete(ctx, "\x00", clientv3.WithFromKey())
	if err != nil || d.Deleted != 0 {
		t.Errorf("a's delete of every key: %v, %v", d, err)
	}
	if g, err := h.b.Get(ctx, "", clientv3.WithFromKey()); err != nil || g.Count != 5 {
		t.Errorf("b after a's deletes: %d keys, %v", g.Count, err)
	}
}

// TestTenantWatchSeesOnlyItsOwnChanges: a's watch of every key from
// revision 1 gets a's events only, however b writes meanwhile.
func TestTenantWatchSeesOnlyItsOwnChanges(t *testing.T) {
	h := newHostileFleet(t, tenant.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wc := h.a.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(1), clientv3.WithPrevKV())
	if _, err := h.b.Put(ctx, "/registry/more", secret); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Put(ctx, "mine", "a-value"); err != nil {
		t.Fatal(err)
	}
	for resp := range wc {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if string(ev.Kv.Key) != "mine" {
				t.Fatalf("a's watch got %q", ev.Kv.Key)
			}
			return
		}
	}
	t.Fatal("a's watch ended without a's own event")
}

// TestTenantCannotReachAnotherTenantsLeasesOrUsers: b's lease ID means
// nothing in a (no TTL, no keepalive, no revoke), a's lease list and auth
// store hold nothing of b's, and a's auth changes leave b alone.
func TestTenantCannotReachAnotherTenantsLeasesOrUsers(t *testing.T) {
	h := newHostileFleet(t, tenant.Limits{})
	ctx := testutil.Context(t, 30*time.Second)
	ttl, err := h.a.TimeToLive(ctx, h.lease, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL != -1 || len(ttl.Keys) != 0 {
		t.Errorf("a's TimeToLive of b's lease: %+v, %v", ttl, err)
	}
	if _, err := h.a.KeepAliveOnce(ctx, h.lease); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("a's keepalive of b's lease: %v", err)
	}
	if _, err := h.a.Revoke(ctx, h.lease); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("a's revoke of b's lease: %v", err)
	}
	if ls, err := h.a.Leases(ctx); err != nil || len(ls.Leases) != 0 {
		t.Errorf("a's lease list: %v, %v", ls, err)
	}
	// a granting the same ID makes a's own lease; b's is untouched.
	if _, err := h.a.Grant(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if bt, err := h.b.TimeToLive(ctx, h.lease); err != nil || bt.TTL <= 0 {
		t.Errorf("b's lease after a's attempts: %+v, %v", bt, err)
	}
	users, err := h.a.UserList(ctx)
	if err != nil || len(users.Users) != 0 {
		t.Errorf("a's users: %v, %v", users, err)
	}
	if _, err := h.a.UserGet(ctx, "b-user"); !errors.Is(err, rpctypes.ErrUserNotFound) {
		t.Errorf("a's UserGet of b's user: %v", err)
	}
	if _, err := h.a.UserAdd(ctx, "root", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := h.b.AuthStatus(ctx); err != nil || st.Enabled {
		t.Errorf("b's auth after a enabled its own: %+v, %v", st, err)
	}
	if _, err := h.b.Put(ctx, "still", "writable"); err != nil {
		t.Errorf("b after a enabled auth: %v", err)
	}
}

// TestTenantMaintenanceCallsStayInsideItsCluster: Status, HashKV,
// MemberList, Snapshot, Alarm, Defragment and Compact from a answer for
// a's cluster and touch nothing of b's.
func TestTenantMaintenanceCallsStayInsideItsCluster(t *testing.T) {
	h := newHostileFleet(t, tenant.Limits{})
	ctx := testutil.Context(t, 30*time.Second)
	ep := h.f.ClientAddrs()[0]
	st, err := h.a.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	if st.Header.ClusterId == h.bClust || st.Header.Revision != 1 {
		t.Errorf("a's status: cluster %x (b's %x), revision %d", st.Header.ClusterId, h.bClust, st.Header.Revision)
	}
	hk, err := h.a.HashKV(ctx, ep, 0)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := h.b.HashKV(ctx, ep, 0)
	if err != nil {
		t.Fatal(err)
	}
	if hk.Hash == hb.Hash || hk.Header.Revision != 1 {
		t.Errorf("a's HashKV %x at %d equals b's %x", hk.Hash, hk.Header.Revision, hb.Hash)
	}
	ml, err := h.a.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 {
		t.Fatalf("a's members: %v, %v", ml, err)
	}
	mb, _ := h.b.MemberList(ctx)
	if mb != nil && len(mb.Members) == 1 && mb.Members[0].ID == ml.Members[0].ID {
		t.Errorf("a and b share a member ID %x", ml.Members[0].ID)
	}
	rc, err := h.a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || bytes.Contains(data, []byte(secret)) {
		t.Errorf("a's snapshot (%d bytes, %v) holds b's data", len(data), err)
	}
	if _, err := h.a.Compact(ctx, h.bRev); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Errorf("a compacting at b's revision: %v", err)
	}
	if _, err := h.a.Defragment(ctx, ep); err != nil {
		t.Errorf("a's defragment: %v", err)
	}
	if _, err := h.a.AlarmList(ctx); err != nil {
		t.Fatal(err)
	}
	am := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: ml.Members[0].ID, Alarm: pb.AlarmType_NOSPACE}
	if _, err := pb.NewMaintenanceClient(h.a.ActiveConnection()).Alarm(ctx, am); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Put(ctx, "k", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Errorf("a after its NOSPACE alarm: %v", err)
	}
	if _, err := h.b.Put(ctx, "k", "v"); err != nil {
		t.Errorf("b after a's NOSPACE alarm: %v", err)
	}
	if al, err := h.b.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Errorf("b's alarms after a's: %v, %v", al, err)
	}
}

// TestTenantAtItsLimitsLeavesOthersWritable: a tenant over its quota gets
// NOSPACE and over its rate "too many requests"; its neighbour writes on.
func TestTenantAtItsLimitsLeavesOthersWritable(t *testing.T) {
	h := newHostileFleet(t, tenant.Limits{QuotaBackendBytes: 64 << 10, RequestsPerSecond: 20, Leases: 2, Watchers: 2})
	ctx := testutil.Context(t, 30*time.Second)
	for range 2 {
		if _, err := h.a.Grant(ctx, 60); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.a.Grant(ctx, 60); !errors.Is(err, rpctypes.ErrTooManyRequests) {
		t.Errorf("a's third lease over its limit of 2: %v", err)
	}
	if _, err := h.b.Grant(ctx, 60); err != nil {
		t.Errorf("b's lease beside a at its limit: %v", err)
	}
	// 200 reads at once: a second's worth passes, a little more waits for
	// room, the rest is refused.
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if _, err := h.a.Get(ctx, "k"); errors.Is(err, rpctypes.ErrTooManyRequests) {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if refused.Load() < 100 {
		t.Errorf("200 reads at once over a's 20/s: %d refused", refused.Load())
	}
	for i := range 20 {
		if _, err := h.b.Put(ctx, "b-key", fmt.Sprint(i)); err != nil {
			t.Fatalf("b beside a's flood: %v", err)
		}
	}
	time.Sleep(1100 * time.Millisecond) // a's bucket refills
	big := make([]byte, 16<<10)
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		rand.Read(big) // incompressible: the quota counts what is stored
		_, err = h.a.Put(ctx, "big", string(big))
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a past its quota: %v", err)
	}
	if _, err := h.b.Put(ctx, "b-key", "after"); err != nil {
		t.Fatalf("b beside a out of space: %v", err)
	}
}

// TestTenantQuotaChangedInTheRegistryAppliesWhileItRuns: the operator
// lowers a running tenant's space quota (zketcd tenant limits
// --quota-backend-bytes): its next growing write gets NOSPACE and Status
// reports the new quota, without the tenant's engine restarting; raised
// again and the alarm disarmed, it writes again.
func TestTenantQuotaChangedInTheRegistryAppliesWhileItRuns(t *testing.T) {
	fx := newFleetFixture(t, "a")
	f := fx.start("i1", nil)
	a := fx.client(f, "a")
	ctx := testutil.Context(t, 30*time.Second)
	big := make([]byte, 16<<10)
	rand.Read(big)
	if _, err := a.Put(ctx, "big", string(big)); err != nil {
		t.Fatal(err)
	}
	setQuota := func(n int64) {
		t.Helper()
		rec, err := fx.reg.Tenant("a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fx.reg.SetTenantLimits(rec, tenant.Limits{QuotaBackendBytes: n}.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	setQuota(8 << 10)
	testutil.Eventually(t, 10*time.Second, "the lowered quota in Status", func() bool {
		st, err := a.Status(ctx, a.Endpoints()[0])
		return err == nil && st.DbSizeQuota == 8<<10
	})
	if _, err := a.Put(ctx, "more", "1"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("put over the lowered quota: %v", err)
	}
	setQuota(1 << 20)
	testutil.Eventually(t, 10*time.Second, "the raised quota in Status", func() bool {
		st, err := a.Status(ctx, a.Endpoints()[0])
		return err == nil && st.DbSizeQuota == 1<<20
	})
	al, err := a.AlarmList(ctx)
	if err != nil || len(al.Alarms) == 0 {
		t.Fatalf("alarms after NOSPACE: %v %v", al, err)
	}
	for _, m := range al.Alarms {
		if _, err := a.AlarmDisarm(ctx, (*clientv3.AlarmMember)(m)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Put(ctx, "more", "1"); err != nil {
		t.Fatalf("put under the raised quota: %v", err)
	}
}
