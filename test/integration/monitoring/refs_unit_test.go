package monitoring

import (
	"slices"
	"strings"
	"testing"

	"github.com/cle-dev/cle/internal/promtest"
)

// TestMissing checks the reading of queries and the comparison with a
// scrape on their own, so that a reference the metrics test should catch
// is not lost in the parsing.
func TestMissing(t *testing.T) {
	fams, err := promtest.Parse(strings.NewReader(`# TYPE cle_lease_state gauge
cle_lease_state{namespace="a",lease="b",state="vacant"} 1
# TYPE cle_lease_leaderless_seconds gauge
cle_lease_leaderless_seconds{namespace="a",lease="b"} 3
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{name="cle_election",le="1"} 1
workqueue_queue_duration_seconds_bucket{name="cle_election",le="+Inf"} 1
workqueue_queue_duration_seconds_sum{name="cle_election"} 0.1
workqueue_queue_duration_seconds_count{name="cle_election"} 1
# TYPE cle_build_info gauge
cle_build_info{version="v1",revision="abc",go_version="go1.26"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr    string
		extra   []string
		missing []string // substrings of the problems, in order
	}{
		{expr: `max by (namespace, lease) (cle_lease_state{job="cle-controller", state="vacant"}) == 1`},
		{expr: `histogram_quantile(0.99, sum by (le, name) (rate(workqueue_queue_duration_seconds_bucket{job="cle-controller", name="cle_election"}[$__rate_interval])))`},
		{expr: `sum(rate(workqueue_queue_duration_seconds_count{job="cle-controller"}[5m]))`},
		{expr: `max by (version, revision, go_version) (cle_build_info{job="cle-controller"})`, extra: []string{"version"}},
		{expr: `label_values(cle_lease_state{job="cle-controller", namespace=~"$namespace"}, lease)`},
		{expr: `cle_lease_leaderless_seconds > on (namespace, lease) cle_lease_duration_seconds`,
			missing: []string{"metric cle_lease_duration_seconds"}},
		{expr: `sum by (pod) (cle_lease_stat{job="cle-controller"})`, missing: []string{"metric cle_lease_stat "}},
		{expr: `cle_lease_state{job="cle-controller", lease_name="x"}`, missing: []string{"has no label lease_name"}},
		{expr: `max by (namespace, holder) (cle_lease_state)`, missing: []string{"label holder"}},
		{expr: `cle_lease_state`, extra: []string{"holder"}, missing: []string{"label holder"}},
		{expr: `workqueue_queue_duration_seconds_bucket{le="1", name="x"} or workqueue_queue_duration_seconds_sum{le="1"}`,
			missing: []string{"workqueue_queue_duration_seconds_sum has no label le"}},
		{expr: `cle_build_info_count`, missing: []string{"metric cle_build_info_count"}},
	} {
		refs, err := exprRefs("test", tc.expr, tc.extra...)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		got := missing(families(fams), refs)
		if len(got) != len(tc.missing) {
			t.Errorf("%s: problems %q, want %d like %q", tc.expr, got, len(tc.missing), tc.missing)
			continue
		}
		for i, want := range tc.missing {
			if !strings.Contains(got[i], want) {
				t.Errorf("%s: problem %q, want one with %q", tc.expr, got[i], want)
			}
		}
	}

	for _, tc := range []struct {
		series  string
		missing []string
	}{
		{series: `cle_lease_state{job="cle-controller",instance="x",namespace="a",lease="b",state="vacant"}`},
		{series: `cle_lease_state{job="cle-controller",namespace="a",state="vacant"}`, missing: []string{"lack the label lease"}},
		{series: `cle_lease_state{job="cle-controller",namespace="a",lease="b",state="vacant",holder="c"}`, missing: []string{"no label holder"}},
		{series: `workqueue_queue_duration_seconds_bucket{job="cle-controller",name="cle_election",le="+Inf"}`},
		{series: `up{job="cle-controller"}`},
	} {
		refs, err := seriesRefs("test", tc.series)
		if err != nil {
			t.Errorf("%s: %v", tc.series, err)
			continue
		}
		got := missing(families(fams), refs)
		if len(got) != len(tc.missing) || !slices.EqualFunc(got, tc.missing, strings.Contains) {
			t.Errorf("%s: problems %q, want %q", tc.series, got, tc.missing)
		}
	}

	for _, bad := range []string{`{__name__="cle_lease_state"}`, `cle_lease_state{namespace=~$ns}`} {
		if _, err := exprRefs("test", bad); err == nil {
			t.Errorf("%s: read without an error, want one: the test cannot check it", bad)
		}
	}
}
