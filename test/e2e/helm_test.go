package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/pkg/access"
)

// helmEnv names the helm binary (hack/helm.sh), built before the node's
// network namespace cuts the module proxy off.
const helmEnv = "CLE_HELM"

// The Helm release of the chart test, in a namespace of its own.
const (
	helmRelease   = "cle-e2e"
	helmNamespace = "cle-helm"
	crdName       = "leasecandidates.cle.dev"
)

// TestHelmChart installs the release's chart with helm, as a user would,
// once the bundles' tests have removed their cle-controller (two in one
// cluster would contend for the same lock): the example candidates get a
// leader, an upgrade to three replicas keeps it, and helm uninstall leaves
// nothing of the release but the LeaseCandidate CRD, which the chart keeps
// by default (values crds.keep).
func TestHelmChart(t *testing.T) {
	n := cluster
	ctx := context.Background()
	helm := toolFromEnv(t, helmEnv)
	chart := n.release.chart(t)

	// Nothing of the bundles' installs is left to contend with.
	if ds, err := n.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cleDeployment}); err != nil || len(ds.Items) > 0 {
		t.Fatalf("a Deployment %s is already there (%v): the chart's test needs the cluster without one", cleDeployment, err)
	}
	if out := n.kubectl(t, "", "get", "crd", crdName, "--ignore-not-found", "-o", "name"); out != "" {
		t.Fatalf("the CRD %s is already there: the chart's test needs the cluster without it", crdName)
	}

	pods := n.installChart(t, helm, chart)

	// The example candidates elect through it.
	n.kubectl(t, "", "apply", "-f", n.release.bundle("cle-examples.yaml"))
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "-f", n.release.bundle("cle-examples.yaml"), "--ignore-not-found", "--wait=true", "--timeout=3m")
		n.waitNamespaceGone(t, exampleNamespace)
	})
	n.waitDeploymentReady(t, exampleNamespace, exampleName)
	live := func(holder string) bool {
		p, err := n.client.CoreV1().Pods(exampleNamespace).Get(ctx, holder, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp == nil
	}
	leader := n.waitLease(t, exampleNamespace, exampleLease, live)
	n.waitElectedEvent(t, exampleNamespace, exampleLease, leader)
	t.Logf("the example candidates elected %s", leader)

	// An upgrade to three replicas: the quota admits them, one acts, the
	// election stands.
	begin := time.Now()
	n.helm(t, helm, "upgrade", helmRelease, chart, "--namespace", helmNamespace, "--reuse-values", "--set", "replicas=3")
	pods = n.waitDeploymentReady(t, helmNamespace, cleDeployment)
	if len(pods) != 3 {
		t.Fatalf("%d cle-controller Pods after the upgrade, want 3", len(pods))
	}
	quota, err := n.client.CoreV1().ResourceQuotas(helmNamespace).Get(ctx, "cle-controller-critical-pods", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := quota.Spec.Hard[corev1.ResourcePods]; got.String() != "8" {
		t.Errorf("the ResourceQuota admits %s Pods after the upgrade, want 8", got.String())
	}
	n.waitLockHeldBy(t, pods)
	if now := n.waitLease(t, exampleNamespace, exampleLease, live); now != leader {
		t.Errorf("the upgrade changed the example's leader from %s to %s", leader, now)
	}
	var releases []struct {
		Revision   string `json:"revision"`
		Status     string `json:"status"`
		Chart      string `json:"chart"`
		AppVersion string `json:"app_version"`
	}
	if err := json.Unmarshal([]byte(n.helm(t, helm, "list", "--namespace", helmNamespace, "-o", "json")), &releases); err != nil {
		t.Fatal(err)
	}
	if want := "cle-" + strings.TrimPrefix(n.release.tag, "v"); len(releases) != 1 || releases[0].Revision != "2" || releases[0].Status != "deployed" ||
		releases[0].Chart != want || releases[0].AppVersion != n.release.tag {
		t.Errorf("helm list: %+v, want %s at revision 2, deployed, chart %s, app version %s", releases, helmRelease, want, n.release.tag)
	}
	t.Logf("upgraded to 3 replicas in %s; %s still leads", time.Since(begin).Round(100*time.Millisecond), leader)

	// The uninstall: of the objects labelled with the release, only the CRD
	// stays, as the chart says; the Pods go with their Deployment.
	begin = time.Now()
	n.helm(t, helm, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout=3m")
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := n.client.CoreV1().Pods(helmNamespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		n.describe(t, helmNamespace)
		t.Fatalf("cle-controller's Pods still there after the uninstall: %v", err)
	}
	left := n.objectsOf(t, helmRelease)
	if want := []string{"customresourcedefinition.apiextensions.k8s.io/" + crdName}; !equalStrings(left, want) {
		t.Errorf("after helm uninstall, the objects labelled app.kubernetes.io/instance=%s are %q, want only %q", helmRelease, left, want)
	}
	policy := n.kubectl(t, "", "get", "crd", crdName, "-o", `jsonpath={.metadata.annotations.helm\.sh/resource-policy}`)
	if policy != "keep" {
		t.Errorf("the CRD left after the uninstall has helm.sh/resource-policy %q, want keep", policy)
	}
	if out := n.kubectl(t, "", "get", "all", "--namespace", helmNamespace, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("after helm uninstall, namespace %s still holds:\n%s", helmNamespace, out)
	}
	if out := n.helm(t, helm, "list", "--namespace", helmNamespace, "--all", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("helm still lists %q after the uninstall", out)
	}
	t.Logf("uninstalled in %s; the CRD %s kept, as the chart's crds.keep says", time.Since(begin).Round(100*time.Millisecond), crdName)
}

// installChart installs the chart with helm, as a user would, with the --set
// values given, in a namespace of its own with the Pod Security labels of
// the bundle's; it waits until cle-controller's Pods are Ready and one of
// them holds the lock, and returns them. The uninstall, the CRD's deletion
// and the namespace's come when the test ends.
func (n *node) installChart(t *testing.T, helm, chart string, set ...string) []corev1.Pod {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmNamespace, Labels: n.release.namespaceLabels(t)}}
	if _, err := n.client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.client.CoreV1().Namespaces().Delete(context.Background(), helmNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		n.waitNamespaceGone(t, helmNamespace)
	})
	begin := time.Now()
	args := []string{"install", helmRelease, chart, "--namespace", helmNamespace}
	for _, v := range set {
		args = append(args, "--set", v)
	}
	n.helm(t, helm, args...)
	t.Cleanup(func() {
		// After a failure before the test's own uninstall; the CRD goes
		// last.
		n.helmMayFail(t, helm, "uninstall", helmRelease, "--namespace", helmNamespace, "--ignore-not-found", "--wait", "--timeout=3m")
		n.kubectl(t, "", "delete", "crd", crdName, "--ignore-not-found", "--wait=true", "--timeout=3m")
	})
	pods := n.waitDeploymentReady(t, helmNamespace, cleDeployment)
	t.Logf("chart %s installed as %s %v; cle-controller's %d Pods Ready in %s", filepath.Base(chart), helmRelease, set, len(pods), time.Since(begin).Round(100*time.Millisecond))
	for _, p := range pods {
		if c := p.Spec.Containers[0]; c.Image != n.release.tagRef()+"@"+n.release.digest {
			t.Errorf("Pod %s runs image %s, want the release's %s@%s", p.Name, c.Image, n.release.tagRef(), n.release.digest)
		}
	}
	n.waitLockHeldBy(t, pods)
	return pods
}

