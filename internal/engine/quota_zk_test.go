package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
)

// On ZooKeeper, where log entries are stored compressed: the quota and
// Status.DbSize count the bytes of what is stored, before compression, as
// etcd's database grows with what it holds. Forty puts of 200 kB of one
// repeated character under a quota of 2,000,000 bytes hit NOSPACE at the
// tenth, as on etcd 3.7.3, though ZooKeeper holds a few hundred bytes of
// each.
func TestQuotaCountsTheBytesStoredBeforeCompression(t *testing.T) {
	const quota = 2_000_000
	a := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{Configure: func(c *embed.Config) { c.Engine.QuotaBackendBytes = quota }})
	c := a.Client(t)
	value := strings.Repeat("a", 200_000)
	accepted := 0
	for ; accepted < 40; accepted++ {
		if _, err := c.Put(testutil.Context(t, 30*time.Second), "k", value); err != nil {
			if !errors.Is(err, rpctypes.ErrGRPCNoSpace) && err.Error() != rpctypes.ErrNoSpace.Error() {
				t.Fatalf("put %d: %v", accepted+1, err)
			}
			break
		}
	}
	st, err := c.Status(testutil.Context(t, 30*time.Second), a.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d puts of 200 kB accepted; DB size %d, in use %d; ZooKeeper holds %d", accepted, st.DbSize, st.DbSizeInUse, a.Engine().ZooKeeperBytes())
	if accepted != 9 {
		t.Fatalf("%d puts of 200 kB accepted under a quota of %d bytes (DB size %d), want 9 as etcd", accepted, quota, st.DbSize)
	}
	if st.DbSize < 9*200_000 || st.DbSize >= quota {
		t.Fatalf("DB size %d after 9 puts of 200 kB, want at least %d and below the quota", st.DbSize, 9*200_000)
	}
	// What ZooKeeper holds is counted apart, compressed.
	if stored := a.Engine().ZooKeeperBytes(); stored <= 0 || stored > 20_000 {
		t.Fatalf("the root holds %d bytes in ZooKeeper after 9 compressible puts of 200 kB", stored)
	}

	// A restart counts the same from the log it replays.
	a.Restart()
	c = a.Client(t)
	again, err := c.Status(testutil.Context(t, 30*time.Second), a.Endpoint())
	if err != nil || again.DbSize != st.DbSize {
		t.Fatalf("after a restart: DB size %d (was %d), %v", again.DbSize, st.DbSize, err)
	}

	// A base generation counts its bytes before compression too: after a
	// compaction the one live value is in use, the rest freed by a
	// defragment.
	resp, err := c.Compact(testutil.Context(t, 30*time.Second), st.Header.Revision, clientv3.WithCompactPhysical())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Defragment(testutil.Context(t, 30*time.Second), a.Endpoint()); err != nil {
		t.Fatal(err)
	}
	after, err := c.Status(testutil.Context(t, 30*time.Second), a.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after compaction at %d and defragment: DB size %d, in use %d, ZooKeeper %d", resp.Header.Revision, after.DbSize, after.DbSizeInUse, a.Engine().ZooKeeperBytes())
	if after.DbSize != after.DbSizeInUse || after.DbSize < 200_000 || after.DbSize > 250_000 {
		t.Fatalf("after compaction and defragment: DB size %d, in use %d; want the one 200 kB value", after.DbSize, after.DbSizeInUse)
	}
	if _, err := c.AlarmDisarm(testutil.Context(t, 30*time.Second), &clientv3.AlarmMember{MemberID: a.Engine().MemberID(), Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(testutil.Context(t, 30*time.Second), "k", value); err != nil {
		t.Fatalf("put after the space was freed: %v", err)
	}
}
