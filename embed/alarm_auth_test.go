package embed_test

import (
	"crypto/rand"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/crypto/bcrypt"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// With authentication on: a non-root user's write over the quota raises
// NOSPACE (the server raises it, whatever the user may do) and is refused;
// the user may list alarms but not change them; root disarms; the
// corruption check runs without any credential (it goes through
// ZooKeeper, not the client URLs).
func TestAlarmsAndTheCorruptionCheckWithAuthenticationOn(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	quota := func(c *embed.Config) {
		c.GRPC.Auth.BcryptCost = bcrypt.MinCost
		c.Engine.QuotaBackendBytes = 64 << 10
	}
	a := embedtest.Start(t, []string{zk}, embedtest.Options{Configure: quota})
	b := embedtest.Start(t, []string{zk}, embedtest.Options{Root: a.Root(), Configure: quota})
	enableAuth(t, a.Client(t))
	ctx := ctx30s(t)
	alice, err := userClient(t, b.Endpoint(), "alice", "alicepw")
	if err != nil {
		t.Fatal(err)
	}
	// Incompressible: the root compresses log entries.
	raw := make([]byte, 4<<10)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	value := string(raw)
	var refused error
	for i := 0; i < 100 && refused == nil; i++ {
		_, refused = alice.Put(ctx, "/bar", value)
	}
	if refused == nil || refused.Error() != rpctypes.ErrNoSpace.Error() {
		t.Fatalf("alice filling the quota: %v", refused)
	}
	list, err := alice.AlarmList(ctx)
	if err != nil || len(list.Alarms) != 1 || list.Alarms[0].Alarm != pb.AlarmType_NOSPACE || list.Alarms[0].MemberID != b.Engine().MemberID() {
		t.Fatalf("alice lists alarms: %v %v", list, err)
	}
	if _, err := alice.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: b.Engine().MemberID(), Alarm: pb.AlarmType_NOSPACE}); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice disarms: %v, want permission denied", err)
	}
	root, err := userClient(t, a.Endpoint(), "root", "rootpw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Delete(ctx, "/bar"); err != nil {
		t.Fatal(err)
	}
	st, err := root.Status(ctx, a.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Defragment(ctx, a.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if _, err := root.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	if list, err := alice.AlarmList(ctx); err != nil || len(list.Alarms) != 0 {
		t.Fatalf("after disarm: %v %v", list, err)
	}

	leader := a
	if l, _ := b.Engine().Leader(); l {
		leader = b
	}
	if err := leader.Engine().CheckCorruption(ctx); err != nil {
		t.Fatalf("corruption check with auth on: %v", err)
	}
}
