package main

import (
	"context"
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestServeTLSMinVersion13RefusesTLS12Client runs "serve" with
// --tls-min-version=TLS1.3: a client capped at TLS 1.2 fails its
// handshake, a TLS 1.3 client is served.
func TestServeTLSMinVersion13RefusesTLS12Client(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	certs := testcerts.New(t)
	addr := embedtest.FreeAddr(t)
	f := parseServeFlags(t, "--zk", zkSrv.Addr(), "--zk-root", "/serve-tls13",
		"--listen-client-urls", "https://"+addr, "--log-level", "warn",
		"--cert-file", certs.ServerCert, "--key-file", certs.ServerKey,
		"--trusted-ca-file", certs.CAFile, "--client-cert-auth",
		"--tls-min-version", "TLS1.3")
	ctx := serveUntilDone(t, f)

	put := func(maxVersion uint16) error {
		cfg := certs.ClientTLS(t, true)
		cfg.MaxVersion = maxVersion
		c, err := clientv3.New(clientv3.Config{
			Endpoints: []string{addr}, DialTimeout: 3 * time.Second, TLS: cfg, Logger: zap.NewNop(),
		})
		if err != nil {
			return err
		}
		defer c.Close()
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		defer pcancel()
		_, err = c.Put(pctx, "k", "v")
		return err
	}
	if err := put(tls.VersionTLS12); err == nil {
		t.Fatal("a client limited to TLS 1.2 was served with --tls-min-version=TLS1.3")
	}
	if err := put(tls.VersionTLS13); err != nil {
		t.Fatalf("TLS 1.3 client: %v", err)
	}
	// The refusal is the handshake's, not the server's health.
	raw, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: certs.CA, MaxVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
	if err == nil {
		raw.Close()
		t.Fatal("TLS 1.2 handshake succeeded")
	}
	t.Logf("TLS 1.2 handshake: %v", err)
}

// serveUntilDone runs "serve" with f until the test ends (it must then stop
// without an error) and returns once it is ready; the context is canceled
// when the test ends.
func serveUntilDone(t *testing.T, f serveFlags) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- serve(ctx, f, func() { close(ready) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not become ready")
	}
	return ctx
}

// TestCORSOriginsAreCheckedAsEtcdChecksThem: --cors takes exactly the
// values etcd 3.7.3's flag parser takes (the accepted and refused values
// below are its answers), in the form it keeps them, and the refusal of an
// origin without a port (which etcd refuses too) says what to write.
func TestCORSOriginsAreCheckedAsEtcdChecksThem(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string // nil: refused
		hint string   // the refusal names it
	}{
		{in: []string{"*"}, want: []string{"*"}},
		{in: nil, want: []string{}},
		{in: []string{"http://a.example:80", "https://b.example:8443"}, want: []string{"http://a.example:80", "https://b.example:8443"}},
		{in: []string{"HTTP://a.example:80"}, want: []string{"http://a.example:80"}},
		{in: []string{"http://a.example:"}, want: []string{"http://a.example:"}},
		{in: []string{"http://a.example:80?x=1"}, want: []string{"http://a.example:80?x=1"}},
		{in: []string{"http://[::1]:8080"}, want: []string{"http://[::1]:8080"}},
		{in: []string{"unix://local.sock"}, want: []string{"unix://local.sock"}},
		{in: []string{"http://good.example"}, hint: "http://good.example:80"},
		{in: []string{"https://good.example"}, hint: "https://good.example:443"},
		{in: []string{"a.example:80"}},
		{in: []string{"ftp://a.example:21"}},
		{in: []string{"http://a.example:80/ui"}},
		{in: []string{"http://a.example/"}},
	} {
		got, err := corsOrigins(tc.in)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("corsOrigins(%q) = %q, want it refused (etcd refuses it)", tc.in, got)
		case tc.want == nil && !strings.Contains(err.Error(), tc.hint):
			t.Errorf("corsOrigins(%q): %v, want the error to name %q", tc.in, err, tc.hint)
		case tc.want != nil && err != nil:
			t.Errorf("corsOrigins(%q): %v (etcd accepts it)", tc.in, err)
		case tc.want != nil && !slices.Equal(got, tc.want):
			t.Errorf("corsOrigins(%q) = %q, want %q (etcd's form)", tc.in, got, tc.want)
		}
	}
}
