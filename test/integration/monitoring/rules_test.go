package monitoring

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// serviceAccountToken is where Prometheus in a Pod reads its token.
const serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

const runbookBase = "https://github.com/cle-dev/cle/blob/main/" + operationsFile + "#"

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func docAnchors(t *testing.T) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, operationsFile)))
	fenced := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			anchors[githubAnchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	return anchors
}

// jobMatcherRE finds every job matcher; the bundle's only job is
// cle-controller.
var jobMatcherRE = regexp.MustCompile(`\bjob\s*(=~|!~|!=|=)\s*("[^"]*"|'[^']*')`)

// TestAlerts checks what each alert must carry: a severity, a summary and a
// description (naming the Lease for the per-Lease alerts), and a runbook
// that exists in docs/operations.md; that the metrics of every alert and
// dashboard query are those of job="cle-controller" (workqueue_* and
// rest_client_* are every component's); and that every alert has a promtool
// test where it fires and one where it must not.
func TestAlerts(t *testing.T) {
	anchors := docAnchors(t)
	rules := readRules(t)
	var alerts []string
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		alerts = append(alerts, r.Alert)
		if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s has no %s annotation", r.Alert, a)
			}
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
		if !ok || !anchors[anchor] {
			t.Errorf("%s: runbook_url %q is not %s followed by the anchor of a heading of %s", r.Alert, r.Annotations["runbook_url"], runbookBase, operationsFile)
		}
		if anchor != strings.ToLower(r.Alert) {
			t.Errorf("%s: runbook anchor %q, want the alert's name, %q", r.Alert, anchor, strings.ToLower(r.Alert))
		}
		if strings.Contains(r.Expr, "lease)") {
			for _, a := range []string{"summary", "description"} {
				if !strings.Contains(r.Annotations[a], "$labels.namespace") || !strings.Contains(r.Annotations[a], "$labels.lease") {
					t.Errorf("%s is per Lease, but its %s does not name the Lease ($labels.namespace, $labels.lease)", r.Alert, a)
				}
			}
		}
		refs, err := exprRefs(ruleFile+" "+r.Alert, r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		checkJob(t, ruleFile+" "+r.Alert, r.Expr, refs)
	}
	dashRefs, err := dashboardRefs(readFile(t, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, dashboardFile, string(readFile(t, dashboardFile)), dashRefs)

	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, path := range ruleTestFiles(t) {
		rt := readRuleTest(t, path)
		if !slices.Equal(rt.RuleFiles, []string{rulesName}) {
			t.Errorf("%s: rule_files %v, want [%s] (the PrometheusRule's spec)", filepath.Base(path), rt.RuleFiles, rulesName)
		}
		for _, tc := range rt.Tests {
			for _, a := range tc.AlertRuleTests {
				if !slices.Contains(alerts, a.Alertname) {
					t.Errorf("%s %q tests %s, which is no alert", filepath.Base(path), tc.Name, a.Alertname)
				}
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	for _, a := range alerts {
		if !firing[a] {
			t.Errorf("%s: no rule test where it fires", a)
		}
		if !quiet[a] {
			t.Errorf("%s: no rule test where it must not fire", a)
		}
	}
}

// checkJob requires every job matcher of text (PromQL, or JSON holding it)
// to select job="cle-controller", and with jobLabel every metric of expr to
// have a job matcher.
func checkJob(t *testing.T, where, text string, refs []ref) {
	t.Helper()
	for _, m := range jobMatcherRE.FindAllStringSubmatch(strings.ReplaceAll(text, `\"`, `"`), -1) {
		if m[1] != "=" || strings.Trim(m[2], `"'`) != "cle-controller" {
			t.Errorf("%s: job%s%s, want job=\"cle-controller\"", where, m[1], m[2])
		}
	}
	for _, r := range refs {
		if r.metric != "" && !slices.Contains(r.labels, "job") {
			t.Errorf("%s: %s is not limited to job=\"cle-controller\"", r.where, r.metric)
		}
	}
}

// TestPromtool runs promtool on the bundle: check rules (with its linter)
// on the PrometheusRule's spec, test rules on the rule tests, and check
// config on a Prometheus configuration made of the scrape config and the
// rules.
func TestPromtool(t *testing.T) {
	dir := t.TempDir()
	writeRuleFile(t, filepath.Join(dir, rulesName))
	runPromtool(t, dir, "check", "rules", "--lint=all", "--lint-fatal", rulesName)

	var tests []string
	for _, path := range ruleTestFiles(t) {
		name := filepath.Base(path)
		if err := os.WriteFile(filepath.Join(dir, name), readFile(t, filepath.Join(bundleDir, "tests", name)), 0o600); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, name)
	}
	out := runPromtool(t, dir, append([]string{"test", "rules"}, tests...)...)
	t.Logf("promtool test rules:\n%s", out)

	// promtool checks that the token file exists: here it is not in a Pod.
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	scrape := strings.ReplaceAll(string(readFile(t, scrapeFile)), serviceAccountToken, token)
	if scrape == string(readFile(t, scrapeFile)) {
		t.Errorf("%s does not read the token from %s", scrapeFile, serviceAccountToken)
	}
	var config bytes.Buffer
	config.WriteString("rule_files:\n  - " + rulesName + "\nscrape_configs:\n")
	for line := range strings.SplitSeq(strings.TrimRight(scrape, "\n"), "\n") {
		if line != "" {
			line = "  " + line
		}
		config.WriteString(line + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), config.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "config", "--lint=all", "--lint-fatal", "prometheus.yml")
}
