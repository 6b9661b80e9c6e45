package embed_test

import (
	"io"
	"net/http"
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
