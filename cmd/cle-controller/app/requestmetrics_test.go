package app

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cle-dev/cle/internal/promtest"
)

func TestClassifyRequest(t *testing.T) {
	tests := []struct {
		method, path           string
		wantVerb, wantResource string
	}{
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "get", "leases.coordination.k8s.io"},
		{"GET", "/apis/coordination.k8s.io/v1/leases?limit=500", "list", "leases.coordination.k8s.io"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases?watch=true&resourceVersion=5", "watch", "leases.coordination.k8s.io"},
		{"GET", "/apis/coordination.k8s.io/v1/watch/namespaces/ns/leases", "watch", "leases.coordination.k8s.io"},
		{"PUT", "/apis/coordination.k8s.io/v1beta1/namespaces/ns/leasecandidates/c", "update", "leasecandidates.coordination.k8s.io"},
		{"PUT", "/apis/cle.dev/v1beta1/namespaces/ns/leasecandidates/c", "update", "leasecandidates.cle.dev"},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "create", "leases.coordination.k8s.io"},
		{"DELETE", "/apis/cle.dev/v1beta1/namespaces/ns/leasecandidates/c", "delete", "leasecandidates.cle.dev"},
		{"DELETE", "/apis/cle.dev/v1beta1/namespaces/ns/leasecandidates", "deletecollection", "leasecandidates.cle.dev"},
		{"PATCH", "/apis/events.k8s.io/v1/namespaces/ns/events/e", "patch", "events.events.k8s.io"},
		{"POST", "/api/v1/namespaces/ns/events", "create", "events"},
		{"GET", "/api/v1/namespaces", "list", "namespaces"},
		{"GET", "/api/v1/namespaces/ns", "get", "namespaces"},
		{"PUT", "/api/v1/namespaces/ns/finalize", "update", "namespaces/finalize"},
		{"PUT", "/api/v1/namespaces/ns/pods/p/status", "update", "pods/status"},
		{"GET", "/api", "get", "discovery"},
		{"GET", "/apis/coordination.k8s.io/v1beta1", "get", "discovery"},
		{"GET", "/version", "get", "nonresource"},
	}
	for _, tc := range tests {
		u, err := url.Parse(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		verb, resource := classifyRequest(tc.method, u)
		if verb != tc.wantVerb || resource != tc.wantResource {
			t.Errorf("%s %s: %s %s, want %s %s", tc.method, tc.path, verb, resource, tc.wantVerb, tc.wantResource)
		}
	}
}

// TestRequestMetricsCountsClientRequests drives a real client through the
// wrapper, as the controller's clients are: requests are counted by what
// the server answered, and a request that got no answer counts as an error.
func TestRequestMetricsCountsClientRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l","namespace":"ns"}}`))
	}))
	defer srv.Close()

	m := newRequestMetrics()
	cfg := &rest.Config{Host: srv.URL, QPS: -1}
	cfg.Wrap(m.wrap)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases("ns")
	for range 2 {
		if _, err := leases.Get(t.Context(), "l", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := leases.Update(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, metav1.UpdateOptions{}); err == nil {
		t.Fatal("update succeeded, want a conflict")
	}

	failing := m.wrap(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("refused") }))
	req := httptest.NewRequest(http.MethodPost, "https://server/apis/coordination.k8s.io/v1/namespaces/ns/leases", nil)
	if _, err := failing.RoundTrip(req); err == nil {
		t.Fatal("want the transport's error")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		verb, code string
		want       float64
	}{
		{"get", "200", 2},
		{"update", "409", 1},
		{"create", "error", 1},
	} {
		if got := promtest.Value(fams, "cle_api_requests_total", "verb", tc.verb, "resource", "leases.coordination.k8s.io", "code", tc.code); got != tc.want {
			t.Errorf("%s of leases with code %s counted %v times, want %v", tc.verb, tc.code, got, tc.want)
		}
	}
	if got := promtest.Value(fams, "cle_api_requests_total"); got != 4 {
		t.Errorf("%v requests counted in all, want 4", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestProfilingNeedsMetricsAddress(t *testing.T) {
	if err := parse(t, "--profiling").Validate(); err != nil {
		t.Errorf("--profiling: %v", err)
	}
	err := parse(t, "--profiling", "--metrics-bind-address=0").Validate()
	if err == nil || !strings.Contains(err.Error(), "--profiling needs --metrics-bind-address") {
		t.Errorf("--profiling without a metrics address: err = %v", err)
	}
}
