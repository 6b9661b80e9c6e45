package main

import (
	"crypto/tls"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/internal/testutil/testcerts"
)

func parseServeFlags(t *testing.T, args ...string) serveFlags {
	t.Helper()
	var f serveFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs, true)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	if f.lossDir == "" {
		f.lossDir = t.TempDir() // not the machine's durable default
	}
	return f
}

func TestTLSVersionAndCipherSuiteFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		min, max uint16
		suites   []uint16
		insecure []string
		err      string
	}{
		{name: "defaults are TLS1.2 and Go's suites", min: tls.VersionTLS12},
		{name: "TLS1.3 only", args: []string{"--tls-min-version=TLS1.3"}, min: tls.VersionTLS13},
		{name: "TLS1.2 only", args: []string{"--tls-max-version=TLS1.2"}, min: tls.VersionTLS12, max: tls.VersionTLS12},
		{name: "empty min defers to Go", args: []string{"--tls-min-version="}},
		{
			name: "suites in the given order, Go and IANA names",
			args: []string{"--cipher-suites", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
			min:  tls.VersionTLS12,
			suites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
				tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		},
		{
			name:   "etcd's ChaCha20 aliases",
			args:   []string{"--cipher-suites", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"},
			min:    tls.VersionTLS12,
			suites: []uint16{tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256},
		},
		{
			name:     "insecure suites are accepted and reported",
			args:     []string{"--cipher-suites", "TLS_RSA_WITH_RC4_128_SHA"},
			min:      tls.VersionTLS12,
			suites:   []uint16{tls.TLS_RSA_WITH_RC4_128_SHA},
			insecure: []string{"TLS_RSA_WITH_RC4_128_SHA"},
		},
		{name: "unknown suite", args: []string{"--cipher-suites", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_NOPE"}, err: `unknown TLS cipher suite "TLS_NOPE"`},
		{
			// As etcd: accepted, though Go always picks TLS 1.3 suites itself.
			name:   "TLS 1.3 suite names are accepted",
			args:   []string{"--cipher-suites", "TLS_AES_128_GCM_SHA256"},
			min:    tls.VersionTLS12,
			suites: []uint16{tls.TLS_AES_128_GCM_SHA256},
		},
		{name: "unknown min version", args: []string{"--tls-min-version=TLS1.1"}, err: "--tls-min-version: unknown TLS version"},
		{name: "unknown max version", args: []string{"--tls-max-version=1.3"}, err: "--tls-max-version: unknown TLS version"},
		{name: "min above max", args: []string{"--tls-min-version=TLS1.3", "--tls-max-version=TLS1.2"}, err: "is above --tls-max-version"},
		{
			name: "suites with TLS1.3 only",
			args: []string{"--tls-min-version=TLS1.3", "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"},
			err:  "cannot be set when --tls-min-version is TLS1.3",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parseServeFlags(t, tc.args...)
			cfg, err := f.tlsConfig() // no certificate: only the checks run
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || cfg != nil {
				t.Fatalf("tlsConfig without a certificate: %v, %v", cfg, err)
			}
			minV, maxV, suites, insecure, err := f.tlsVersions()
			if err != nil {
				t.Fatal(err)
			}
			if minV != tc.min || maxV != tc.max || !slices.Equal(suites, tc.suites) || !slices.Equal(insecure, tc.insecure) {
				t.Fatalf("got min %x max %x suites %x insecure %v, want %x %x %x %v",
					minV, maxV, suites, insecure, tc.min, tc.max, tc.suites, tc.insecure)
			}
		})
	}
}

func TestTLSConfigAppliesVersionsAndSuites(t *testing.T) {
	certs := testcerts.New(t)
	f := parseServeFlags(t, "--cert-file", certs.ServerCert, "--key-file", certs.ServerKey,
		"--tls-max-version=TLS1.2", "--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")
	cfg, err := f.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.MaxVersion != tls.VersionTLS12 ||
		!slices.Equal(cfg.CipherSuites, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}) {
		t.Fatalf("config: min %x max %x suites %x", cfg.MinVersion, cfg.MaxVersion, cfg.CipherSuites)
	}
	// The empty minimum is etcd's TLS 1.2 floor, never Go's older default.
	f = parseServeFlags(t, "--cert-file", certs.ServerCert, "--key-file", certs.ServerKey, "--tls-min-version=")
	if cfg, err = f.tlsConfig(); err != nil || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("empty --tls-min-version: %v %v", cfg, err)
	}
}

func TestRequestLimitFlags(t *testing.T) {
	f := parseServeFlags(t)
	if f.maxConcurrentRequests != 10000 || f.handshakeTimeout.Seconds() != 20 {
		t.Fatalf("defaults: --max-concurrent-requests %d --grpc-handshake-timeout %v", f.maxConcurrentRequests, f.handshakeTimeout)
	}
	f = parseServeFlags(t, "--max-concurrent-requests=0", "--grpc-handshake-timeout=3s")
	if f.maxConcurrentRequests != 0 || f.handshakeTimeout.Seconds() != 3 {
		t.Fatalf("set: %d %v", f.maxConcurrentRequests, f.handshakeTimeout)
	}
}

// TestLossDirectoryIsDurableByDefault: loss files never default to the
// temporary directory (systemd's PrivateTmp= would drop them): systemd's
// StateDirectory, else /var/lib/zketcd/loss; the flag wins.
func TestLossDirectoryIsDurableByDefault(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "")
	var f serveFlags
	if got := f.lossDirectory(); got != defaultLossDir {
		t.Errorf("default %q, want %q", got, defaultLossDir)
	}
	t.Setenv("STATE_DIRECTORY", "/var/lib/zketcd:/var/lib/other")
	if got := f.lossDirectory(); got != "/var/lib/zketcd/loss" {
		t.Errorf("under StateDirectory: %q", got)
	}
	f.lossDir = "/srv/loss"
	if got := f.lossDirectory(); got != "/srv/loss" {
		t.Errorf("with the flag: %q", got)
	}
	if err := checkLossDir(filepath.Join(t.TempDir(), "a", "b")); err != nil {
		t.Errorf("a creatable directory: %v", err)
	}
	if err := checkLossDir("/proc/zketcd-loss"); err == nil {
		t.Error("an impossible directory passed the check")
	}
}
