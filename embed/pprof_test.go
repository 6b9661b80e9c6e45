package embed_test

import (
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestEnablePprof: with EnablePprof (etcd's --enable-pprof) the client and
// metrics addresses serve Go's goroutine profile under /debug/pprof/;
// without it neither does.
func TestEnablePprof(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	for _, enable := range []bool{true, false} {
		in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
			c.EnablePprof = enable
			c.MetricsAddrs = []string{"127.0.0.1:0"}
		}})
		for _, addr := range []string{in.Endpoint(), in.Zketcd().MetricsAddrs()[0]} {
			resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			served := resp.StatusCode == http.StatusOK && strings.Contains(string(body), "goroutine profile:")
			if served != enable {
				t.Errorf("EnablePprof=%v, %s: status %d, profile served %v", enable, addr, resp.StatusCode, served)
			}
		}
		in.Close()
	}
}

// TestPprofCmdlineHidesCredentials: /debug/pprof/cmdline shows the
// command line without the values of --zk-auth and the other flags that
// carry secrets.
func TestPprofCmdlineHidesCredentials(t *testing.T) {
	zkSrv := zkservertest.Standalone(t)
	saved := os.Args
	os.Args = append(slices.Clone(saved), "--zk-auth", "digest:zketcd:hunter2", "--zk-former-auth=digest:old:pw-old", "--log-level", "warn")
	t.Cleanup(func() { os.Args = saved })
	in := embedtest.Start(t, []string{zkSrv.Addr()}, embedtest.Options{Configure: func(c *embed.Config) { c.EnablePprof = true }})
	resp, err := http.Get("http://" + in.Endpoint() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := strings.Split(string(body), "\x00")
	if strings.Contains(string(body), "hunter2") || strings.Contains(string(body), "pw-old") {
		t.Fatalf("cmdline shows a credential: %q", got)
	}
	want := []string{"--zk-auth", embed.Redacted, "--zk-former-auth=" + embed.Redacted, "--log-level", "warn"}
	if !slices.Equal(got[len(got)-len(want):], want) {
		t.Fatalf("cmdline %q, want it to end with %q", got, want)
	}
}
