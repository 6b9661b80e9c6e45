package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/integration/etcdoracle"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// step is one HTTP request of the script.
type step struct {
	method, path, body string
	// pending names a difference that another change closes (the Auth
	// service): it is logged, not failed, until then.
	pending string
	// own, if set, is zketcd's answer where it differs from etcd's on
	// purpose (the reason is in the script).
	own *answer
}

func (s step) String() string {
	b := s.body
	if len(b) > 60 {
		b = b[:60] + "..."
	}
	return s.method + " " + s.path + " " + b
}

// b64 is etcd's JSON encoding of bytes.
func b64(s string) string { return base64(s) }

// script is every unary gateway and HTTP endpoint etcd serves on the
// client port, with good and bad input.
func script() []step {
	post := func(path, body string) step { return step{method: "POST", path: path, body: body} }
	get := func(path string) step { return step{method: "GET", path: path} }
	big := `{"key":"` + b64("big") + `","value":"` + strings.Repeat("QUFB", 700_000) + `"}`
	huge := `{"key":"` + b64("big") + `","value":"` + strings.Repeat("QUFB", 1_500_000) + `"}`
	return []step{
		post("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q}`, b64("foo"), b64("bar"))),
		post("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q,"prev_kv":true}`, b64("foo"), b64("baz"))),
		post("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q}`, b64("foo/a"), b64("1"))),
		post("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q}`, b64("foo/b"), b64("2"))),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q}`, b64("foo"))),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q,"range_end":%q}`, b64("foo/"), b64("foo0"))),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q,"range_end":%q,"count_only":true}`, b64("foo/"), b64("foo0"))),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q,"range_end":%q,"limit":1,"sort_order":"DESCEND","sort_target":"KEY"}`, b64("foo/"), b64("foo0"))),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q,"revision":2}`, b64("foo"))),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q,"serializable":true,"keys_only":true}`, b64("foo"))),
		post("/v3/kv/txn", fmt.Sprintf(`{"compare":[{"key":%q,"target":"VALUE","result":"EQUAL","value":%q}],"success":[{"request_put":{"key":%q,"value":%q}}],"failure":[{"request_range":{"key":%q}}]}`,
			b64("foo"), b64("baz"), b64("t"), b64("yes"), b64("foo"))),
		post("/v3/kv/txn", fmt.Sprintf(`{"compare":[{"key":%q,"target":"VERSION","result":"GREATER","version":"10"}],"success":[{"request_put":{"key":%q,"value":%q}}],"failure":[{"request_range":{"key":%q}},{"request_delete_range":{"key":%q,"prev_kv":true}}]}`,
			b64("foo"), b64("t"), b64("no"), b64("foo"), b64("t"))),
		post("/v3/kv/deleterange", fmt.Sprintf(`{"key":%q,"range_end":%q,"prev_kv":true}`, b64("foo/"), b64("foo0"))),
		post("/v3/kv/compaction", `{"revision":"3"}`),
		post("/v3/kv/compaction", `{"revision":"2"}`),
		post("/v3/kv/compaction", `{"revision":"1000"}`),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q,"revision":2}`, b64("foo"))),
		post("/v3/lease/grant", `{"TTL":"60"}`),
		post("/v3/lease/grant", `{"TTL":"90","ID":"12345"}`),
		post("/v3/lease/grant", `{"TTL":"90","ID":"12345"}`),
		post("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q,"lease":"12345"}`, b64("leased"), b64("x"))),
		post("/v3/lease/timetolive", `{"ID":"12345","keys":true}`),
		post("/v3/kv/lease/timetolive", `{"ID":"12345"}`),
		post("/v3/lease/leases", `{}`),
		post("/v3/lease/keepalive", `{"ID":"12345"}`),
		post("/v3/lease/revoke", `{"ID":"12345"}`),
		post("/v3/lease/revoke", `{"ID":"12345"}`),
		post("/v3/kv/range", fmt.Sprintf(`{"key":%q}`, b64("leased"))),
		post("/v3/maintenance/status", `{}`),
		post("/v3/cluster/member/list", `{}`),
		post("/v3/maintenance/alarm", `{"action":"GET"}`),
		post("/v3/election/leader", fmt.Sprintf(`{"name":%q}`, b64("nobody"))),
		post("/v3/election/proclaim", `{"value":"eA=="}`),
		post("/v3/lock/unlock", fmt.Sprintf(`{"key":%q}`, b64("foo"))),
		{method: "POST", path: "/v3/auth/status", body: `{}`, pending: "the Auth service (auth engineer)"},
		{method: "POST", path: "/v3/auth/authenticate", body: `{"name":"root","password":"x"}`, pending: "the Auth service (auth engineer)"},
		{method: "POST", path: "/v3/auth/user/list", body: `{}`, pending: "the Auth service (auth engineer)"},
		// Bad input: etcd's gateway errors.
		post("/v3/kv/range", `{bad`),
		post("/v3/kv/range", `{"key":123}`),
		post("/v3/kv/range", `{"key":"!!"}`),
		post("/v3/kv/range", `[]`),
		post("/v3/kv/range", ``),
		post("/v3/kv/range", `{"key":"Zm9v","unknown_field":1}`),
		post("/v3/kv/range", `{"key":"Zm9v","sort_order":"SIDEWAYS"}`),
		post("/v3/kv/txn", `{"success":[{}]}`),
		post("/v3/kv/put", `{"value":"eA=="}`),
		post("/v3/kv/nothing", `{}`),
		get("/v3/kv/range"),
		post("/v3beta/kv/range", fmt.Sprintf(`{"key":%q}`, b64("foo"))),
		post("/v3/kv/put", big),
		// Over httpgw.MaxBodyBytes zketcd stops reading and answers etcd's
		// "request is too large"; etcd reads the whole body first and
		// answers gRPC's size error.
		{method: "POST", path: "/v3/kv/put", body: huge, own: &answer{Code: 400, Type: "application/json", CORS: "*",
			Body: map[string]any{"code": float64(3), "message": "etcdserver: request is too large"}}},
		// HTTP endpoints.
		get("/health"),
		get("/health?serializable=true"),
		get("/health?exclude=NOSPACE"),
		post("/health", ``),
		get("/livez"),
		get("/livez?verbose"),
		get("/readyz"),
		get("/readyz?verbose"),
		get("/readyz?verbose&exclude=linearizable_read"),
		get("/readyz/serializable_read"),
		get("/readyz/nope"),
		post("/readyz", ``),
		get("/version"),
		post("/version", ``),
		{method: "OPTIONS", path: "/v3/kv/range"},
	}
}

// answer is a response after normalisation.
type answer struct {
	Code    int
	Type    string
	CORS    string
	Body    any
	RawText string
}

// target is one server under test.
type target struct {
	name   string
	base   string
	client *http.Client      // nil: a plain HTTP/1.1 client
	ids    map[string]string // lease ids seen → their ordinal name
}

func (tg *target) do(t *testing.T, s step) answer {
	t.Helper()
	req, err := http.NewRequest(s.method, tg.base+s.path, strings.NewReader(s.body))
	if err != nil {
		t.Fatal(err)
	}
	hc := tg.client
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %s: %v", tg.name, s, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %s: read: %v", tg.name, s, err)
	}
	a := answer{Code: resp.StatusCode, Type: resp.Header.Get("Content-Type"), CORS: resp.Header.Get("Access-Control-Allow-Origin")}
	var v any
	if err := json.Unmarshal(raw, &v); err == nil && len(raw) > 0 && (raw[0] == '{' || raw[0] == '[') {
		// Whitespace is not compared: protojson varies it per build on
		// purpose (zketcd compacts it).
		a.Body = tg.normalise(s.path, "", v)
	} else {
		// Health check lines come in etcd's map order: sort them.
		lines := strings.Split(string(raw), "\n")
		sort.Strings(lines)
		a.RawText = strings.Join(lines, "\n")
	}
	return a
}