// waitLockHeldBy waits until one of the Pods holds cle-controller's lock
// (portable mode's) in kube-system.
func (n *node) waitLockHeldBy(t *testing.T, pods []corev1.Pod) string {
	t.Helper()
	return n.waitLease(t, metav1.NamespaceSystem, access.PortableControllerLock, func(holder string) bool {
		for _, p := range pods {
			if strings.HasPrefix(holder, p.Name+"_") {
				return true
			}
		}
		return false
	})
}

// objectsOf lists every object of every listable resource, in all
// namespaces, that carries the Helm release's instance label.
func (n *node) objectsOf(t *testing.T, release string) []string {
	t.Helper()
	resources := strings.Fields(n.kubectl(t, "", "api-resources", "--verbs=list", "-o", "name"))
	out := n.kubectl(t, "", "get", strings.Join(resources, ","), "--all-namespaces", "-l", "app.kubernetes.io/instance="+release, "-o", "name")
	objs := strings.Fields(out)
	sort.Strings(objs)
	return objs
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// helm runs helm against the node as the admin, with a home of its own, and
// returns its standard output. It fails the test on error.
func (n *node) helm(t *testing.T, helm string, args ...string) string {
	t.Helper()
	out, err := n.runHelm(t, helm, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// helmMayFail runs helm as helm does, logging an error rather than failing.
func (n *node) helmMayFail(t *testing.T, helm string, args ...string) {
	t.Helper()
	if _, err := n.runHelm(t, helm, args...); err != nil {
		t.Logf("helm %s: %v", strings.Join(args, " "), err)
	}
}

func (n *node) runHelm(t *testing.T, helm string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	home := filepath.Join(n.dir, "helm")
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &helmError{err: err, output: stdout.String() + stderr.String()}
	}
	return stdout.String(), nil
}

type helmError struct {
	err    error
	output string
}

func (e *helmError) Error() string { return e.err.Error() + "\n" + e.output }
func (e *helmError) Unwrap() error { return e.err }

var chartArchive = regexp.MustCompile(`^cle-[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?\.tgz$`)

// chart is the release's chart archive, cle-<version without the v>.tgz.
func (r *release) chart(t *testing.T) string {
	t.Helper()
	want := "cle-" + strings.TrimPrefix(r.tag, "v") + ".tgz"
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		if chartArchive.MatchString(e.Name()) {
			found = append(found, e.Name())
		}
	}
	if len(found) != 1 || found[0] != want {
		t.Fatalf("release %s has chart archives %q, want %s", r.dir, found, want)
	}
	return filepath.Join(r.dir, want)
}

// namespaceLabels are the labels of the Namespace the portable bundle
// creates (Pod Security admission's).
func (r *release) namespaceLabels(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(r.bundle("cle-portable.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		var ns corev1.Namespace
		if err := yaml.Unmarshal([]byte(doc), &ns); err != nil {
			t.Fatalf("cle-portable.yaml: %v", err)
		}
		if ns.Kind == "Namespace" {
			if len(ns.Labels) == 0 {
				t.Fatal("the Namespace of cle-portable.yaml has no labels")
			}
			return ns.Labels
		}
	}
	t.Fatal("cle-portable.yaml creates no Namespace")
	return nil
}
