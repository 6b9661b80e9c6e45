package httpgw_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// get sends a GET of path to base with the Host and Origin headers given
// (empty: the default) and returns the response (its body closed).
func get(t *testing.T, base, path, host, origin string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

func TestHostWhitelistRefusesOtherHostsWithoutTLS(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.HostWhitelist = []string{"zketcd.example"}
	}})
	base := "http://" + in.Endpoint()
	if r := get(t, base, "/version", "", ""); r.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("Host %s: %d, want 421", in.Endpoint(), r.StatusCode)
	}
	if r := get(t, base, "/version", "zketcd.example:2379", ""); r.StatusCode != http.StatusOK {
		t.Fatalf("whitelisted host: %d, want 200", r.StatusCode)
	}
	// gRPC is not subject to it, as on etcd.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := in.Client(t).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("gRPC with a host whitelist: %v", err)
	}
}

func TestCORSHeadersOnlyForAllowedOrigins(t *testing.T) {
	zk := zkservertest.Standalone(t)
	open := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	if got := get(t, "http://"+open.Endpoint(), "/version", "", "http://any.example:80").Header.Get("Access-Control-Allow-Origin"); got != "*" {
		t.Fatalf("default --cors: Access-Control-Allow-Origin %q, want *", got)
	}
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{Configure: func(c *embed.Config) {
		c.CORS = []string{"http://ui.example:8080"}
	}})
	base := "http://" + in.Endpoint()
	r := get(t, base, "/version", "", "http://ui.example:8080")
	if got := r.Header.Get("Access-Control-Allow-Origin"); got != "http://ui.example:8080" || r.Header.Get("Access-Control-Allow-Methods") == "" {
		t.Fatalf("allowed origin: headers %v", r.Header)
	}
	if r := get(t, base, "/version", "", "http://evil.example:80"); r.StatusCode != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("other origin: %d, Access-Control-Allow-Origin %q; want 403 and none", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
}

func TestWatchOverWebSocket(t *testing.T) {
	zk := zkservertest.Standalone(t)
	in := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	conn, resp, err := websocket.DefaultDialer.Dial("ws://"+in.Endpoint()+"/v3/watch", nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.Close()
	// key "foo", prefix: range_end "fop".
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"create_request":{"key":"Zm9v","range_end":"Zm9w"}}`)); err != nil {
		t.Fatal(err)
	}
	type msg struct {
		Result struct {
			Created bool `json:"created"`
			Events  []struct {
				KV struct {
					Key   []byte `json:"key"`
					Value []byte `json:"value"`
				} `json:"kv"`
			} `json:"events"`
		} `json:"result"`
	}
	read := func() msg {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var m msg
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("message %s: %v", b, err)
		}
		return m
	}
	if m := read(); !m.Result.Created {
		t.Fatalf("first message is not the created response: %+v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := in.Client(t)
	for _, k := range []string{"foo/a", "bar", "foo/b"} {
		if _, err := c.Put(ctx, k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < 2 {
		for _, ev := range read().Result.Events {
			got = append(got, string(ev.KV.Key)+"="+string(ev.KV.Value))
		}
	}
	if strings.Join(got, " ") != "foo/a=v-foo/a foo/b=v-foo/b" {
		t.Fatalf("events %v", got)
	}
}
