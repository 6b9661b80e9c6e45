package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestRVReadsARootOverTLSWithTheIdentityFromAFile: `zketcd rv` reaches a
// root as serve does — ZooKeeper's secure client port with a client
// certificate, the identity from --zk-auth-file (never on the command
// line) — and without the identity it is refused by the root's ACL.
func TestRVReadsARootOverTLSWithTheIdentityFromAFile(t *testing.T) {
	certs := testcerts.New(t)
	opts, secure := zkservertest.SecureOptions(t, certs)
	zkservertest.StandaloneWith(t, opts)
	waitTLS(t, secure, certs.ClientTLS(t, true))
	const identity = "digest:zketcd:rv-test-secret"
	in := embedtest.Start(t, []string{secure}, embedtest.Options{ZKTLS: certs.ClientTLS(t, true), ZKAuth: []string{identity}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put, err := in.Client(t).Put(ctx, "rv-key", "v")
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	authFile := filepath.Join(t.TempDir(), "zk-auth")
	if err := os.WriteFile(authFile, []byte(identity+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFlags := []string{"--zk-tls-ca-file", certs.CAFile, "--zk-tls-cert-file", certs.ClientCert, "--zk-tls-key-file", certs.ClientKey}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"identity from a file over TLS", append([]string{"--zk-auth-file", authFile}, tlsFlags...), ""},
		{"no identity", tlsFlags, "ACL"},
		{"identity without TLS on the secure port", []string{"--zk-auth-file", authFile}, "zookeeper"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--zk", secure, "--zk-root", in.Root(), "--zk-session-timeout", "4s"}, tc.args...)
			args = append(args, "rv-key")
			var out bytes.Buffer
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			defer rcancel()
			err := rv(rctx, args, &out)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("rv %q: %v", args, err)
				}
				row := ""
				for _, l := range strings.Split(out.String(), "\n") {
					if strings.HasPrefix(l, "rv-key ") {
						row = l
					}
				}
				if f := strings.Fields(row); len(f) < 3 || f[2] != strconv.FormatInt(put.Header.Revision, 10) {
					t.Fatalf("no row for rv-key at mod revision %d:\n%s", put.Header.Revision, out.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("rv %q succeeded:\n%s", args, out.String())
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.wantErr)) {
				t.Fatalf("rv %q: %v (want an error mentioning %q)", args, err, tc.wantErr)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// waitTLS waits until addr completes a TLS handshake with cfg: ZooKeeper
// opens its secure client port after the plain one zkservertest waits for.
func waitTLS(t *testing.T, addr string, cfg *tls.Config) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ZooKeeper's secure port %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
