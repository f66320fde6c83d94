package candidate

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a candidate's Prometheus metrics (Config.Metrics), labelled
// with its Lease. What it acts on is read at each scrape: whether it leads and
// under which token, as IsLeader and Token answer then (a term that lapsed
// while nobody asked, in a paused process, is not reported as leading), or
// how many shards a group's replica acts on.
type metrics struct {
	// states are the gauges of what the process acts on, collected by
	// collect.
	states   []*prometheus.Desc
	collect  func(ch chan<- prometheus.Metric)
	renewals *prometheus.HistogramVec
	refusals prometheus.Counter
}

// The results of a renewal, for cle_candidate_renewal_duration_seconds.
const (
	renewalOK     = "ok"
	renewalFailed = "error"
)

// newMetrics registers the metrics of c on reg.
func newMetrics(c *Candidate, reg prometheus.Registerer) (*metrics, error) {
	labels := metricLabels(&c.cfg)
	leading := prometheus.NewDesc("cle_candidate_leading",
		"1 while this process leads its Lease (IsLeader), 0 otherwise.", nil, labels)
	term := prometheus.NewDesc("cle_candidate_term",
		"The fencing token of the term this process leads (Token); absent while it does not lead.", nil, labels)
	return registerMetrics(&c.cfg, reg, "the Lease", "because this process was not leader", []*prometheus.Desc{leading, term}, func(ch chan<- prometheus.Metric) {
		token, ok := c.Token()
		v := 0.0
		if ok {
			v = 1
			ch <- prometheus.MustNewConstMetric(term, prometheus.GaugeValue, float64(token))
		}
		ch <- prometheus.MustNewConstMetric(leading, prometheus.GaugeValue, v)
	})
}

// newGroupMetrics registers the metrics of a group's replica on reg.
func newGroupMetrics(g *Group, reg prometheus.Registerer) (*metrics, error) {
	shards := prometheus.NewDesc("cle_candidate_shards",
		"The shards of its group this replica acts on now.", nil, metricLabels(&g.c.cfg))
	return registerMetrics(&g.c.cfg, reg, "the member Lease", "because this replica did not act on the request's shard", []*prometheus.Desc{shards}, func(ch chan<- prometheus.Metric) {
		ch <- prometheus.MustNewConstMetric(shards, prometheus.GaugeValue, float64(len(g.Acting())))
	})
}

func metricLabels(cfg *Config) prometheus.Labels {
	return prometheus.Labels{"namespace": cfg.Namespace, "lease": cfg.LeaseName}
}

// registerMetrics registers, on reg, the gauges states collected by collect,
// and the renewal and refusal metrics every process has: renewed names what
// it renews, refused why its guard refuses a write.
func registerMetrics(cfg *Config, reg prometheus.Registerer, renewed, refused string, states []*prometheus.Desc, collect func(chan<- prometheus.Metric)) (*metrics, error) {
	labels := metricLabels(cfg)
	m := &metrics{
		states:  states,
		collect: collect,
		renewals: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "cle_candidate_renewal_duration_seconds",
			Help:        "Time a renewal of " + renewed + " took, from sending it to its answer, by result (ok, error).",
			Buckets:     prometheus.ExponentialBuckets(0.005, 2, 12),
			ConstLabels: labels,
		}, []string{"result"}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "cle_candidate_guard_refusals_total",
			Help:        "Writes the write guard (WrapConfig) refused " + refused + ".",
			ConstLabels: labels,
		}),
	}
	if err := reg.Register(m); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return nil, fmt.Errorf("Metrics: another candidate of Lease %s/%s already registered its metrics on this registry", cfg.Namespace, cfg.LeaseName)
		}
		return nil, fmt.Errorf("Metrics: %w", err)
	}
	return m, nil
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.states {
		ch <- d
	}
	m.renewals.Describe(ch)
	m.refusals.Describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.collect(ch)
	m.renewals.Collect(ch)
	m.refusals.Collect(ch)
}

// observeRenewal records a renewal that took seconds; nil-safe.
func (m *metrics) observeRenewal(seconds float64, err error) {
	if m == nil {
		return
	}
	result := renewalOK
	if err != nil {
		result = renewalFailed
	}
	m.renewals.WithLabelValues(result).Observe(seconds)
}

// refused counts a write the guard refused; nil-safe.
func (m *metrics) refused() {
	if m != nil {
		m.refusals.Inc()
	}
}