// Values that differ between two servers by nature, by field name.
var (
	// dropped everywhere: zketcd's cluster and member ids derive from its
	// root and name; raft_term is etcd's raft term (zketcd reports 0).
	dropped = map[string]bool{"cluster_id": true, "member_id": true, "raft_term": true}
	// sizes and raft positions of Status.
	// storageVersion: a fresh etcd reports 3.5.0 until its version monitor
	// has run (a settled one 3.7.0, as zketcd always does).
	statusValues = map[string]bool{"dbSize": true, "dbSizeInUse": true, "raftIndex": true, "raftAppliedIndex": true, "leader": true, "raftTerm": true, "storageVersion": true}
)

// normalise rewrites v (decoded JSON) for comparison: server ids dropped,
// lease ids (chosen by the server) named by order of appearance, Status
// sizes and positions replaced by their presence, and the member list
// reduced to what both servers can share.
func (tg *target) normalise(path, field string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			switch {
			case dropped[k]:
				continue
			case path == "/version" && k == "storage":
				out[k] = "S" // as storageVersion below
			case path == "/version" && (k == "zketcd" || k == "zketcd_commit"):
				// zketcd's build, beside etcd's fields (internal/httpgw's
				// tests check them).
				continue
			case path == "/v3/maintenance/status" && statusValues[k]:
				if k == "raftTerm" {
					// zketcd's ZooKeeper epoch is 0 on a fresh ensemble,
					// omitted as any zero.
					continue
				}
				out[k] = "N"
			case path == "/v3/cluster/member/list" && (k == "peerURLs" || k == "clientURLs" || k == "name" || k == "revision"):
				// zketcd has no peer URLs; MemberList's header carries no
				// revision on etcd (zketcd fills it as for every RPC).
				continue
			default:
				out[k] = tg.normalise(path, k, e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tg.normalise(path, field, e)
		}
		return out
	case string:
		if field == "ID" || field == "lease" {
			if x == "12345" {
				return x
			}
			if n, ok := tg.ids[x]; ok {
				return n
			}
			n := fmt.Sprintf("id-%d", len(tg.ids)+1)
			tg.ids[x] = n
			return n
		}
		// protobuf's error texts put a non-breaking space in place of a
		// space in some builds, on purpose (so nobody compares them): the
		// two servers are different builds.
		return strings.ReplaceAll(x, "\u00a0", " ")
	}
	return v
}

