package tools

// Tests of the chart charts/cle, run by hack/test-chart.sh with the helm it
// builds (CLE_HELM) and the kubectl of hack/kube-bin.sh (CLE_KUBECTL), whose
// kustomize renders the release bundles' manifests:
//
//   - for values equivalent to a release bundle, helm template renders the
//     same objects as kubectl kustomize of its manifests, Helm's own labels
//     and annotations aside, the Namespace excepted (a chart installs into
//     its release's namespace and does not own it);
//   - each value does what values.yaml says;
//   - values.schema.json rejects values that are not valid;
//   - files/ holds exact copies of the manifests the chart renders from;
//   - the fences value renders what kubectl cle fence (CLE_KUBECTL_CLE)
//     prints for each election.

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

var (
	root  = filepath.Join("..", "..", "..")
	chart = filepath.Join(root, "charts", "cle")
)

// helmLabels and helmAnnotations are what the chart adds to the bundles'
// objects for Helm; every object carries the labels.
var (
	helmLabels      = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
	helmAnnotations = []string{"helm.sh/resource-policy"}
)

const (
	// release is the release name of every rendering here.
	release = "cle"
	// shippedRunbooks is the runbooks page manifests/monitoring names.
	shippedRunbooks = "https://github.com/cle-dev/cle/blob/main/docs/operations.md"
	digest          = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// object is a rendered object, as JSON-compatible maps.
type object = map[string]any

func tool(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Fatalf("%s is not set: run hack/test-chart.sh", env)
	}
	return p
}

func run(t *testing.T, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// helmTemplate renders the chart in the namespace with --set values.
func helmTemplate(t *testing.T, namespace string, set ...string) []object {
	t.Helper()
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return helmTemplateArgs(t, namespace, args...)
}

// kustomize renders kustomization directories as the release does:
// kubectl kustomize, the image pinned when digest is set.
func kustomize(t *testing.T, digest string, dirs ...string) []object {
	t.Helper()
	var objs []object
	for _, dir := range dirs {
		path, err := filepath.Abs(filepath.Join(root, "manifests", dir))
		if err != nil {
			t.Fatal(err)
		}
		if digest != "" {
			overlay := t.TempDir()
			// kustomize takes no absolute path to a base.
			if path, err = filepath.Rel(overlay, path); err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n"+
				"images:\n  - name: ghcr.io/cle-dev/cle\n    newName: ghcr.io/cle-dev/cle\n    newTag: %s\n    digest: %s\n", path, appVersion(t), digest)
			if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
				t.Fatal(err)
			}
			path = overlay
		}
		out, stderr, err := run(t, tool(t, "CLE_KUBECTL"), "kustomize", path)
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", path, err, stderr)
		}
		objs = append(objs, parse(t, out)...)
	}
	return objs
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func parse(t *testing.T, out string) []object {
	t.Helper()
	var objs []object
	for _, doc := range docSeparator.Split(out, -1) {
		var obj object
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if len(obj) > 0 {
			objs = append(objs, obj)
		}
	}
	return objs
}

func key(obj object) string {
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	return fmt.Sprintf("%v %v %s/%s", obj["apiVersion"], obj["kind"], ns, name)
}

func byKey(t *testing.T, objs []object) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, obj := range objs {
		k := key(obj)
		if _, dup := m[k]; dup {
			t.Errorf("%s rendered twice", k)
		}
		m[k] = obj
	}
	return m
}

// withoutHelmMetadata returns the object without the labels and annotations
// the chart adds for Helm, and fails if it lacks any of the labels.
func withoutHelmMetadata(t *testing.T, obj object) object {
	t.Helper()
	meta := obj["metadata"].(map[string]any)
	for field, keys := range map[string][]string{"labels": helmLabels, "annotations": helmAnnotations} {
		m, _ := meta[field].(map[string]any)
		for _, k := range keys {
			if _, ok := m[k]; !ok && field == "labels" {
				t.Errorf("%s has no label %s", key(obj), k)
			}
			delete(m, k)
		}
		if m != nil && len(m) == 0 {
			delete(meta, field)
		}
	}
	return obj
}

// TestBundles renders the chart with values equivalent to each release
// bundle (hack/release.sh) and compares the objects with the bundle's.
func TestBundles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     []string
		bundles []string // kustomizations of manifests/
		digest  string
	}{
		{name: "defaults are cle-portable.yaml", bundles: []string{"portable"}},
		{
			name:    "a pinned image as the release pins it",
			set:     []string{"image.digest=" + digest},
			bundles: []string{"portable"}, digest: digest,
		},
		{
			name:    "auto mode without the CRD is cle-native.yaml",
			set:     []string{"apiMode=auto", "crds.enabled=false"},
			bundles: []string{"controller"},
		},
		{
			name:    "monitoring and policies are cle-monitoring.yaml and cle-policies.yaml",
			set:     []string{"monitoring.enabled=true", "monitoring.runbookBaseURL=" + shippedRunbooks, "policies.enabled=true"},
			bundles: []string{"portable", "monitoring", "policies"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := byKey(t, helmTemplate(t, "cle-system", tc.set...))
			want := byKey(t, kustomize(t, tc.digest, tc.bundles...))
			for k, w := range want {
				if w["kind"] == "Namespace" {
					// Helm installs into the release's namespace, which it
					// does not create with the chart's objects.
					if _, ok := got[k]; ok {
						t.Errorf("the chart renders %s", k)
					}
					continue
				}
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart does not render %s", k)
					continue
				}
				if diff := cmp.Diff(w, withoutHelmMetadata(t, g), blankLinesIgnored); diff != "" {
					t.Errorf("%s differs from the bundle's (-bundle +chart):\n%s", k, diff)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, which the bundles do not", k)
				}
			}
		})
	}
}

