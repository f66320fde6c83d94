package candidate

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a candidate's Prometheus metrics (Config.Metrics), labelled
// with its Lease. Whether it leads and under which token are read from the
// candidate at each scrape, as IsLeader and Token answer then: a term that
// lapsed while nobody asked (a paused process) is not reported as leading.
type metrics struct {
	c        *Candidate
	leading  *prometheus.Desc
	term     *prometheus.Desc
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
	labels := prometheus.Labels{"namespace": c.cfg.Namespace, "lease": c.cfg.LeaseName}
	m := &metrics{
		c: c,
		leading: prometheus.NewDesc("cle_candidate_leading",
			"1 while this process leads its Lease (IsLeader), 0 otherwise.", nil, labels),
		term: prometheus.NewDesc("cle_candidate_term",
			"The fencing token of the term this process leads (Token); absent while it does not lead.", nil, labels),
		renewals: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "cle_candidate_renewal_duration_seconds",
			Help:        "Time a renewal of the Lease took, from sending it to its answer, by result (ok, error).",
			Buckets:     prometheus.ExponentialBuckets(0.005, 2, 12),
			ConstLabels: labels,
		}, []string{"result"}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "cle_candidate_guard_refusals_total",
			Help:        "Writes the write guard (WrapConfig) refused because this process was not leader.",
			ConstLabels: labels,
		}),
	}
	if err := reg.Register(m); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return nil, fmt.Errorf("Metrics: another candidate of Lease %s/%s already registered its metrics on this registry", c.cfg.Namespace, c.cfg.LeaseName)
		}
		return nil, fmt.Errorf("Metrics: %w", err)
	}
	return m, nil
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.leading
	ch <- m.term
	m.renewals.Describe(ch)
	m.refusals.Describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	token, leading := m.c.Token()
	v := 0.0
	if leading {
		v = 1
		ch <- prometheus.MustNewConstMetric(m.term, prometheus.GaugeValue, float64(token))
	}
	ch <- prometheus.MustNewConstMetric(m.leading, prometheus.GaugeValue, v)
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
