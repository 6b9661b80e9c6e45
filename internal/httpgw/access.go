package httpgw

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// allowList is etcd's form of --cors and --host-whitelist: empty, or
// holding "*", allows everything; otherwise exactly the listed values.
type allowList map[string]struct{}

func newAllowList(values []string) allowList {
	l := allowList{}
	for _, v := range values {
		if v = strings.TrimSpace(v); v != "" {
			l[v] = struct{}{}
		}
	}
	return l
}

func (l allowList) all() bool {
	_, star := l["*"]
	return len(l) == 0 || star
}

func (l allowList) allows(v string) bool {
	if l.all() {
		return true
	}
	_, ok := l[v]
	return ok
}

// allowsOrigin is allows for an Origin header. --cors lists origins as
// scheme://host:port (etcd's form), while a browser leaves the port out
// when it is its scheme's default (https://ui.example, never
// https://ui.example:443): such an origin is also looked up with that port.
func (l allowList) allowsOrigin(origin string) bool {
	if l.allows(origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Port() != "" || u.Path != "" {
		return false
	}
	switch u.Scheme {
	case "http":
		return l.allows(origin + ":80")
	case "https":
		return l.allows(origin + ":443")
	}
	return false
}

// accessControl is the first handler of every HTTP request on the client
// URLs, as etcd's: /v3beta/ is served as /v3/; on a connection without TLS
// the Host header must be in the host allow list (--host-whitelist; a
// guard against DNS rebinding, CVE-2018-5702), else 421 Misdirected
// Request; CORS headers are added for an allowed origin (--cors); OPTIONS
// is answered 200 with no body. It is safe for concurrent use (read only).
type accessControl struct {
	cors, hosts allowList
	lg          *logrus.Entry
	refused     *prometheus.CounterVec // by reason: host, origin
	next        http.Handler
}

func (a *accessControl) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v3beta/") {
		r.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
	}
	if r.TLS == nil {
		host := hostname(r)
		if !a.hosts.allows(host) {
			a.lg.WithField("host", host).Warn("HTTP request refused: its Host is not in --host-whitelist (DNS rebinding guard)")
			a.refused.WithLabelValues("host").Inc()
			http.Error(w, misdirected(host), http.StatusMisdirectedRequest)
			return
		}
	}
	switch origin := r.Header.Get("Origin"); {
	case a.cors.all():
		addCORS(w, "*")
	case origin == "":
		// Not a browser's cross-origin request (etcdctl, curl).
	case a.cors.allowsOrigin(origin):
		addCORS(w, origin)
	default:
		a.lg.WithField("origin", origin).Warn("HTTP request refused: its Origin is not in --cors")
		a.refused.WithLabelValues("origin").Inc()
		http.Error(w, forbiddenOrigin(origin), http.StatusForbidden)
		return
	}
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusOK)
		return
	}
	a.next.ServeHTTP(w, r)
}

// hostname is the request's Host without its port.
func hostname(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		return h
	}
	return r.Host
}

func addCORS(w http.ResponseWriter, origin string) {
	w.Header().Add("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE")
	w.Header().Add("Access-Control-Allow-Origin", origin)
	w.Header().Add("Access-Control-Allow-Headers", "accept, content-type, authorization")
}

// misdirected is the body of a refusal by host: what to change.
func misdirected(host string) string {
	return fmt.Sprintf("\nzketcd refused this request: its Host header %q is not an accepted hostname.\n\n"+
		"Either serve the client URLs with TLS (any Host is accepted over HTTPS), or start zketcd with\n"+
		"--host-whitelist listing this hostname (e.g. --host-whitelist %q).\n\n"+
		"The check guards plain-HTTP endpoints against DNS rebinding (CVE-2018-5702).\n", host, host)
}

// forbiddenOrigin is the body of a refusal by origin.
func forbiddenOrigin(origin string) string {
	return fmt.Sprintf("\nzketcd refused this request: its Origin %q is not an allowed origin.\n\n"+
		"Start zketcd with --cors listing it (e.g. --cors %q) to let pages of that origin use the HTTP API.\n", origin, origin)
}