// blankLinesIgnored compares multi-line strings without their blank lines:
// kustomize writes a folded scalar (>-) with more-indented lines, as the CEL
// expressions of manifests/policies have, back with a blank line before
// each of them, which adds a line break to the value it reads (as does
// kubectl apply of the bundle); the chart keeps the manifest's value. Line
// breaks are whitespace to CEL.
var blankLinesIgnored = cmp.FilterValues(func(a, b string) bool {
	return strings.Contains(a, "\n") || strings.Contains(b, "\n")
}, cmp.Transformer("blankLinesIgnored", func(s string) string {
	return blankLines.ReplaceAllString(s, "\n")
}))

var blankLines = regexp.MustCompile(`\n([ \t]*\n)+`)

// TestValues checks what each value changes.
func TestValues(t *testing.T) {
	for _, tc := range []struct {
		name      string
		namespace string
		set       []string
		check     func(t *testing.T, objs map[string]object)
	}{
		{
			name: "defaults: portable mode, two replicas, the CRD kept",
			check: func(t *testing.T, objs map[string]object) {
				wantArg(t, objs, "--api-mode=portable")
				wantReplicas(t, objs, 2, "6")
				if got := at(t, crd(t, objs), "metadata", "annotations", "helm.sh/resource-policy"); got != "keep" {
					t.Errorf("the CRD's helm.sh/resource-policy is %v, want keep", got)
				}
				wantImage(t, objs, "ghcr.io/cle-dev/cle:"+appVersion(t))
				wantKinds(t, objs, "PodDisruptionBudget")
				wantNoKinds(t, objs, "ServiceMonitor", "PrometheusRule", "ConfigMap", "ValidatingAdmissionPolicy")
			},
		},
		{
			name: "native mode needs no CRD",
			set:  []string{"apiMode=native"},
			check: func(t *testing.T, objs map[string]object) {
				wantArg(t, objs, "--api-mode=native")
				wantNoKinds(t, objs, "CustomResourceDefinition")
			},
		},
		{
			name: "auto mode falls back to portable, so has the CRD",
			set:  []string{"apiMode=auto"},
			check: func(t *testing.T, objs map[string]object) {
				wantArg(t, objs, "--api-mode=auto")
				crd(t, objs)
			},
		},
		{
			name: "the CRD not kept",
			set:  []string{"crds.keep=false"},
			check: func(t *testing.T, objs map[string]object) {
				if got := at(t, crd(t, objs), "metadata", "annotations"); got != nil {
					t.Errorf("the CRD has annotations %v, want none", got)
				}
			},
		},
		{
			name: "three replicas, a quota for them, no PodDisruptionBudget",
			set:  []string{"replicas=3", "podDisruptionBudget.enabled=false"},
			check: func(t *testing.T, objs map[string]object) {
				wantReplicas(t, objs, 3, "8")
				wantNoKinds(t, objs, "PodDisruptionBudget")
			},
		},
		{
			name: "image: a digest wins, the tag stays as a label",
			set:  []string{"image.repository=registry.example.com/cle", "image.tag=v9.9.9", "image.digest=" + digest},
			check: func(t *testing.T, objs map[string]object) {
				wantImage(t, objs, "registry.example.com/cle:v9.9.9@"+digest)
			},
		},
		{
			name: "proof of death: off by default, no Pods read",
			check: func(t *testing.T, objs map[string]object) {
				if args := deploymentArgs(t, objs); slices.Contains(args, "--proof-of-death") {
					t.Errorf("the arguments %q turn the proof of death on", args)
				}
				if hasObject(objs, "ClusterRole", "cle-controller-pods") {
					t.Error("cle-controller-pods rendered with the proof of death off")
				}
			},
		},
		{
			name: "proof of death: the flags, and Pods readable",
			set:  []string{"proofOfDeath.enabled=true", "proofOfDeath.namespaces={team-a,team-b}", "proofOfDeath.labelSelector=cle.dev/candidate=true"},
			check: func(t *testing.T, objs map[string]object) {
				args := deploymentArgs(t, objs)
				for _, want := range []string{"--proof-of-death", "--pod-namespaces=team-a,team-b", "--pod-label-selector=cle.dev/candidate=true"} {
					if !slices.Contains(args, want) {
						t.Errorf("the arguments %q lack %s", args, want)
					}
				}
				find(t, objs, "ClusterRole", "cle-controller-pods")
				binding := find(t, objs, "ClusterRoleBinding", "cle-controller-pods")
				if ns := at(t, binding, "subjects").([]any)[0].(map[string]any)["namespace"]; ns != "cle-system" {
					t.Errorf("cle-controller-pods is bound to the ServiceAccount in %v", ns)
				}
			},
		},
		{
			name: "extra arguments after the Deployment's",
			set:  []string{"extraArgs={--namespaces=a,--workers=32}"},
			check: func(t *testing.T, objs map[string]object) {
				args := deploymentArgs(t, objs)
				if tail := args[len(args)-2:]; !slices.Equal(tail, []string{"--namespaces=a", "--workers=32"}) {
					t.Errorf("the arguments end with %q, want the extra ones", tail)
				}
			},
		},
		{
			name:      "another namespace",
			namespace: "team-cle",
			set:       []string{"monitoring.enabled=true"},
			check: func(t *testing.T, objs map[string]object) {
				for k, obj := range objs {
					if ns := at(t, obj, "metadata", "namespace"); ns != nil && ns != "team-cle" {
						t.Errorf("%s is in namespace %v", k, ns)
					}
				}
				binding := find(t, objs, "ClusterRoleBinding", "cle-controller")
				if ns := at(t, binding, "subjects").([]any)[0].(map[string]any)["namespace"]; ns != "team-cle" {
					t.Errorf("cle-controller is bound to the ServiceAccount in %v", ns)
				}
				sm := find(t, objs, "ServiceMonitor", "cle-controller")
				if got := at(t, sm, "spec", "namespaceSelector", "matchNames"); !cmp.Equal(got, []any{"team-cle"}) {
					t.Errorf("the ServiceMonitor selects namespaces %v", got)
				}
			},
		},
		{
			name: "monitoring: runbooks of the chart's release by default, selector labels",
			set:  []string{"monitoring.enabled=true", "monitoring.labels.release=prometheus"},
			check: func(t *testing.T, objs map[string]object) {
				wantRunbooks(t, objs, "https://github.com/cle-dev/cle/blob/"+appVersion(t)+"/docs/operations.md")
				for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
					if got := at(t, find(t, objs, kind, "cle-controller"), "metadata", "labels", "release"); got != "prometheus" {
						t.Errorf("%s has label release=%v, want prometheus", kind, got)
					}
				}
			},
		},
		{
			name: "monitoring: runbooks elsewhere",
			set:  []string{"monitoring.enabled=true", "monitoring.runbookBaseURL=https://wiki.example.com/cle"},
			check: func(t *testing.T, objs map[string]object) {
				wantRunbooks(t, objs, "https://wiki.example.com/cle")
			},
		},
		{
			name: "a private registry: pull secrets and policy",
			set:  []string{"imagePullSecrets[0].name=regcred", "image.pullPolicy=Always"},
			check: func(t *testing.T, objs map[string]object) {
				if got := at(t, podSpec(t, objs), "imagePullSecrets"); !cmp.Equal(got, []any{map[string]any{"name": "regcred"}}) {
					t.Errorf("imagePullSecrets %v, want regcred", got)
				}
				if got := container(t, objs)["imagePullPolicy"]; got != "Always" {
					t.Errorf("imagePullPolicy %v, want Always", got)
				}
			},
		},
		{
			name: "an existing ServiceAccount, bound by its name",
			set:  []string{"serviceAccount.create=false", "serviceAccount.name=platform-cle", "proofOfDeath.enabled=true"},
			check: func(t *testing.T, objs map[string]object) {
				wantNoKinds(t, objs, "ServiceAccount")
				if got := at(t, podSpec(t, objs), "serviceAccountName"); got != "platform-cle" {
					t.Errorf("the Pods run as %v, want platform-cle", got)
				}
				for _, name := range []string{"cle-controller", "cle-controller-pods"} {
					binding := find(t, objs, "ClusterRoleBinding", name)
					if got := at(t, binding, "subjects").([]any)[0].(map[string]any)["name"]; got != "platform-cle" {
						t.Errorf("%s binds %v, want platform-cle", name, got)
					}
				}
			},
		},
		{
			name: "a ServiceAccount with workload identity",
			set:  []string{"serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account=cle@project.iam.gserviceaccount.com"},
			check: func(t *testing.T, objs map[string]object) {
				sa := find(t, objs, "ServiceAccount", "cle-controller")
				if got := at(t, sa, "metadata", "annotations", "iam.gke.io/gcp-service-account"); got != "cle@project.iam.gserviceaccount.com" {
					t.Errorf("the ServiceAccount's annotations are %v", at(t, sa, "metadata", "annotations"))
				}
			},
		},
		{
			name: "Pod annotations and labels; the selector's label stays",
			set:  []string{"podAnnotations.team=platform", "podLabels.zone=a"},
			check: func(t *testing.T, objs map[string]object) {
				tmpl := at(t, find(t, objs, "Deployment", "cle-controller"), "spec", "template", "metadata")
				if got := at(t, tmpl, "annotations", "team"); got != "platform" {
					t.Errorf("Pod annotations %v", at(t, tmpl, "annotations"))
				}
				if got := at(t, tmpl, "labels"); !cmp.Equal(got, map[string]any{"app.kubernetes.io/name": "cle-controller", "zone": "a"}) {
					t.Errorf("Pod labels %v", got)
				}
			},
		},
		{
			name: "another priority class: no quota for system-cluster-critical",
			set:  []string{"priorityClassName=platform-critical"},
			check: func(t *testing.T, objs map[string]object) {
				if got := at(t, podSpec(t, objs), "priorityClassName"); got != "platform-critical" {
					t.Errorf("priorityClassName %v", got)
				}
				wantNoKinds(t, objs, "ResourceQuota")
			},
		},
		{
			name: "no priority class",
			set:  []string{"priorityClassName="},
			check: func(t *testing.T, objs map[string]object) {
				if got, ok := podSpec(t, objs)["priorityClassName"]; ok {
					t.Errorf("priorityClassName %v, want none", got)
				}
				wantNoKinds(t, objs, "ResourceQuota")
			},
		},
		{
			name: "log level",
			set:  []string{"logLevel=4"},
			check: func(t *testing.T, objs map[string]object) {
				wantArg(t, objs, "--v=4")
				if args := deploymentArgs(t, objs); slices.Contains(args, "--v=2") {
					t.Errorf("the arguments %q keep --v=2", args)
				}
			},
		},
		{
			name: "placement and security contexts replace the defaults",
			set: []string{"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
				"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
				"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
				"topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
				"podSecurityContext.runAsNonRoot=true", "podSecurityContext.runAsUser=1000",
				"securityContext.readOnlyRootFilesystem=true"},
			check: func(t *testing.T, objs map[string]object) {
				spec := podSpec(t, objs)
				if at(t, spec, "affinity", "nodeAffinity") == nil {
					t.Errorf("no node affinity: %v", spec["affinity"])
				}
				if got := spec["topologySpreadConstraints"].([]any); len(got) != 1 || at(t, got[0], "whenUnsatisfiable") != "DoNotSchedule" {
					t.Errorf("topologySpreadConstraints %v, want the one set", got)
				}
				if got := spec["securityContext"]; !cmp.Equal(got, map[string]any{"runAsNonRoot": true, "runAsUser": float64(1000)}) {
					t.Errorf("the Pod's securityContext %v, want the one set", got)
				}
				if got := container(t, objs)["securityContext"]; !cmp.Equal(got, map[string]any{"readOnlyRootFilesystem": true}) {
					t.Errorf("the container's securityContext %v, want the one set", got)
				}
			},
		},
		{
			name: "monitoring without the dashboard and the alerts",
			set:  []string{"monitoring.enabled=true", "monitoring.dashboard.enabled=false", "monitoring.prometheusRule.enabled=false"},
			check: func(t *testing.T, objs map[string]object) {
				find(t, objs, "ServiceMonitor", "cle-controller")
				find(t, objs, "ClusterRole", "cle-metrics-reader")
				wantNoKinds(t, objs, "PrometheusRule", "ConfigMap")
			},
		},
		{
			name: "monitoring: the ServiceMonitor scrapes with its own ServiceAccount's token, unverified without a certificate",
			set:  []string{"monitoring.enabled=true"},
			check: func(t *testing.T, objs map[string]object) {
				endpoint := serviceMonitorEndpoint(t, objs)
				if got := endpoint["authorization"]; !cmp.Equal(got, map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "cle-metrics-scraper-token", "key": "token"}}) {
					t.Errorf("authorization %v, want the token of cle-metrics-scraper-token", got)
				}
				if _, ok := endpoint["bearerTokenFile"]; ok {
					t.Error("the ServiceMonitor reads Prometheus's token file")
				}
				if got := endpoint["tlsConfig"]; !cmp.Equal(got, map[string]any{"insecureSkipVerify": true}) {
					t.Errorf("tlsConfig %v, want verification skipped for a self-signed certificate", got)
				}
				secret := find(t, objs, "Secret", "cle-metrics-scraper-token")
				if secret["type"] != "kubernetes.io/service-account-token" || at(t, secret, "metadata", "annotations", "kubernetes.io/service-account.name") != "cle-metrics-scraper" {
					t.Errorf("Secret cle-metrics-scraper-token is not a token of cle-metrics-scraper: %v", secret)
				}
				find(t, objs, "ServiceAccount", "cle-metrics-scraper")
				binding := find(t, objs, "ClusterRoleBinding", "cle-metrics-scraper")
				if got := at(t, binding, "roleRef", "name"); got != "cle-metrics-reader" {
					t.Errorf("cle-metrics-scraper is bound to %v", got)
				}
				if got := at(t, binding, "subjects").([]any)[0].(map[string]any); got["name"] != "cle-metrics-scraper" || got["namespace"] != "cle-system" {
					t.Errorf("ClusterRoleBinding cle-metrics-scraper binds %v", got)
				}
				wantNoArg(t, objs, "--tls-cert-file")
				wantNoKinds(t, objs, "Certificate")
			},
		},
		{
			name:      "metricsTLS.secretName: the controller serves it, the ServiceMonitor verifies it",
			namespace: "team-cle",
			set:       []string{"monitoring.enabled=true", "metricsTLS.secretName=metrics-cert"},
			check: func(t *testing.T, objs map[string]object) {
				wantMetricsCertificate(t, objs, "metrics-cert", "team-cle")
				wantNoKinds(t, objs, "Certificate")
			},
		},
		{
			name: "metricsTLS.certManager: a Certificate keeps the Secret the controller serves",
			set:  []string{"monitoring.enabled=true", "metricsTLS.certManager.issuerRef.name=cluster-ca", "metricsTLS.certManager.issuerRef.kind=ClusterIssuer"},
			check: func(t *testing.T, objs map[string]object) {
				wantMetricsCertificate(t, objs, "cle-controller-metrics-tls", "cle-system")
				cert := find(t, objs, "Certificate", "cle-controller-metrics")
				if got := at(t, cert, "spec", "secretName"); got != "cle-controller-metrics-tls" {
					t.Errorf("the Certificate's secret %v", got)
				}
				if got := at(t, cert, "spec", "dnsNames"); !cmp.Equal(got, []any{"cle-controller-metrics.cle-system.svc", "cle-controller-metrics.cle-system.svc.cluster.local"}) {
					t.Errorf("the Certificate's names %v, want the metrics Service's", got)
				}
				if got := at(t, cert, "spec", "issuerRef"); !cmp.Equal(got, map[string]any{"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}) {
					t.Errorf("the Certificate's issuer %v", got)
				}
			},
		},
		{
			name: "metricsTLS without monitoring: the controller serves the certificate",
			set:  []string{"metricsTLS.certManager.issuerRef.name=ca", "metricsTLS.secretName=mine"},
			check: func(t *testing.T, objs map[string]object) {
				wantArg(t, objs, "--tls-cert-file=/etc/cle/metrics-tls/tls.crt")
				if got := at(t, find(t, objs, "Certificate", "cle-controller-metrics"), "spec", "secretName"); got != "mine" {
					t.Errorf("the Certificate keeps Secret %v, want mine", got)
				}
				if got := at(t, podSpec(t, objs), "volumes").([]any)[0]; !cmp.Equal(got, map[string]any{"name": "metrics-tls", "secret": map[string]any{"secretName": "mine"}}) {
					t.Errorf("the Pod's volume %v", got)
				}
				wantNoKinds(t, objs, "ServiceMonitor")
			},
		},
		{
			name: "monitoring without the ServiceMonitor",
			set:  []string{"monitoring.enabled=true", "monitoring.serviceMonitor.enabled=false"},
			check: func(t *testing.T, objs map[string]object) {
				wantNoKinds(t, objs, "ServiceMonitor", "Secret")
				for _, kind := range []string{"ServiceAccount", "ClusterRoleBinding"} {
					if hasObject(objs, kind, "cle-metrics-scraper") {
						t.Errorf("the scraper's %s is rendered without the ServiceMonitor", kind)
					}
				}
				wantKinds(t, objs, "PrometheusRule", "ConfigMap")
			},
		},
		{
			name: "namespaced RBAC: Roles where it elects and for its lock, --namespaces, Pods read there",
			set:  []string{"rbac.namespaced=true", "rbac.namespaces={team-a,team-b}", "proofOfDeath.enabled=true"},
			check: func(t *testing.T, objs map[string]object) {
				wantArg(t, objs, "--namespaces=team-a,team-b")
				for _, name := range []string{"cle-controller", "cle-controller-pods"} {
					if hasObject(objs, "ClusterRoleBinding", name) {
						t.Errorf("ClusterRoleBinding %s rendered: the controller is bound cluster-wide", name)
					}
				}
				if hasObject(objs, "ClusterRole", "cle-controller") {
					t.Error("ClusterRole cle-controller rendered")
				}
				granted := ruleSet(t, find(t, byKey(t, helmTemplate(t, "cle-system")), "ClusterRole", "cle-controller"))
				for _, ref := range []struct{ ns, name string }{{"team-a", "cle-controller"}, {"team-b", "cle-controller"}, {"kube-system", "cle-controller-lock"}} {
					role := objs["rbac.authorization.k8s.io/v1 Role "+ref.ns+"/"+ref.name]
					if role == nil {
						t.Errorf("no Role %s/%s", ref.ns, ref.name)
						continue
					}
					// The Roles grant nothing the cluster-wide ClusterRole
					// does not: they narrow it, never widen it.
					for rule := range ruleSet(t, role) {
						if !granted[rule] {
							t.Errorf("Role %s/%s grants %s, which the ClusterRole cle-controller does not", ref.ns, ref.name, rule)
						}
					}
					binding := objs["rbac.authorization.k8s.io/v1 RoleBinding "+ref.ns+"/"+ref.name]
					if got := at(t, binding, "subjects"); !cmp.Equal(got, []any{map[string]any{"kind": "ServiceAccount", "name": "cle-controller", "namespace": "cle-system"}}) {
						t.Errorf("RoleBinding %s/%s binds %v", ref.ns, ref.name, got)
					}
				}
				for _, ns := range []string{"team-a", "team-b"} {
					if objs["rbac.authorization.k8s.io/v1 RoleBinding "+ns+"/cle-controller-pods"] == nil {
						t.Errorf("cle-controller-pods is not bound in %s", ns)
					}
				}
				find(t, objs, "ClusterRoleBinding", "cle-controller-reviews")
				reviews := ruleSet(t, find(t, objs, "ClusterRole", "cle-controller-reviews"))
				for rule := range reviews {
					if !granted[rule] {
						t.Errorf("ClusterRole cle-controller-reviews grants %s, which the ClusterRole cle-controller does not", rule)
					}
				}
			},
		},
		{
			name: "policies",
			set:  []string{"policies.enabled=true"},
			check: func(t *testing.T, objs map[string]object) {
				for _, name := range []string{"leasecandidates.cle.dev", "coordinated-leases.cle.dev", "member-lease-deletes.cle.dev"} {
					find(t, objs, "ValidatingAdmissionPolicy", name)
					find(t, objs, "ValidatingAdmissionPolicyBinding", name)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.namespace
			if ns == "" {
				ns = "cle-system"
			}
			objs := byKey(t, helmTemplate(t, ns, tc.set...))
			// Every object names the release, which is how the node test
			// finds what an uninstall leaves.
			for k, obj := range objs {
				if got := at(t, obj, "metadata", "labels", "app.kubernetes.io/instance"); got != release {
					t.Errorf("%s has app.kubernetes.io/instance=%v, want %s", k, got, release)
				}
			}
			tc.check(t, objs)
		})
	}
}

