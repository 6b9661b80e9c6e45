package zkstore

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

func quietLogger() *logrus.Entry {
	lg := testutil.Logger(logrus.ErrorLevel)
	return lg
}

func openStore(t *testing.T, cfg Config) (*Store, error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err == nil {
		t.Cleanup(s.Close)
	}
	return s, err
}

// anonymous connects to ZooKeeper with no identity at all.
func anonymous(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// everyZnode lists the root's znodes through s's own session.
func everyZnode(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	stack := []string{s.l.root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		out = append(out, p)
		kids, _, err := s.conn.Children(p)
		if err != nil {
			t.Fatalf("list %s: %v", p, err)
		}
		for _, k := range kids {
			stack = append(stack, child(p, k))
		}
	}
	return out
}

// assertClosed checks that a session without the identity reads none of
// the root's znodes.
func assertClosed(t *testing.T, s *Store, anon *zk.Conn) {
	t.Helper()
	znodes := everyZnode(t, s)
	if len(znodes) < 10 {
		t.Fatalf("only %d znodes under the root", len(znodes))
	}
	for _, p := range znodes {
		if _, _, err := anon.Get(p); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("a session without the identity read %s: %v, want no auth", p, err)
		}
	}
}

func TestAddingAnIdentityReACLsEveryZnodeOfAnOpenRoot(t *testing.T) {
	srv := zkservertest.Standalone(t)
	root := "/acl-add"
	open, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if r := open.ACLReport(); !r.WorldReadable || r.Identity != "" {
		t.Fatalf("a root opened without an identity reports %+v, want world-readable", r)
	}
	// Some znodes below the fixed ones: a bucket, entries, a lease.
	for _, p := range []string{root + "/log/0000000001", root + "/log/0000000001/x", root + "/leases/0000000000000007"} {
		if _, err := open.conn.Create(p, []byte("secret"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	anon := anonymous(t, srv.Addr())
	if _, _, err := anon.Get(root + "/log/0000000001/x"); err != nil {
		t.Fatalf("the open root is not readable to anyone: %v", err)
	}
	open.Close()

	s, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:zketcd:s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.ACLReport(); r.WorldReadable || r.Identity != "digest:zketcd" {
		t.Fatalf("after the re-ACL the report is %+v", r)
	}
	assertClosed(t, s, anon)
	if checked, wrong, err := s.CheckACL(context.Background()); err != nil || wrong != 0 || checked < 13 {
		t.Fatalf("CheckACL: %d checked, %d wrong, %v", checked, wrong, err)
	}
	// No instance without the identity opens the root any more, and it
	// says which flag is missing.
	if _, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root}); !errors.Is(err, ErrACL) || !strings.Contains(err.Error(), "--zk-auth") {
		t.Fatalf("open without the identity: %v", err)
	}
}

// TestWorldReadableIsJudgedBeyondTheRootsOwnACL: the report follows what
// a reader can reach, not the root's ACL alone. Without an identity a root
// closed by hand stays world-readable (every znode the store creates is
// open); with one, a fixed znode opened by hand makes the root
// world-readable at the next check, naming the znode.
func TestWorldReadableIsJudgedBeyondTheRootsOwnACL(t *testing.T) {
	srv := zkservertest.Standalone(t)
	admin := anonymous(t, srv.Addr())
	closed := "/acl-closed-by-hand"
	if _, err := admin.Create(closed, nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: "127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	s, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: closed})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.ACLReport(); !r.WorldReadable || !strings.Contains(r.ACL, "'ip,'127.0.0.1") {
		t.Fatalf("a root closed by hand, without an identity: %+v, want world-readable, naming the root's own ACL", r)
	}

	withID, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: "/acl-opened-by-hand", Auth: []string{"digest:zketcd:s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := withID.ACLReport(); r.WorldReadable {
		t.Fatalf("a root with an identity: %+v", r)
	}
	if _, err := withID.conn.SetACL(withID.l.meta(), zk.WorldACL(zk.PermRead), -1); err != nil {
		t.Fatal(err)
	}
	if err := withID.refreshACL(); err != nil {
		t.Fatal(err)
	}
	if r := withID.ACLReport(); !r.WorldReadable || !strings.Contains(r.ACL, withID.l.meta()) {
		t.Fatalf("meta opened by hand: %+v, want world-readable naming it", r)
	}
}

// TestAReACLAsksForTheTokenSecretToBeRotated: re-ACLing an open root
// leaves the rekey znode; it is pending for an instance with the identity
// only once the re-ACL is complete (the root's own ACL is set last), never
// for one without an identity, and RekeyDone withdraws it.
func TestAReACLAsksForTheTokenSecretToBeRotated(t *testing.T) {
	srv := zkservertest.Standalone(t)
	root := "/acl-rekey"
	open, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := open.RekeyPending(); err != nil || pending {
		t.Fatalf("an open root: pending %v, %v", pending, err)
	}
	open.Close()
	s, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:zketcd:s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := s.RekeyPending(); err != nil || !pending {
		t.Fatalf("after the re-ACL at open: pending %v, %v; want pending", pending, err)
	}
	// A walk not complete yet: the root's own ACL is still the former one.
	if _, err := s.conn.SetACL(root, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	if pending, err := s.RekeyPending(); err != nil || pending {
		t.Fatalf("while the root is not closed yet: pending %v, %v", pending, err)
	}
	if _, err := s.conn.SetACL(root, s.acl, -1); err != nil {
		t.Fatal(err)
	}
	if err := s.RekeyDone(); err != nil {
		t.Fatal(err)
	}
	if pending, err := s.RekeyPending(); err != nil || pending {
		t.Fatalf("after RekeyDone: pending %v, %v", pending, err)
	}
	if err := s.RekeyDone(); err != nil {
		t.Fatalf("RekeyDone again: %v", err)
	}
	// zketcd zk-acl's path: an inspector's ReACL asks for it too.
	in, err := OpenInspector(context.Background(), Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:zketcd:s3cret"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.ReACL(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if pending, err := s.RekeyPending(); err != nil || !pending {
		t.Fatalf("after zk-acl's re-ACL: pending %v, %v; want pending", pending, err)
	}
}

// TestReACLClosesZnodesCreatedDuringTheWalk: an instance still running
// without the identity creates a log entry in a bucket after the walk
// listed the bucket and before it closed it; the re-ACL closes that entry
// too, so that no open znode is left once every instance restarted with
// the identity (the start check reads only the fixed znodes' ACLs).
func TestReACLClosesZnodesCreatedDuringTheWalk(t *testing.T) {
	srv := zkservertest.Standalone(t)
	root := "/acl-race"
	open, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	bucket := root + "/log/0000000001"
	if _, err := open.conn.Create(bucket, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	s, err := openRaw(context.Background(), Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:zketcd:s3cret"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	late := bucket + "/0000000000000042"
	var once sync.Once
	s.listed = func(p string) {
		if p != bucket {
			return
		}
		once.Do(func() {
			if _, err := open.conn.Create(late, []byte("secret"), 0, zk.WorldACL(zk.PermAll)); err != nil {
				t.Errorf("the open instance's entry: %v", err)
			}
		})
	}
	if _, err := s.ReACL(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	anon := anonymous(t, srv.Addr())
	if _, _, err := anon.Get(late); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("the entry created while the walk ran is readable without the identity: %v", err)
	}
	assertClosed(t, s, anon)
}

func TestChangingTheIdentityNeedsTheFormerOne(t *testing.T) {
	srv := zkservertest.Standalone(t)
	root := "/acl-change"
	a, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:old:pw1"}})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	_, err = openStore(t, Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:new:pw2"}})
	if !errors.Is(err, ErrACL) || !strings.Contains(err.Error(), "zk-acl") {
		t.Fatalf("open with another identity: %v, want an ACL error naming zketcd zk-acl", err)
	}
	b, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:new:pw2"}, FormerAuth: []string{"digest:old:pw1"}})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:old:pw1"}}); !errors.Is(err, ErrACL) {
		t.Fatalf("the former identity still opens the root: %v", err)
	}
	if _, err := openStore(t, Config{Servers: []string{srv.Addr()}, Root: root, Auth: []string{"digest:new:pw2"}}); err != nil {
		t.Fatalf("the new identity alone: %v", err)
	}
}

