package tools

import (
	"bytes"
	"encoding/json"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// TestMonitoringObjectsAreValid decodes every ServiceMonitor and
// PrometheusRule the chart renders and manifests/monitoring holds into the
// Prometheus Operator's own types, refusing a field they do not have: a
// misspelt or removed field (the operator drops it and scrapes without it)
// fails here rather than on a user's cluster.
func TestMonitoringObjectsAreValid(t *testing.T) {
	objs := kustomize(t, "", "monitoring", "monitoring/static-pod")
	for _, set := range [][]string{
		{"monitoring.enabled=true"},
		{"monitoring.enabled=true", "metricsTLS.secretName=metrics-cert"},
		{"monitoring.enabled=true", "metricsTLS.certManager.issuerRef.name=ca"},
	} {
		objs = append(objs, helmTemplate(t, "cle-system", set...)...)
	}
	seen := map[string]int{}
	for _, obj := range objs {
		var into any
		switch obj["kind"] {
		case "ServiceMonitor":
			into = &monitoringv1.ServiceMonitor{}
		case "PrometheusRule":
			into = &monitoringv1.PrometheusRule{}
		default:
			continue
		}
		seen[obj["kind"].(string)]++
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Errorf("%s: not a valid %s: %v", key(obj), obj["kind"], err)
		}
	}
	if seen["ServiceMonitor"] != 5 || seen["PrometheusRule"] != 4 {
		t.Errorf("decoded %v, want 5 ServiceMonitors (two of manifests/monitoring, three of the chart) and 4 PrometheusRules", seen)
	}
}
