package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/engine/memlog"
	"github.com/zketcd/zketcd/internal/testutil"
)

func alarmOf(b *Engine, t pb.AlarmType, member uint64) bool {
	for _, a := range b.Alarms() {
		if a.Alarm == t && a.MemberID == member {
			return true
		}
	}
	return false
}

// fill puts values on b until the quota refuses one; it returns how many
// were accepted.
func fill(t *testing.T, b *Engine) int {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		_, err := b.Put(ctx, &pb.PutRequest{Key: []byte("fill/" + strings.Repeat("k", i%7)), Value: []byte(strings.Repeat("v", 200))})
		if errors.Is(err, rpctypes.ErrGRPCNoSpace) {
			return i
		}
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	t.Fatalf("1000 puts of 200 bytes fit in the quota (DB size %d)", b.DBSize())
	return 0
}

func TestQuotaRaisesNoSpaceOnEveryInstanceAndOnlyWritesThatGrowAreRefused(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", func(c *Config) { c.QuotaBackendBytes = 8 << 10 })
	// b has no quota of its own: what it refuses, the alarm refuses.
	b, _ := engine(t, st, "b", func(c *Config) { c.QuotaBackendBytes = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lease, err := b.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	if n := fill(t, a); n == 0 {
		t.Fatal("the first put was refused")
	}
	if a.DBSize() < 8<<10-456 {
		t.Fatalf("refused at DB size %d, below the quota's reach", a.DBSize())
	}
	if !alarmOf(a, pb.AlarmType_NOSPACE, a.MemberID()) {
		t.Fatalf("alarms on a: %v", a.Alarms())
	}
	testutil.Eventually(t, 5*time.Second, "b sees a's NOSPACE alarm", func() bool { return alarmOf(b, pb.AlarmType_NOSPACE, a.MemberID()) })
	got, err := b.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if err != nil || len(got) != 1 || got[0].MemberID != a.MemberID() || got[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("alarm list on b: %v %v", got, err)
	}

	put := &pb.PutRequest{Key: []byte("x"), Value: []byte("1")}
	txnPut := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put}}}}
	txnDel := &pb.TxnRequest{Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("fill/")}}}}}
	refused := map[string]error{}
	_, refused["put"] = b.Put(ctx, put)
	_, refused["txn with a put"] = b.Txn(ctx, txnPut)
	_, refused["lease grant"] = b.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
	for what, err := range refused {
		if !errors.Is(err, rpctypes.ErrGRPCNoSpace) {
			t.Errorf("%s under NOSPACE: %v, want %v", what, err, rpctypes.ErrGRPCNoSpace)
		}
	}
	if _, err := b.Txn(ctx, txnDel); err != nil {
		t.Errorf("txn deleting: %v", err)
	}
	if _, err := b.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("fill/"), RangeEnd: []byte("fill0")}); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := b.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lease.ID}); err != nil {
		t.Errorf("lease revoke: %v", err)
	}
	if _, err := b.Compact(ctx, &pb.CompactionRequest{Revision: b.State().Rev}); err != nil {
		t.Errorf("compact: %v", err)
	}
	get(t, b, "x", false)

	// The alarm is in the log: a restarted instance has it.
	c, _ := engine(t, st, "c", func(c *Config) { c.QuotaBackendBytes = -1 })
	if !alarmOf(c, pb.AlarmType_NOSPACE, a.MemberID()) {
		t.Fatalf("alarms after recovery: %v", c.Alarms())
	}

	disarmed, err := c.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: a.MemberID(), Alarm: pb.AlarmType_NOSPACE})
	if err != nil || len(disarmed) != 1 {
		t.Fatalf("disarm: %v %v", disarmed, err)
	}
	again, err := c.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: a.MemberID(), Alarm: pb.AlarmType_NOSPACE})
	if err != nil || len(again) != 0 {
		t.Fatalf("disarm of a cleared alarm: %v %v", again, err)
	}
	testutil.Eventually(t, 5*time.Second, "b sees the disarm", func() bool { return len(b.Alarms()) == 0 })
	if _, err := b.Put(ctx, put); err != nil {
		t.Fatalf("put after disarm: %v", err)
	}
}