func TestIdentitySpecsAreCheckedAndNeverEchoTheCredential(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string
	}{
		{"ip:127.0.0.1", "unknown zookeeper identity scheme"},
		{"super:hunter2", "unknown zookeeper identity scheme"},
		{"digest:onlyuser", "want digest:user:password"},
		{"sasl:", "want sasl:user:password"},
		{"x509", "needs a TLS client certificate"},
		{"x509:hunter2", "takes no credential"},
	} {
		_, err := parseIdentity(tc.spec, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.spec, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the credential: %v", tc.spec, err)
		}
	}
	if _, _, err := parseIdentities(Config{Auth: []string{"digest:a:b", "digest:c:d"}}); err == nil {
		t.Error("two identities were accepted")
	}
}

func TestJavaRFC2253NamesAsZooKeeperDoes(t *testing.T) {
	certs := testcerts.New(t)
	for _, tc := range []struct {
		subject pkix.Name
		want    string
	}{
		{pkix.Name{CommonName: "zketcd"}, "CN=zketcd"},
		{pkix.Name{CommonName: "zketcd", Organization: []string{"Example, Inc."}, Country: []string{"DE"}}, `CN=zketcd,O=Example\, Inc.,C=DE`},
		{pkix.Name{CommonName: " a=b#c ", OrganizationalUnit: []string{"ops"}}, `CN=\ a\=b\#c\ ,OU=ops`},
		{pkix.Name{CommonName: "x", SerialNumber: "42"}, "2.5.4.5=#13023432,CN=x"},
	} {
		cert := certs.ClientWithSubject(t, tc.subject)
		id, err := parseIdentity("x509", &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			t.Fatal(err)
		}
		if id.user != tc.want {
			t.Errorf("subject %v: %q, want %q", tc.subject, id.user, tc.want)
		}
	}
}

