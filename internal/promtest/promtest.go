// Package promtest reads Prometheus metrics in tests, from a registry or from
// a /metrics page.
package promtest

import (
	"io"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads metric families in the Prometheus text format.
func Parse(r io.Reader) ([]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	return slices.Collect(maps.Values(fams)), nil
}

// Counter is a counter's value, read from the counter itself. A counter's
// Write does not fail; if one did, Counter panics.
func Counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// Gauge is a gauge's value, read from the gauge itself.
func Gauge(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// Value sums the series of the family called name whose labels include the
// given name/value pairs: counter and gauge values, and the sample counts of
// histograms. A family with no such series is 0.
func Value(fams []*dto.MetricFamily, name string, labels ...string) float64 {
	var sum float64
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
			return lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
		}) {
			return false
		}
	}
	return true
}
