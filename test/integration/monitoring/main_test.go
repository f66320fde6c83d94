// Package monitoring checks the monitoring bundle of manifests/monitoring
// against what cle-controller really exports: it runs the controller binary
// on a real kube-apiserver with Leases in every kind of state, scrapes its
// /metrics, and requires every metric and label name the alerts, their
// promtool tests and the dashboard use to be there; it runs promtool on the
// rules, their tests and the scrape config; and it renders the kustomization.
package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cle-dev/cle/test/integration/framework"
)

// server runs in portable mode, where only cle-controller elects.
var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{PortableCRD: true}, func(s *framework.Server) { server = s })
}

// PromtoolEnv names the promtool binary. When unset, hack/promtool.sh
// builds it on first use and reuses its cache afterwards.
const PromtoolEnv = "CLE_PROMTOOL"

func promtool(t *testing.T) string {
	t.Helper()
	if path := os.Getenv(PromtoolEnv); path != "" {
		return path
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", framework.RepoPath("hack/promtool.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/promtool.sh: %v\n%s", err, stderr.String())
	}
	path := strings.TrimSpace(stdout.String())
	os.Setenv(PromtoolEnv, path) // later tests in this process skip the script
	return path
}

// runPromtool runs promtool in dir and fails the test on a non-zero exit.
func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
