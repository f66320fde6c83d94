package monitoring

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A ref is one use of a metric or label name in the monitoring bundle: in an
// alert's expression or annotations, a rule test's input series, or a
// dashboard query or legend.
type ref struct {
	where string
	// metric is a metric name as written (a histogram's _bucket, _sum or
	// _count included); empty for a label used in grouping, in a legend or
	// in an annotation, which belongs to some metric of the expression.
	metric string
	// labels are the label names used with metric, or without one.
	labels []string
	// metrics are all the metric names of the expression, for the labels
	// of a ref without metric.
	metrics []string
	// exact: labels is the whole label set of a series (a rule test's
	// input), not just some of it.
	exact bool
}

// knownPrefixes are the prefixes of the metrics cle-controller exports; an
// identifier of PromQL with one of them is a metric name.
var knownPrefixes = []string{"cle_", "workqueue_", "rest_client_", "leader_election_", "process_", "go_"}

func isMetricName(s string) bool {
	return slices.ContainsFunc(knownPrefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}

var (
	// Strings of PromQL, and Grafana's variables ($namespace,
	// ${datasource}, $__rate_interval).
	stringRE   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	variableRE = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::[a-z]+)?\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	// A selector: an optional metric name and its label matchers, whose
	// values are strings (emptied by then).
	selectorRE = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}`)
	matcherRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*""`)
	// Label lists of aggregations and vector matching.
	groupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	// Grafana's label_values(selector, label) in a template variable.
	labelValuesRE = regexp.MustCompile(`\blabel_values\s*\(((?:[^(),]|\{[^{}]*\})*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)`)
	identRE       = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	labelNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// Labels in templates: {{ $labels.lease }} in alert annotations,
	// {{lease}} in Grafana legends.
	annotationLabelRE = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
	legendLabelRE     = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
)

// exprRefs returns the metric and label names an expression uses (PromQL, or
// a Grafana query that may hold label_values); extraLabels are label names
// from its templates (legend, annotations), which must belong to one of its
// metrics.
func exprRefs(where, expr string, extraLabels ...string) ([]ref, error) {
	s := stringRE.ReplaceAllString(expr, `""`)
	s = variableRE.ReplaceAllString(s, "")
	loose := slices.Clone(extraLabels)
	if m := labelValuesRE.FindStringSubmatch(s); m != nil {
		loose = append(loose, m[2])
		s = strings.Replace(s, m[0], m[1], 1)
	}
	var refs []ref
	var metrics []string
	for _, m := range selectorRE.FindAllStringSubmatch(s, -1) {
		var labels []string
		for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, lm[1])
		}
		rest := matcherRE.ReplaceAllString(m[2], "")
		if strings.Trim(rest, " ,\n\t") != "" {
			return nil, fmt.Errorf("%s: cannot read the matchers of %q", where, m[0])
		}
		name := m[1]
		if name != "" && !isMetricName(name) {
			if slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, name) {
				return nil, fmt.Errorf("%s: unexpected braces after %s in %q", where, name, expr)
			}
			// Another job's metric (up) or a function: not ours to check.
			continue
		}
		if name == "" {
			return nil, fmt.Errorf("%s: a selector without a metric name in %q", where, expr)
		}
		metrics = append(metrics, name)
		refs = append(refs, ref{where: where, metric: name, labels: labels})
	}
	s = selectorRE.ReplaceAllString(s, "$1")
	if strings.ContainsAny(s, "{}") {
		return nil, fmt.Errorf("%s: unbalanced braces in %q", where, expr)
	}
	for _, m := range groupingRE.FindAllStringSubmatch(s, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				loose = append(loose, l)
			}
		}
	}
	s = groupingRE.ReplaceAllString(s, "")
	for _, id := range identRE.FindAllString(s, -1) {
		if isMetricName(id) && !slices.Contains(metrics, id) {
			metrics = append(metrics, id)
			refs = append(refs, ref{where: where, metric: id})
		}
	}
	for _, l := range loose {
		if !labelNameRE.MatchString(l) {
			return nil, fmt.Errorf("%s: %q is no label name", where, l)
		}
	}
	if len(loose) > 0 {
		refs = append(refs, ref{where: where, labels: loose, metrics: metrics})
	}
	return refs, nil
}

// seriesRefs returns the metric and label names of a series in the notation
// of promtool's input_series: name{label="value", ...}.
func seriesRefs(where, series string) ([]ref, error) {
	s := stringRE.ReplaceAllString(series, `""`)
	m := regexp.MustCompile(`^\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{([^{}]*)\})?\s*$`).FindStringSubmatch(s)
	if m == nil {
		return nil, fmt.Errorf("%s: cannot read the series %q", where, series)
	}
	var labels []string
	for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
		labels = append(labels, lm[1])
	}
	if strings.Trim(matcherRE.ReplaceAllString(m[2], ""), " ,") != "" {
		return nil, fmt.Errorf("%s: cannot read the labels of %q", where, series)
	}
	if !isMetricName(m[1]) {
		return nil, nil
	}
	return []ref{{where: where, metric: m[1], labels: labels, exact: true}}, nil
}

// templateLabels returns the label names that a template reads with re.
func templateLabels(re *regexp.Regexp, texts ...string) []string {
	var labels []string
	for _, t := range texts {
		for _, m := range re.FindAllStringSubmatch(t, -1) {
			if !slices.Contains(labels, m[1]) {
				labels = append(labels, m[1])
			}
		}
	}
	return labels
}
