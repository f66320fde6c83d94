package controller

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cle-dev/cle/test/integration/framework"
)

// Users of the secure metrics test: one granted get on /metrics through a
// ClusterRole, as Prometheus's service account is by manifests/monitoring,
// and one without it.
const (
	metricsReader = "metrics-reader"
	metricsNobody = "metrics-nobody"
)

var metricsUsers = []framework.User{{Name: metricsReader}, {Name: metricsNobody}}

func hasFamily(fams []*dto.MetricFamily, name string) bool {
	for _, mf := range fams {
		if mf.GetName() == name {
			return true
		}
	}
	return false
}

// TestSecureMetrics: the metrics address serves HTTPS only, and only to a
// token that kube-apiserver authenticates and authorizes to get /metrics;
// pprof is not served unless asked for, and then under the same rule.
func TestSecureMetrics(t *testing.T) { forEachMode(t, testSecureMetrics) }

func testSecureMetrics(t *testing.T, m apiMode) {
	bin := buildController(t)
	ns := m.server.CreateNamespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	client := m.server.Client()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "cle-metrics-reader-" + ns},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: metricsReader}},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	token := func(user string) string {
		cfg, err := m.server.UserConfig(user)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.BearerToken
	}

	r := startReplica(t, m.server, bin, kubeconfig, ns, "secure")
	url := "https://" + r.metrics
	if code, _, err := httpGet("http://" + r.metrics + "/metrics"); err == nil && code == http.StatusOK {
		t.Errorf("plain HTTP /metrics answered 200: want HTTPS only")
	}
	for _, tc := range []struct {
		who, path, token string
		want             int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"a token kube-apiserver does not know", "/metrics", "not-a-token", http.StatusUnauthorized},
		{"a user without the role", "/metrics", token(metricsNobody), http.StatusForbidden},
		{"the reader", "/metrics", token(metricsReader), http.StatusOK},
		{"the reader, pprof not enabled", "/debug/pprof/", token(metricsReader), http.StatusNotFound},
	} {
		code, body, err := framework.Get(ctx, url+tc.path, tc.token)
		if err != nil {
			t.Fatalf("%s: GET %s: %v", tc.who, tc.path, err)
		}
		if code != tc.want {
			t.Errorf("%s: GET %s = %d, want %d (%s)", tc.who, tc.path, code, tc.want, strings.TrimSpace(body))
		}
		if code == http.StatusOK && !strings.Contains(body, "cle_build_info{") {
			t.Errorf("%s: /metrics has no cle_build_info", tc.who)
		}
	}

	// With --profiling, pprof is there for those authorized to get its path
	// and for nobody else: the reader's role names only /metrics.
	p := startReplica(t, m.server, bin, kubeconfig, ns, "profiling", "--profiling", "--leader-elect=false", "--namespaces=none-"+ns)
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"the reader", token(metricsReader), http.StatusForbidden},
		{"the admin", m.server.Config().BearerToken, http.StatusOK},
	} {
		code, _, err := framework.Get(ctx, "https://"+p.metrics+"/debug/pprof/", tc.token)
		if err != nil {
			t.Fatal(err)
		}
		if code != tc.want {
			t.Errorf("--profiling, %s: GET /debug/pprof/ = %d, want %d", tc.who, code, tc.want)
		}
	}
}
