package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// parseWithConfig parses args and the environment, then the config file
// with the given YAML (written to a temp file, passed as --config-file).
func parseWithConfig(t *testing.T, yml string, args ...string) (serveFlags, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "zketcd.conf.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	var f serveFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs, true)
	err := f.parse(fs, append([]string{"--config-file", path}, args...))
	return f, err
}

func TestConfigFileSetsEtcdKeysAndZketcdFlags(t *testing.T) {
	f, err := parseWithConfig(t, `
name: m1
listen-client-urls: http://127.0.0.1:12379,http://127.0.0.1:22379
advertise-client-urls: [http://a:2379, http://b:2379]
listen-metrics-urls: http://127.0.0.1:12381
max-request-bytes: 10485760
max-txn-ops: 1024
auto-compaction-mode: revision
auto-compaction-retention: "1000"
grpc-keepalive-min-time: 7000000000
grpc-keepalive-timeout: 3s
experimental-watch-progress-notify-interval: 1m
log-level: debug
log-format: console
client-transport-security:
  cert-file: /c.crt
  key-file: /c.key
  client-cert-auth: true
  trusted-ca-file: /ca.crt
cipher-suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]
zk: 10.0.0.1:2181
zk-root: /prod
`)
	if err != nil {
		t.Fatal(err)
	}
	want := serveFlags{
		name: "m1", listenClientURLs: "http://127.0.0.1:12379,http://127.0.0.1:22379",
		advertiseClientURLs: "http://a:2379,http://b:2379", listenMetricsURLs: "http://127.0.0.1:12381",
		maxRequestBytes: 10485760, maxTxnOps: 1024, autoCompactionMode: "revision", autoCompactionRetain: "1000",
		keepaliveMinTime: 7 * time.Second, keepaliveTimeout: 3 * time.Second, watchProgressInterval: time.Minute,
		logLevel: "debug", logFormat: "console", certFile: "/c.crt", keyFile: "/c.key", clientCert: true,
		trustedCAFile: "/ca.crt", cipherSuites: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
		zk: "10.0.0.1:2181", zkRoot: "/prod",
	}
	got := []any{f.name, f.listenClientURLs, f.advertiseClientURLs, f.listenMetricsURLs, f.maxRequestBytes, f.maxTxnOps,
		f.autoCompactionMode, f.autoCompactionRetain, f.keepaliveMinTime, f.keepaliveTimeout, f.watchProgressInterval,
		f.logLevel, f.logFormat, f.certFile, f.keyFile, f.clientCert, f.trustedCAFile, f.cipherSuites, f.zk, f.zkRoot}
	exp := []any{want.name, want.listenClientURLs, want.advertiseClientURLs, want.listenMetricsURLs, want.maxRequestBytes, want.maxTxnOps,
		want.autoCompactionMode, want.autoCompactionRetain, want.keepaliveMinTime, want.keepaliveTimeout, want.watchProgressInterval,
		want.logLevel, want.logFormat, want.certFile, want.keyFile, want.clientCert, want.trustedCAFile, want.cipherSuites, want.zk, want.zkRoot}
	for i := range got {
		if got[i] != exp[i] {
			t.Errorf("setting %d: got %v, want %v", i, got[i], exp[i])
		}
	}
	if len(f.configWarnings) != 0 {
		t.Errorf("warnings: %q", f.configWarnings)
	}
	if _, err := f.logger(); err != nil {
		t.Errorf("etcd's log-format console: %v", err)
	}
}

func TestCommandLineAndEnvironmentOverrideTheConfigFile(t *testing.T) {
	t.Setenv("ZKETCD_MAX_TXN_OPS", "7")
	f, err := parseWithConfig(t, "name: from-file\nmax-txn-ops: 1024\nzk-root: /file\n", "--name", "from-flag")
	if err != nil {
		t.Fatal(err)
	}
	if f.name != "from-flag" || f.maxTxnOps != 7 || f.zkRoot != "/file" {
		t.Fatalf("name %q (flag), max-txn-ops %d (environment), zk-root %q (file)", f.name, f.maxTxnOps, f.zkRoot)
	}
}

