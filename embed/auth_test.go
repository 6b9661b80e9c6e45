package embed_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/grpcsrv"
	"github.com/zketcd/zketcd/internal/zkstore"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// fastBcrypt runs an instance with the cheapest bcrypt cost (the tests log
// in many times; -race makes bcrypt slow).
func fastBcrypt(o embedtest.Options) embedtest.Options {
	o.Configure = func(c *embed.Config) { c.GRPC.Auth.BcryptCost = bcrypt.MinCost }
	return o
}

// userClient returns a client logged in as user (empty: none) at endpoint.
func userClient(t *testing.T, endpoint, user, password string) (*clientv3.Client, error) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second,
		Username: user, Password: password, Logger: zap.NewNop(),
	})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func ctx30s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// enableAuth creates root and alice (READ on prefix /foo/, READWRITE on
// /bar) through c and enables authentication.
func enableAuth(t *testing.T, c *clientv3.Client) {
	t.Helper()
	ctx := ctx30s(t)
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.RoleAdd(ctx, "root"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "reader"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "reader", "/foo/", "/foo0", clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error {
			_, err := c.RoleGrantPermission(ctx, "reader", "/bar", "", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "alice", "reader"); return err },
		func() error { _, err := c.Put(ctx, "/foo/a", "1"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("setup step %d: %v", i, err)
		}
	}
}

// checkAlice asserts what alice may do at endpoint: read /foo/a, write
// /bar, not write /foo/a; and that a client without a user is refused.
func checkAlice(t *testing.T, endpoint string) {
	t.Helper()
	ctx := ctx30s(t)
	c, err := userClient(t, endpoint, "alice", "alicepw")
	if err != nil {
		t.Fatalf("alice logs in at %s: %v", endpoint, err)
	}
	if r, err := c.Get(ctx, "/foo/a"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("alice reads /foo/a: %v %v", r, err)
	}
	if _, err := c.Put(ctx, "/bar", "x"); err != nil {
		t.Fatalf("alice writes /bar: %v", err)
	}
	if _, err := c.Put(ctx, "/foo/a", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice writes /foo/a: %v, want permission denied", err)
	}
	anon, err := userClient(t, endpoint, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Get(ctx, "/foo/a"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("no user reads: %v, want user name is empty", err)
	}
}

func TestAuthChangesThroughOneInstanceAreEnforcedByTheOtherAtOnce(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	a := embedtest.Start(t, []string{zk}, fastBcrypt(embedtest.Options{}))
	b := embedtest.Start(t, []string{zk}, fastBcrypt(embedtest.Options{Root: a.Root()}))
	enableAuth(t, a.Client(t))
	checkAlice(t, b.Endpoint())

	ctx := ctx30s(t)
	// A simple token issued by a is valid on b (tokens are signed with a
	// secret of the auth state, which both instances hold).
	tok, err := pb.NewAuthClient(a.Client(t).ActiveConnection()).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewKVClient(b.Client(t).ActiveConnection()).Range(withToken(ctx, tok.Token), &pb.RangeRequest{Key: []byte("/foo/a")}); err != nil {
		t.Fatalf("a's simple token on b: %v", err)
	}

	root, err := userClient(t, a.Endpoint(), "root", "rootpw")
	if err != nil {
		t.Fatal(err)
	}
	// Revoke through a; b refuses at once.
	if _, err := root.RoleRevokePermission(ctx, "reader", "/bar", ""); err != nil {
		t.Fatal(err)
	}
	alice, err := userClient(t, b.Endpoint(), "alice", "alicepw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Put(ctx, "/bar", "y"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice writes /bar on b after the revocation on a: %v", err)
	}
	// A user added through b logs in through a.
	rootB, err := userClient(t, b.Endpoint(), "root", "rootpw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rootB.UserAdd(ctx, "dave", "davepw"); err != nil {
		t.Fatal(err)
	}
	if _, err := rootB.UserGrantRole(ctx, "dave", "root"); err != nil {
		t.Fatal(err)
	}
	dave, err := userClient(t, a.Endpoint(), "dave", "davepw")
	if err != nil {
		t.Fatalf("dave logs in at a: %v", err)
	}
	if _, err := dave.Put(ctx, "/anything", "v"); err != nil {
		t.Fatalf("dave (root role) writes through a: %v", err)
	}
	sa, err := root.AuthStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := rootB.AuthStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sa.Enabled || sa.AuthRevision != sb.AuthRevision {
		t.Fatalf("auth status a %+v, b %+v", sa, sb)
	}
}

func TestAuthSurvivesRestartAndBaseGenerations(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	in := embedtest.Start(t, []string{zk}, fastBcrypt(embedtest.Options{}))
	enableAuth(t, in.Client(t))
	in.Restart()
	checkAlice(t, in.Endpoint())

	// Compact: the leader writes a base generation holding the auth store;
	// a restart then recovers from it rather than from the log.
	ctx := ctx30s(t)
	root, err := userClient(t, in.Endpoint(), "root", "rootpw")
	if err != nil {
		t.Fatal(err)
	}
	r, err := root.Put(ctx, "/bar", "z")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Compact(ctx, r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{zk}, Root: in.Root(), Logger: logrus.NewEntry(logrus.New())})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testutil.Eventually(t, 20*time.Second, "a base generation written after the compaction", func() bool {
		base, err := st.ReadBase()
		if err != nil {
			t.Fatal(err)
		}
		return base.Gen > 0
	})
	in.Restart()
	checkAlice(t, in.Endpoint())
}

func TestAuthClientCertificateCommonNameIsTheUser(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	certs := testcerts.New(t)
	in := embedtest.Start(t, []string{zkSrv.Addr()}, fastBcrypt(embedtest.Options{TLS: certs.ServerTLS(t)}))
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{in.Endpoint()}, DialTimeout: 5 * time.Second,
		TLS: certs.ClientTLS(t, true), Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctx30s(t)
	if _, err := c.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RoleAdd(ctx, "bar"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RoleGrantPermission(ctx, "bar", "/bar", "", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserAddWithOptions(ctx, "client", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "client", "bar"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	// Same connection, no token: the certificate's common name is the user.
	if _, err := c.Put(ctx, "/bar", "v"); err != nil {
		t.Fatalf("put as the certificate's user: %v", err)
	}
	if _, err := c.Put(ctx, "/other", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put outside the user's permission: %v", err)
	}
}

// grpcAuth is the auth configuration with tokens from tp and bcrypt cost 5.
func grpcAuth(tp auth.TokenProvider) grpcsrv.AuthConfig {
	return grpcsrv.AuthConfig{Tokens: tp, BcryptCost: 5}
}

func TestConcurrentAuthChangesThroughTwoInstancesAreAllKept(t *testing.T) {
	zk := zkservertest.Standalone(t).Addr()
	a := embedtest.Start(t, []string{zk}, fastBcrypt(embedtest.Options{}))
	b := embedtest.Start(t, []string{zk}, fastBcrypt(embedtest.Options{Root: a.Root()}))
	clients := []*clientv3.Client{a.Client(t), b.Client(t)}
	ctx := ctx30s(t)
	const n = 20
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := clients[i%2].UserAdd(ctx, fmt.Sprintf("user-%02d", i), "pw")
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var revs []int64
	for _, c := range clients {
		l, err := c.UserList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Users) != n {
			t.Fatalf("%d users listed, want %d: %v", len(l.Users), n, l.Users)
		}
		s, err := c.AuthStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, int64(s.AuthRevision))
	}
	if revs[0] != n+1 || revs[1] != n+1 {
		t.Fatalf("auth revisions %v, want %d on both", revs, n+1)
	}
}
