// Package policies applies the admission policies of manifests/policies to a
// real kube-apiserver, in both API modes, and checks that they stop a
// candidate RBAC lets in from taking leadership, while the controller and
// legitimate candidates keep electing, pinging and handing over.
package policies

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/test/integration/framework"
)

// The identities of the tests. Each is a user the server authenticates by
// token; what each may do comes from RBAC, as in a cluster.
const (
	// controllerUser is the static Pod's user, bound to the shipped
	// ClusterRole by manifests/static-pod/rbac: the election controller.
	controllerUser = "cle-controller"
	// appUser and otherAppUser run legitimate candidates: RBAC lets them
	// write LeaseCandidates and update the Leases of the test (as the Role of
	// manifests/examples does).
	appUser      = "app"
	otherAppUser = "other-app"
	// malloryUser may create and update LeaseCandidates in the test
	// namespaces, and nothing else.
	malloryUser = "mallory"
	// proberUser may create Leases and LeaseCandidates in kube-system, for
	// the dry-run writes that tell whether the policies are in force.
	proberUser = "prober"
)

// The names of the policies and bindings of manifests/policies.
var policyNames = []string{"leasecandidates.cle.dev", "coordinated-leases.cle.dev", "member-lease-deletes.cle.dev"}

// probeLease is a Lease in kube-system, not a member Lease, that the third
// policy's probe dry-runs a delete of as the controller.
const probeLease = "cle-policies-probe-lease"

type apiMode struct {
	name   string
	server *framework.Server
	// once prepares the server's cluster-wide RBAC; err is its outcome.
	once sync.Once
	err  error
}

var modes []*apiMode

func TestMain(m *testing.M) {
	var users []framework.User
	for _, name := range []string{controllerUser, appUser, otherAppUser, malloryUser, proberUser} {
		users = append(users, framework.User{Name: name})
	}
	framework.MainServers(m, []framework.Options{
		{CoordinatedLeaderElection: true, IdleBuiltinController: true, Users: users},
		{PortableCRD: true, Users: users},
	}, func(s []*framework.Server) {
		modes = []*apiMode{{name: string(access.ModeNative), server: s[0]}, {name: string(access.ModePortable), server: s[1]}}
	})
}

func forEachMode(t *testing.T, f func(t *testing.T, m *apiMode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			prepare(t, m)
			f(t, m)
		})
	}
}

// prepare grants the cluster-wide rights of the tests once per server: the
// controller's, by applying manifests/static-pod/rbac as shipped, and in
// kube-system the creates of the API mode probe (candidates in native mode)
// and of the policy probes. It binds the fences' keeper first, as the
// policies bundle does (fence.Keeper): the fence tests remove their fences
// as they end, which without it stops kube-apiserver's watch of Leases as
// parameters for good on the releases that have that defect, and every
// fence bound after it refuses nothing.
func prepare(t *testing.T, m *apiMode) {
	t.Helper()
	m.once.Do(func() {
		ctx := context.Background()
		keeper, err := os.ReadFile(framework.RepoPath("manifests/policies/lease-params.yaml"))
		if err != nil {
			m.err = err
			return
		}
		if m.err = applyManifest(m, "manifests/policies/lease-params.yaml", keeper); m.err != nil {
			return
		}
		if m.err = applyKustomization(m, "static-pod/rbac"); m.err != nil {
			return
		}
		if _, err := m.server.Client().CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: probeLease},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			m.err = err
			return
		}
		m.err = grant(ctx, m, "kube-system", "cle-policies-test-probes", []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io", "cle.dev"}, Resources: []string{"leasecandidates"}, Verbs: []string{"create"}},
		}, appUser, otherAppUser, proberUser)
	})
	if m.err != nil {
		t.Fatalf("prepare the %s server: %v", m.name, m.err)
	}
}

