package diff_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	etcdembed "go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/diff"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/grpcsrv"
)

// TestDiffAuthOff compares the Auth service with authentication disabled.
func TestDiffAuthOff(t *testing.T) {
	diff.Runner{A: diff.EtcdFactory(), B: zketcdFactory(), KeepGoing: true}.Run(t, diff.AuthOffScenarios())
}

// TestDiffAuthOn compares every RPC with authentication enabled, as a
// permitted and a forbidden user.
func TestDiffAuthOn(t *testing.T) {
	diff.Runner{A: diff.EtcdFactory(), B: zketcdFactory(), KeepGoing: true}.Run(t, diff.AuthOnScenarios())
}

// TestDiffAuthOnJWT runs the auth-on scenarios with JWT tokens (the same
// ES256 keys on both servers), where tokens carry their auth revision.
func TestDiffAuthOnJWT(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	pubDer, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	priv, pub := filepath.Join(dir, "priv.pem"), filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDer}), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := "jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=ES256"
	etcd := diff.EtcdFactory(etcdoracle.WithConfig(func(c *etcdembed.Config) { c.AuthToken = opts }))
	zk := diff.EndpointFactory("zketcd", func(t testing.TB) string {
		return embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Configure: func(c *embed.Config) {
			tp, err := auth.NewTokenProvider(opts, 0)
			if err != nil {
				t.Fatal(err)
			}
			c.GRPC.Auth = grpcsrv.AuthConfig{Tokens: tp}
		}}).Endpoint()
	})
	diff.Runner{A: etcd, B: zk, KeepGoing: true}.Run(t, diff.AuthOnScenarios())
}

// TestDiffAuthTokenTTL runs both servers with simple tokens that live 1 s
// after their last use (etcd's --auth-token-ttl).
func TestDiffAuthTokenTTL(t *testing.T) {
	etcd := diff.EtcdFactory(etcdoracle.WithConfig(func(c *etcdembed.Config) { c.AuthTokenTTL = 1 }))
	zk := diff.EndpointFactory("zketcd", func(t testing.TB) string {
		return embedtest.Start(t, []string{sharedZK.Addr(t)}, embedtest.Options{Configure: func(c *embed.Config) {
			tp, err := auth.NewTokenProvider("simple", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.GRPC.Auth = grpcsrv.AuthConfig{Tokens: tp}
		}}).Endpoint()
	})
	diff.Runner{A: etcd, B: zk, KeepGoing: true}.Run(t, diff.AuthTokenTTLScenarios())
}
