package candidate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/cle-dev/cle/internal/lead"
)

// ErrNotLeader is the error of a write refused by a client from WrapConfig
// because this process is not leader. Clients wrap it (in a *url.Error);
// test for it with errors.Is.
var ErrNotLeader = lead.ErrNotLeader

// WrapConfig returns a copy of cfg whose clients refuse mutating requests
// with ErrNotLeader while this process is not leader. It returns nil for a
// nil cfg.
//
// Requests that change nothing pass whatever the leadership: reads (GET,
// which includes LIST and WATCH, HEAD and OPTIONS), server-side dry runs
// (dryRun=All), and the create-only review APIs of the groups
// authentication.k8s.io and authorization.k8s.io (TokenReview,
// SubjectAccessReview and the like), which only ask a question. Paths are
// matched below the path of cfg.Host, if it has one (a server behind a proxy
// such as https://host/k8s/clusters/c-1).
//
// Leadership is checked when each request is sent, including the renew
// deadline, so a process that wakes from a pause cannot write before it
// notices. A write that is let through is bounded too: it is cancelled when
// the leadership it was sent under ends (at the renew deadline as it stood
// when the request was sent, or earlier when the library steps down), until
// its response body is closed. This is not a lock: the API server may still
// apply a write whose cancellation it has not seen, which is why the renew
// deadline is shorter than the lease duration, and why a resource that must
// never see a deposed leader's write should also check the fencing token.
func (c *Candidate) WrapConfig(cfg *rest.Config) *rest.Config {
	return wrapConfig(cfg, c)
}

// wrapConfig is WrapConfig for any gate.
func wrapConfig(cfg *rest.Config, gate gate) *rest.Config {
	if cfg == nil {
		return nil
	}
	out := rest.CopyConfig(cfg)
	// A Host that does not parse fails the clients built from out anyway.
	var basePath string
	if u, _, err := rest.DefaultServerUrlFor(out); err == nil {
		basePath = strings.TrimSuffix(u.Path, "/")
	}
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &guard{gate: gate, next: rt, basePath: basePath}
	})
	return out
}

// gate decides which requests a guard lets through: a Candidate lets its
// leader's through, a Group those made on the context of a shard it acts on.
type gate interface {
	// requestContext returns a context for one write, cancelled when what
	// it is sent under ends, and the function that releases it; ok is
	// false when the write may not be sent.
	requestContext(parent context.Context) (ctx context.Context, release func(), ok bool)
	// refuse counts a refused write and says why it was refused.
	refuse(req *http.Request) error
}

type guard struct {
	gate gate
	next http.RoundTripper
	// basePath is the path of the server URL, without a trailing slash:
	// every API path follows it.
	basePath string
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if changesNothing(req, g.apiPath(req.URL)) {
		return g.next.RoundTrip(req)
	}
	ctx, release, ok := g.gate.requestContext(req.Context())
	if !ok {
		// A RoundTripper owns the body, even when it fails.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, g.gate.refuse(req)
	}
	resp, err := g.next.RoundTrip(req.WithContext(ctx))
	if err != nil || resp == nil || resp.Body == nil {
		release()
		return resp, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// apiPath is the path of u below the server URL's path: the path the API
// server sees. A URL outside the server's path is taken whole.
func (g *guard) apiPath(u *url.URL) string {
	if u == nil {
		return ""
	}
	if rel, ok := strings.CutPrefix(u.Path, g.basePath); ok && strings.HasPrefix(rel, "/") {
		return rel
	}
	return u.Path
}

// changesNothing tells the requests that cannot change the cluster's state;
// apiPath is the request's path as the API server sees it.
func changesNothing(req *http.Request, apiPath string) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		// exec, attach and port-forward are GETs upgraded to a stream,
		// and a proxy passes any request on: they act.
		return !upgrades(req) && !actingSubresources[subresourceOf(apiPath)]
	}
	if req.URL != nil && req.URL.Query().Get("dryRun") == "All" {
		return true
	}
	if req.Method == http.MethodPost {
		for _, group := range []string{"/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/"} {
			if strings.HasPrefix(apiPath, group) {
				return true
			}
		}
	}
	return false
}

// actingSubresources are the subresources a GET acts through.
var actingSubresources = map[string]bool{"exec": true, "attach": true, "portforward": true, "proxy": true}

// upgrades reports whether req asks to switch to a stream (SPDY or a
// WebSocket), as exec, attach and port-forward do.
func upgrades(req *http.Request) bool {
	if req.Header.Get("Upgrade") != "" {
		return true
	}
	for _, v := range req.Header.Values("Connection") {
		for _, token := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), "upgrade") {
				return true
			}
		}
	}
	return false
}

// subresourceOf returns the subresource an API path names ("" for none):
// /api/v1/[namespaces/NS/]RESOURCE/NAME/SUB... and
// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE/NAME/SUB...
func subresourceOf(apiPath string) string {
	parts := strings.Split(strings.Trim(apiPath, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return ""
	}
	if len(parts) >= 4 && parts[0] == "namespaces" {
		parts = parts[2:] // a namespaced resource, not a namespace's own subresource
	}
	if len(parts) >= 3 {
		return parts[2]
	}
	return ""
}

// WrappedRoundTripper lets client-go's transport debugging see through the
// guard.
func (g *guard) WrappedRoundTripper() http.RoundTripper { return g.next }

// requestContext returns a context for one guarded request, cancelled when
// the leadership it is sent under ends, and the function that releases it;
// ok is false when this process is not leader.
func (c *Candidate) requestContext(parent context.Context) (ctx context.Context, release func(), ok bool) {
	t, ok := c.liveTerm()
	if !ok {
		return nil, nil, false
	}
	ended := fmt.Errorf("%w: leadership of %s ended while the request was in flight", ErrNotLeader, c.cfg.Identity)
	ctx, release = c.boundedRequest(parent, t.ctx, c.cfg.RenewDeadline-c.since(t.renewedAt), ended)
	return ctx, release, true
}

func (c *Candidate) refuse(req *http.Request) error {
	c.metrics.refused()
	return fmt.Errorf("%w: %s refused %s %s", ErrNotLeader, c.cfg.Identity, req.Method, req.URL.Path)
}

// boundedRequest is parent cancelled with ended when until ends or after
// remaining, whichever is first, and the function that releases it.
func (c *Candidate) boundedRequest(parent, until context.Context, remaining time.Duration, ended error) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	stopAfter := context.AfterFunc(until, func() { cancel(ended) })
	stopTimer := c.afterFunc(remaining, func() { cancel(ended) })
	return ctx, sync.OnceFunc(func() {
		stopAfter()
		stopTimer()
		cancel(context.Canceled)
	})
}

// afterFunc calls f after d on the library's clock, and returns the function
// that stops that.
func (c *Candidate) afterFunc(d time.Duration, f func()) (stop func()) {
	if clk, ok := c.cfg.Clock.(clock.WithDelayedExecution); ok {
		t := clk.AfterFunc(d, f)
		return func() { t.Stop() }
	}
	t := c.cfg.Clock.NewTimer(d)
	done := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			f()
		case <-done:
		}
	}()
	return func() {
		t.Stop()
		close(done)
	}
}

// releasingBody releases a guarded request's context once the caller is done
// with the response.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}
