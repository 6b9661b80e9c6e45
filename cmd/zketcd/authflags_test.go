package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuthFlagsAsEtcd(t *testing.T) {
	dir := t.TempDir()
	pubKey, privKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privDer, _ := x509.MarshalPKCS8PrivateKey(privKey)
	pubDer, _ := x509.MarshalPKIXPublicKey(pubKey)
	priv, pub := filepath.Join(dir, "priv"), filepath.Join(dir, "pub")
	_ = os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDer}), 0o600)
	_ = os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDer}), 0o600)
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{args: nil},
		{args: []string{"--auth-token=simple", "--auth-token-ttl=10", "--bcrypt-cost=4"}},
		{args: []string{"--auth-token=jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=EdDSA"}},
		{args: []string{"--auth-token=jwt,pub-key=" + pub + ",sign-method=EdDSA,ttl=10m"}},
		{args: []string{"--auth-token=jwt,priv-key=" + priv + ",sign-method=RS256"}, err: "--auth-token"},
		{args: []string{"--auth-token=jwt,sign-method=ES256"}, err: "missing key data"},
		{args: []string{"--auth-token=jwt,sign-method"}, err: "invalid auth options"},
		{args: []string{"--auth-token=oauth"}, err: "unknown token type"},
		{args: []string{"--bcrypt-cost=3"}, err: "--bcrypt-cost"},
		{args: []string{"--bcrypt-cost=32"}, err: "--bcrypt-cost"},
	} {
		f := parseServeFlags(t, tc.args...)
		cfg, err := f.authConfig()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
		}
		if err == nil {
			cfg.Tokens.Close()
		}
	}
}
