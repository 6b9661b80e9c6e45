package embed_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// ecKeyFiles writes a P-256 key pair as etcd's pub-key and priv-key files.
func ecKeyFiles(t *testing.T) (pub, priv string, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	pubDer, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	dir := t.TempDir()
	priv, pub = filepath.Join(dir, "priv.pem"), filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDer}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pub, priv, key
}

// jwtOptions runs an instance with JWT tokens from opts (etcd's
// --auth-token value) and bcrypt cost 5.
func jwtOptions(t *testing.T, opts string, o embedtest.Options) embedtest.Options {
	o.Configure = func(c *embed.Config) {
		tp, err := auth.NewTokenProvider(opts, 0)
		if err != nil {
			t.Fatal(err)
		}
		c.GRPC.Auth = grpcAuth(tp)
	}
	return o
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "token", tok)
}

func TestAuthJWTIssuedByOneInstanceIsHonouredByAnotherAndForgeriesAreNot(t *testing.T) {
	pub, priv, _ := ecKeyFiles(t)
	opts := "jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=ES256,ttl=2s"
	zk := zkservertest.Standalone(t).Addr()
	a := embedtest.Start(t, []string{zk}, jwtOptions(t, opts, embedtest.Options{}))
	b := embedtest.Start(t, []string{zk}, jwtOptions(t, opts, embedtest.Options{Root: a.Root()}))
	enableAuth(t, a.Client(t))
	ctx := ctx30s(t)

	// The bcrypt cost configured is the cost of the stored hash.
	raw, _ := a.Engine().AuthState()
	st, err := auth.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost(st.User("alice").Password); err != nil || cost != 5 {
		t.Fatalf("alice's hash: cost %d, %v; want 5", cost, err)
	}

	ac := pb.NewAuthClient(a.Client(t).ActiveConnection())
	for _, pw := range []string{"", "alicepw ", "ALICEPW", "x"} {
		if _, err := ac.Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: pw}); !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
			t.Fatalf("password %q: %v", pw, err)
		}
	}
	resp, err := ac.Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	if err != nil {
		t.Fatal(err)
	}
	kvB := pb.NewKVClient(b.Client(t).ActiveConnection())
	if _, err := kvB.Range(withToken(ctx, resp.Token), &pb.RangeRequest{Key: []byte("/foo/a")}); err != nil {
		t.Fatalf("a's token on b: %v", err)
	}

	// Forgeries: another key, no signature, an altered payload, garbage.
	_, _, other := ecKeyFiles(t)
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"username": "root", "revision": 100, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(other)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"username": "root", "revision": 100}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	altered := []byte(resp.Token)
	altered[len(altered)/2] ^= 1
	for name, tok := range map[string]string{"other key": forged, "none": none, "altered": string(altered), "garbage": "a.b.c", "empty": ""} {
		if _, err := kvB.Range(withToken(ctx, tok), &pb.RangeRequest{Key: []byte("/foo/a")}); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
			t.Errorf("%s token: %v, want invalid auth token", name, err)
		}
	}

	// Expired (ttl=2s; a JWT's expiry is whole seconds of the wall clock).
	testutil.Eventually(t, 5*time.Second, "the token refused once expired", func() bool {
		_, err := kvB.Range(withToken(ctx, resp.Token), &pb.RangeRequest{Key: []byte("/foo/a")})
		if err != nil && !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
			t.Fatalf("expired token: %v, want invalid auth token", err)
		}
		return err != nil
	})
}