func startPair(t *testing.T) (*target, *target) {
	// etcd's gateway dials the configured client URL: it needs a real port.
	u, err := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", etcdoracle.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	o := etcdoracle.Start(t, etcdoracle.WithConfig(func(c *embed.Config) {
		c.EnableGRPCGateway = true
		c.ListenClientUrls, c.AdvertiseClientUrls = []url.URL{*u}, []url.URL{*u}
	}))
	zk := zkservertest.Standalone(t)
	z := embedtest.Start(t, []string{zk.Addr()}, embedtest.Options{})
	return &target{name: "etcd", base: "http://" + o.Endpoint(), ids: map[string]string{}},
		&target{name: "zketcd", base: "http://" + z.Endpoint(), ids: map[string]string{}}
}

func TestGatewayAnswersAsEtcd(t *testing.T) {
	etcd, zketcd := startPair(t)
	failed := 0
	for i, s := range script() {
		want, got := etcd.do(t, s), zketcd.do(t, s)
		if s.own != nil {
			if d := cmp.Diff(*s.own, got); d != "" {
				failed++
				t.Errorf("step %d %s: zketcd's own answer (-want +got):\n%s", i, s, d)
			}
			continue
		}
		if d := cmp.Diff(want, got); d != "" {
			if s.pending != "" {
				t.Logf("step %d %s: differs, pending %s (-etcd +zketcd):\n%s", i, s, s.pending, d)
				continue
			}
			failed++
			t.Errorf("step %d %s (-etcd +zketcd):\n%s", i, s, d)
		}
	}
	t.Logf("%d steps, %d differ", len(script()), failed)
}

