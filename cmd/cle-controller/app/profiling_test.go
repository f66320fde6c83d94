package app

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestProfilingHandlers checks that the paths pprof's clients ask for are
// served: the index, a named profile through it, and a short CPU profile.
func TestProfilingHandlers(t *testing.T) {
	mux := http.NewServeMux()
	for path, h := range profilingHandlers() {
		mux.Handle(path, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?gc=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
	}
}
