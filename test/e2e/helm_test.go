package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
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
	chart := n.publishedChart(t)

	// Nothing of the bundles' installs is left to contend with.
	if ds, err := n.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cleDeployment}); err != nil || len(ds.Items) > 0 {
		t.Fatalf("a Deployment %s is already there (%v): the chart's test needs the cluster without one", cleDeployment, err)
	}
	if out := n.kubectl(t, "", "get", "crd", crdName, "--ignore-not-found", "-o", "name"); out != "" {
		t.Fatalf("the CRD %s is already there: the chart's test needs the cluster without it", crdName)
	}

	// With its monitoring (the Prometheus Operator's CRDs stand in for the
	// operator) and a certificate of a CA of the test's for the metrics.
	ca := n.prepareMetrics(t)
	pods := n.installChart(t, helm, chart, "monitoring.enabled=true", "metricsTLS.secretName="+metricsSecret)
	n.scrapeAsServiceMonitor(t, pods, ca)

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
	n.helm(t, helm, append(append([]string{"upgrade", helmRelease}, chart...), "--namespace", helmNamespace, "--reuse-values", "--set", "replicas=3")...)
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

// The namespaces of TestHelmChartNamespaced: cle-controller elects in the
// first only.
const (
	teamNamespace  = "cle-team-a"
	otherNamespace = "cle-team-b"
	teamLease      = "team-work"
)

// TestHelmChartNamespaced installs the chart in its namespace-scoped mode
// (rbac.namespaced, rbac.namespaces): cle-controller elects in the
// namespaces it is given, and neither sees nor may write Leases elsewhere.
// A candidate registered in another namespace first stays without a Lease
// after the one in its namespace is elected, and the controller's
// ServiceAccount may write Leases in its namespaces only.
func TestHelmChartNamespaced(t *testing.T) {
	n := cluster
	ctx := context.Background()
	helm := toolFromEnv(t, helmEnv)
	chart := n.publishedChart(t)
	for _, name := range []string{teamNamespace, otherNamespace} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := n.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := n.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
			n.waitNamespaceGone(t, name)
		})
	}
	n.installChart(t, helm, chart, "rbac.namespaced=true", "rbac.namespaces={"+teamNamespace+"}")

	sa := "system:serviceaccount:" + helmNamespace + ":" + cleDeployment
	for ns, want := range map[string]bool{teamNamespace: true, otherNamespace: false, metav1.NamespaceDefault: false} {
		for _, verb := range []string{"create", "update"} {
			review, err := n.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + helmNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: coordinationv1.GroupName, Resource: "leases"},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != want {
				t.Errorf("may %s %s leases in %s: %t, want %t (%s)", sa, verb, ns, review.Status.Allowed, want, review.Status.Reason)
			}
		}
	}

	// The other namespace's candidate first: a controller electing there
	// would have done so by the time it elects the team's.
	for _, ns := range []string{otherNamespace, teamNamespace} {
		n.kubectl(t, fmt.Sprintf(portableCandidate, ns, teamLease, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")), "apply", "-f", "-")
	}
	holder := n.waitLease(t, teamNamespace, teamLease, func(holder string) bool { return holder == teamNamespace+"-worker" })
	n.waitElectedEvent(t, teamNamespace, teamLease, holder)
	if l, err := n.client.CoordinationV1().Leases(otherNamespace).Get(ctx, teamLease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Lease %s/%s: %v (holder %q), want none: the controller elects in %s only", otherNamespace, teamLease, err, ptr.Deref(l.Spec.HolderIdentity, ""), teamNamespace)
	}
	if t.Failed() {
		return
	}
	t.Logf("namespace-scoped: %s elected in %s; %s's candidate left alone; the controller may write Leases in %s only", holder, teamNamespace, otherNamespace, teamNamespace)
}

// portableCandidate is a LeaseCandidate of the portable API (namespace,
// Lease, renewTime) named <namespace>-worker.
const portableCandidate = `apiVersion: cle.dev/v1beta1
kind: LeaseCandidate
metadata:
  name: %[1]s-worker
  namespace: %[1]s
spec:
  leaseName: %[2]s
  binaryVersion: 1.36.0
  emulationVersion: 1.36.0
  strategy: OldestEmulationVersion
  renewTime: %[3]s
`

// installChart installs the chart with helm, as a user would, with the --set
// values given, in a namespace of its own with the Pod Security labels of
// the bundle's; it waits until cle-controller's Pods are Ready and one of
// them holds the lock, and returns them. The uninstall, the CRD's deletion
// and the namespace's come when the test ends.
func (n *node) installChart(t *testing.T, helm string, chart []string, set ...string) []corev1.Pod {
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
	args := append(append([]string{"install", helmRelease}, chart...), "--namespace", helmNamespace)
	for _, v := range set {
		args = append(args, "--set", v)
	}
	if n.beforeChartInstall != nil {
		n.beforeChartInstall(t)
	}
	n.helm(t, helm, args...)
	// After a failure before the test's own uninstall.
	n.uninstallWhenDone(t, helm, helmRelease, helmNamespace)
	pods := n.waitDeploymentReady(t, helmNamespace, cleDeployment)
	t.Logf("chart %s installed as %s %v; cle-controller's %d Pods Ready in %s", chart[0], helmRelease, set, len(pods), time.Since(begin).Round(100*time.Millisecond))
	n.wantReleaseImage(t, pods)
	n.waitLockHeldBy(t, pods)
	return pods
}

// uninstallWhenDone uninstalls the Helm release when the test ends, if it
// is still there, and then deletes the CRD, which the chart keeps.
func (n *node) uninstallWhenDone(t *testing.T, helm, release, namespace string) {
	t.Cleanup(func() {
		n.helmMayFail(t, helm, "uninstall", release, "--namespace", namespace, "--ignore-not-found", "--wait", "--timeout=3m")
		n.kubectl(t, "", "delete", "crd", crdName, "--ignore-not-found", "--wait=true", "--timeout=3m")
	})
}

// wantReleaseImage checks that cle-controller's Pods run the release's
// image by the digest the bundles pin.
func (n *node) wantReleaseImage(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if c := p.Spec.Containers[0]; c.Image != n.release.tagRef()+"@"+n.release.digest {
			t.Errorf("Pod %s runs image %s, want the release's %s@%s", p.Name, c.Image, n.release.tagRef(), n.release.digest)
		}
	}
}

