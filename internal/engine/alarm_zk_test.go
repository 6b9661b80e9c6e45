package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
)

func hasAlarm(t *testing.T, c *clientv3.Client, typ pb.AlarmType, member uint64) bool {
	t.Helper()
	resp, err := c.AlarmList(testutil.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range resp.Alarms {
		if a.Alarm == typ && a.MemberID == member {
			return true
		}
	}
	return false
}

// On ZooKeeper: the NOSPACE alarm one instance raises is listed, enforced
// and reported by the other, survives a restart, and once the space is
// freed (delete, compaction, defragment) a disarm through the other
// instance lets writes in again.
func TestNoSpaceAlarmIsSharedByInstancesAndSurvivesRestarts(t *testing.T) {
	a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Configure: func(c *embed.Config) { c.Engine.QuotaBackendBytes = 64 << 10 }})
	b := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: a.Root(), Configure: func(c *embed.Config) { c.Engine.QuotaBackendBytes = -1 }})
	ca, cb := a.Client(t), b.Client(t)
	// Incompressible: the root compresses log entries.
	raw := make([]byte, 4<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	value := string(raw)
	n := 0
	for ; n < 100; n++ {
		if _, err := ca.Put(testutil.Context(t, 30*time.Second), fmt.Sprintf("k%d", n%4), value); err != nil {
			if !errors.Is(err, rpctypes.ErrGRPCNoSpace) && err.Error() != rpctypes.ErrNoSpace.Error() {
				t.Fatalf("put %d: %v", n, err)
			}
			break
		}
	}
	if n == 0 || n == 100 {
		t.Fatalf("%d puts of 4 KiB fit in 64 KiB", n)
	}
	member := a.Engine().MemberID()
	testutil.Eventually(t, 5*time.Second, "b lists a's NOSPACE alarm", func() bool { return hasAlarm(t, cb, pb.AlarmType_NOSPACE, member) })
	if _, err := cb.Put(testutil.Context(t, 30*time.Second), "x", "1"); err == nil || err.Error() != rpctypes.ErrNoSpace.Error() {
		t.Fatalf("put through b under NOSPACE: %v", err)
	}
	st, err := cb.Status(testutil.Context(t, 30*time.Second), b.Endpoint())
	if err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "alarm:NOSPACE") || st.DbSizeQuota != -1 {
		t.Fatalf("status on b: %v %v", st, err)
	}

	b.Restart()
	cb = b.Client(t)
	if !hasAlarm(t, cb, pb.AlarmType_NOSPACE, member) {
		t.Fatal("the alarm did not survive b's restart")
	}
	if _, err := cb.Delete(testutil.Context(t, 30*time.Second), "k", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	resp, err := cb.Get(testutil.Context(t, 30*time.Second), "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Compact(testutil.Context(t, 30*time.Second), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Defragment(testutil.Context(t, 30*time.Second), b.Endpoint()); err != nil {
		t.Fatal(err)
	}
	// a reads the new generation within its 2 s check.
	testutil.Eventually(t, 10*time.Second, "a's DB size below 16 KiB after the defragment", func() bool { return a.Engine().DBSize() < 16<<10 })
	if _, err := cb.AlarmDisarm(testutil.Context(t, 30*time.Second), &clientv3.AlarmMember{MemberID: member, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Put(testutil.Context(t, 30*time.Second), "x", "after"); err != nil {
		t.Fatalf("put through a after disarm: %v", err)
	}
}

// On ZooKeeper: the leader's corruption check reads the other instance's
// answer from its member znode and raises CORRUPT for it when the hashes
// differ; every instance then refuses writes.
func TestCorruptionCheckThroughMemberZnodes(t *testing.T) {
	var flip atomic.Bool
	a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	b := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Root: a.Root(), Configure: func(c *embed.Config) {
		c.Engine.HashHook = func(h uint32) uint32 {
			if flip.Load() {
				return h + 1
			}
			return h
		}
	}})
	leader, follower := waitLeader(t, a, b)
	if leader != a {
		t.Skip("b leads; the hook is on b") // election order is the start order, so this is rare
	}
	putN(t, a.Client(t), "c/", 5)
	if err := leader.Engine().CheckCorruption(testutil.Context(t, 30*time.Second)); err != nil {
		t.Fatalf("agreeing hashes: %v", err)
	}
	flip.Store(true)
	putN(t, a.Client(t), "c/", 2)
	if err := leader.Engine().CheckCorruption(testutil.Context(t, 30*time.Second)); err == nil {
		t.Fatal("a differing hash went unnoticed")
	}
	cf := follower.Client(t)
	if !hasAlarm(t, cf, pb.AlarmType_CORRUPT, follower.Engine().MemberID()) {
		t.Fatal("no CORRUPT alarm for the follower")
	}
	if _, err := cf.Put(testutil.Context(t, 30*time.Second), "x", "1"); err == nil || err.Error() != rpctypes.ErrCorrupt.Error() {
		t.Fatalf("put under CORRUPT: %v", err)
	}
	if _, err := cf.Get(testutil.Context(t, 30*time.Second), "c/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("read under CORRUPT: %v", err)
	}
}