func TestDigestMD5ResponseIsRFC2831s(t *testing.T) {
	// The example of RFC 2831 section 4.
	challenge := `realm="elwood.innosoft.com",nonce="OA6MG9tEQGm2hh",qop="auth",algorithm=md5-sess,charset=utf-8`
	resp, rspauth, err := digestMD5Response([]byte(challenge), "chris", "secret", "imap/elwood.innosoft.com", []byte("OA6MHXh6VqTrRk"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(resp), "response=d388dad90d4bbd760a152321f2143af7") {
		t.Errorf("response %s", resp)
	}
	if rspauth != "ea40f60335c427b5527b84dbabcdfffd" {
		t.Errorf("rspauth %s", rspauth)
	}
	if _, _, err := digestMD5Response([]byte(`qop="auth-conf"`), "u", "p", "x/y", nil); err == nil {
		t.Error("a challenge without a nonce or qop=auth was answered")
	}
}

// secureZooKeeper starts a ZooKeeper with a secure client port that
// authenticates client certificates as x509 identities, and SASL
// DIGEST-MD5 for user zketcd (password sasl-pw) on its plain port.
func secureZooKeeper(t *testing.T, certs *testcerts.Set) (srv *zkserver.Server, plain, secure string) {
	t.Helper()
	dir := t.TempDir()
	jaas := filepath.Join(dir, "jaas.conf")
	if err := os.WriteFile(jaas, []byte("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_zketcd=\"sasl-pw\";\n};\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, secure := zkservertest.SecureOptions(t, certs)
	opts.SystemProps["java.security.auth.login.config"] = jaas
	opts.ExtraConfig["authProvider.x509"] = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
	opts.ExtraConfig["authProvider.sasl"] = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
	srv = zkservertest.StandaloneWith(t, opts)
	return srv, srv.Addr(), secure
}

func TestX509AndSASLIdentitiesCloseTheRoot(t *testing.T) {
	certs := testcerts.New(t)
	srv, plain, secure := secureZooKeeper(t, certs)
	anon := anonymous(t, plain)

	t.Run("x509", func(t *testing.T) {
		cert := certs.ClientWithSubject(t, pkix.Name{CommonName: "zketcd, node", Organization: []string{"Example"}})
		cfg := &tls.Config{RootCAs: certs.CA, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s, err := openStore(t, Config{Servers: []string{secure}, Root: "/acl-x509", TLS: cfg, Auth: []string{"x509"}})
		if err != nil {
			t.Fatal(err)
		}
		acl, _, err := s.conn.GetACL("/acl-x509/meta")
		if err != nil || len(acl) != 1 || acl[0].Scheme != "x509" || acl[0].ID != `CN=zketcd\, node,O=Example` {
			t.Fatalf("meta's ACL: %+v %v", acl, err)
		}
		assertClosed(t, s, anon)
		// Another certificate of the same CA is another identity.
		other := certs.ClientWithSubject(t, pkix.Name{CommonName: "intruder"})
		ocfg := &tls.Config{RootCAs: certs.CA, Certificates: []tls.Certificate{other}, MinVersion: tls.VersionTLS12}
		if _, err := openStore(t, Config{Servers: []string{secure}, Root: "/acl-x509", TLS: ocfg, Auth: []string{"x509"}}); !errors.Is(err, ErrACL) {
			t.Fatalf("another certificate opened the root: %v", err)
		}
	})
	t.Run("sasl", func(t *testing.T) {
		s, err := openStore(t, Config{Servers: []string{plain}, Root: "/acl-sasl", Auth: []string{"sasl:zketcd:sasl-pw"}})
		if err != nil {
			t.Fatal(err)
		}
		acl, _, err := s.conn.GetACL("/acl-sasl/head")
		if err != nil || len(acl) != 1 || acl[0].Scheme != "sasl" || acl[0].ID != "zketcd" {
			t.Fatalf("head's ACL: %+v %v", acl, err)
		}
		assertClosed(t, s, anon)
		// A new connection (ZooKeeper restarted) authenticates again.
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for {
			_, _, err := s.conn.Get("/acl-sasl/meta")
			if err == nil {
				break
			}
			if errors.Is(err, zk.ErrNoAuth) || ctx.Err() != nil {
				t.Fatalf("read after reconnecting: %v (SASL not run again?)", err)
			}
			select { // the next session change, or poll again
			case <-s.SessionChanged():
			case <-time.After(100 * time.Millisecond):
			}
		}
		_, err = openStore(t, Config{Servers: []string{plain}, Root: "/acl-sasl", Auth: []string{"sasl:zketcd:bad-secret-9"}, SessionTimeout: 4 * time.Second})
		if !errors.Is(err, ErrACL) || !strings.Contains(err.Error(), "SASL") {
			t.Fatalf("a wrong SASL password: %v", err)
		}
		if strings.Contains(err.Error(), "bad-secret-9") {
			t.Fatalf("the error shows the password: %v", err)
		}
	})
}