// operatorCRD is a stand-in for a Prometheus Operator CRD (name, kind,
// singular) that keeps any field.
const operatorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[1]s
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: %[2]s, listKind: %[2]sList, plural: %[3]ss, singular: %[3]s}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// metricsSecret is the Secret of the metrics certificate the chart test
// gives cle-controller (metricsTLS.secretName).
const metricsSecret = "cle-metrics-cert"

// prepareMetrics readies what the chart's monitoring and metricsTLS values
// need that a cluster would have: the Prometheus Operator's CRDs for
// ServiceMonitors and PrometheusRules (stand-ins that keep any field: the
// chart's objects are checked against the operator's types by
// hack/test-chart.sh), and, once installChart has made the namespace, the
// certificate of a CA of the test's for cle-controller-metrics in a
// kubernetes.io/tls Secret with ca.crt, as cert-manager writes one. It
// returns the CA.
func (n *node) prepareMetrics(t *testing.T) *x509.CertPool {
	t.Helper()
	ctx := context.Background()
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		singular := strings.ToLower(kind)
		name := singular + "s.monitoring.coreos.com"
		n.kubectl(t, fmt.Sprintf(operatorCRD, name, kind, singular), "apply", "-f", "-")
		t.Cleanup(func() {
			n.kubectl(t, "", "delete", "crd", name, "--ignore-not-found", "--wait=true", "--timeout=3m")
		})
	}
	n.kubectl(t, "", "wait", "--for=condition=Established", "--timeout=1m", "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	// A serving certificate signed by a CA made for it: client-go's
	// utility writes the certificate, then its CA.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("cle-controller-metrics."+helmNamespace+".svc", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) != 2 {
		t.Fatalf("the generated certificate: %d certificates, %v; want the serving certificate and its CA", len(certs), err)
	}
	caPEM, err := certutil.EncodeCertificates(certs[1])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(certs[1])
	n.beforeChartInstall = func(t *testing.T) {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: metricsSecret, Namespace: helmNamespace},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": caPEM},
		}
		if _, err := n.client.CoreV1().Secrets(helmNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { n.beforeChartInstall = nil })
	return pool
}