// watchLines opens a streaming watch on tg with one create request (over
// HTTP/1.1 both servers answer once the request body is complete, as curl
// -d sends it), runs writes after the first result, and returns the first
// n result lines, normalised.
func watchLines(t *testing.T, tg *target, create string, n int, writes func()) []any {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", tg.base+"/v3/watch", pr)
	lines := make(chan string, n)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			errc <- err
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		errc <- sc.Err()
	}()
	if _, err := io.WriteString(pw, create+"\n"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var out []any
	for len(out) < n {
		select {
		case l := <-lines:
			var v any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("%s: watch line %q: %v", tg.name, l, err)
			}
			out = append(out, tg.normalise("/v3/watch", "", v))
			if len(out) == 1 {
				writes()
			}
		case err := <-errc:
			t.Fatalf("%s: watch ended after %d lines: %v", tg.name, len(out), err)
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d watch lines", tg.name, len(out), n)
		}
	}
	return out
}

func TestStreamingWatchAnswersAsEtcd(t *testing.T) {
	etcd, zketcd := startPair(t)
	run := func(tg *target) []any {
		writes := func() {
			for _, s := range []step{
				{method: "POST", path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("w/a"), b64("1"))},
				{method: "POST", path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("w/a"), b64("2"))},
				{method: "POST", path: "/v3/kv/deleterange", body: fmt.Sprintf(`{"key":%q}`, b64("w/a"))},
			} {
				if a := tg.do(t, s); a.Code != 200 {
					t.Fatalf("%s: %s: %+v", tg.name, s, a)
				}
			}
		}
		create := fmt.Sprintf(`{"create_request":{"key":%q,"range_end":%q,"prev_kv":true}}`, b64("w/"), b64("w0"))
		return watchLines(t, tg, create, 4, writes)
	}
	want, got := run(etcd), run(zketcd)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("watch stream (-etcd +zketcd):\n%s", d)
	}
	t.Logf("watch stream: %d equal results", len(want))
}

// wsLines is watchLines over a WebSocket (etcd's wsproxy): create is sent
// as one text message, writes run after the first answer, and the first n
// answers are returned, normalised.
func wsLines(t *testing.T, tg *target, create string, n int, writes func()) []any {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(tg.base, "http")+"/v3/watch", nil)
	if err != nil {
		t.Fatalf("%s: websocket dial: %v (%v)", tg.name, err, resp)
	}
	defer conn.Close()
	if err := conn.WriteMessage(websocket.TextMessage, []byte(create)); err != nil {
		t.Fatal(err)
	}
	var out []any
	for len(out) < n {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, b, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("%s: websocket ended after %d messages: %v", tg.name, len(out), err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: websocket message %q: %v", tg.name, b, err)
		}
		out = append(out, tg.normalise("/v3/watch", "", v))
		if len(out) == 1 {
			writes()
		}
	}
	return out
}

func TestWebSocketWatchAnswersAsEtcd(t *testing.T) {
	etcd, zketcd := startPair(t)
	run := func(tg *target) []any {
		writes := func() {
			for _, s := range []step{
				{method: "POST", path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("ws/a"), b64("1"))},
				{method: "POST", path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("ws/b"), b64("2"))},
				{method: "POST", path: "/v3/kv/deleterange", body: fmt.Sprintf(`{"key":%q}`, b64("ws/a"))},
			} {
				if a := tg.do(t, s); a.Code != 200 {
					t.Fatalf("%s: %s: %+v", tg.name, s, a)
				}
			}
		}
		create := fmt.Sprintf(`{"create_request":{"key":%q,"range_end":%q,"prev_kv":true}}`, b64("ws/"), b64("ws0"))
		return wsLines(t, tg, create, 4, writes)
	}
	want, got := run(etcd), run(zketcd)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("websocket watch (-etcd +zketcd):\n%s", d)
	}
	t.Logf("websocket watch: %d equal messages", len(want))
}
