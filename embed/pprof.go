package embed

import (
	"net/http"
	"net/http/pprof"
)

// pprofHandler serves Go's runtime profiles under /debug/pprof/, as etcd
// does with --enable-pprof: the index, the named profiles (goroutine,
// heap, allocs, block, mutex, threadcreate), cmdline, a CPU profile, a
// trace and symbol lookups. It uses its own mux, so nothing is
// registered on http.DefaultServeMux.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
