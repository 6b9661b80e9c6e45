package main

import (
	"strings"
	"testing"
)

// TestServeBuildsAValidConfigFromTheFlagsOrRefusesThem: serve's first
// step, without starting anything: the flags become the instance's
// configuration (defaults filled as etcd fills them), or the first bad
// flag is named.
func TestServeBuildsAValidConfigFromTheFlagsOrRefusesThem(t *testing.T) {
	zk := []string{"--zk", "127.0.0.1:2181", "--log-level", "error"}
	for _, tc := range []struct {
		name  string
		args  []string
		err   string
		check func(t *testing.T, f serveFlags)
	}{
		{name: "defaults", check: func(t *testing.T, f serveFlags) {
			cfg, err := f.config()
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.ClientAddrs) != 1 || cfg.ClientAddrs[0] != "127.0.0.1:2379" {
				t.Fatalf("client addresses %v", cfg.ClientAddrs)
			}
			if got := cfg.Engine.ClientURLs; len(got) != 1 || got[0] != "http://127.0.0.1:2379" {
				t.Fatalf("advertised %v, want the listen URL", got)
			}
			if !strings.HasSuffix(cfg.Engine.Name, "-2379") || cfg.Engine.Store.Root == "" || len(cfg.Engine.Store.Servers) != 1 {
				t.Fatalf("engine %+v", cfg.Engine)
			}
			if cfg.GRPC.ConnectionTimeout <= 0 || cfg.Logger == nil || cfg.TLS != nil {
				t.Fatalf("grpc %+v, TLS %v", cfg.GRPC, cfg.TLS)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the defaults do not validate: %v", err)
			}
		}},
		{name: "a name and advertised URLs as given",
			args: []string{"--name", "n1", "--advertise-client-urls", "http://10.0.0.1:2379"},
			check: func(t *testing.T, f serveFlags) {
				cfg, err := f.config()
				if err != nil || cfg.Engine.Name != "n1" || cfg.Engine.ClientURLs[0] != "http://10.0.0.1:2379" {
					t.Fatalf("%+v %v", cfg.Engine, err)
				}
			}},
		{name: "no client URL", args: []string{"--listen-client-urls", ""}, err: "--listen-client-urls is empty"},
		{name: "https without a certificate", args: []string{"--listen-client-urls", "https://127.0.0.1:2379"}, err: "need --cert-file and --key-file"},
		{name: "a bad metrics URL", args: []string{"--listen-metrics-urls", "ftp://x"}, err: "--listen-metrics-urls"},
		{name: "a bad CORS origin", args: []string{"--cors", "http://a/path"}, err: "--cors"},
		{name: "no handshake time", args: []string{"--grpc-handshake-timeout", "0s"}, err: "--grpc-handshake-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parseServeFlags(t, append(append([]string{}, zk...), tc.args...)...)
			if tc.check != nil {
				tc.check(t, f)
				return
			}
			if _, err := f.config(); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("config: %v, want an error naming %q", err, tc.err)
			}
		})
	}
}
