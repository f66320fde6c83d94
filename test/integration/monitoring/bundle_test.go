package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/test/integration/framework"
)

// The files of the monitoring bundle, relative to the repository root.
const (
	bundleDir      = "manifests/monitoring"
	ruleFile       = bundleDir + "/prometheusrule.yaml"
	dashboardFile  = bundleDir + "/dashboard.json"
	scrapeFile     = bundleDir + "/prometheus-scrape-config.yaml"
	ruleTestsGlob  = bundleDir + "/tests/*.yaml"
	operationsFile = "docs/operations.md"
	// rulesName is the plain rule file the rule tests name: the
	// PrometheusRule's spec, written next to copies of them.
	rulesName = "rules.yaml"
)

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(framework.RepoPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func readRules(t *testing.T) []rule {
	t.Helper()
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(readFile(t, ruleFile), &pr); err != nil {
		t.Fatalf("%s: %v", ruleFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", ruleFile, pr.APIVersion, pr.Kind)
	}
	var rules []rule
	for _, g := range pr.Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", ruleFile)
	}
	return rules
}

// writeRuleFile writes the PrometheusRule's spec as a plain rule file.
func writeRuleFile(t *testing.T, path string) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(readFile(t, ruleFile), &obj); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(obj["spec"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, spec, 0o600); err != nil {
		t.Fatal(err)
	}
}

// ruleTest is the part of a promtool test file that names metrics and
// alerts.
type ruleTest struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name        string `json:"name"`
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		AlertRuleTests []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func ruleTestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(framework.RepoPath(ruleTestsGlob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule tests %s: %v", ruleTestsGlob, err)
	}
	sort.Strings(files)
	return files
}

func readRuleTest(t *testing.T, path string) ruleTest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTest
	if err := yaml.Unmarshal(data, &rt); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rt
}

// bundleRefs collects every metric and label name that the alerts, the
// rule tests' input series and the dashboard's queries use.
func bundleRefs(t *testing.T) []ref {
	t.Helper()
	var refs []ref
	add := func(r []ref, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r...)
	}
	for _, r := range readRules(t) {
		name := r.Alert + r.Record
		var texts []string
		for _, a := range r.Annotations {
			texts = append(texts, a)
		}
		add(exprRefs(ruleFile+" "+name, r.Expr, templateLabels(annotationLabelRE, texts...)...))
	}
	for _, path := range ruleTestFiles(t) {
		rel := ruleTestsGlob[:strings.LastIndex(ruleTestsGlob, "/")+1] + filepath.Base(path)
		for _, tc := range readRuleTest(t, path).Tests {
			for _, in := range tc.InputSeries {
				add(seriesRefs(fmt.Sprintf("%s %q", rel, tc.Name), in.Series))
			}
		}
	}
	dashRefs, err := dashboardRefs(readFile(t, dashboardFile))
	add(dashRefs, err)
	return refs
}

// dashboardRefs walks a Grafana dashboard for its queries: the expr of
// every target (with the labels its legend reads) and the queries of the
// template variables.
func dashboardRefs(data []byte) ([]ref, error) {
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", dashboardFile, err)
	}
	var refs []ref
	var walk func(path string, v any) error
	walk = func(path string, v any) error {
		switch v := v.(type) {
		case map[string]any:
			if expr, ok := v["expr"].(string); ok {
				legend, _ := v["legendFormat"].(string)
				r, err := exprRefs(dashboardFile+" "+path, expr, templateLabels(legendLabelRE, legend)...)
				if err != nil {
					return err
				}
				refs = append(refs, r...)
			}
			if v["type"] == "query" {
				for _, q := range []any{v["query"], v["definition"]} {
					if m, ok := q.(map[string]any); ok {
						q = m["query"]
					}
					if s, ok := q.(string); ok && s != "" {
						r, err := exprRefs(dashboardFile+" "+path, s)
						if err != nil {
							return err
						}
						refs = append(refs, r...)
					}
				}
			}
			for k, child := range v {
				p := path + "." + k
				if title, ok := v["title"].(string); ok {
					p = path + "[" + title + "]." + k
				} else if name, ok := v["name"].(string); ok {
					p = path + "[" + name + "]." + k
				}
				if err := walk(p, child); err != nil {
					return err
				}
			}
		case []any:
			for i, child := range v {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("", dash); err != nil {
		return nil, err
	}
	return refs, nil
}
