package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// serverTLS returns the metrics server's TLS configuration: the certificate
// and key files, read again when they change on disk (a rotated certificate
// is served without a restart), or without files a self-signed certificate
// made at start, which is what a Prometheus that skips verification, as
// Kubernetes components' scrape configurations do, needs.
func serverTLS(ctx context.Context, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certFile == "" {
		cert, err := selfSignedCertificate(time.Now())
		if err != nil {
			return nil, fmt.Errorf("generate a self-signed serving certificate: %w", err)
		}
		klog.FromContext(ctx).Info("Serving metrics with a self-signed certificate; --tls-cert-file and --tls-private-key-file give one to verify")
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.load() }
	return cfg, nil
}

// certReloader serves the certificate of certFile and keyFile, reloaded
// when either file's modification time changes.
type certReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	stamp             string
}

func (r *certReloader) load() (*tls.Certificate, error) {
	stamp := ""
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			if r.cert != nil {
				return r.cert, nil // mid-rotation: keep serving the last good pair
			}
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
		stamp += st.ModTime().String() + "/" + fmt.Sprint(st.Size()) + ";"
	}
	if r.cert != nil && stamp == r.stamp {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			return r.cert, nil // mid-rotation: keep serving the last good pair
		}
		return nil, fmt.Errorf("load serving certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.stamp = &cert, stamp
	return r.cert, nil
}

// selfSignedCertificate is a one-year ECDSA P-256 certificate for the host
// name, localhost and the loopback addresses.
func selfSignedCertificate(now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	host, _ := os.Hostname()
	names := []string{"localhost"}
	if host != "" {
		names = append(names, host)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "cle-controller@" + host},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// apiAuth authenticates requests by their bearer token with a TokenReview
// and authorizes them with a SubjectAccessReview for the request's verb on
// its path (a non-resource URL, as kube-apiserver's own /metrics), as
// Kubernetes components delegate their endpoints' authentication and
// authorization to kube-apiserver. A Prometheus with its service account
// token and a ClusterRole granting get on /metrics scrapes; nobody else
// does. Answers are cached for cacheTTL, so that scrapes do not cost
// kube-apiserver two requests each.
type apiAuth struct {
	client   kubernetes.Interface
	cacheTTL time.Duration
	now      func() time.Time

	mu    sync.Mutex
	users map[[32]byte]cachedUser
	sars  map[string]cachedDecision
}

type cachedUser struct {
	user  *authenticationv1.UserInfo // nil: the token was rejected
	until time.Time
}

type cachedDecision struct {
	allowed bool
	reason  string
	until   time.Time
}

// maxCached bounds each cache; a full cache is emptied.
const maxCached = 1024

func newAPIAuth(client kubernetes.Interface) *apiAuth {
	return &apiAuth{client: client, cacheTTL: 10 * time.Second, now: time.Now,
		users: map[[32]byte]cachedUser{}, sars: map[string]cachedDecision{}}
}

// wrap returns h behind authentication and authorization.
func (a *apiAuth) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		user, err := a.authenticate(r.Context(), token)
		if err != nil {
			// The controller's own failure (kube-apiserver unreachable, no
			// right to create TokenReviews), not the client's.
			klog.FromContext(r.Context()).Error(err, "Cannot authenticate a metrics request", "path", r.URL.Path)
			http.Error(w, "Internal error: the token could not be reviewed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(r.Method)
		allowed, reason, err := a.authorize(r.Context(), user, verb, r.URL.Path)
		if err != nil {
			klog.FromContext(r.Context()).Error(err, "Cannot authorize a metrics request", "user", user.Username, "path", r.URL.Path)
			http.Error(w, "Internal error: the request could not be authorized", http.StatusInternalServerError)
			return
		}
		if !allowed {
			klog.FromContext(r.Context()).V(2).Info("Metrics request denied", "user", user.Username, "verb", verb, "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q cannot %s path %q", user.Username, verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// evictExpired drops the expired answers of a full cache, and all of them
// if none has expired (a flood of distinct tokens): the cache stays bounded,
// and a flood costs the regular scrapers one review each.
func evictExpired[K comparable, V any](m map[K]V, now time.Time, until func(V) time.Time) {
	for k, v := range m {
		if !now.Before(until(v)) {
			delete(m, k)
		}
	}
	if len(m) >= maxCached {
		clear(m)
	}
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate returns the token's user, nil if kube-apiserver rejects the
// token.
func (a *apiAuth) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := a.now()
	a.mu.Lock()
	c, ok := a.users[key]
	a.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.user, nil
	}
	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated {
		user = &review.Status.User
	}
	a.mu.Lock()
	if len(a.users) >= maxCached {
		evictExpired(a.users, now, func(c cachedUser) time.Time { return c.until })
	}
	a.users[key] = cachedUser{user: user, until: now.Add(a.cacheTTL)}
	a.mu.Unlock()
	return user, nil
}

func (a *apiAuth) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	key := strings.Join([]string{user.Username, user.UID, strings.Join(user.Groups, ","), fmt.Sprint(user.Extra), verb, path}, "\x00")
	now := a.now()
	a.mu.Lock()
	c, ok := a.sars[key]
	a.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.allowed, c.reason, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	d := cachedDecision{allowed: sar.Status.Allowed, reason: sar.Status.Reason, until: now.Add(a.cacheTTL)}
	a.mu.Lock()
	if len(a.sars) >= maxCached {
		evictExpired(a.sars, now, func(c cachedDecision) time.Time { return c.until })
	}
	a.sars[key] = d
	a.mu.Unlock()
	return d.allowed, d.reason, nil
}