// grantCandidates gives, in ns, appUser and otherAppUser the rights of a
// candidate of the given Leases, and malloryUser create and update on
// LeaseCandidates only.
func grantCandidates(t *testing.T, m *apiMode, ns string, leases ...string) {
	t.Helper()
	ctx := context.Background()
	candidates := []string{"coordination.k8s.io", "cle.dev"}
	if err := grant(ctx, m, ns, "candidate", []rbacv1.PolicyRule{
		{APIGroups: candidates, Resources: []string{"leasecandidates"}, Verbs: []string{"create", "get", "list", "watch", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: leases, Verbs: []string{"get", "list", "watch", "update"}},
	}, appUser, otherAppUser); err != nil {
		t.Fatal(err)
	}
	if err := grant(ctx, m, ns, "candidates-only", []rbacv1.PolicyRule{
		{APIGroups: candidates, Resources: []string{"leasecandidates"}, Verbs: []string{"create", "get", "list", "watch", "update"}},
	}, malloryUser); err != nil {
		t.Fatal(err)
	}
}

// grant creates a Role with rules in ns and binds it to users, then waits
// until the authorizer allows the first rule to each of them.
func grant(ctx context.Context, m *apiMode, ns, name string, rules []rbacv1.PolicyRule, users ...string) error {
	rbac := m.server.Client().RbacV1()
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Role %s/%s: %w", ns, name, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}
	for _, u := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create RoleBinding %s/%s: %w", ns, name, err)
	}
	first := rules[0]
	for _, u := range users {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Group: first.APIGroups[0], Resource: first.Resources[0], Verb: first.Verbs[0],
			},
		}}
		if len(first.ResourceNames) > 0 {
			review.Spec.ResourceAttributes.Name = first.ResourceNames[0]
		}
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := m.server.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			return err == nil && got.Status.Allowed, nil
		}); err != nil {
			return fmt.Errorf("Role %s/%s not in force for %s: %w", ns, name, u, err)
		}
	}
	return nil
}

// kustomize renders a directory of manifests/ with kubectl.
func kustomize(dir string) ([]byte, error) {
	kubectl, err := framework.Binary("kubectl")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(kubectl, "kustomize", framework.RepoPath(filepath.Join("manifests", dir)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize manifests/%s: %w\n%s", dir, err, stderr.String())
	}
	return out, nil
}

// applyKustomization renders a directory of manifests/ and server-side
// applies it as the admin, as `kubectl apply -k` would.
func applyKustomization(m *apiMode, dir string) error {
	manifest, err := kustomize(dir)
	if err != nil {
		return err
	}
	return applyManifest(m, "manifests/"+dir, manifest)
}

// applyManifest applies the objects of manifest (named what) as
// applyKustomization does.
func applyManifest(m *apiMode, what string, manifest []byte) error {
	kubectl, err := framework.Binary("kubectl")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(m.server.Dir(), "kubeconfig-policies-test")
	if err := m.server.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	cmd := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "--field-manager=cle-policies-test", "-f", "-")
	cmd.Stdin = bytes.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply %s: %w\n%s", what, err, out)
	}
	return nil
}

// enablePolicies applies manifests/policies and returns once they deny a
// probe write: a policy takes a moment to be in force after it is created.
func enablePolicies(t *testing.T, m *apiMode) {
	t.Helper()
	if err := applyKustomization(m, "policies"); err != nil {
		t.Fatal(err)
	}
	waitPolicies(t, m, true)
}

