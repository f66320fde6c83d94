package app

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// reviewingClient is a fake API that knows one token, of user "prometheus",
// who may get /metrics and nothing else; it counts the reviews made.
func reviewingClient(tokenReviews, accessReviews *int) *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*tokenReviews++
		r := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if r.Spec.Token == "good" {
			r.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus", Groups: []string{"system:authenticated"}}}
		}
		return true, r, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*accessReviews++
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		n := r.Spec.NonResourceAttributes
		r.Status.Allowed = r.Spec.User == "prometheus" && n != nil && n.Path == "/metrics" && n.Verb == "get"
		return true, r, nil
	})
	return client
}

func TestAPIAuth(t *testing.T) {
	var tokenReviews, accessReviews int
	auth := newAPIAuth(reviewingClient(&tokenReviews, &accessReviews))
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	auth.now = func() time.Time { return now }
	h := auth.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	get := func(path, authz string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
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
	tokenReviews, accessReviews = 0, 0
	for range 3 {
		if got := get("/metrics", "Bearer good"); got != http.StatusOK {
			t.Fatalf("cached: %d, want 200", got)
		}
	}
	if tokenReviews != 0 || accessReviews != 0 {
		t.Errorf("within the cache TTL: %d TokenReviews and %d SubjectAccessReviews, want none", tokenReviews, accessReviews)
	}
	now = now.Add(auth.cacheTTL)
	if got := get("/metrics", "Bearer good"); got != http.StatusOK || tokenReviews != 1 || accessReviews != 1 {
		t.Errorf("after the TTL: %d with %d TokenReviews and %d SubjectAccessReviews, want 200 after one of each", got, tokenReviews, accessReviews)
	}
}

func TestSelfSignedCertificate(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	cert, err := selfSignedCertificate(now)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Leaf == nil {
		t.Fatal("no parsed leaf")
	}
	if !cert.Leaf.NotAfter.After(now.Add(364*24*time.Hour)) || cert.Leaf.NotBefore.After(now) {
		t.Errorf("valid %v to %v, want a year from now", cert.Leaf.NotBefore, cert.Leaf.NotAfter)
	}
	if err := cert.Leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("loopback: %v", err)
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

// TestAPIAuthReviewFailure: when the controller cannot have a token
// reviewed (no right to, kube-apiserver unreachable), the failure is its
// own: 500, not a 401 that blames the client's credentials.
func TestAPIAuthReviewFailure(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("tokenreviews.authentication.k8s.io is forbidden")
	})
	h := newAPIAuth(client).wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer good")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("TokenReview failed: %d, want 500", rec.Code)
	}
}
