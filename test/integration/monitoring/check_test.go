package monitoring

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// targetLabels are the labels Prometheus adds to every series it scrapes
// from cle-controller (the ServiceMonitor's and the scrape config's), not
// the controller. namespace is not one of them here: with honorLabels the
// per-Lease series keep their own, and no query reads the target's.
var targetLabels = []string{"job", "instance", "pod", "service", "container", "endpoint"}

// family is what a scrape says about one metric family: its type, and the
// names of the labels its series carry.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
}

func families(fams []*dto.MetricFamily) map[string]family {
	out := map[string]family{}
	for _, mf := range fams {
		f := family{typ: mf.GetType(), labels: map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				f.labels[lp.GetName()] = true
			}
		}
		out[mf.GetName()] = f
	}
	return out
}

// resolve finds the family of a metric name as a query writes it: a
// histogram's or summary's series have the suffixes _bucket (histograms,
// with the label le), _sum and _count. It returns the family's name and the
// labels the name adds.
func resolve(fams map[string]family, name string) (string, []string, bool) {
	if _, ok := fams[name]; ok {
		return name, nil, true
	}
	for suffix, extra := range map[string][]string{"_bucket": {"le"}, "_sum": nil, "_count": nil} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := fams[base]
		if !ok {
			continue
		}
		switch {
		case f.typ == dto.MetricType_HISTOGRAM || f.typ == dto.MetricType_GAUGE_HISTOGRAM:
			return base, extra, true
		case f.typ == dto.MetricType_SUMMARY && suffix != "_bucket":
			return base, nil, true
		}
	}
	return "", nil, false
}

// missing lists every ref that the scrape does not satisfy: a metric name
// with no family, a label name that none of the metrics it belongs to
// carries, and, for the exact label set of a rule test's input series, any
// label of the family the series lacks.
func missing(fams map[string]family, refs []ref) []string {
	problems := map[string]bool{}
	labelsOf := func(metric string) (map[string]bool, bool) {
		base, extra, ok := resolve(fams, metric)
		if !ok {
			problems[fmt.Sprintf("metric %s (used in %s) is not exported", metric, refWhere(refs, metric))] = true
			return nil, false
		}
		labels := maps.Clone(fams[base].labels)
		for _, l := range extra {
			labels[l] = true
		}
		return labels, true
	}
	for _, r := range refs {
		if r.metric != "" {
			have, ok := labelsOf(r.metric)
			if !ok {
				continue
			}
			for _, l := range r.labels {
				if !have[l] && !slices.Contains(targetLabels, l) {
					problems[fmt.Sprintf("%s: %s has no label %s", r.where, r.metric, l)] = true
				}
			}
			if r.exact {
				for l := range have {
					if l != "le" && !slices.Contains(r.labels, l) {
						problems[fmt.Sprintf("%s: series of %s lack the label %s that the controller exports", r.where, r.metric, l)] = true
					}
				}
			}
			continue
		}
		union := map[string]bool{}
		for _, m := range r.metrics {
			if have, ok := labelsOf(m); ok {
				maps.Copy(union, have)
			}
		}
		for _, l := range r.labels {
			if !union[l] && !slices.Contains(targetLabels, l) {
				problems[fmt.Sprintf("%s: label %s is on none of %v", r.where, l, r.metrics)] = true
			}
		}
	}
	out := slices.Collect(maps.Keys(problems))
	sort.Strings(out)
	return out
}

// refWhere names the first place a metric is used.
func refWhere(refs []ref, metric string) string {
	for _, r := range refs {
		if r.metric == metric {
			return r.where
		}
	}
	return "?"
}

// metricNames are the distinct metric names the refs use.
func metricNames(refs []ref) []string {
	var names []string
	for _, r := range refs {
		if r.metric != "" && !slices.Contains(names, r.metric) {
			names = append(names, r.metric)
		}
	}
	sort.Strings(names)
	return names
}
