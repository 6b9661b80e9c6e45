package embed_test

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestLockAndElectionAreAuthorisedByTheirKVPermissions: under auth,
// v3lock and v3election need what etcd needs, the KV permissions on the
// lock's or election's prefix, not root: a user holding them locks and
// campaigns (with a password, or by client certificate alone), one
// without them is refused with etcd's "permission denied".
func TestLockAndElectionAreAuthorisedByTheirKVPermissions(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	certs := testcerts.New(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{TLS: certs.ServerTLS(t)}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := func(tlsCfg *tls.Config, user, pw string) *clientv3.Client {
		t.Helper()
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{in.Endpoint()}, TLS: tlsCfg,
			Username: user, Password: pw, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := client(certs.ClientTLS(t, true), "", "")
	for i, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "locker", "/locks/", "/locks0", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "alice", "locker"); return err },
		func() error { _, err := admin.UserAdd(ctx, "bob", "bobpw"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("setup step %d: %v", i, err)
		}
	}
	lockAndCampaign := func(who string, c *clientv3.Client) error {
		lk := lpb.NewLockClient(c.ActiveConnection())
		l, err := lk.Lock(ctx, &lpb.LockRequest{Name: []byte("/locks/a")})
		if err != nil {
			return err
		}
		if _, err := lk.Unlock(ctx, &lpb.UnlockRequest{Key: l.Key}); err != nil {
			t.Fatalf("%s unlocks: %v", who, err)
		}
		el := epb.NewElectionClient(c.ActiveConnection())
		camp, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("/locks/e"), Value: []byte(who)})
		if err != nil {
			t.Fatalf("%s campaigns: %v", who, err)
		}
		if lead, err := el.Leader(ctx, &epb.LeaderRequest{Name: []byte("/locks/e")}); err != nil || string(lead.Kv.Value) != who {
			t.Fatalf("%s reads the leader: %v %v", who, lead, err)
		}
		if _, err := el.Resign(ctx, &epb.ResignRequest{Leader: camp.Leader}); err != nil {
			t.Fatalf("%s resigns: %v", who, err)
		}
		return nil
	}
	if err := lockAndCampaign("alice", client(certs.ClientTLS(t, true), "alice", "alicepw")); err != nil {
		t.Fatalf("alice (with the prefix's permissions) locks: %v", err)
	}
	cn := certs.ClientWithSubject(t, pkix.Name{CommonName: "alice"})
	byCert := client(&tls.Config{RootCAs: certs.CA, Certificates: []tls.Certificate{cn}, MinVersion: tls.VersionTLS12}, "", "")
	if err := lockAndCampaign("alice", byCert); err != nil {
		t.Fatalf("alice by client certificate locks: %v", err)
	}
	err := lockAndCampaign("bob", client(certs.ClientTLS(t, true), "bob", "bobpw"))
	// As etcd's recipes answer an inner call's error: its message, code Unknown.
	if st, _ := status.FromError(err); err == nil || st.Message() != rpctypes.ErrPermissionDenied.Error() {
		t.Fatalf("bob (no permissions) locks: %v, want etcd's permission denied", err)
	}
	if err := lockAndCampaign("root", client(certs.ClientTLS(t, true), "root", "rootpw")); err != nil {
		t.Fatalf("root locks: %v", err)
	}
}
