package candidate

import (
	"errors"
	"fmt"
	"net/http"

	"k8s.io/client-go/rest"
)

// ErrNotLeader is the error of a write refused by a client from WrapConfig
// because this process is not leader. Clients wrap it (in a *url.Error);
// test for it with errors.Is.
var ErrNotLeader = errors.New("not the leader")

// WrapConfig returns a copy of cfg whose clients refuse mutating requests
// with ErrNotLeader while this process is not leader. Reads (GET, which
// includes LIST and WATCH, HEAD and OPTIONS) always pass. Leadership is
// checked when each request is sent, including the renew deadline, so a
// process that wakes from a pause cannot write before it notices. The check
// is not a lock: a request sent just before the deadline can still arrive
// after it, which is why the deadline is shorter than the lease duration.
func (c *Candidate) WrapConfig(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &guard{c: c, next: rt}
	})
	return out
}

type guard struct {
	c    *Candidate
	next http.RoundTripper
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return g.next.RoundTrip(req)
	}
	if !g.c.IsLeader() {
		// A RoundTripper owns the body, even when it fails.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %s refused %s %s", ErrNotLeader, g.c.cfg.Identity, req.Method, req.URL.Path)
	}
	return g.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go's transport debugging see through the
// guard.
func (g *guard) WrappedRoundTripper() http.RoundTripper { return g.next }
