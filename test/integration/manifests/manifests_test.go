// Package manifests applies the kustomize bases of manifests/ to a real
// kube-apiserver with kubectl, and runs cle-controller with exactly the
// rights they grant it.
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/test/integration/framework"
)

// serviceAccountUser is the user name of the ServiceAccount that
// manifests/controller binds to the ClusterRole: the server authenticates it
// by token here, and RBAC matches it to the binding's ServiceAccount subject.
const serviceAccountUser = "system:serviceaccount:cle-system:cle-controller"

var saUser = framework.User{Name: serviceAccountUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:cle-system"}}

// lessUser is bound to the shipped ClusterRole without its LeaseCandidate
// rule.
var lessUser = framework.User{Name: "cle-controller-missing-a-rule"}

type apiMode struct {
	name   string
	server *framework.Server
}

var modes []apiMode

func TestMain(m *testing.M) {
	framework.MainServers(m, []framework.Options{
		{CoordinatedLeaderElection: true, IdleBuiltinController: true, Users: []framework.User{saUser, lessUser}},
		{PortableCRD: true, Users: []framework.User{saUser, lessUser}},
	}, func(s []*framework.Server) {
		modes = []apiMode{{string(access.ModeNative), s[0]}, {string(access.ModePortable), s[1]}}
	})
}

func forEachMode(t *testing.T, f func(t *testing.T, m apiMode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

func kubectl(t *testing.T) string {
	t.Helper()
	path, err := framework.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// render runs `kubectl kustomize` on a directory of manifests/.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	return renderPath(t, framework.RepoPath(filepath.Join("manifests", dir)), dir)
}

// renderPath runs `kubectl kustomize` on the kustomization in path, named dir
// in errors.
func renderPath(t *testing.T, path, dir string) []byte {
	t.Helper()
	cmd := exec.Command(kubectl(t), "kustomize", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize manifests/%s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// apply server-side applies YAML with kubectl and returns its stderr (the
// warnings); dryRun asks the server to check without storing.
func apply(t *testing.T, m apiMode, manifest []byte, dryRun bool) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", kc, "apply", "--server-side", "--field-manager=cle-manifests-test", "-f", "-"}
	if dryRun {
		args = append(args, "--dry-run=server")
	}
	cmd := exec.Command(kubectl(t), args...)
	cmd.Stdin = bytes.NewReader(manifest)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args[2:], " "), err, stdout.String(), stderr.String())
	}
	return stderr.String()
}

// TestApply applies every kustomize base: for real where no kubelet is
// needed to accept it, dry-run for the static Pod, and checks that the
// server raises no Pod Security warning for the restricted namespaces.
func TestApply(t *testing.T) {
	forEachMode(t, func(t *testing.T, m apiMode) {
		for _, tc := range []struct {
			dir    string
			dryRun bool
			kinds  []string
		}{
			{dir: "crd", kinds: []string{"CustomResourceDefinition"}},
			{dir: "controller", kinds: []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget", "Service"}},
			{dir: "portable", kinds: []string{"CustomResourceDefinition", "Deployment"}},
			{dir: "static-pod/rbac", kinds: []string{"ClusterRole", "ClusterRoleBinding"}},
			{dir: "static-pod", dryRun: true, kinds: []string{"Pod"}},
			{dir: "examples", kinds: []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Deployment"}},
			{dir: "migration/native", kinds: []string{"Deployment"}},
			{dir: "migration/portable", kinds: []string{"Deployment"}},
		} {
			manifest := render(t, tc.dir)
			for _, kind := range tc.kinds {
				if !bytes.Contains(manifest, []byte("\nkind: "+kind+"\n")) {
					t.Errorf("manifests/%s renders no %s", tc.dir, kind)
				}
			}
			warnings := apply(t, m, manifest, tc.dryRun)
			if strings.Contains(warnings, "PodSecurity") {
				t.Errorf("manifests/%s: %s", tc.dir, warnings)
			}
		}
		// Nothing keeps a replica Pending or a rollout stuck on a cluster
		// of one or two nodes: no required (anti-)affinity, spreads that
		// yield.
		controllerManifest := string(render(t, "controller"))
		for _, trap := range []string{"requiredDuringSchedulingIgnoredDuringExecution", "whenUnsatisfiable: DoNotSchedule"} {
			if strings.Contains(controllerManifest, trap) {
				t.Errorf("manifests/controller has %s: a replica can stay Pending on a small cluster", trap)
			}
		}
		// The portable overlay switches the API mode.
		if !bytes.Contains(render(t, "portable"), []byte("- --api-mode=portable\n")) {
			t.Error("manifests/portable does not set --api-mode=portable")
		}
		// The migration overlays add cle-controller-next, in their mode, with
		// Pods of its own, next to cle-controller.
		for _, mode := range []string{"native", "portable"} {
			manifest := render(t, "migration/"+mode)
			if got := deploymentArgs(t, manifest); len(got) == 0 || got[0] != "--api-mode="+mode {
				t.Errorf("manifests/migration/%s: cle-controller-next args %v, want --api-mode=%s first", mode, got, mode)
			}
			if n := strings.Count(string(manifest), "app.kubernetes.io/name: cle-controller-next\n"); n != 5 {
				t.Errorf("manifests/migration/%s names cle-controller-next's Pods in %d places, want 5 (labels, selector, template, two topology spreads)", mode, n)
			}
		}
		// The proof of death's component, as a user's kustomization takes
		// it: the flag, and the role that lets the controller read Pods.
		withProof := withComponent(t, "controller", "components/proof-of-death")
		if got := deploymentArgs(t, withProof); !slices.Contains(got, "--proof-of-death") {
			t.Errorf("manifests/components/proof-of-death: cle-controller args %v, want --proof-of-death", got)
		}
		role := clusterRole(t, withProof, "cle-controller-pods")
		if len(role.Rules) != 1 || strings.Join(role.Rules[0].Resources, ",") != "pods" || strings.Join(role.Rules[0].Verbs, ",") != "get,list,watch" {
			t.Errorf("cle-controller-pods grants %+v, want get, list and watch on pods only", role.Rules)
		}
		apply(t, m, withProof, false)
		deployments, err := m.server.Client().AppsV1().Deployments("cle-system").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range deployments.Items {
			names = append(names, d.Name)
		}
		if strings.Join(names, " ") != "cle-controller cle-controller-next" {
			t.Errorf("Deployments in cle-system after applying everything: %v, want cle-controller and cle-controller-next", names)
		}
	})
}

// withComponent renders the base manifests/base with the kustomize component
// manifests/component, as a user's kustomization would.
func withComponent(t *testing.T, base, component string) []byte {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes no absolute path to a base.
	rel := func(p string) string {
		r, err := filepath.Rel(dir, framework.RepoPath(filepath.Join("manifests", p)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n", rel(base), rel(component))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return renderPath(t, dir, base+" with "+component)
}

// clusterRole returns the ClusterRole name of a rendered manifest.
func clusterRole(t *testing.T, manifest []byte, name string) *rbacv1.ClusterRole {
	t.Helper()
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "ClusterRole" && role.Name == name {
			return &role
		}
	}
	t.Fatalf("no ClusterRole %s in:\n%s", name, manifest)
	return nil
}

// TestViewerRole: every base that installs cle's RBAC ships cle-viewer,
// aggregated into the built-in view ClusterRole and granting nothing but
// reads of Leases and LeaseCandidates of both modes.
func TestViewerRole(t *testing.T) {
	for _, dir := range []string{"controller/rbac", "controller", "portable", "static-pod/rbac"} {
		role := clusterRole(t, render(t, dir), "cle-viewer")
		if role.Labels["rbac.authorization.k8s.io/aggregate-to-view"] != "true" {
			t.Errorf("manifests/%s: cle-viewer is not aggregated to view: labels %v", dir, role.Labels)
		}
		granted := map[string]bool{}
		for _, r := range role.Rules {
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("manifests/%s: cle-viewer rule %+v is narrower or other than expected", dir, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if v != "get" && v != "list" && v != "watch" {
							t.Errorf("manifests/%s: cle-viewer grants %s on %s.%s", dir, v, res, g)
						}
						granted[v+" "+res+"."+g] = true
					}
				}
			}
		}
		for _, res := range []string{"leases.coordination.k8s.io", "leasecandidates.coordination.k8s.io", "leasecandidates.cle.dev"} {
			for _, v := range []string{"get", "list", "watch"} {
				if !granted[v+" "+res] {
					t.Errorf("manifests/%s: cle-viewer does not grant %s on %s", dir, v, res)
				}
			}
		}
	}
}

// deploymentArgs returns the container args of the rendered Deployment.
func deploymentArgs(t *testing.T, manifest []byte) []string {
	t.Helper()
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Args []string `json:"args"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "Deployment" && len(obj.Spec.Template.Spec.Containers) == 1 {
			return obj.Spec.Template.Spec.Containers[0].Args
		}
	}
	t.Fatal("no Deployment with one container")
	return nil
}

func buildController(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cle-controller")
	if out, err := framework.GoBuild("-o", bin, "github.com/cle-dev/cle/cmd/cle-controller").CombinedOutput(); err != nil {
		t.Fatalf("build cle-controller: %v\n%s", err, out)
	}
	return bin
}

// controllerProcess is cle-controller run as the ServiceAccount's user with
// the Deployment's flags.
type controllerProcess struct {
	health string
	logs   *framework.SyncBuffer
}

// startController runs the cle-controller binary with the args of the
// rendered Deployment, authenticated as the ServiceAccount, electing in ns.
func startController(t *testing.T, m apiMode, bin string, args []string, ns, user string) *controllerProcess {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteUserKubeconfig(kc, user); err != nil {
		t.Fatal(err)
	}
	p := &controllerProcess{health: framework.FreeAddress(t), logs: &framework.SyncBuffer{}}
	args = append(append([]string{}, args...),
		"--kubeconfig="+kc, "--namespaces="+ns,
		// The framework idles the built-in controller by holding its Lease,
		// kube-system/leader-election-controller, as a cle-controller of an
		// older release would: the locks go in ns, under the names the
		// ClusterRole allows (cle-controller, and leader-election-controller
		// in native mode).
		"--leader-elect-resource-namespace="+ns,
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address="+p.health)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("cle-controller output:\n%s", p.logs.String())
		}
	})
	return p
}

// ready reports /readyz.
func (p *controllerProcess) ready() (bool, string) {
	resp, err := http.Get("http://" + p.health + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, string(body)
}

// startCandidate runs a candidate of the library, as admin, until the test
// ends: it answers the controller's pings.
func startCandidate(t *testing.T, m apiMode, ns, lease, id string) {
	t.Helper()
	framework.RunCandidate(t, candidate.Config{
		RestConfig: m.server.Config(), APIMode: m.name, Namespace: ns, LeaseName: lease, Identity: id,
		BinaryVersion: "1.36.0", EmulationVersion: "1.36.0",
	})
}

func newAccess(t *testing.T, m apiMode) access.Interface {
	t.Helper()
	acc, err := m.server.Access(context.Background(), m.name)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

// TestClusterRoleSuffices runs cle-controller as the ServiceAccount of
// manifests/controller, with its Deployment's flags and nothing but the
// shipped RBAC, and sees it elect, with no request forbidden.
func TestClusterRoleSuffices(t *testing.T) {
	bin := buildController(t)
	forEachMode(t, func(t *testing.T, m apiMode) {
		manifest := render(t, "controller")
		apply(t, m, manifest, false)
		ns := m.server.CreateNamespace(t)
		p := startController(t, m, bin, deploymentArgs(t, manifest), ns, serviceAccountUser)

		acc := newAccess(t, m)
		startCandidate(t, m, ns, "app", "a")
		var last string
		if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			lease, err := acc.Leases(ns).Get(ctx, "app")
			if err != nil {
				last = err.Error()
				return false, nil
			}
			last = fmt.Sprintf("holder %q strategy %q", ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.Strategy, ""))
			return ptr.Deref(lease.Spec.HolderIdentity, "") == "a" && lease.Spec.Strategy != nil, nil
		}); err != nil {
			t.Fatalf("cle-controller as %s did not elect: %s", serviceAccountUser, last)
		}
		if ok, body := p.ready(); !ok {
			t.Errorf("/readyz: %s", body)
		}
		// The LeaderElected Event was written too.
		if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			events, err := m.server.Client().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, e := range events.Items {
				if e.Reason == "LeaderElected" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Errorf("no LeaderElected Event: %v", err)
		}
		if logs := p.logs.String(); strings.Contains(logs, "forbidden") {
			t.Errorf("a request was forbidden:\n%s", grep(logs, "forbidden"))
		}
	})
}

func grep(s, substr string) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "\n")
}

// TestMissingRuleIsLoud binds the shipped ClusterRole without its
// LeaseCandidate rule: the controller must say what is forbidden and stay
// unready, not elect nothing in silence.
func TestMissingRuleIsLoud(t *testing.T) {
	bin := buildController(t)
	m := modes[1]
	role := clusterRole(t, render(t, "controller/rbac"), "cle-controller")
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "leasecandidates") {
			rules = append(rules, r)
		}
	}
	if len(rules) != len(role.Rules)-1 {
		t.Fatalf("expected one LeaseCandidate rule in %+v", role.Rules)
	}
	ctx := context.Background()
	rbac := m.server.Client().RbacV1()
	lessRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cle-controller-missing-a-rule"}, Rules: rules}
	if _, err := rbac.ClusterRoles().Create(ctx, lessRole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cle-controller-missing-a-rule"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: lessRole.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: lessUser.Name}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, lessRole.Name, metav1.DeleteOptions{})
	})
	ns := m.server.CreateNamespace(t)
	p := startController(t, m, bin, deploymentArgs(t, render(t, "controller")), ns, lessUser.Name)
	want := `leasecandidates.cle.dev is forbidden: User \"` + lessUser.Name + `\" cannot list resource \"leasecandidates\"`
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(p.logs.String(), want), nil
	}); err != nil {
		t.Fatalf("the log does not say %q", want)
	}
	// Leading, but its caches cannot sync: unready, and it stays so.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Second, true, func(context.Context) (bool, error) {
		ok, body := p.ready()
		last = body
		return ok, nil
	}); err == nil {
		t.Fatalf("/readyz is ready without the LeaseCandidate rule")
	}
	if !strings.Contains(last, "caches not synced") {
		t.Errorf("/readyz says %q, want caches not synced", last)
	}
}
