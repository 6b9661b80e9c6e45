package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

func TestCredsKeepsExistingFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	token, _ := os.ReadFile(filepath.Join(dir, "token"))
	csv, _ := os.ReadFile(filepath.Join(dir, "tokens.csv"))
	if len(token) != 48 || string(csv) != string(token)+",admin,admin-uid,system:masters\n" {
		t.Fatalf("token %q, tokens.csv %q", token, csv)
	}
	key, _ := os.ReadFile(filepath.Join(dir, "sa.key"))
	pub, _ := os.ReadFile(filepath.Join(dir, "sa.pub"))
	kb, _ := pem.Decode(key)
	pb, _ := pem.Decode(pub)
	if kb == nil || pb == nil {
		t.Fatal("sa.key or sa.pub is not PEM")
	}
	if _, err := x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
		t.Fatal(err)
	}
	if _, err := x509.ParsePKIXPublicKey(pb.Bytes); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "zketcd-kubeinit")); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("binary not copied: %v", err)
	}
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	token2, _ := os.ReadFile(filepath.Join(dir, "token"))
	key2, _ := os.ReadFile(filepath.Join(dir, "sa.key"))
	if string(token2) != string(token) || string(key2) != string(key) {
		t.Fatal("a second run replaced the token or the key")
	}
}

// TestCredsWritesTheMastersTokenForItsOwnerOnly: the token (worth
// system:masters), tokens.csv and the service account key are 0600, also
// when an earlier run left them world-readable.
func TestCredsWritesTheMastersTokenForItsOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	check := func() {
		t.Helper()
		for _, name := range []string{"token", "tokens.csv", "sa.key"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
			}
		}
	}
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	check()
	for _, name := range []string{"token", "tokens.csv"} {
		if err := os.Chmod(filepath.Join(dir, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	check()
}

// TestCredsWritesZketcdsSecretsWhenAsked: with ZKETCD_SECRETS_DIR, creds
// also writes zketcd's ZooKeeper identity and token secret there, 0600,
// and keeps them across runs.
func TestCredsWritesZketcdsSecretsWhenAsked(t *testing.T) {
	secrets := filepath.Join(t.TempDir(), "zketcd")
	t.Setenv(secretsDirEnv, secrets)
	t.Setenv(secretsOwnerEnv, fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()))
	dir := filepath.Join(t.TempDir(), "creds")
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	id, _ := os.ReadFile(filepath.Join(secrets, "zk-auth"))
	key, _ := os.ReadFile(filepath.Join(secrets, "token.secret"))
	if !strings.HasPrefix(string(id), "digest:zketcd:") || len(strings.TrimSpace(string(key))) != 64 {
		t.Fatalf("zk-auth %q, token.secret %q", id, key)
	}
	for _, name := range []string{"zk-auth", "token.secret"} {
		if fi, err := os.Stat(filepath.Join(secrets, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", name, fi, err)
		}
	}
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(secrets, "zk-auth")); string(again) != string(id) {
		t.Fatal("a second run replaced the ZooKeeper identity (the root would be locked out)")
	}
}

func TestProbe(t *testing.T) {
	ok := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.Write([]byte("ok"))
			return
		}
		http.Error(w, "[-]etcd failed", http.StatusServiceUnavailable)
	}))
	defer ok.Close()
	if err := probe(ok.URL+"/readyz", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	err := probe(ok.URL+"/livez", 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("probe of a 503: %v", err)
	}
}

// TestCredsMakesTheStacksTLSAndAuthTurnsItOn: with ZKETCD_SECRETS_DIR,
// creds writes a CA, zketcd's serving certificate (valid for its service
// name and the host's loopback) and the client certificates of
// kube-apiserver and root, keeps them on a second run; auth then turns
// etcd's authentication on at a zketcd requiring those certificates, once,
// after which kube-apiserver's certificate is served as its user.
func TestCredsMakesTheStacksTLSAndAuthTurnsItOn(t *testing.T) {
	secrets := filepath.Join(t.TempDir(), "zketcd")
	t.Setenv(secretsDirEnv, secrets)
	t.Setenv(secretsOwnerEnv, fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()))
	dir := filepath.Join(t.TempDir(), "creds")
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(read(filepath.Join(dir, "ca.crt"))) || string(read(filepath.Join(secrets, "ca.crt"))) != string(read(filepath.Join(dir, "ca.crt"))) {
		t.Fatal("no CA, or two")
	}
	parse := func(p string) *x509.Certificate {
		t.Helper()
		b, _ := pem.Decode(read(p))
		if b == nil {
			t.Fatalf("%s: not PEM", p)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	server := parse(filepath.Join(secrets, "zketcd.crt"))
	for _, name := range []string{"zketcd", "localhost", "127.0.0.1"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("zketcd's certificate for %s: %v", name, err)
		}
	}
	for _, user := range []string{"kube-apiserver", "root"} {
		c := parse(filepath.Join(dir, user+".crt"))
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || c.Subject.CommonName != user {
			t.Errorf("%s's certificate: CN %q, %v", user, c.Subject.CommonName, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, user+".key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v %v", user, fi, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(secrets, "zketcd.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("zketcd.key: %v %v", fi, err)
	}
	before := read(filepath.Join(secrets, "zketcd.crt"))
	if err := creds(dir); err != nil {
		t.Fatal(err)
	}
	if string(read(filepath.Join(secrets, "zketcd.crt"))) != string(before) {
		t.Fatal("a second run replaced the certificates")
	}

	serving, err := tls.LoadX509KeyPair(filepath.Join(secrets, "zketcd.crt"), filepath.Join(secrets, "zketcd.key"))
	if err != nil {
		t.Fatal(err)
	}
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{TLS: &tls.Config{
		Certificates: []tls.Certificate{serving}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}})
	url := "https://" + in.Endpoint()
	for range 2 { // the second run finds it on
		if err := enableAuth(t.Context(), url, dir, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientTLS(dir, "kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{in.Endpoint()}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := c.AuthStatus(ctx)
	if err != nil || !st.Enabled {
		t.Fatalf("auth status: %+v %v", st, err)
	}
	if _, err := c.Put(ctx, "/registry/x", "y"); err != nil {
		t.Fatalf("kube-apiserver's certificate: %v", err)
	}
	if _, err := c.Compact(ctx, 1); err != nil && !strings.Contains(err.Error(), "compacted") {
		t.Fatalf("kube-apiserver's compaction (root only): %v", err)
	}
}
