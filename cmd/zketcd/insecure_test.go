package main

import (
	"flag"
	"strings"
	"testing"
)

// TestServeWarnsOfEveryInsecureChoice: a credential on the command line,
// ZooKeeper without TLS off loopback (the digest password in clear) and a
// plaintext client URL off loopback are each warned about at start; the
// secure shape, and loopback, warn of nothing.
func TestServeWarnsOfEveryInsecureChoice(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string // one substring per warning, in order
	}{
		{name: "the secure shape", args: []string{"--zk", "zk1:2181,zk2:2181", "--zk-auth-file", "/etc/zketcd/zk-auth", "--zk-tls-ca-file", "/etc/zketcd/zk-ca.crt",
			"--listen-client-urls", "https://0.0.0.0:2379,http://127.0.0.1:2379"}},
		{name: "everything on loopback", args: []string{"--zk", "127.0.0.1:2181,localhost:2182", "--zk-auth", "digest:zketcd:s3cret"},
			want: []string{"--zk-auth given on the command line"}},
		{name: "a digest identity on the command line, ZooKeeper in clear", args: []string{"--zk", "zk1:2181,127.0.0.1:2181", "--zk-auth", "digest:zketcd:s3cret"},
			want: []string{"--zk-auth given on the command line", "without TLS at zk1:2181: keys, values"}},
		{name: "inline, with a former identity", args: []string{"--zk", "zk1:2181", "--zk-auth=sasl:zketcd:s3cret", "--zk-former-auth", "digest:old:pw", "--zk-tls-ca-file", "ca.crt"},
			want: []string{"--zk-auth and --zk-former-auth given on the command line"}},
		{name: "x509 has no password", args: []string{"--zk", "zk1:2181", "--zk-auth", "x509", "--zk-tls-ca-file", "ca.crt"}},
		{name: "the identity from the environment", args: []string{"--zk", "zk1:2181", "--zk-tls-ca-file", "ca.crt"}, env: map[string]string{"ZKETCD_ZK_AUTH": "digest:zketcd:s3cret"}},
		{name: "plaintext client URLs off loopback", args: []string{"--zk", "127.0.0.1:2181", "--listen-client-urls", "http://0.0.0.0:2379,http://[::1]:2379,http://10.0.0.1:2379"},
			want: []string{"client URL http://0.0.0.0:2379 serves without TLS", "client URL http://10.0.0.1:2379 serves without TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var f serveFlags
			fs := flag.NewFlagSet("zketcd serve", flag.ContinueOnError)
			f.register(fs, true)
			if err := f.parse(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			got := f.insecureChoices(f.zkAuth)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d %q, want it to say %q", i, got[i], w)
				}
			}
			for _, w := range got {
				if strings.Contains(w, "s3cret") || strings.Contains(w, "old:pw") {
					t.Errorf("a warning shows the credential: %q", w)
				}
			}
		})
	}
	// The digest password's own warning.
	var f serveFlags
	fs := flag.NewFlagSet("zketcd serve", flag.ContinueOnError)
	f.register(fs, true)
	if err := f.parse(fs, []string{"--zk", "zk1:2181", "--zk-auth-file", "/etc/zketcd/zk-auth"}); err != nil {
		t.Fatal(err)
	}
	if got := f.insecureChoices("digest:zketcd:s3cret"); len(got) != 1 || !strings.Contains(got[0], "the --zk-auth password") {
		t.Fatalf("a digest identity from a file, ZooKeeper in clear: %q", got)
	}
}