// TestSchema checks that values.schema.json rejects values that are not
// valid, and that helm says so rather than failing in a template.
func TestSchema(t *testing.T) {
	for _, set := range [][]string{
		{"replicas=0"},
		{"replicas=-1"},
		{"replicas=1.5"},
		{"replicas=two"},
		{"apiMode=beta"},
		{"apiMode="},
		{"replica=2"},
		{"image.name=cle"},
		{"image.digest=sha256:abc"},
		{"image.digest=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{"image.tag=v1@sha256:x"},
		{"image.repository=Registry/CLE"},
		{"extraArgs={-v=4}"},
		{"crds.enabled=maybe"},
		{"crds.upgrade=true"},
		{"monitoring.enabled=yes"},
		{"monitoring.runbookBaseURL=docs/operations.md"},
		{"monitoring.labels.release=null", "monitoring.labels.x=1"},
		{"policies=true"},
		{"podDisruptionBudget.maxUnavailable=2"},
		{"image.pullPolicy=Sometimes"},
		{"imagePullSecrets[0].secret=regcred"},
		{"serviceAccount.name=Not_A_Name"},
		{"serviceAccount.create=maybe"},
		{"podLabels.app\\.kubernetes\\.io/name=other"},
		{"podAnnotations.x=null", "podAnnotations.y=1"},
		{"priorityClassName=Critical"},
		{"logLevel=11"},
		{"logLevel=-1"},
		{"affinity=pool"},
		{"topologySpreadConstraints=hostname"},
		{"securityContext=root"},
		{"monitoring.dashboard.enabled=maybe"},
		{"metricsTLS.secretName=Metrics_Cert"},
		{"metricsTLS.secret=metrics-cert"},
		{"metricsTLS.certManager.issuerRef.kind=ClusterIssuer"},
		{"metricsTLS.certManager.issuerRef.name=ca", "metricsTLS.certManager.issuerRef.kind=Vault"},
		{"metricsTLS.certManager.issuerRef.name=ca", "metricsTLS.certManager.issuerRef.namespace=x"},
		{"metricsTLS.certManager.duration=24h"},
		{"monitoring.grafana.enabled=true"},
		{"rbac.namespaced=true"},
		{"rbac.namespaced=true", "rbac.namespaces={kube-node-lease}"},
		{"rbac.namespaces={Team-A}"},
		{"rbac.clusterWide=false"},
		{"fences[0].namespace=team-a", "fences[0].lease=l", "fences[0].serviceAccount=w"},
		{"fences[0].namespace=team-a", "fences[0].lease=Bad_Name", "fences[0].serviceAccount=w", "fences[0].resources={configmaps}"},
		{"fences[0].namespace=team-a", "fences[0].lease=l", "fences[0].serviceAccount=w", "fences[0].resources={config maps}"},
		{"fences[0].namespace=team-a", "fences[0].lease=l", "fences[0].serviceAccount=w", "fences[0].resources={configmaps}", "fences[0].verbs={get}"},
		{"fences[0].namespace=team-a", "fences[0].lease=l", "fences[0].serviceAccount=w\"", "fences[0].resources={configmaps}"},
		{"fences[0].namespace=team-a", "fences[0].lease=l", "fences[0].serviceAccount=w", "fences[0].resources={configmaps}", "fences[0].user=x"},
		{"fences[0].namespace=team-a", "fences[0].lease=l", "fences[0].serviceAccount=w", "fences[0].resources={configmaps}", "fences[0].namespaces={a,a}"},
	} {
		t.Run(strings.Join(set, ","), func(t *testing.T) {
			args := []string{"template", release, chart}
			for _, s := range set {
				args = append(args, "--set", s)
			}
			_, stderr, err := run(t, tool(t, "CLE_HELM"), args...)
			if err == nil {
				t.Fatalf("helm %s renders, want the schema to reject the values", strings.Join(args, " "))
			}
			if !strings.Contains(stderr, "values don't meet the specifications of the schema") {
				t.Fatalf("helm %s fails, but not on the schema:\n%s", strings.Join(args, " "), stderr)
			}
		})
	}
}

// TestFilesMirrorManifests checks that every file of files/ is the manifest
// at the same path under manifests/, so that the chart renders what the
// bundles ship.
func TestFilesMirrorManifests(t *testing.T) {
	files := filepath.Join(chart, "files")
	n := 0
	err := filepath.WalkDir(files, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(files, path)
		if err != nil {
			return err
		}
		n++
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(root, "manifests", rel))
		if err != nil {
			t.Errorf("charts/cle/files/%s copies no manifest: %v", rel, err)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/cle/files/%s differs from manifests/%s: cp manifests/%s charts/cle/files/%s", rel, rel, rel, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("charts/cle/files is empty")
	}
}

// TestChartVersion checks that the chart in the tree is the version in
// VERSION, which make release stamps into the chart it packages.
func TestChartVersion(t *testing.T) {
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	v := versionFile(t)
	if meta.AppVersion != v || meta.Version != strings.TrimPrefix(v, "v") {
		t.Errorf("Chart.yaml has version %s, appVersion %s; want %s and %s (VERSION)", meta.Version, meta.AppVersion, strings.TrimPrefix(v, "v"), v)
	}
}

func versionFile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// appVersion is the chart's, which TestChartVersion holds to VERSION.
func appVersion(t *testing.T) string { return versionFile(t) }

// at returns the value at the path of maps, or nil.
func at(t *testing.T, obj any, path ...string) any {
	t.Helper()
	for _, p := range path {
		m, ok := obj.(map[string]any)
		if !ok {
			return nil
		}
		obj = m[p]
	}
	return obj
}

func find(t *testing.T, objs map[string]object, kind, name string) object {
	t.Helper()
	for _, obj := range objs {
		if obj["kind"] == kind && at(t, obj, "metadata", "name") == name {
			return obj
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

func crd(t *testing.T, objs map[string]object) object {
	t.Helper()
	return find(t, objs, "CustomResourceDefinition", "leasecandidates.cle.dev")
}

func container(t *testing.T, objs map[string]object) map[string]any {
	t.Helper()
	cs := at(t, find(t, objs, "Deployment", "cle-controller"), "spec", "template", "spec", "containers").([]any)
	return cs[0].(map[string]any)
}

// ruleSet is what a Role or ClusterRole grants, one "group resource verb"
// each (resourceNames aside).
func ruleSet(t *testing.T, role object) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	rules, _ := role["rules"].([]any)
	for _, r := range rules {
		for _, g := range at(t, r, "apiGroups").([]any) {
			for _, res := range at(t, r, "resources").([]any) {
				for _, v := range at(t, r, "verbs").([]any) {
					set[fmt.Sprintf("%v %v %v", g, res, v)] = true
				}
			}
		}
	}
	return set
}

// podSpec is the spec of cle-controller's Pod template.
func podSpec(t *testing.T, objs map[string]object) map[string]any {
	t.Helper()
	spec, ok := at(t, find(t, objs, "Deployment", "cle-controller"), "spec", "template", "spec").(map[string]any)
	if !ok {
		t.Fatal("the Deployment has no Pod spec")
	}
	return spec
}

func deploymentArgs(t *testing.T, objs map[string]object) []string {
	t.Helper()
	var args []string
	for _, a := range container(t, objs)["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

func wantArg(t *testing.T, objs map[string]object, arg string) {
	t.Helper()
	if args := deploymentArgs(t, objs); !slices.Contains(args, arg) {
		t.Errorf("cle-controller runs with %q, want %s", args, arg)
	}
}

func wantNoArg(t *testing.T, objs map[string]object, prefix string) {
	t.Helper()
	for _, a := range deploymentArgs(t, objs) {
		if strings.HasPrefix(a, prefix) {
			t.Errorf("cle-controller runs with %s", a)
		}
	}
}

// serviceMonitorEndpoint is the one endpoint of ServiceMonitor
// cle-controller.
func serviceMonitorEndpoint(t *testing.T, objs map[string]object) map[string]any {
	t.Helper()
	endpoints := at(t, find(t, objs, "ServiceMonitor", "cle-controller"), "spec", "endpoints").([]any)
	if len(endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	return endpoints[0].(map[string]any)
}

// wantMetricsCertificate checks that cle-controller serves the certificate
// of the Secret and that the ServiceMonitor verifies it with the Secret's
// CA under the metrics Service's name in namespace.
func wantMetricsCertificate(t *testing.T, objs map[string]object, secret, namespace string) {
	t.Helper()
	wantArg(t, objs, "--tls-cert-file=/etc/cle/metrics-tls/tls.crt")
	wantArg(t, objs, "--tls-private-key-file=/etc/cle/metrics-tls/tls.key")
	if got := at(t, podSpec(t, objs), "volumes"); !cmp.Equal(got, []any{map[string]any{"name": "metrics-tls", "secret": map[string]any{"secretName": secret}}}) {
		t.Errorf("the Pod's volumes %v, want Secret %s", got, secret)
	}
	if got := container(t, objs)["volumeMounts"]; !cmp.Equal(got, []any{map[string]any{"name": "metrics-tls", "mountPath": "/etc/cle/metrics-tls", "readOnly": true}}) {
		t.Errorf("the container's mounts %v", got)
	}
	want := map[string]any{
		"ca":         map[string]any{"secret": map[string]any{"name": secret, "key": "ca.crt"}},
		"serverName": "cle-controller-metrics." + namespace + ".svc",
	}
	if got := serviceMonitorEndpoint(t, objs)["tlsConfig"]; !cmp.Equal(got, want) {
		t.Errorf("tlsConfig %v, want %v", got, want)
	}
}

func wantReplicas(t *testing.T, objs map[string]object, replicas float64, quota string) {
	t.Helper()
	if got := at(t, find(t, objs, "Deployment", "cle-controller"), "spec", "replicas"); got != replicas {
		t.Errorf("the Deployment has %v replicas, want %v", got, replicas)
	}
	if got := at(t, find(t, objs, "ResourceQuota", "cle-controller-critical-pods"), "spec", "hard", "pods"); got != quota {
		t.Errorf("the ResourceQuota admits %v Pods, want %s", got, quota)
	}
}

func wantImage(t *testing.T, objs map[string]object, image string) {
	t.Helper()
	if got := container(t, objs)["image"]; got != image {
		t.Errorf("cle-controller runs image %v, want %s", got, image)
	}
}

func wantKinds(t *testing.T, objs map[string]object, kinds ...string) {
	t.Helper()
	for _, kind := range kinds {
		if !slices.ContainsFunc(mapsValues(objs), func(o object) bool { return o["kind"] == kind }) {
			t.Errorf("no %s rendered", kind)
		}
	}
}

func wantNoKinds(t *testing.T, objs map[string]object, kinds ...string) {
	t.Helper()
	for k, obj := range objs {
		if slices.Contains(kinds, obj["kind"].(string)) {
			t.Errorf("%s rendered", k)
		}
	}
}

func mapsValues(objs map[string]object) []object {
	var v []object
	for _, o := range objs {
		v = append(v, o)
	}
	return v
}

// wantRunbooks checks that every alert's runbook_url is its section of the
// page, and that the dashboard links the page.
func wantRunbooks(t *testing.T, objs map[string]object, page string) {
	t.Helper()
	n := 0
	for _, g := range at(t, find(t, objs, "PrometheusRule", "cle-controller"), "spec", "groups").([]any) {
		for _, r := range at(t, g, "rules").([]any) {
			alert, ok := at(t, r, "alert").(string)
			if !ok {
				continue
			}
			n++
			if got, want := at(t, r, "annotations", "runbook_url"), page+"#"+strings.ToLower(alert); got != want {
				t.Errorf("alert %s has runbook_url %v, want %s", alert, got, want)
			}
		}
	}
	if n == 0 {
		t.Error("the PrometheusRule has no alerts")
	}
	dashboard, _ := at(t, find(t, objs, "ConfigMap", "cle-dashboard"), "data", "cle.json").(string)
	if !strings.Contains(dashboard, `"url": "`+page+`#runbooks"`) || page != shippedRunbooks && strings.Contains(dashboard, shippedRunbooks) {
		t.Errorf("the dashboard does not link the runbooks at %s", page)
	}
}

func hasObject(objs map[string]object, kind, name string) bool {
	for _, obj := range objs {
		if m, ok := obj["metadata"].(map[string]any); ok && obj["kind"] == kind && m["name"] == name {
			return true
		}
	}
	return false
}

// TestFences renders elections of the fences value and compares each
// election's objects with what kubectl cle fence prints for it (CLE_KUBECTL_CLE,
// built by hack/test-chart.sh): the chart fills pkg/fence's objects in, and
// must fill them in as the command does.
func TestFences(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value string   // one element of fences, as JSON
		args  []string // kubectl cle fence's
	}{
		{
			name:  "by Pod, every namespace",
			value: `{"namespace":"team-a","lease":"my-controller","serviceAccount":"worker","resources":["deployments.apps","configmaps","deployments.apps/scale"]}`,
			args:  []string{"my-controller", "-n", "team-a", "--service-account=worker", "--resource=deployments.apps", "--resource=configmaps", "--resource=deployments.apps/scale"},
		},
		{
			name: "by Pod, some verbs and namespaces, the ServiceAccount elsewhere, warnings only",
			value: `{"namespace":"team-a","lease":"my-controller","serviceAccount":"worker","serviceAccountNamespace":"ops",` +
				`"resources":["*.apps","widgets.example.com"],"verbs":["patch","create","update"],"namespaces":["team-b","team-a"],"warnOnly":true}`,
			args: []string{"my-controller", "-n", "team-a", "--service-account=worker", "--service-account-namespace=ops",
				"--resource=*.apps", "--resource=widgets.example.com", "--verbs=patch,create,update", "--namespaces=team-b,team-a", "--warn-only"},
		},
		{
			name:  "by token, no ServiceAccount",
			value: `{"namespace":"team-a","lease":"my-controller","byToken":true,"resources":["configmaps"]}`,
			args:  []string{"my-controller", "-n", "team-a", "--by-token", "--resource=configmaps"},
		},
		{
			name:  "by token, one ServiceAccount's updates",
			value: `{"namespace":"team-a","lease":"my-controller","byToken":true,"serviceAccount":"worker","resources":["configmaps"],"verbs":["create","patch"]}`,
			args:  []string{"my-controller", "-n", "team-a", "--by-token", "--service-account=worker", "--resource=configmaps", "--verbs=create,patch"},
		},
		{
			name:  "a name too long to be the objects' name",
			value: `{"namespace":"team-a","lease":"` + strings.Repeat("l", 250) + `","serviceAccount":"worker","resources":["configmaps"]}`,
			args:  []string{strings.Repeat("l", 250), "-n", "team-a", "--service-account=worker", "--resource=configmaps"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := byKey(t, helmTemplateArgs(t, "cle-system", "--set-json", "fences=["+tc.value+"]", "--show-only", "templates/fences.yaml"))
			out, stderr, err := run(t, tool(t, "CLE_KUBECTL_CLE"), append([]string{"fence"}, tc.args...)...)
			if err != nil {
				t.Fatalf("kubectl cle fence %s: %v\n%s", strings.Join(tc.args, " "), err, stderr)
			}
			want := byKey(t, parse(t, out))
			if len(want) != 2 {
				t.Fatalf("kubectl cle fence printed %d objects, want a policy and its binding", len(want))
			}
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart does not render %s; it renders %v", k, slices.Sorted(maps.Keys(got)))
					continue
				}
				if diff := cmp.Diff(w, withoutHelmMetadata(t, g)); diff != "" {
					t.Errorf("%s differs from kubectl cle fence's (-command +chart):\n%s", k, diff)
				}
			}
			if len(got) != len(want) {
				t.Errorf("the chart renders %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		})
	}
	// What the command refuses, the chart refuses, saying why.
	for _, tc := range []struct{ value, want string }{
		// The schema refuses it first, as the template would.
		{`{"namespace":"team-a","lease":"l","resources":["configmaps"]}`, "serviceAccount"},
		{`{"namespace":"team-a","lease":"l","serviceAccount":"w","resources":["leases.coordination.k8s.io"]}`, "never fenced"},
		{`{"namespace":"team-a","lease":"l","serviceAccount":"w","resources":["events"]}`, "never fenced"},
		{`{"namespace":"team-a","lease":"l","serviceAccount":"w","resources":["leasecandidates.cle.dev"]}`, "never fenced"},
		{`{"namespace":"team-a","lease":"l","byToken":true,"resources":["configmaps"],"verbs":["create","delete"]}`, "judges updates and patches only"},
	} {
		t.Run("refuses "+tc.value, func(t *testing.T) {
			args := []string{"template", release, chart, "--set-json", "fences=[" + tc.value + "]"}
			_, stderr, err := run(t, tool(t, "CLE_HELM"), args...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Errorf("helm template: %v, want it to fail saying %q:\n%s", err, tc.want, stderr)
			}
		})
	}
}

// helmTemplateArgs renders the chart in the namespace with helm template's
// arguments args.
func helmTemplateArgs(t *testing.T, namespace string, args ...string) []object {
	t.Helper()
	args = append([]string{"template", release, chart, "--namespace", namespace}, args...)
	out, stderr, err := run(t, tool(t, "CLE_HELM"), args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return parse(t, out)
}

// TestFenceKeeper checks when the chart binds the fences' keeper
// (pkg/fence's Keeper, manifests/policies/lease-params.yaml): with the
// policies, and with fences even without them, and not otherwise.
func TestFenceKeeper(t *testing.T) {
	const fence = `{"namespace":"team-a","lease":"l","serviceAccount":"w","resources":["configmaps"]}`
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		{"defaults", nil, false},
		{"policies", []string{"--set", "policies.enabled=true"}, true},
		{"a fence without the policies", []string{"--set-json", "fences=[" + fence + "]"}, true},
		{"a fence and the policies", []string{"--set", "policies.enabled=true", "--set-json", "fences=[" + fence + "]"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := byKey(t, helmTemplateArgs(t, "cle-system", tc.args...))
			for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
				var found bool
				for _, obj := range objs {
					meta, _ := obj["metadata"].(map[string]any)
					if obj["kind"] == kind && meta["name"] == "cle-lease-params" {
						found = true
					}
				}
				if found != tc.want {
					t.Errorf("%s cle-lease-params rendered: %t, want %t", kind, found, tc.want)
				}
			}
		})
	}
}
