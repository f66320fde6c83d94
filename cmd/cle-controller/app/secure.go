package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// serverTLS returns the metrics server's TLS configuration, kept by
// k8s.io/apiserver's dynamic serving certificate controller as
// kube-apiserver's own is: the certificate and key files, loaded again when
// they change on disk (a rotated certificate is served without a restart),
// or without files a self-signed certificate made at start, which is what a
// Prometheus that skips verification, as Kubernetes components' scrape
// configurations do, needs. The controllers stop with ctx.
func serverTLS(ctx context.Context, certFile, keyFile string) (*tls.Config, error) {
	var (
		content dynamiccertificates.CertKeyContentProvider
		files   *dynamiccertificates.DynamicCertKeyPairContent
	)
	if certFile == "" {
		cert, key, err := selfSignedCertificate()
		if err != nil {
			return nil, err
		}
		if content, err = dynamiccertificates.NewStaticCertKeyContent("self-signed metrics serving certificate", cert, key); err != nil {
			return nil, fmt.Errorf("self-signed serving certificate: %w", err)
		}
		klog.FromContext(ctx).Info("Serving metrics with a self-signed certificate; --tls-cert-file and --tls-private-key-file give one to verify")
	} else {
		var err error
		if files, err = dynamiccertificates.NewDynamicServingContentFromFiles("metrics serving certificate", certFile, keyFile); err != nil {
			return nil, fmt.Errorf("load serving certificate %s and key %s: %w", certFile, keyFile, err)
		}
		content = files
	}
	certs := dynamiccertificates.NewDynamicServingCertificateController(&tls.Config{MinVersion: tls.VersionTLS12}, nil, content, nil, nil)
	if err := certs.RunOnce(); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if files != nil {
		files.AddListener(certs)
		go files.Run(ctx, 1)
	}
	go certs.Run(1, ctx.Done())
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: certs.GetConfigForClient}, nil
}

// selfSignedCertificate is a certificate and key, PEM-encoded, for the host
// name, localhost and the loopback addresses, valid for a year.
func selfSignedCertificate() (cert, key []byte, err error) {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	cert, key, err = certutil.GenerateSelfSignedCertKey(host, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
	if err != nil {
		return nil, nil, fmt.Errorf("generate a self-signed serving certificate: %w", err)
	}
	return cert, key, nil
}

// metricsAuth authenticates requests by their bearer token with a
// TokenReview and authorizes them with a SubjectAccessReview for the
// request's verb on its path (a non-resource URL, as kube-apiserver's own
// /metrics), as Kubernetes components delegate their endpoints'
// authentication and authorization to kube-apiserver, with
// k8s.io/apiserver's webhook authenticator and authorizer. A Prometheus
// with its service account token and a ClusterRole granting get on
// /metrics scrapes; nobody else does. Answers are cached for reviewCacheTTL,
// so that scrapes do not cost kube-apiserver two requests each.
type metricsAuth struct {
	tokens     authenticator.Token
	authorizer authorizer.Authorizer
}

const (
	reviewCacheTTL = 10 * time.Second
	reviewTimeout  = 10 * time.Second
)

// reviewRetry is how a review that failed on a connection or with a server
// error is retried: k8s.io/apiserver's default for its webhooks.
func reviewRetry() wait.Backoff { return *webhooktoken.DefaultRetryBackoff() }

// newMetricsAuth reviews tokens and access with client, retrying a review
// that failed on a connection or a server error as retry says.
func newMetricsAuth(client kubernetes.Interface, retry wait.Backoff) (*metricsAuth, error) {
	review, err := webhooktoken.NewFromInterface(client.AuthenticationV1(), nil, retry, reviewTimeout, webhooktoken.AuthenticatorMetrics{
		RecordRequestTotal:   func(context.Context, string) {},
		RecordRequestLatency: func(context.Context, string, float64) {},
	})
	if err != nil {
		return nil, fmt.Errorf("token review authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             reviewCacheTTL,
		DenyCacheTTL:              reviewCacheTTL,
		WebhookRetryBackoff:       &retry,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("subject access review authorizer: %w", err)
	}
	return &metricsAuth{tokens: tokencache.New(review, false, reviewCacheTTL, reviewCacheTTL), authorizer: authz}, nil
}

// wrap returns h behind authentication and authorization. A request
// without a valid token is refused with 401, one its user may not make with
// 403; a review the controller cannot have made (kube-apiserver
// unreachable, no right to create reviews) is the controller's own failure,
// not the client's: 500, and logged.
func (a *metricsAuth) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		token, ok := bearerToken(r)
		if !ok {
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		resp, ok, err := a.tokens.AuthenticateToken(r.Context(), token)
		if err != nil && reviewFailed(err) {
			logger.Error(err, "Cannot authenticate a metrics request", "path", r.URL.Path)
			http.Error(w, "Internal error: the token could not be reviewed", http.StatusInternalServerError)
			return
		}
		if !ok {
			logger.V(2).Info("Metrics request with a token kube-apiserver rejected", "path", r.URL.Path, "reason", err)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: resp.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := a.authorizer.Authorize(r.Context(), attrs)
		if err != nil {
			logger.Error(err, "Cannot authorize a metrics request", "user", resp.User.GetName(), "path", r.URL.Path)
			http.Error(w, "Internal error: the request could not be authorized", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			logger.V(2).Info("Metrics request denied", "user", resp.User.GetName(), "verb", attrs.Verb, "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q cannot %s path %q", resp.User.GetName(), attrs.Verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// reviewFailed tells a review that could not be made (kube-apiserver
// refused the request, did not answer it, or not in time) from a token the
// review rejected with a reason, which the webhook authenticator also
// returns as an error.
func reviewFailed(err error) bool {
	var status apierrors.APIStatus
	var transport *url.Error
	return errors.As(err, &status) || errors.As(err, &transport) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// bearerToken is the request's bearer token (the scheme in any case).
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
