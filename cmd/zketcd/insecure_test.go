package main

import (
	"flag"
	"strconv"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
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

// TestServeWarnsWhileAnyPageMayUseTheGateway: with etcd's default --cors
// (every origin) and authentication off, any web page a browser that
// reaches a client URL opens can read and write every key through the
// HTTP gateway: serve warns at start; with the origins listed it does not.
func TestServeWarnsWhileAnyPageMayUseTheGateway(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	const warning = "every origin may use the HTTP gateway"
	for _, tc := range []struct {
		cors string
		want bool
	}{{"", true}, {"https://ui.example:443", false}} {
		args := []string{"--zk", zkSrv.Addr(), "--zk-root", "/gateway-warning-" + strconv.FormatBool(tc.want), "--zk-auth", "digest:zketcd:gw",
			"--listen-client-urls", "http://" + embedtest.FreeAddr(t), "--log-level", "warn"}
		if tc.cors != "" {
			args = append(args, "--cors", tc.cors)
		}
		f := parseServeFlags(t, args...)
		log := &embedtest.SyncBuffer{}
		f.logOutput = log
		serveUntilDone(t, f)
		if got := strings.Contains(log.String(), warning); got != tc.want {
			t.Errorf("--cors %q: warned %v, want %v:\n%s", tc.cors, got, tc.want, log.String())
		}
	}
	if openGatewayWarning(nil, true, false) != "" || openGatewayWarning([]string{"*"}, false, true) != "" {
		t.Error("warned with client certificates required, or with authentication on")
	}
}
