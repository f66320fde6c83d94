package app

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated tables of docs/operations.md (metrics) and docs/reference.md (flags) from the binary")

const (
	operationsDoc     = "../../../docs/operations.md"
	metricsTableBegin = "<!-- BEGIN metrics table: generated from the binary's metrics by `go test ./cmd/cle-controller/app -run TestMetricsTableInDocs -update` -->"
	metricsTableEnd   = "<!-- END metrics table -->"
)

// captured records the collectors registered with it.
type captured struct{ cs []prometheus.Collector }

func (c *captured) Register(x prometheus.Collector) error { c.cs = append(c.cs, x); return nil }
func (c *captured) MustRegister(xs ...prometheus.Collector) {
	c.cs = append(c.cs, xs...)
}
func (c *captured) Unregister(prometheus.Collector) bool { return false }

// metricType names a collector's metric type; cle's own collectors that are
// not client_golang's types report gauges.
func metricType(c prometheus.Collector) string {
	switch c.(type) {
	case prometheus.Gauge, *prometheus.GaugeVec:
		return "gauge"
	case prometheus.Counter, *prometheus.CounterVec:
		return "counter"
	case prometheus.Histogram, *prometheus.HistogramVec:
		return "histogram"
	default:
		return "gauge"
	}
}

var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)
var constLabelRE = regexp.MustCompile(`(\w+)="(?:[^"\\]|\\.)*"`)

type metricDoc struct{ name, typ, labels, help string }

// exportedMetrics are the metrics cle-controller registers, but Go's and
// the process's (go_*, process_*), sorted by name.
func exportedMetrics(t *testing.T) []metricDoc {
	t.Helper()
	c := &captured{}
	if err := controller.NewMetrics().Register(c); err != nil {
		t.Fatal(err)
	}
	acting := newActingWatch(fake.NewClientset(), access.ModeNative, "kube-system", access.NativeControllerLock)
	c.cs = append(c.cs, processCollectors(access.ModeNative, &controller.WatchLag{}, acting)...)
	var docs []metricDoc
	for _, col := range c.cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			name, err1 := strconv.Unquote(m[1])
			help, err2 := strconv.Unquote(m[2])
			if err1 != nil || err2 != nil {
				t.Fatalf("cannot read %s", d)
			}
			var labels []string
			for _, l := range constLabelRE.FindAllStringSubmatch(m[3], -1) {
				labels = append(labels, l[1])
			}
			if m[4] != "" {
				labels = append(labels, strings.Split(m[4], ",")...)
			}
			docs = append(docs, metricDoc{name: name, typ: metricType(col), labels: strings.Join(labels, ", "), help: help})
		}
	}
	slices.SortFunc(docs, func(a, b metricDoc) int { return strings.Compare(a.name, b.name) })
	return docs
}

func metricsTable(docs []metricDoc) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | what it says |\n| --- | --- | --- | --- |\n")
	for _, d := range docs {
		labels := "-"
		if d.labels != "" {
			labels = "`" + d.labels + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.name, d.typ, labels, strings.ReplaceAll(d.help, "|", `\|`))
	}
	return b.String()
}

// TestMetricsTableInDocs keeps the metrics table of docs/operations.md the
// one the binary's registered metrics make: a metric added, renamed or
// re-described without the table fails here (-update rewrites it).
func TestMetricsTableInDocs(t *testing.T) {
	docs := exportedMetrics(t)
	for _, want := range []string{"cle_build_info", "cle_election_controller_acting", "cle_lease_state", "rest_client_requests_total", "leader_election_master_status", "workqueue_depth"} {
		if !slices.ContainsFunc(docs, func(d metricDoc) bool { return d.name == want }) {
			t.Errorf("%s is not registered", want)
		}
	}
	checkGenerated(t, operationsDoc, metricsTableBegin, metricsTableEnd, metricsTable(docs), "TestMetricsTableInDocs")
}

// checkGenerated checks that the part of the document at path between the
// markers begin and end is body, and with -update makes it so; test is the
// test that generates it, named in the failure.
func checkGenerated(t *testing.T, path, begin, end, body, test string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	from, to := strings.Index(doc, begin), strings.Index(doc, end)
	if from < 0 || to < from {
		t.Fatalf("%s has nothing between %q and %q", path, begin, end)
	}
	want := begin + "\n" + body + end
	if doc[from:to+len(end)] == want {
		return
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(doc[:from]+want+doc[to+len(end):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not what the binary makes; run go test ./cmd/cle-controller/app -run %s -update\n--- want\n%s", path, test, want)
}
