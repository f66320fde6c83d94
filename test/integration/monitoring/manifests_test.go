package monitoring

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/test/integration/framework"
)

// object is what the test reads of a rendered manifest.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	raw  []byte
}

// render runs `kubectl kustomize` on a directory of manifests/.
func render(t *testing.T, dir string) []object {
	t.Helper()
	kubectl, err := framework.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubectl, "kustomize", framework.RepoPath("manifests/"+dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize manifests/%s: %v\n%s", dir, err, stderr.String())
	}
	var objs []object
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("manifests/%s: %v", dir, err)
		}
		o.raw = []byte(doc)
		objs = append(objs, o)
	}
	return objs
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return object{}
}

// TestBundle renders manifests/monitoring and checks it against
// manifests/controller: the ServiceMonitor selects the metrics Service by
// namespace, labels and port name; the dashboard ConfigMap holds
// dashboard.json for Grafana's sidecar; the PrometheusRule is the one the
// other tests check; and the reader ClusterRole, applied to kube-apiserver,
// grants get on /metrics once bound.
func TestBundle(t *testing.T) {
	objs := render(t, "monitoring")
	service := find(t, render(t, "controller"), "Service", "cle-controller-metrics")

	var sm struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			JobLabel          string `json:"jobLabel"`
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port        string `json:"port"`
				Scheme      string `json:"scheme"`
				HonorLabels bool   `json:"honorLabels"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(find(t, objs, "ServiceMonitor", "cle-controller").raw, &sm); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, service.Metadata.Namespace) {
		t.Errorf("ServiceMonitor looks in namespaces %v, the Service is in %s", sm.Spec.NamespaceSelector.MatchNames, service.Metadata.Namespace)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if service.Metadata.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the Service's labels are %v", k, v, service.Metadata.Labels)
		}
	}
	if job := service.Metadata.Labels[sm.Spec.JobLabel]; job != "cle-controller" {
		t.Errorf("ServiceMonitor jobLabel %q gives the job %q, want cle-controller", sm.Spec.JobLabel, job)
	}
	var svc struct {
		Spec struct {
			Ports []struct {
				Name string `json:"name"`
				Port int    `json:"port"`
			} `json:"ports"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(service.raw, &svc); err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Name)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor has %d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if !slices.Contains(ports, ep.Port) || ep.Scheme != "https" || !ep.HonorLabels {
		t.Errorf("ServiceMonitor endpoint port %q scheme %q honorLabels %v; want a port of the Service (%v), https, honorLabels", ep.Port, ep.Scheme, ep.HonorLabels, ports)
	}

	dashboard := find(t, objs, "ConfigMap", "cle-dashboard")
	if dashboard.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", dashboard.Metadata.Labels)
	}
	if got := dashboard.Data["cle.json"]; got != string(readFile(t, dashboardFile)) {
		t.Errorf("dashboard ConfigMap's cle.json is not %s", dashboardFile)
	}

	var rendered, file map[string]any
	if err := yaml.Unmarshal(find(t, objs, "PrometheusRule", "cle-controller").raw, &rendered); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(readFile(t, ruleFile), &file); err != nil {
		t.Fatal(err)
	}
	renderedSpec, _ := yaml.Marshal(rendered["spec"])
	fileSpec, _ := yaml.Marshal(file["spec"])
	if !bytes.Equal(renderedSpec, fileSpec) {
		t.Errorf("the rendered PrometheusRule's spec differs from %s", ruleFile)
	}

	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(find(t, objs, "ClusterRole", "cle-metrics-reader").raw, &role); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	client := server.Client()
	prometheus := "system:serviceaccount:monitoring:prometheus"
	allowed := func(path string) bool {
		t.Helper()
		sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:                  prometheus,
				Groups:                []string{"system:serviceaccounts", "system:authenticated"},
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	if allowed("/metrics") {
		t.Fatalf("%s may get /metrics before the binding; the test proves nothing", prometheus)
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cle-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	// The authorizer sees the binding once its informer has it.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return allowed("/metrics"), nil
	}); err != nil {
		t.Errorf("%s bound to cle-metrics-reader may not get /metrics: %v", prometheus, err)
	}
	if allowed("/debug/pprof/") {
		t.Errorf("cle-metrics-reader grants more than /metrics: get /debug/pprof/ is allowed")
	}
}

