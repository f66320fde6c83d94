package app

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// requestMetrics counts the requests the controller's own clients send to
// kube-apiserver, by verb, resource and response code: what the controller
// costs the server, readable without access to the server's metrics.
type requestMetrics struct {
	total *prometheus.CounterVec
}

func newRequestMetrics() *requestMetrics {
	return &requestMetrics{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cle_api_requests_total",
		Help: "Requests sent to kube-apiserver by this controller's clients, once past the client-side rate limit, " +
			"by verb (get, list, watch, create, update, patch, delete, deletecollection), resource (resource.group, " +
			"/subresource if any; discovery or nonresource for other paths) and HTTP code (error when no response came).",
	}, []string{"verb", "resource", "code"})}
}

func (m *requestMetrics) Describe(ch chan<- *prometheus.Desc) { m.total.Describe(ch) }
func (m *requestMetrics) Collect(ch chan<- prometheus.Metric) { m.total.Collect(ch) }

// wrap is a rest.Config WrapTransport: it sits below client-go's rate
// limiter, so only requests actually sent are counted.
func (m *requestMetrics) wrap(rt http.RoundTripper) http.RoundTripper {
	return &countingRoundTripper{next: rt, total: m.total}
}

type countingRoundTripper struct {
	next  http.RoundTripper
	total *prometheus.CounterVec
}

func (c *countingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	verb, resource := classifyRequest(req.Method, req.URL)
	c.total.WithLabelValues(verb, resource, code).Inc()
	return resp, err
}

// WrappedRoundTripper lets client-go find the transport underneath (to close
// idle connections, for instance).
func (c *countingRoundTripper) WrappedRoundTripper() http.RoundTripper { return c.next }

// namespaceSubresources are the subresources of a Namespace object, which
// follow /namespaces/{name} where a namespaced resource would.
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// classifyRequest names a request's verb and resource as kube-apiserver's
// RequestInfo does: a GET is a get of a named object, a list of a
// collection, or a watch (?watch=true or the legacy /watch/ prefix); a POST
// a create; a DELETE of a collection a deletecollection.
func classifyRequest(method string, u *url.URL) (verb, resource string) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	group := ""
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	case len(parts) >= 1 && (parts[0] == "api" || parts[0] == "apis"):
		return strings.ToLower(method), "discovery"
	default:
		return strings.ToLower(method), "nonresource"
	}
	watchPath := len(parts) > 0 && parts[0] == "watch"
	if watchPath {
		parts = parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" && !namespaceSubresources[parts[2]] {
		parts = parts[2:]
	}
	if len(parts) == 0 || parts[0] == "" {
		return strings.ToLower(method), "discovery"
	}
	resource = parts[0]
	if group != "" {
		resource += "." + group
	}
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	named := len(parts) >= 2
	switch method {
	case http.MethodGet:
		switch {
		case watchPath || u.Query().Get("watch") == "true" || u.Query().Get("watch") == "1":
			return "watch", resource
		case named:
			return "get", resource
		default:
			return "list", resource
		}
	case http.MethodPost:
		return "create", resource
	case http.MethodPut:
		return "update", resource
	case http.MethodPatch:
		return "patch", resource
	case http.MethodDelete:
		if named {
			return "delete", resource
		}
		return "deletecollection", resource
	default:
		return strings.ToLower(method), resource
	}
}
