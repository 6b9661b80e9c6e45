package main

import (
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