func TestDefragmentFreesCompactedHistoryAtOnce(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { l, _ := a.Leader(); return l })
	for i := 0; i < 40; i++ {
		put(t, a, "k", strings.Repeat("v", 500))
	}
	if total, inUse := a.DBSize(), a.DBSizeInUse(); total != inUse || total < 40*500 {
		t.Fatalf("before any compaction: DB size %d, in use %d", total, inUse)
	}
	rev := a.State().Rev
	if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the base generation is accounted", func() bool { return a.DBSizeInUse() < 4*500 })
	total, inUse := a.DBSize(), a.DBSizeInUse()
	if total < 40*500 {
		t.Fatalf("after compaction the log is still held, yet DB size is %d (in use %d)", total, inUse)
	}
	entries := st.EntryCount()
	if err := a.Defragment(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.DBSize(); got != a.DBSizeInUse() || got >= total {
		t.Fatalf("after defragment: DB size %d, in use %d (was %d)", got, a.DBSizeInUse(), total)
	}
	if st.EntryCount() >= entries-30 {
		t.Fatalf("defragment kept %d of %d log entries", st.EntryCount(), entries)
	}
	if st.Generations() != 1 {
		t.Fatalf("%d base generations after defragment", st.Generations())
	}
	// The root still recovers, and the next compaction works.
	b, _ := engine(t, st, "b", nil)
	if got := get(t, b, "k", false); len(got.Kvs) != 1 || got.Kvs[0].ModRevision != rev {
		t.Fatalf("after defragment a new instance reads %v", got.Kvs)
	}
	put(t, a, "k", "after")
	if _, err := a.Compact(ctx, &pb.CompactionRequest{Revision: a.State().Rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Defragment(ctx); err != nil {
		t.Fatalf("defragment from the other instance: %v", err)
	}
}

func TestCorruptionCheckRaisesCorruptForTheMemberWhoseHashDiffers(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { l, _ := a.Leader(); return l })
	var bad bool
	var badMu = make(chan struct{}, 1)
	badMu <- struct{}{}
	b, _ := engine(t, st, "b", func(c *Config) {
		c.HashHook = func(h uint32) uint32 {
			<-badMu
			defer func() { badMu <- struct{}{} }()
			if bad {
				return h ^ 1
			}
			return h
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put(t, a, "k", "v")
	if err := a.CheckCorruption(ctx); err != nil {
		t.Fatalf("check with agreeing hashes: %v", err)
	}
	if len(a.Alarms()) != 0 {
		t.Fatalf("alarms: %v", a.Alarms())
	}
	if err := b.CheckCorruption(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("check on the follower: %v", err)
	}

	<-badMu
	bad = true
	badMu <- struct{}{}
	put(t, a, "k", "w")
	if err := a.CheckCorruption(ctx); !errors.Is(err, errMismatch) {
		t.Fatalf("check with b's hash off: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "both see CORRUPT for b", func() bool {
		return alarmOf(a, pb.AlarmType_CORRUPT, b.MemberID()) && alarmOf(b, pb.AlarmType_CORRUPT, b.MemberID())
	})
	for name, be := range map[string]*Engine{"a": a, "b": b} {
		if _, err := be.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("x")}); !errors.Is(err, rpctypes.ErrGRPCCorrupt) {
			t.Errorf("put on %s under CORRUPT: %v", name, err)
		}
		if _, err := be.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k")}); !errors.Is(err, rpctypes.ErrGRPCCorrupt) {
			t.Errorf("delete on %s under CORRUPT: %v", name, err)
		}
		get(t, be, "k", false)
	}
	if _, err := a.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: b.MemberID(), Alarm: pb.AlarmType_CORRUPT}); err != nil {
		t.Fatal(err)
	}
	put(t, a, "k", "after")
}

func TestInitialCorruptionCheckFailsTheStartOnAMismatch(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", nil)
	put(t, a, "k", "v")
	// A matching instance starts (after asking a).
	engine(t, st, "b", func(c *Config) { c.InitialCorruptCheck = true })

	lg := a.cfg.Logger
	cfg := Config{Name: "c", Logger: lg, InitialCorruptCheck: true, HashHook: func(h uint32) uint32 { return h ^ 1 }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(ctx, cfg, st.Client())
	if err == nil {
		c.Close()
		t.Fatal("an instance whose hash differs started")
	}
	if !errors.Is(err, errMismatch) {
		t.Fatalf("start: %v, want a hash mismatch", err)
	}
	if len(a.Alarms()) != 0 {
		t.Fatalf("the initial check raised alarms: %v", a.Alarms())
	}
}

// TestQuotaSetWhileRunningAppliesToTheNextWrite: a quota changed on a
// running engine (a tenant's limits changed in the fleet's registry) is
// the one the next write is checked against and the one Status reports.
func TestQuotaSetWhileRunningAppliesToTheNextWrite(t *testing.T) {
	st := memlog.New(memlog.Options{})
	a, _ := engine(t, st, "a", func(c *Config) { c.QuotaBackendBytes = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("big"), Value: []byte(strings.Repeat("v", 4<<10))}); err != nil {
		t.Fatal(err)
	}
	a.SetQuotaBackendBytes(2 << 10)
	if got := a.QuotaBytes(); got != 2<<10 {
		t.Fatalf("quota in force %d, want %d", got, 2<<10)
	}
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("more"), Value: []byte("1")}); !errors.Is(err, rpctypes.ErrGRPCNoSpace) {
		t.Fatalf("put over the lowered quota: %v, want %v", err, rpctypes.ErrGRPCNoSpace)
	}
	a.SetQuotaBackendBytes(1 << 20)
	if _, err := a.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: a.MemberID(), Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, &pb.PutRequest{Key: []byte("more"), Value: []byte("1")}); err != nil {
		t.Fatalf("put under the raised quota: %v", err)
	}
	a.SetQuotaBackendBytes(0)
	if got := a.QuotaBytes(); got != 2<<30 {
		t.Fatalf("quota 0 resolves to %d, want etcd's default %d", got, int64(2<<30))
	}
}