// TestStaticPodBundle checks manifests/monitoring/static-pod against
// manifests/static-pod: its Service selects the static Pod by its labels in
// its namespace and targets the port the Pod serves metrics on, its
// ServiceMonitor selects that Service and names the job cle-controller.
func TestStaticPodBundle(t *testing.T) {
	objs := render(t, "monitoring/static-pod")
	pod := find(t, render(t, "static-pod"), "Pod", "cle-controller")
	var p struct {
		Spec struct {
			Containers []struct {
				Args []string `json:"args"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(pod.raw, &p); err != nil {
		t.Fatal(err)
	}
	metricsPort := ""
	for _, a := range p.Spec.Containers[0].Args {
		if addr, ok := strings.CutPrefix(a, "--metrics-bind-address="); ok {
			metricsPort = addr[strings.LastIndex(addr, ":")+1:]
		}
	}
	service := find(t, objs, "Service", "cle-controller-static-pod-metrics")
	var svc struct {
		Spec struct {
			Selector map[string]string `json:"selector"`
			Ports    []struct {
				Name       string `json:"name"`
				TargetPort int    `json:"targetPort"`
			} `json:"ports"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(service.raw, &svc); err != nil {
		t.Fatal(err)
	}
	if service.Metadata.Namespace != pod.Metadata.Namespace {
		t.Errorf("Service in %s, the static Pod in %s", service.Metadata.Namespace, pod.Metadata.Namespace)
	}
	for k, v := range svc.Spec.Selector {
		if pod.Metadata.Labels[k] != v {
			t.Errorf("Service selects %s=%s; the static Pod's labels are %v", k, v, pod.Metadata.Labels)
		}
	}
	if len(svc.Spec.Ports) != 1 || fmt.Sprint(svc.Spec.Ports[0].TargetPort) != metricsPort {
		t.Errorf("Service ports %+v, want one targeting the static Pod's metrics port %s", svc.Spec.Ports, metricsPort)
	}
	var sm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port        string `json:"port"`
				Scheme      string `json:"scheme"`
				Relabelings []struct {
					TargetLabel string `json:"targetLabel"`
					Replacement string `json:"replacement"`
				} `json:"relabelings"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(find(t, objs, "ServiceMonitor", "cle-controller-static-pod").raw, &sm); err != nil {
		t.Fatal(err)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if service.Metadata.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the Service's labels are %v", k, v, service.Metadata.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Scheme != "https" {
		t.Fatalf("ServiceMonitor endpoints %+v, want https on the Service's port %s", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
	job := ""
	for _, r := range sm.Spec.Endpoints[0].Relabelings {
		if r.TargetLabel == "job" {
			job = r.Replacement
		}
	}
	if job != "cle-controller" {
		t.Errorf("job %q, want cle-controller (the alerts' job)", job)
	}
}

// TestRunbookOverlay: manifests/monitoring-runbooks renders manifests/monitoring
// with every alert's runbook_url on the page its baseURL names, each keeping
// its anchor, and nothing else changed (its ConfigMap is not applied; the
// dashboard's link to the runbooks stays, only Helm's value moves it).
func TestRunbookOverlay(t *testing.T) {
	base, overlay := render(t, "monitoring"), render(t, "monitoring-runbooks")
	if len(base) != len(overlay) {
		t.Fatalf("the overlay renders %d objects, the base %d", len(overlay), len(base))
	}
	const page = "https://runbooks.example.com/cle#"
	for i := range base {
		want := string(base[i].raw)
		if base[i].Kind == "PrometheusRule" {
			want = strings.ReplaceAll(want, runbookBase, page)
		}
		if got := string(overlay[i].raw); got != want {
			t.Errorf("%s %s differs from the base's with its runbooks moved:\n%s", overlay[i].Kind, overlay[i].Metadata.Name, got)
		}
	}
	rule := string(find(t, overlay, "PrometheusRule", "cle-controller").raw)
	if n, alerts := strings.Count(rule, "runbook_url: "+page), strings.Count(rule, "- alert:"); n == 0 || n != alerts {
		t.Errorf("%d of %d alerts have their runbook_url on %s", n, alerts, page)
	}
}