// scrapeAsServiceMonitor scrapes each cle-controller Pod as the chart's
// ServiceMonitor has Prometheus do it: the token of the Secret it names,
// the certificate verified with the CA under the name it gives. Every
// replica answers with its metrics; without the token, none does.
func (n *node) scrapeAsServiceMonitor(t *testing.T, pods []corev1.Pod, ca *x509.CertPool) {
	t.Helper()
	ctx := context.Background()
	var sm struct {
		Spec struct {
			Endpoints []struct {
				Authorization struct {
					Credentials struct{ Name, Key string } `json:"credentials"`
				} `json:"authorization"`
				TLSConfig struct {
					ServerName string `json:"serverName"`
				} `json:"tlsConfig"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(n.kubectl(t, "", "get", "servicemonitor", "cle-controller", "-n", helmNamespace, "-o", "json")), &sm); err != nil {
		t.Fatal(err)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	// kube-controller-manager's token controller fills the Secret in.
	var token string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := n.client.CoreV1().Secrets(helmNamespace).Get(ctx, ep.Authorization.Credentials.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		token = string(s.Data[ep.Authorization.Credentials.Key])
		return token != "", nil
	})
	if err != nil {
		t.Fatalf("Secret %s/%s holds no token %q: %v", helmNamespace, ep.Authorization.Credentials.Name, ep.Authorization.Credentials.Key, err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca, ServerName: ep.TLSConfig.ServerName, MinVersion: tls.VersionTLS12},
	}}
	get := func(ip, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(ip, "8443")+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /metrics of %s, verifying its certificate as %s: %v", ip, ep.TLSConfig.ServerName, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, p := range pods {
		if code, body := get(p.Status.PodIP, token); code != http.StatusOK || !strings.Contains(body, "cle_build_info{") {
			t.Errorf("Pod %s: GET /metrics with the scraper's token = %d, want 200 with cle_build_info", p.Name, code)
		}
		if code, _ := get(p.Status.PodIP, ""); code != http.StatusUnauthorized {
			t.Errorf("Pod %s: GET /metrics without a token = %d, want 401", p.Name, code)
		}
	}
	t.Logf("the %d replicas serve their metrics to the ServiceMonitor's token over a certificate verified as %s", len(pods), ep.TLSConfig.ServerName)
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

// helmCommand is helm run against the node as the admin, with a home of
// its own in the node's directory (its registry logins and caches too).
func (n *node) helmCommand(ctx context.Context, helm string, args ...string) *exec.Cmd {
	home := filepath.Join(n.dir, "helm")
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	return cmd
}

func (n *node) runHelm(t *testing.T, helm string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := n.helmCommand(ctx, helm, args...)
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

// publishedChart is the chart as helm install takes it from the registry
// it was published to (the stand-in of ghcr.io), with the flags that pick
// the release's version (and speak plain HTTP to the stand-in). The release
// holds that chart's archive, and only that one.
func (n *node) publishedChart(t *testing.T) []string {
	t.Helper()
	n.release.chart(t)
	return []string{n.chartRef, "--version", strings.TrimPrefix(n.release.tag, "v"), "--plain-http"}
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
