package embed

import (
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
)

// pprofHandler serves Go's runtime profiles under /debug/pprof/, as etcd
// does with --enable-pprof: the index, the named profiles (goroutine,
// heap, allocs, block, mutex, threadcreate), cmdline (with secrets
// redacted), a CPU profile, a trace and symbol lookups. It uses its own
// mux, so nothing is registered on http.DefaultServeMux.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// cmdline is pprof's cmdline (the arguments separated by NUL bytes) with
// the values of flags that carry secrets redacted: whoever reaches the
// client URLs must not learn the ZooKeeper credential.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(strings.Join(RedactArgs(os.Args), "\x00")))
}

// secretFlags are the flags whose values are credentials.
func secretFlag(name string) bool {
	switch strings.TrimLeft(name, "-") {
	case "zk-auth", "zk-former-auth", "password", "user":
		return true
	}
	return false
}

// Redacted replaces a secret's value.
const Redacted = "<redacted>"

// RedactArgs returns args with the value of every flag carrying a secret
// (--zk-auth, --zk-former-auth, --user, --password; as "--flag value" or
// "--flag=value") replaced by Redacted.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		if name, _, ok := strings.Cut(a, "="); ok {
			if secretFlag(name) {
				out[i] = name + "=" + Redacted
			}
			continue
		}
		if secretFlag(a) && i+1 < len(out) {
			out[i+1] = Redacted
			i++
		}
	}
	return out
}
