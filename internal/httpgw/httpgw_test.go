package httpgw_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/buildinfo"
	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// post sends body to path with c and returns the status and the body.
func post(t *testing.T, c *http.Client, base, path, body string) (int, string) {
	t.Helper()
	resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// h2c is an HTTP/2 client without TLS (prior knowledge).
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p}}
}

// h2Only is an HTTP/2-over-TLS client (ALPN h2 only).
func h2Only(cfg *tls.Config) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p, TLSClientConfig: cfg}}
}

func TestGatewayAndGRPCShareThePlaintextPort(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	base := "http://" + in.Endpoint()
	h1 := &http.Client{Timeout: 10 * time.Second}
	if code, body := post(t, h1, base, "/v3/kv/put", `{"key":"Zm9v","value":"YmFy"}`); code != 200 || !strings.Contains(body, `"revision":"2"`) {
		t.Fatalf("put over HTTP/1.1: %d %s", code, body)
	}
	// gRPC on the same port sees the gateway's write.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := in.Client(t).Get(ctx, "foo")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "bar" {
		t.Fatalf("gRPC get after a gateway put: %v %v", got, err)
	}
	for name, c := range map[string]*http.Client{"HTTP/1.1": h1, "h2c": h2c()} {
		code, body := post(t, c, base, "/v3/kv/range", `{"key":"Zm9v"}`)
		if code != 200 || !strings.Contains(body, `"value":"YmFy"`) || strings.Contains(body, ", ") {
			t.Errorf("range over %s: %d %s (want compact JSON with the value)", name, code, body)
		}
	}
}

func TestGatewayAndGRPCShareTheTLSPort(t *testing.T) {
	zk := zkservertest.Standalone(t)
	certs := testcerts.New(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{TLS: certs.ServerTLS(t)})
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{in.Endpoint()}, DialTimeout: 5 * time.Second,
		TLS: certs.ClientTLS(t, true), Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "foo", "bar"); err != nil {
		t.Fatalf("gRPC put over TLS: %v", err)
	}
	base := "https://" + in.Endpoint()
	h1 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: certs.ClientTLS(t, true), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}}
	h2 := h2Only(certs.ClientTLS(t, true))
	for name, hc := range map[string]*http.Client{"HTTP/1.1 (ALPN http/1.1)": h1, "HTTP/2 (ALPN h2)": h2} {
		code, body := post(t, hc, base, "/v3/kv/range", `{"key":"Zm9v"}`)
		if code != 200 || !strings.Contains(body, `"value":"YmFy"`) {
			t.Errorf("range over %s: %d %s", name, code, body)
		}
		resp, err := hc.Get(base + "/health")
		if err != nil {
			t.Fatalf("/health over %s: %v", name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"health":"true","reason":""}` {
			t.Errorf("/health over %s: %d %q", name, resp.StatusCode, b)
		}
	}
	// Without a client certificate the handshake fails for HTTP too.
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: certs.ClientTLS(t, false)}}
	if resp, err := noCert.Get(base + "/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %d", resp.StatusCode)
	}
}

func TestBadGatewayBodiesGetTheGatewayErrorJSON(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{MaxRequestBytes: 1024})
	base := "http://" + in.Endpoint()
	hc := &http.Client{Timeout: 10 * time.Second}
	big := `{"key":"` + strings.Repeat("QUFB", 1<<20) + `"}`
	cases := []struct {
		path, body string
		code       int
		message    string
	}{
		{"/v3/kv/range", `{bad`, 400, "invalid character 'b' looking for beginning of object key string"},
		{"/v3/kv/range", `{"key":123}`, 400, "proto: (line 1:8): invalid value for bytes field key: 123"},
		{"/v3/kv/range", ``, 400, "etcdserver: key is not provided"},
		{"/v3/kv/txn", `{"compare":[{"target":"NOPE"}]}`, 400, ""},
		{"/v3/kv/put", `{"key":"Zm9v","value":"` + strings.Repeat("QUFB", 400) + `"}`, 400, "etcdserver: request is too large"},
		{"/v3/kv/put", big, 400, "etcdserver: request is too large"},
		{"/v3/kv/nothing", `{}`, 404, "Not Found"},
	}
	for _, c := range cases {
		code, body := post(t, hc, base, c.path, c.body)
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		// protobuf's error texts put a non-breaking space in place of a
		// space in some builds, on purpose (so nobody compares them).
		err := json.Unmarshal([]byte(body), &e)
		e.Message = strings.ReplaceAll(e.Message, "\u00a0", " ")
		if err != nil || code != c.code || e.Code == 0 || (c.message != "" && e.Message != c.message) {
			t.Errorf("%s %.40q: %d %s, want %d %q", c.path, c.body, code, body, c.code, c.message)
		}
	}
	// The instance still serves.
	if code, body := post(t, hc, base, "/v3/kv/range", `{"key":"Zm9v"}`); code != 200 {
		t.Fatalf("range after bad bodies: %d %s", code, body)
	}
}

func TestHealthEndpointsAnswerAsEtcd(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	base := "http://" + in.Endpoint()
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/health", 200, `{"health":"true","reason":""}`},
		{"GET", "/health?serializable=true", 200, `{"health":"true","reason":""}`},
		{"POST", "/health", 405, "Method Not Allowed\n"},
		{"GET", "/livez", 200, "ok\n"},
		{"GET", "/livez?verbose", 200, "[+]serializable_read ok\nok\n"},
		{"GET", "/readyz", 200, "ok\n"},
		{"GET", "/readyz?verbose&exclude=non_learner", 200, "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\nok\n"},
		{"GET", "/readyz/linearizable_read", 200, "ok\n"},
		{"GET", "/livez/nope", 404, "404 page not found\n"},
	} {
		if code, body := get(c.method, c.path); code != c.code || body != c.body {
			t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, code, body, c.code, c.body)
		}
	}
	if code, body := get("GET", "/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d %.200s", code, body)
	}
}

// TestVersionKeepsEtcdsFieldsAndAddsTheBuild: /version answers etcd's three
// fields as etcd 3.7.3 does, so etcd's own reader (a json.Unmarshal into
// version.Versions, which ignores other fields) reads what it reads from
// etcd, plus zketcd's version and commit as two more string fields (a
// reader decoding into a map of strings works too).
func TestVersionKeepsEtcdsFieldsAndAddsTheBuild(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	resp, err := http.Get("http://" + in.Endpoint() + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/version: %d %q %v", resp.StatusCode, body, err)
	}
	var etcds version.Versions
	if err := json.Unmarshal(body, &etcds); err != nil {
		t.Fatalf("etcd's reader: %v: %s", err, body)
	}
	if want := (version.Versions{Server: "3.7.3", Cluster: "3.7.0", Storage: "3.7.0"}); etcds != want {
		t.Errorf("etcd's fields %+v, want %+v", etcds, want)
	}
	var all map[string]string
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatalf("as strings: %v: %s", err, body)
	}
	build := buildinfo.Get()
	if all["zketcd"] != build.Version || all["zketcd_commit"] != build.Commit || len(all) != 5 {
		t.Errorf("/version %s: want zketcd %q and zketcd_commit %q besides etcd's three fields", body, build.Version, build.Commit)
	}
}
