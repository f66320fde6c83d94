package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// reviewServer is kube-apiserver's review API as the metrics endpoint uses
// it: it knows one token, of user "prometheus", who may get /metrics and
// nothing else; it counts the reviews made, and answers fail with a 403 (the
// controller may not create reviews) while forbidden is set.
type reviewServer struct {
	mu                          sync.Mutex
	tokenReviews, accessReviews int
	forbidden                   bool
}

func (s *reviewServer) counts() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReviews, s.accessReviews
}

func (s *reviewServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forbidden {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("no RBAC policy matched")).ErrStatus)
		return
	}
	var answer any
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		s.tokenReviews++
		var review authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if review.Spec.Token == "good" {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus", Groups: []string{"system:authenticated"}}}
		} else {
			// As kube-apiserver answers a token it cannot read.
			review.Status.Error = "[invalid bearer token, token lookup failed]"
		}
		answer = &review
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		s.accessReviews++
		var review authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := review.Spec.NonResourceAttributes
		review.Status.Allowed = review.Spec.User == "prometheus" && n != nil && n.Path == "/metrics" && n.Verb == "get"
		answer = &review
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// authedHandler is a handler behind metricsAuth that reviews with srv, and
// a function that makes a GET of path with the Authorization header authz
// and returns the status code.
func authedHandler(t *testing.T, srv *reviewServer) func(path, authz string) int {
	t.Helper()
	api := httptest.NewServer(srv)
	t.Cleanup(api.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := newMetricsAuth(client, wait.Backoff{Duration: time.Millisecond, Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := auth.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	return func(path, authz string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
}

func TestMetricsAuth(t *testing.T) {
	srv := &reviewServer{}
	get := authedHandler(t, srv)
	for _, tc := range []struct {
		name, path, authz string
		want              int
	}{
		{"no credentials", "/metrics", "", http.StatusUnauthorized},
		{"not a bearer token", "/metrics", "Basic Zm9vOmJhcg==", http.StatusUnauthorized},
		{"an empty bearer token", "/metrics", "Bearer ", http.StatusUnauthorized},
		{"an unknown token", "/metrics", "Bearer bad", http.StatusUnauthorized},
		{"the reader", "/metrics", "Bearer good", http.StatusOK},
		{"the reader, scheme in lower case", "/metrics", "bearer good", http.StatusOK},
		{"the reader on another path", "/debug/pprof/", "Bearer good", http.StatusForbidden},
	} {
		if got := get(tc.path, tc.authz); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}

	// Answers are cached: scrapes within the TTL cost no review.
	tokens, access := srv.counts()
	for range 3 {
		if got := get("/metrics", "Bearer good"); got != http.StatusOK {
			t.Fatalf("cached: %d, want 200", got)
		}
	}
	if t2, a2 := srv.counts(); t2 != tokens || a2 != access {
		t.Errorf("within the cache TTL: %d TokenReviews and %d SubjectAccessReviews, want none", t2-tokens, a2-access)
	}
}

// TestMetricsAuthReviewFailure: when the controller cannot have a token
// reviewed (no right to, kube-apiserver unreachable), the failure is its
// own: 500, not a 401 that blames the client's credentials.
func TestMetricsAuthReviewFailure(t *testing.T) {
	get := authedHandler(t, &reviewServer{forbidden: true})
	if got := get("/metrics", "Bearer good"); got != http.StatusInternalServerError {
		t.Errorf("TokenReview failed: %d, want 500", got)
	}
}

func TestSelfSignedCertificate(t *testing.T) {
	certPEM, keyPEM, err := selfSignedCertificate()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pair.Leaf
	now := time.Now()
	if !leaf.NotAfter.After(now.Add(364*24*time.Hour)) || leaf.NotBefore.After(now) {
		t.Errorf("valid %v to %v, want a year from now", leaf.NotBefore, leaf.NotAfter)
	}
	for _, name := range []string{"127.0.0.1", "::1", "localhost"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestServingCertificateReloaded: the metrics server serves the
// certificate of its files, and a new one written over them (as the kubelet
// rotates a mounted Secret) without a restart.
func TestServingCertificateReloaded(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func() *x509.Certificate {
		t.Helper()
		certPEM, keyPEM, err := selfSignedCertificate()
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		// The key first: a reload between the two writes fails to pair
		// them and keeps the certificate it serves.
		for f, b := range map[string][]byte{keyFile: keyPEM, certFile: certPEM} {
			if err := os.WriteFile(f+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{keyFile, certFile} {
			if err := os.Rename(f+".new", f); err != nil {
				t.Fatal(err)
			}
		}
		return pair.Leaf
	}
	first := write()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := serverTLS(ctx, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads the certificate served
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	if got := served(); !got.Equal(first) {
		t.Fatalf("serves %v, want the file's certificate %v", got.Subject, first.Subject)
	}
	second := write()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return served().Equal(second), nil
	}); err != nil {
		t.Fatalf("the rewritten certificate was not served within a minute: %v", err)
	}
}

func TestProfilingNeedsSecureMetrics(t *testing.T) {
	if err := parse(t, "--profiling").Validate(); err != nil {
		t.Errorf("--profiling on the secure default: %v", err)
	}
	for _, args := range [][]string{
		{"--profiling", "--metrics-secure=false"},
		{"--profiling", "--metrics-bind-address=0"},
	} {
		if err := parse(t, args...).Validate(); err == nil || !strings.Contains(err.Error(), "--profiling") {
			t.Errorf("%v: %v, want an error naming --profiling", args, err)
		}
	}
	if err := parse(t, "--tls-cert-file=/c").Validate(); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("a certificate without its key: %v", err)
	}
}
