package app

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// clientGoMetrics are the metrics client-go reports through its hooks, under
// the names Kubernetes components export them: the requests the
// controller's clients send to kube-apiserver (rest_client_*) and its own
// leader election (leader_election_master_status), so that dashboards and
// alerts written for kube-controller-manager and kube-scheduler read cle's
// too.
type clientGoMetrics struct {
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	rateLimiter    *prometheus.HistogramVec
	leader         *prometheus.GaugeVec
	leaderSlowpath *prometheus.CounterVec
}

// Buckets of kube's rest_client_request_duration_seconds.
var requestBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}

// clientGo is process-wide: client-go takes its hooks once per process.
var clientGo = sync.OnceValue(func() *clientGoMetrics {
	m := &clientGoMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_requests_total",
			Help: "Number of HTTP requests to kube-apiserver, partitioned by status code, method, and host.",
		}, []string{"code", "method", "host"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rest_client_request_duration_seconds",
			Help:    "Request latency in seconds, by verb and host.",
			Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		rateLimiter: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rest_client_rate_limiter_duration_seconds",
			Help:    "Client-side rate limiter latency in seconds, by verb and host: how long requests waited for --kube-api-qps.",
			Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leader_election_master_status",
			Help: "1 while this process leads the leader election called name, 0 while it does not.",
		}, []string{"name"}),
		leaderSlowpath: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_election_slowpath_total",
			Help: "Times the leader election called name had to read its lock again because a renewal from its cached copy failed.",
		}, []string{"name"}),
	}
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:      resultAdapter{m.requests},
		RequestLatency:     latencyAdapter{m.latency},
		RateLimiterLatency: latencyAdapter{m.rateLimiter},
	})
	leaderelection.SetProvider(leaderProvider{m})
	return m
})

func (m *clientGoMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency, m.rateLimiter, m.leader, m.leaderSlowpath}
}

type resultAdapter struct{ v *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.v.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ v *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	a.v.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type leaderProvider struct{ m *clientGoMetrics }

func (p leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return p }
func (p leaderProvider) On(name string)                               { p.m.leader.WithLabelValues(name).Set(1) }
func (p leaderProvider) Off(name string)                              { p.m.leader.WithLabelValues(name).Set(0) }
func (p leaderProvider) SlowpathExercised(name string) {
	p.m.leaderSlowpath.WithLabelValues(name).Inc()
}