// disablePolicies deletes the policies and their bindings, if there, and
// returns once a probe write is allowed again.
func disablePolicies(t *testing.T, m *apiMode) {
	t.Helper()
	ctx := context.Background()
	admission := m.server.Client().AdmissionregistrationV1()
	for _, name := range policyNames {
		if err := admission.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := admission.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitPolicies(t, m, false)
}

// waitPolicies waits until every policy denies (enabled) or allows its
// probe: server-side dry runs, which admission sees but which store nothing,
// by a user that may neither elect nor update the Lease named, or, for the
// deletes, by the controller.
func waitPolicies(t *testing.T, m *apiMode, enabled bool) {
	t.Helper()
	cfg, err := m.server.UserConfig(proberUser)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	kube := framework.MustClient(cfg)
	ctrlCfg, err := m.server.UserConfig(controllerUser)
	if err != nil {
		t.Fatal(err)
	}
	asController := framework.MustClient(ctrlCfg)
	const probe = "cle-policies-probe"
	dryRun := []string{metav1.DryRunAll}
	probes := map[string]func(ctx context.Context) error{
		policyNames[0]: func(ctx context.Context) error {
			_, err := dyn.Resource(candidateResource(m)).Namespace("kube-system").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": candidateResource(m).GroupVersion().String(),
				"kind":       "LeaseCandidate",
				"metadata":   map[string]any{"name": probe},
				"spec": map[string]any{
					"leaseName": probe, "binaryVersion": "1.36.0", "emulationVersion": "1.36.0",
					"strategy": string(coordinationv1.OldestEmulationVersion),
				},
			}}, metav1.CreateOptions{DryRun: dryRun})
			return err
		},
		policyNames[1]: func(ctx context.Context) error {
			_, err := kube.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: probe, Annotations: map[string]string{access.StrategyAnnotation: string(coordinationv1.OldestEmulationVersion)}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(probe)},
			}, metav1.CreateOptions{DryRun: dryRun})
			return err
		},
		policyNames[2]: func(ctx context.Context) error {
			return asController.CoordinationV1().Leases("kube-system").Delete(ctx, probeLease, metav1.DeleteOptions{DryRun: dryRun})
		},
	}
	var last []string
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = nil
		for policy, write := range probes {
			err := write(ctx)
			switch {
			case err == nil && !enabled, enabled && isPolicyDenial(err, policy):
			default:
				last = append(last, fmt.Sprintf("%s: %v", policy, err))
			}
		}
		return len(last) == 0, nil
	})
	if err != nil {
		t.Fatalf("policies not %s after a minute: %s", map[bool]string{true: "in force", false: "gone"}[enabled], strings.Join(last, "; "))
	}
}

// isPolicyDenial reports an error that is the denial of a write by the
// ValidatingAdmissionPolicy policy (through its binding of the same name).
func isPolicyDenial(err error, policy string) bool {
	return apierrors.IsForbidden(err) &&
		strings.Contains(err.Error(), fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request", policy, policy))
}

// candidateResource is the LeaseCandidate resource of the mode.
func candidateResource(m *apiMode) schema.GroupVersionResource {
	if m.name == string(access.ModeNative) {
		return schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1beta1", Resource: "leasecandidates"}
	}
	return access.CandidateResource
}

// accessAs returns the mode's access layer with the credentials of user,
// without the detection requests (which need rights of their own).
func accessAs(t *testing.T, m *apiMode, user string) access.Interface {
	t.Helper()
	cfg, err := m.server.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := access.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.name == string(access.ModeNative) {
		return access.NewNative(clients.Kube)
	}
	acc, err := access.NewPortable(clients)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

// holderOf reads the Lease's holder ("" for none) as the admin.
func holderOf(ctx context.Context, acc access.Interface, ns, lease string) (string, error) {
	l, err := acc.Leases(ns).Get(ctx, lease)
	if err != nil {
		return "", err
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), nil
}

// waitHolder waits until the Lease names want as its holder.
func waitHolder(t *testing.T, acc access.Interface, ns, lease, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := holderOf(ctx, acc, ns, lease)
		switch {
		case ctx.Err() != nil:
			return false, nil // the deadline, not the answer: keep the last one
		case err != nil:
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("holder %q", got)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("Lease %s/%s: want holder %q, still %s", ns, lease, want, last)
	}
}

// checkHolderStays fails the test if the Lease names another holder than
// want at any time within d. Used only after the write that could have moved
// it was refused, to show that nothing else moves it either.
func checkHolderStays(t *testing.T, acc access.Interface, ns, lease, want string, d time.Duration) {
	t.Helper()
	var moved string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, d, true, func(ctx context.Context) (bool, error) {
		got, err := holderOf(ctx, acc, ns, lease)
		if err != nil {
			return false, err
		}
		moved = got
		return got != want, nil
	})
	if !wait.Interrupted(err) {
		t.Fatalf("Lease %s/%s: holder %q (want %q to stay): %v", ns, lease, moved, want, err)
	}
}
