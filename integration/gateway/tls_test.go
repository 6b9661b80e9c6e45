package gateway_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// tlsClient speaks HTTP/2 (ALPN h2) or HTTP/1.1 only over TLS.
func tlsClient(cfg *tls.Config, h2 bool) *http.Client {
	var p http.Protocols
	if h2 {
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p, TLSClientConfig: cfg}}
}

func TestGatewayOverTLSAnswersAsEtcd(t *testing.T) {
	certs := testcerts.New(t)
	u, err := url.Parse(fmt.Sprintf("https://127.0.0.1:%d", etcdoracle.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	o := etcdoracle.Start(t, etcdoracle.WithConfig(func(c *embed.Config) {
		c.EnableGRPCGateway = true
		c.ListenClientUrls, c.AdvertiseClientUrls = []url.URL{*u}, []url.URL{*u}
		c.ClientTLSInfo.CertFile, c.ClientTLSInfo.KeyFile = certs.ServerCert, certs.ServerKey
	}))
	// Without client-cert-auth: etcd's gateway dials its own port
	// presenting the server certificate as a client certificate, which
	// testcerts' server certificate cannot be (no client-auth usage).
	// zketcd's gateway needs no certificate (the in-process connection);
	// httpgw's tests cover client-cert-auth.
	zk := zkservertest.Standalone(t)
	serverTLS := certs.ServerTLS(t)
	serverTLS.ClientAuth = tls.NoClientCert
	z := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{TLS: serverTLS})
	for _, h2 := range []bool{false, true} {
		etcd := &target{name: "etcd", base: "https://" + o.Endpoint(), ids: map[string]string{}, client: tlsClient(certs.ClientTLS(t, true), h2)}
		zketcd := &target{name: "zketcd", base: "https://" + z.Endpoint(), ids: map[string]string{}, client: tlsClient(certs.ClientTLS(t, true), h2)}
		key := fmt.Sprintf("tls-h2-%v", h2)
		for _, s := range []step{
			{method: "POST", path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64(key), b64("v"))},
			{method: "POST", path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q}`, b64(key))},
			{method: "POST", path: "/v3/kv/range", body: `{bad`},
			{method: "GET", path: "/health"},
			{method: "GET", path: "/version"},
		} {
			want, got := etcd.do(t, s), zketcd.do(t, s)
			if s.path == "/version" {
				want.Body, got.Body = nil, nil // etcd's storage version settles later
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("h2=%v %s (-etcd +zketcd):\n%s", h2, s, d)
			}
		}
	}
}