func TestUnknownEtcdKeysAreIgnoredWithOneWarningEach(t *testing.T) {
	f, err := parseWithConfig(t, `
data-dir: /var/lib/etcd
initial-cluster: a=http://a:2380
heartbeat-interval: 100
peer-transport-security:
  cert-file: /p.crt
client-transport-security:
  cert-file: /c.crt
  key-file: /c.key
  auto-tls: true
  allowed-cn: ""
name: m1
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`config file key "client-transport-security.auto-tls" is not a zketcd setting; ignored`,
		`config file key "data-dir" is not a zketcd setting; ignored`,
		`config file key "heartbeat-interval" is not a zketcd setting; ignored`,
		`config file key "initial-cluster" is not a zketcd setting; ignored`,
	}
	if strings.Join(f.configWarnings, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(f.configWarnings, "\n"), strings.Join(want, "\n"))
	}
	if f.name != "m1" || f.certFile != "/c.crt" || f.peer.certFile != "/p.crt" {
		t.Fatalf("known keys beside unknown ones: name %q cert-file %q peer cert-file %q", f.name, f.certFile, f.peer.certFile)
	}
}

// TestPeerTransportSecurityKeysAreThePeerFlags: etcd's
// peer-transport-security section sets the --peer-* flags, its lists
// joined as the flags take them; a key zketcd lacks is warned about.
func TestPeerTransportSecurityKeysAreThePeerFlags(t *testing.T) {
	f, err := parseWithConfig(t, `
peer-transport-security:
  cert-file: /p.crt
  key-file: /p.key
  trusted-ca-file: /ca.crt
  client-cert-auth: true
  auto-tls: true
  allowed-cn: [zketcd-a, zketcd-b]
  allowed-hostname: []
  crl-file: /p.crl
`)
	if err != nil {
		t.Fatal(err)
	}
	got := f.peer.peerTLS()
	if got.CertFile != "/p.crt" || got.KeyFile != "/p.key" || got.TrustedCAFile != "/ca.crt" || !got.ClientCertAuth || !got.AutoTLS ||
		strings.Join(got.AllowedCNs, ",") != "zketcd-a,zketcd-b" || len(got.AllowedHostnames) != 0 {
		t.Fatalf("peer TLS from the file: %+v", got)
	}
	if want := `config file key "peer-transport-security.crl-file" is not a zketcd setting; ignored`; strings.Join(f.configWarnings, "\n") != want {
		t.Fatalf("warnings %q, want %q", f.configWarnings, want)
	}
}

func TestBadConfigFilesAreRefused(t *testing.T) {
	for name, yml := range map[string]string{
		"not yaml":             "name: [unclosed",
		"not a mapping":        "- a\n- b\n",
		"bad number":           "max-txn-ops: lots\n",
		"bad duration":         "grpc-keepalive-timeout: soon\n",
		"nested value":         "name: {a: b}\n",
		"tls is not a mapping": "client-transport-security: yes-please\n",
	} {
		if _, err := parseWithConfig(t, yml); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var f serveFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs, true)
	if err := f.parse(fs, []string{"--config-file", filepath.Join(t.TempDir(), "missing.yml")}); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestTheExampleConfigFileParses(t *testing.T) {
	var f serveFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs, true)
	if err := f.parse(fs, []string{"--config-file", "../../docs/zketcd.conf.yml"}); err != nil {
		t.Fatal(err)
	}
	if len(f.configWarnings) != 0 {
		t.Errorf("the example has keys zketcd ignores: %q", f.configWarnings)
	}
	if f.zk == "" || f.name != "zketcd-1" || !f.clientCert || f.keepaliveMinTime != 5*time.Second || f.logFormat != "json" {
		t.Fatalf("example read as zk %q name %q client-cert-auth %v keepalive-min-time %v log-format %q",
			f.zk, f.name, f.clientCert, f.keepaliveMinTime, f.logFormat)
	}
	if _, _, _, _, err := f.tlsVersions(); err != nil {
		t.Errorf("example TLS settings: %v", err)
	}
	if p := f.peer.peerTLS(); !p.ClientCertAuth || p.TrustedCAFile == "" || len(p.AllowedCNs) != 3 || f.internalListenURL != "https://10.0.0.11:2380" {
		t.Errorf("example peer TLS: %+v at %s", p, f.internalListenURL)
	}
	if _, err := f.autoCompaction(); err != nil {
		t.Errorf("example auto-compaction: %v", err)
	}
	if _, err := f.logger(); err != nil {
		t.Errorf("example logging: %v", err)
	}
}

func TestConfigFileSetsTheQuotaAndTheCorruptCheck(t *testing.T) {
	f, err := parseWithConfig(t, "quota-backend-bytes: 8589934592\nexperimental-corrupt-check-time: 2m\nzk: z:2181\n")
	if err != nil {
		t.Fatal(err)
	}
	if f.quotaBackendBytes != 8<<30 || f.corruptCheckTime != 2*time.Minute || len(f.configWarnings) != 0 {
		t.Fatalf("quota %d, corrupt check %v, warnings %q", f.quotaBackendBytes, f.corruptCheckTime, f.configWarnings)
	}
	if f, err = parseWithConfig(t, "quota-backend-bytes: -1\ncorrupt-check-time: 30s\nzk: z:2181\n"); err != nil || f.quotaBackendBytes != -1 || f.corruptCheckTime != 30*time.Second {
		t.Fatalf("quota %d, corrupt check %v: %v", f.quotaBackendBytes, f.corruptCheckTime, err)
	}
}
