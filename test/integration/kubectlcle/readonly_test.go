package kubectlcle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/kubectlcle"
	"github.com/cle-dev/cle/test/integration/framework"
)

// The users of the read-only tests, authenticated by token: viewerUser is
// bound to the built-in view ClusterRole in all namespaces, nsViewerUser in
// one namespace only.
const (
	viewerUser   = "viewer"
	nsViewerUser = "namespace-viewer"
)

// viewerManifest is the cle-viewer ClusterRole as shipped.
const viewerManifest = "manifests/controller/rbac/viewer.yaml"

// testVersion is stamped into the plugin binary the tests build, as
// hack/build.sh stamps the release.
const testVersion = "v0.0.0-integration"

// pluginBinary builds kubectl-cle, stamped with testVersion, into a
// directory of the test's.
func pluginBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-cle")
	build := framework.GoBuild("-ldflags", "-X github.com/cle-dev/cle/internal/version.version="+testVersion,
		"-o", bin, "github.com/cle-dev/cle/cmd/kubectl-cle")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-cle: %v\n%s", err, out)
	}
	return bin
}

// aggregate does for the ClusterRole name what kube-controller-manager's
// clusterrole-aggregation controller does, which no process runs here: its
// rules become those of the ClusterRoles its aggregationRule selects, in
// name order, without duplicates.
func aggregate(t *testing.T, m apiMode, name string) {
	t.Helper()
	ctx := context.Background()
	roles := m.server.Client().RbacV1().ClusterRoles()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		role, err := roles.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if role.AggregationRule == nil {
			return errors.New("ClusterRole " + name + " has no aggregationRule")
		}
		rules := []rbacv1.PolicyRule{}
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			selector, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return err
			}
			list, err := roles.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
			if err != nil {
				return err
			}
			slices.SortFunc(list.Items, func(a, b rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
			for _, r := range list.Items {
				if r.Name == name {
					continue
				}
				for _, rule := range r.Rules {
					if !slices.ContainsFunc(rules, func(have rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(have, rule) }) {
						rules = append(rules, rule)
					}
				}
			}
		}
		role.Rules = rules
		_, err = roles.Update(ctx, role, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("aggregate ClusterRole %s: %v", name, err)
	}
}

// applyViewerRole creates cle-viewer from its manifest until the test ends.
func applyViewerRole(t *testing.T, m apiMode) {
	t.Helper()
	data, err := os.ReadFile(framework.RepoPath(viewerManifest))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatalf("%s: %v", viewerManifest, err)
	}
	roles := m.server.Client().RbacV1().ClusterRoles()
	if _, err := roles.Create(context.Background(), &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = roles.Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		aggregate(t, m, "view")
	})
}

// bind binds user to the ClusterRole role: in all namespaces, or in
// namespace only.
func bind(t *testing.T, m apiMode, user, role, namespace string) {
	t.Helper()
	ctx := context.Background()
	rbac := m.server.Client().RbacV1()
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	meta := metav1.ObjectMeta{Name: "cle-test-" + user + "-" + role}
	if namespace == "" {
		if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(ctx, meta.Name, metav1.DeleteOptions{}) })
		return
	}
	if _, err := rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runAs runs kubectl cle in ns with the kubeconfig kc, with a deadline, and
// returns what it printed and its exit code.
func runAs(t *testing.T, kc, ns string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out framework.SyncBuffer
	stderr, code = plugin(ctx, t, kc, ns, &out, args...)
	if ctx.Err() != nil {
		t.Fatalf("kubectl cle %s did not end within a minute", strings.Join(args, " "))
	}
	return out.String(), stderr, code
}

// election writes, as the admin, two Leases under election that need no
// controller to stay as they are: app, held by the best of its two
// candidates, and labelled (label team=x), held by its only one.
func election(t *testing.T, m apiMode, ns string) access.Interface {
	t.Helper()
	ctx := context.Background()
	acc, err := m.server.Access(ctx, m.name)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseTransitions: ptr.To[int32](2)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: map[string]string{"team": "x"}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x"), LeaseTransitions: ptr.To[int32](1)}},
	} {
		l.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
		l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		if _, err := acc.Leases(ns).Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ name, lease, emulation string }{{"a", "app", "1.35.0"}, {"b", "app", "1.36.0"}, {"x", "labelled", "1.36.0"}} {
		if _, err := acc.LeaseCandidates(ns).Create(ctx, &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: c.lease, BinaryVersion: "1.36.0", EmulationVersion: c.emulation,
				Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NewMicroTime(now))},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return acc
}

