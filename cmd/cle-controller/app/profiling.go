package app

import (
	"net/http"
	"net/http/pprof"
)

// profilingHandlers are Go's runtime profiles (net/http/pprof) under
// /debug/pprof/, which --profiling adds to the metrics address as Kubernetes
// components add them to theirs: `go tool pprof
// http://ADDR/debug/pprof/profile?seconds=30` for CPU, .../heap for memory.
func profilingHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		// Index also serves the named profiles: heap, goroutine, allocs, ...
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}
