package main

import (
	"strings"
	"testing"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
)

// TestInternalEndpointFlagsRefuseWhatIsNotSafe: a plaintext internal
// endpoint off loopback is refused with an error naming exactly what to
// set, unless --internal-insecure-plaintext says so; the peer TLS flags
// are checked as etcd checks them, and the URL's scheme follows them.
func TestInternalEndpointFlagsRefuseWhatIsNotSafe(t *testing.T) {
	certs := testcerts.New(t)
	tlsArgs := []string{"--peer-cert-file", certs.ServerCert, "--peer-key-file", certs.ServerKey}
	withTLS := func(args ...string) []string { return append(append([]string{}, tlsArgs...), args...) }
	for _, tc := range []struct {
		name string
		args []string
		err  []string // substrings of the error; none: accepted
	}{
		{name: "the default, loopback plaintext"},
		{name: "localhost plaintext", args: []string{"--internal-listen-url", "http://localhost:2380"}},
		{name: "plaintext on a LAN address", args: []string{"--internal-listen-url", "http://10.1.2.3:2380"},
			err: []string{"10.1.2.3:2380 without TLS", "--internal-listen-url https://10.1.2.3:2380", "--peer-cert-file", "--peer-key-file",
				"--peer-trusted-ca-file", "--peer-client-cert-auth", "--peer-auto-tls", "--internal-insecure-plaintext"}},
		{name: "plaintext on every interface", args: []string{"--internal-listen-url", "http://0.0.0.0:2380"}, err: []string{"without TLS"}},
		{name: "plaintext on a LAN address, said so", args: []string{"--internal-listen-url", "http://10.1.2.3:2380", "--internal-insecure-plaintext"}},
		{name: "plaintext without forwarding", args: []string{"--forward-writes=false", "--internal-listen-url", "http://10.1.2.3:2380"}},
		{name: "https without a certificate", args: []string{"--internal-listen-url", "https://10.1.2.3:2380"}, err: []string{"give --peer-cert-file and --peer-key-file"}},
		{name: "https with a certificate", args: withTLS("--internal-listen-url", "https://10.1.2.3:2380")},
		{name: "https with auto TLS", args: []string{"--internal-listen-url", "https://10.1.2.3:2380", "--peer-auto-tls"}},
		{name: "mutual TLS", args: withTLS("--internal-listen-url", "https://10.1.2.3:2380", "--peer-trusted-ca-file", certs.CAFile, "--peer-client-cert-auth",
			"--peer-cert-allowed-cn", "a,b")},
		{name: "http with a certificate", args: withTLS("--internal-listen-url", "http://10.1.2.3:2380"), err: []string{"use https://10.1.2.3:2380"}},
		{name: "key without certificate", args: []string{"--internal-listen-url", "https://10.1.2.3:2380", "--peer-key-file", certs.ServerKey},
			err: []string{"--peer-cert-file and --peer-key-file go together"}},
		{name: "client cert auth without a CA", args: withTLS("--internal-listen-url", "https://10.1.2.3:2380", "--peer-client-cert-auth"),
			err: []string{"--peer-client-cert-auth needs --peer-trusted-ca-file"}},
		{name: "allowed CN without a CA", args: withTLS("--internal-listen-url", "https://10.1.2.3:2380", "--peer-cert-allowed-cn", "a"),
			err: []string{"need --peer-trusted-ca-file"}},
		{name: "allowed CN and hostname", args: withTLS("--internal-listen-url", "https://10.1.2.3:2380", "--peer-trusted-ca-file", certs.CAFile,
			"--peer-cert-allowed-cn", "a", "--peer-cert-allowed-hostname", "h"), err: []string{"cannot both be set"}},
		{name: "auto TLS with verification", args: []string{"--internal-listen-url", "https://10.1.2.3:2380", "--peer-auto-tls", "--peer-trusted-ca-file", certs.CAFile},
			err: []string{"--peer-auto-tls makes a self-signed certificate"}},
		{name: "a CA without a certificate", args: []string{"--peer-trusted-ca-file", certs.CAFile}, err: []string{"need --peer-cert-file and --peer-key-file"}},
		{name: "advertised https for an http endpoint", args: []string{"--advertise-internal-url", "https://10.1.2.3:2380"},
			err: []string{"must have the scheme of --internal-listen-url"}},
		{name: "advertised URL with a path", args: withTLS("--internal-listen-url", "https://10.1.2.3:2380", "--advertise-internal-url", "https://h:1/x"),
			err: []string{"must be http:// or https://host:port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parseServeFlags(t, tc.args...)
			cfg := embed.Config{ClientAddrs: []string{"127.0.0.1:0"}}
			cfg.Engine.ForwardWrites = f.forwardWrites
			err := f.internalEndpoint(&cfg)
			if err == nil {
				err = cfg.Validate()
			}
			if len(tc.err) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.err {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