// deprecationWarnings is how many times a server of this minor release warns
// that the LeaseCandidate API native mode uses is deprecated, in one run of
// kubectl cle: once (coordination.k8s.io/v1beta1 is deprecated from 1.36),
// however many requests it makes.
func deprecationWarnings(t *testing.T, m apiMode) int {
	t.Helper()
	minor, err := framework.BinaryMinor("kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	if m.name == string(access.ModeNative) && minor >= 36 {
		return 1
	}
	return 0
}

var warningLine = regexp.MustCompile(`(?m)^Warning: .*LeaseCandidate.*$`)

// TestReadOnly runs kubectl cle as a user bound to the built-in view
// ClusterRole: without cle-viewer it is refused, clearly and at once; with
// cle-viewer aggregated into view every command works, with the API mode
// chosen without the dry-run create the user may not make.
func TestReadOnly(t *testing.T) {
	bin := pluginBinary(t)
	forEachMode(t, func(t *testing.T, m apiMode) {
		ns := m.server.CreateNamespace(t)
		acc := election(t, m, ns)
		bind(t, m, viewerUser, "view", "")
		aggregate(t, m, "view")
		kc := kubeconfigOf(t, m, viewerUser)

		// view does not grant Leases: the error says so and what does.
		poll(t, "Forbidden without cle-viewer", 30*time.Second, func() (bool, string) {
			_, stderr, code := runAs(t, kc, ns, "status")
			return code != 0 && strings.Contains(stderr, `is forbidden: User "viewer" cannot list resource`) && strings.Contains(stderr, "cle-viewer ClusterRole"), stderr
		})

		applyViewerRole(t, m)
		aggregate(t, m, "view")
		poll(t, "status allowed with cle-viewer", 30*time.Second, func() (bool, string) {
			out, stderr, code := runAs(t, kc, ns, "status")
			return code == 0, out + stderr
		})

		t.Run("status", func(t *testing.T) {
			out, stderr, _ := runAs(t, kc, ns, "status")
			want := "" +
				"LEASE      STRATEGY                 HOLDER   PREFERRED   BEST   CANDIDATES   TERM   STATE     AGE\n" +
				"app        OldestEmulationVersion   a        <none>      a      2            2      optimal   <age>\n" +
				"labelled   OldestEmulationVersion   x        <none>      x      1            1      optimal   <age>\n"
			if got := table(t, m, out); got != want {
				t.Errorf("status:\n%s\nwant:\n%s", out, want)
			}
			if got := warningLine.FindAllString(stderr, -1); len(got) != deprecationWarnings(t, m) {
				t.Errorf("LeaseCandidate warnings %q, want %d; stderr:\n%s", got, deprecationWarnings(t, m), stderr)
			}
			if strings.Contains(stderr, "No Leases") {
				t.Errorf("stderr: %s", stderr)
			}
		})

		t.Run("no headers", func(t *testing.T) {
			out, _, _ := runAs(t, kc, ns, "status", "--no-headers")
			want := "" +
				"app        OldestEmulationVersion   a     <none>   a     2     2     optimal   <age>\n" +
				"labelled   OldestEmulationVersion   x     <none>   x     1     1     optimal   <age>\n"
			if got := maskAges(out); got != want {
				t.Errorf("status --no-headers:\n%s\nwant:\n%s", out, want)
			}
		})

		t.Run("jsonpath", func(t *testing.T) {
			if out, stderr, _ := runAs(t, kc, ns, "status", "-o", "jsonpath={.items[*].holder}"); out != "a x" {
				t.Errorf("status -o jsonpath: %q %s", out, stderr)
			}
			if out, stderr, _ := runAs(t, kc, ns, "status", "-o", "go-template={{.electionController.state}}"); out != map[string]string{"native": "acting", "portable": "none"}[m.name] {
				t.Errorf("status -o go-template: %q %s", out, stderr)
			}
		})

		t.Run("name", func(t *testing.T) {
			out, _, _ := runAs(t, kc, ns, "status", "-o", "name")
			if want := "lease.coordination.k8s.io/app\nlease.coordination.k8s.io/labelled\n"; out != want {
				t.Fatalf("status -o name: %q, want %q", out, want)
			}
			// The names pipe into kubectl.
			kubectl, err := framework.Binary("kubectl")
			if err != nil {
				t.Fatal(err)
			}
			get := exec.Command(kubectl, append([]string{"--kubeconfig", kc, "-n", ns, "get", "-o", "name"}, strings.Fields(out)...)...)
			if got, err := get.CombinedOutput(); err != nil || string(got) != out {
				t.Errorf("kubectl get %s: %v\n%s", strings.Fields(out), err, got)
			}
			if out, _, _ := runAs(t, kc, ns, "status", "-l", "team=x", "-o", "name"); out != "lease.coordination.k8s.io/labelled\n" {
				t.Errorf("status -l team=x -o name: %q", out)
			}
		})

		t.Run("json", func(t *testing.T) {
			out, _, _ := runAs(t, kc, ns, "status", "-o", "json")
			var list kubectlcle.LeaseStatusList
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			if list.APIVersion != "kubectl.cle.dev/v1alpha1" || list.Kind != "LeaseStatusList" || len(list.Items) != 2 ||
				list.Items[0].APIVersion != "kubectl.cle.dev/v1alpha1" || list.Items[0].Kind != "LeaseStatus" ||
				list.Items[0].Name != "app" || string(list.Items[0].APIMode) != m.name || list.Items[0].State != kubectlcle.StateOptimal {
				t.Errorf("status -o json:\n%s", out)
			}
			ctrl := list.ElectionController
			switch {
			case ctrl == nil:
				t.Errorf("status -o json has no electionController:\n%s", out)
			case m.name == string(access.ModeNative) && (ctrl.State != kubectlcle.ControllerActing || ctrl.Controller != access.ActingCle || ctrl.Holder != framework.IdlerIdentity):
				// The framework's idler holds the built-in controller's
				// Lease for cle, marked as cle's holder.
				t.Errorf("electionController %+v, want cle acting through the idler", ctrl)
			case m.name == string(access.ModePortable) && (ctrl.State != kubectlcle.ControllerNone || ctrl.Lock != "kube-system/cle-controller"):
				t.Errorf("electionController %+v, want none acting", ctrl)
			}
		})

		t.Run("describe", func(t *testing.T) {
			out, stderr, code := runAs(t, kc, ns, "describe", "app")
			if code != 0 {
				t.Fatalf("describe: exit %d: %s", code, stderr)
			}
			controller := strings.TrimPrefix(controllerLine(m).String(), "^Election controller: ")
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`(?m)^API mode:\s+` + m.name + `$`),
				regexp.MustCompile(`(?m)^Election controller:\s+` + controller),
				regexp.MustCompile(`(?m)^State:\s+optimal$`),
				regexp.MustCompile(`(?m)^\s+1\s+a\s+1\.35\.0\s+1\.36\.0\s+OldestEmulationVersion\s+\S+\s+<none>\s+holder,best$`),
				regexp.MustCompile(`(?m)^\s+2\s+b\s+1\.36\.0\s+1\.36\.0\s+OldestEmulationVersion\s+\S+\s+<none>\s+<none>$`),
			} {
				if !want.MatchString(out) {
					t.Errorf("describe does not match %s:\n%s", want, out)
				}
			}
			if out, _, _ := runAs(t, kc, ns, "describe", "app", "-o", "yaml"); !strings.HasPrefix(out, "apiVersion: kubectl.cle.dev/v1alpha1\n") || !strings.Contains(out, "\nkind: LeaseDescription\n") {
				t.Errorf("describe -o yaml:\n%s", out)
			}
		})

		t.Run("completion", func(t *testing.T) {
			out, stderr, code := runAs(t, kc, ns, "__complete", "status", "")
			if code != 0 || out != "app\nlabelled\n:4\n" {
				t.Errorf("__complete status '': exit %d, %q, %s", code, out, stderr)
			}
			if out, _, _ := runAs(t, kc, ns, "__complete", "describe", "la"); out != "labelled\n:4\n" {
				t.Errorf("__complete describe la: %q", out)
			}
		})

		t.Run("binary", func(t *testing.T) {
			plugin := func(args ...string) (string, string) {
				t.Helper()
				cmd := exec.Command(bin, append([]string{"--kubeconfig", kc, "-n", ns}, args...)...)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("kubectl-cle %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
				}
				return stdout.String(), stderr.String()
			}
			klogLine := regexp.MustCompile(`(?m)^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] `)
			out, stderr := plugin("-v=4", "status")
			if !strings.Contains(out, "LEASE ") {
				t.Errorf("-v=4 status printed no table:\n%s", out)
			}
			for _, want := range []string{`"Using API mode" mode="` + m.name + `"`, `"Listed Leases and LeaseCandidates"`} {
				if !strings.Contains(stderr, want) || !klogLine.MatchString(stderr) {
					t.Errorf("-v=4 status does not log %s in klog's format:\n%s", want, stderr)
				}
			}
			if m.name == string(access.ModeNative) && !strings.Contains(stderr, "Using native mode: the server serves LeaseCandidates and not the portable CRD") {
				t.Errorf("-v=4 does not say why native mode was chosen without the dry run:\n%s", stderr)
			}
			if got := warningLine.FindAllString(stderr, -1); len(got) != deprecationWarnings(t, m) {
				t.Errorf("LeaseCandidate warnings %q, want %d", got, deprecationWarnings(t, m))
			}
			if regexp.MustCompile(`(?m)^W\d{4} .*LeaseCandidate`).MatchString(stderr) {
				t.Errorf("a server warning was logged by klog:\n%s", stderr)
			}
			if _, stderr := plugin("status"); klogLine.MatchString(stderr) {
				t.Errorf("status without -v logs:\n%s", stderr)
			}
			if out, _ := plugin("version"); !strings.HasPrefix(out, "kubectl-cle "+testVersion+" (") {
				t.Errorf("version: %q, want the version stamped with -ldflags", out)
			}
		})

		t.Run("namespace viewer", func(t *testing.T) {
			// view and cle-viewer in this namespace only: kube-system's
			// lock cannot be read, which is no reason to fail.
			bind(t, m, nsViewerUser, "view", ns)
			nkc := kubeconfigOf(t, m, nsViewerUser)
			var out, stderr string
			poll(t, "status as the namespace viewer", 30*time.Second, func() (bool, string) {
				var code int
				out, stderr, code = runAs(t, nkc, ns, "status")
				return code == 0, out + stderr
			})
			want := regexp.QuoteMeta("Election controller: unknown (cannot read Lease kube-system/"+map[string]string{"native": access.NativeControllerLock, "portable": access.PortableControllerLock}[m.name]+": forbidden)") + "\nLEASE "
			if !regexp.MustCompile(`^` + want).MatchString(out) {
				t.Errorf("status as the namespace viewer:\n%s\nwant it to begin with %s", out, want)
			}
			if _, stderr, code := runAs(t, nkc, ns, "status", "-A"); code == 0 || !strings.Contains(stderr, "cannot list resource") {
				t.Errorf("status -A as the namespace viewer: exit %d, %s", code, stderr)
			}
		})

		if m.name == string(access.ModePortable) {
			t.Run("cle acting", func(t *testing.T) {
				lock := &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: access.PortableControllerLock},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cle-test"), LeaseDurationSeconds: ptr.To[int32](3600),
						AcquireTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-5 * time.Minute))), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
				}
				leases := m.server.Client().CoordinationV1().Leases("kube-system")
				if _, err := leases.Create(context.Background(), lock, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = leases.Delete(context.Background(), lock.Name, metav1.DeleteOptions{}) })
				out, _, _ := runAs(t, kc, ns, "status")
				if first, _, _ := strings.Cut(out, "\n"); !regexp.MustCompile(`^Election controller: cle \(holder cle-test\), acting for (5|6)m \(kube-system/cle-controller\)$`).MatchString(first) {
					t.Errorf("status with cle-controller's lock held: %q", first)
				}
			})
		}

		// Last: it changes the election.
		t.Run("watch json", func(t *testing.T) {
			var out framework.SyncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int)
			go func() {
				_, code := plugin(ctx, t, kc, ns, &out, "watch", "app", "-o", "json")
				done <- code
			}()
			t.Cleanup(func() { cancel(); <-done })
			changes := func() []kubectlcle.LeaseChange {
				var all []kubectlcle.LeaseChange
				dec := json.NewDecoder(strings.NewReader(out.String()))
				for {
					var c kubectlcle.LeaseChange
					if err := dec.Decode(&c); err != nil {
						if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
							t.Errorf("watch -o json: %v\n%s", err, out.String())
						}
						return all
					}
					all = append(all, c)
				}
			}
			poll(t, "the watch's first object", 30*time.Second, func() (bool, string) {
				return len(changes()) == 1, out.String()
			})
			if c := changes()[0]; c.Kind != kubectlcle.KindLeaseChange || c.APIVersion != "kubectl.cle.dev/v1alpha1" || c.Lease.Holder != "a" || c.Lease.Name != "app" {
				t.Errorf("first object: %+v", c)
			}
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				lease, err := acc.Leases(ns).Get(context.Background(), "app")
				if err != nil {
					return err
				}
				lease.Spec.HolderIdentity = ptr.To("b")
				lease.Spec.LeaseTransitions = ptr.To[int32](3)
				_, err = acc.Leases(ns).Update(context.Background(), lease)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			poll(t, "the watch's object for the new holder", 30*time.Second, func() (bool, string) {
				all := changes()
				return len(all) == 2 && slices.Equal(all[1].Changes, []string{"holder a -> b (term 3)"}) && all[1].Lease.Holder == "b" &&
					all[1].Lease.State == kubectlcle.StatePreempting, out.String()
			})
		})
	})
}

// TestNodeLeases: -A leaves out kube-node-lease, where every node's
// heartbeat Lease is, unless asked for.
func TestNodeLeases(t *testing.T) {
	forEachMode(t, func(t *testing.T, m apiMode) {
		ctx := context.Background()
		ns := m.server.CreateNamespace(t)
		acc, err := m.server.Access(ctx, m.name)
		if err != nil {
			t.Fatal(err)
		}
		kc := kubeconfig(t, m)
		nodeLease := "cle-test-" + m.name
		for _, key := range []struct{ ns, name string }{{"kube-node-lease", nodeLease}, {ns, "marker"}} {
			if _, err := acc.Leases(key.ns).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: key.name},
				Spec:       coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.OldestEmulationVersion)},
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = acc.Leases(key.ns).Delete(ctx, key.name, nil) })
		}
		if _, err := acc.LeaseCandidates("kube-node-lease").Create(ctx, &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Name: nodeLease},
			Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: nodeLease, BinaryVersion: "1.36.0", EmulationVersion: "1.36.0",
				Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = acc.LeaseCandidates("kube-node-lease").Delete(ctx, nodeLease, nil) })

		listed := func(args ...string) (node, marker bool) {
			t.Helper()
			for _, r := range statusOf(t, kc, ns, args...) {
				node = node || (r.Namespace == "kube-node-lease" && r.Name == nodeLease && r.Candidates == 1)
				marker = marker || (r.Namespace == ns && r.Name == "marker")
			}
			return node, marker
		}
		if node, marker := listed("-A"); node || !marker {
			t.Errorf("status -A: kube-node-lease listed %v, %s/marker listed %v; want false, true", node, ns, marker)
		}
		if node, marker := listed("-A", "--include-node-leases"); !node || !marker {
			t.Errorf("status -A --include-node-leases: kube-node-lease listed %v, %s/marker listed %v; want both", node, ns, marker)
		}
		if rows := statusOf(t, kc, "kube-node-lease"); !slices.ContainsFunc(rows, func(r kubectlcle.LeaseStatus) bool { return r.Name == nodeLease }) {
			t.Errorf("status -n kube-node-lease does not list %s: %+v", nodeLease, rows)
		}

		// watch -A prints every Lease it lists first, sorted: kube-node-lease
		// comes before the marker's namespace.
		for _, include := range []bool{false, true} {
			args := []string{"watch", "-A", "-o", "name"}
			if include {
				args = append(args, "--include-node-leases")
			}
			var out framework.SyncBuffer
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan int)
			go func() {
				_, code := plugin(wctx, t, kc, ns, &out, args...)
				done <- code
			}()
			poll(t, "watch lists the marker", 30*time.Second, func() (bool, string) {
				return strings.Contains(out.String(), "lease.coordination.k8s.io/marker\n"), out.String()
			})
			cancel()
			<-done
			if got := strings.Contains(out.String(), "lease.coordination.k8s.io/"+nodeLease+"\n"); got != include {
				t.Errorf("%s: lists %s: %v, want %v:\n%s", strings.Join(args, " "), nodeLease, got, include, out.String())
			}
		}
	})
}

// TestForbiddenIsClear: a user with no rights at all gets the server's
// Forbidden and what grants the rights, instead of a command that waits.
func TestForbiddenIsClear(t *testing.T) {
	m := modes[1]
	ns := m.server.CreateNamespace(t)
	kc := kubeconfigOf(t, m, nsViewerUser)
	_, stderr, code := runAs(t, kc, ns, "describe", "app")
	if code == 0 || !strings.Contains(stderr, "is forbidden") || !strings.Contains(stderr, "cle-viewer") {
		t.Errorf("describe without rights: exit %d, %s", code, stderr)
	}
}
