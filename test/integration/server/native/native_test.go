// Package native checks the test environment in native mode: kube-apiserver
// with the CoordinatedLeaderElection gate on and its own election controller
// idled.
package native

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{
		CoordinatedLeaderElection: true,
		IdleBuiltinController:     true,
		Users:                     []framework.User{{Name: "alice", Groups: []string{"team-a"}}},
	}, func(s *framework.Server) { server = s })
}

func TestLeaseKeepsCoordinatedFields(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	leases := server.Client().CoordinationV1().Leases(ns)

	created, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "fields"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:  ptr.To("a"),
			Strategy:        ptr.To(coordinationv1.OldestEmulationVersion),
			PreferredHolder: ptr.To("b"),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Lease: %v", err)
	}
	if got := ptr.Deref(created.Spec.Strategy, ""); got != coordinationv1.OldestEmulationVersion {
		t.Errorf("created Lease strategy = %q, want %q", got, coordinationv1.OldestEmulationVersion)
	}
	if got := ptr.Deref(created.Spec.PreferredHolder, ""); got != "b" {
		t.Errorf("created Lease preferredHolder = %q, want b", got)
	}

	created.Spec.PreferredHolder = ptr.To("c")
	updated, err := leases.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update Lease: %v", err)
	}
	got, err := leases.Get(ctx, "fields", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease: %v", err)
	}
	if got.ResourceVersion != updated.ResourceVersion || ptr.Deref(got.Spec.PreferredHolder, "") != "c" || ptr.Deref(got.Spec.Strategy, "") != coordinationv1.OldestEmulationVersion {
		t.Errorf("stored Lease spec = %+v, want strategy %q and preferredHolder c", got.Spec, coordinationv1.OldestEmulationVersion)
	}
}

// TestUsersAreAuthorizedByRBAC checks that the token users are real
// identities under RBAC: denied until a RoleBinding grants them access.
func TestUsersAreAuthorizedByRBAC(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	cfg, err := server.UserConfig("alice")
	if err != nil {
		t.Fatal(err)
	}
	alice := framework.MustClient(cfg)
	if _, err := alice.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice lists Leases before any grant: err = %v, want Forbidden", err)
	}
	admin := server.Client()
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role: %v", err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a-reads-leases"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "lease-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: "rbac.authorization.k8s.io", Name: "team-a"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding: %v", err)
	}
	// RBAC reads bindings from an informer: poll until the grant is seen.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := alice.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("alice still cannot list Leases after the group grant: %v", err)
	}
	if _, err := alice.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice creates a Lease with only list rights: err = %v, want Forbidden", err)
	}
}

func TestLeaseCandidateCreateUpdateWatch(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	candidates := server.Client().CoordinationV1beta1().LeaseCandidates(ns)

	w, err := candidates.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch LeaseCandidates: %v", err)
	}
	defer w.Stop()

	lc, err := candidates.Create(ctx, &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: "c1"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        "lease",
			BinaryVersion:    "1.36.0",
			EmulationVersion: "1.35.0",
			Strategy:         coordinationv1.OldestEmulationVersion,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create LeaseCandidate: %v", err)
	}
	expectEvent(t, w, watch.Added, lc.Name)

	// The API stores MicroTime at microsecond precision.
	ping := metav1.NewMicroTime(time.Now().Add(time.Second).Truncate(time.Microsecond))
	lc.Spec.PingTime = &ping
	lc, err = candidates.Update(ctx, lc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update LeaseCandidate: %v", err)
	}
	got := expectEvent(t, w, watch.Modified, lc.Name)
	if got.Spec.PingTime == nil || !got.Spec.PingTime.Equal(&ping) {
		t.Errorf("watched pingTime = %v, want %v", got.Spec.PingTime, ping)
	}

	// The API validates versions: an emulation version above the binary
	// version is rejected.
	bad := lc.DeepCopy()
	bad.Spec.EmulationVersion = "1.37.0"
	if _, err := candidates.Update(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("update with emulationVersion > binaryVersion: err = %v, want Invalid", err)
	}

	if err := candidates.Delete(ctx, lc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete LeaseCandidate: %v", err)
	}
	expectEvent(t, w, watch.Deleted, lc.Name)
}

func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) *coordinationv1beta1.LeaseCandidate {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed while waiting for %s %s", typ, name)
			}
			lc, isLC := ev.Object.(*coordinationv1beta1.LeaseCandidate)
			if ev.Type == typ && isLC && lc.Name == name {
				return lc
			}
		case <-timeout:
			t.Fatalf("no %s event for %s within 30s", typ, name)
		}
	}
}

// TestBuiltinControllerIdle checks that the election controller built into
// kube-apiserver does nothing for a candidate it would otherwise ping at once
// and elect (see the builtin package for the same case with it running).
func TestBuiltinControllerIdle(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	client := server.Client()

	lease, err := client.CoordinationV1().Leases(framework.BuiltinControllerLeaseNamespace).Get(ctx, framework.BuiltinControllerLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the built-in controller's Lease: %v", err)
	}
	if got := ptr.Deref(lease.Spec.HolderIdentity, ""); got != framework.IdlerIdentity {
		t.Fatalf("built-in controller's Lease held by %q, want %q", got, framework.IdlerIdentity)
	}

	// A candidate whose renewTime is old: an active controller pings it on
	// its first look.
	_, err = client.CoordinationV1beta1().LeaseCandidates(ns).Create(ctx, &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: "c1"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        "idle",
			BinaryVersion:    "1.36.0",
			EmulationVersion: "1.36.0",
			Strategy:         coordinationv1.OldestEmulationVersion,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Minute))),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create LeaseCandidate: %v", err)
	}

	// Negative check over a window: the running built-in controller pings
	// such a candidate well within a second, so ten quiet seconds show it
	// is idle.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		lc, err := client.CoordinationV1beta1().LeaseCandidates(ns).Get(ctx, "c1", metav1.GetOptions{})
		if ctx.Err() != nil {
			return false, nil // the window is over: a request cut short by it is no finding
		}
		if err != nil {
			return false, err
		}
		if lc.Spec.PingTime != nil {
			t.Fatalf("idled built-in controller pinged the candidate at %v", lc.Spec.PingTime)
		}
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, "idle", metav1.GetOptions{}); !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Fatalf("idled built-in controller created the Lease (err %v)", err)
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Fatalf("watching for built-in controller writes: %v", err)
	}
}

// TestRestartAndPause checks that kube-apiserver can be restarted on the same
// etcd data and paused without losing objects.
func TestRestartAndPause(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	leases := server.Client().CoordinationV1().Leases(ns)
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Lease: %v", err)
	}

	pid := server.APIServerPID()
	if err := server.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	if server.APIServerPID() == pid {
		t.Fatalf("kube-apiserver pid unchanged (%d) after restart", pid)
	}
	if _, err := leases.Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("Lease lost across restart: %v", err)
	}

	if err := server.PauseAPIServer(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	short := server.Config()
	short.Timeout = time.Second
	paused := framework.MustClient(short)
	_, err := paused.CoordinationV1().Leases(ns).Get(ctx, "survivor", metav1.GetOptions{})
	if err == nil {
		t.Errorf("a paused kube-apiserver answered")
	}
	if err := server.ResumeAPIServer(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := paused.CoordinationV1().Leases(ns).Get(ctx, "survivor", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("kube-apiserver did not answer after resume: %v", err)
	}
}

// TestAutoDetectPicksNative: with the gate on, the dry-run probe keeps
// spec.strategy and auto mode chooses native.
func TestAutoDetectPicksNative(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clients, err := access.NewClients(server.Config())
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.Detect(ctx, clients, access.ModeAuto)
	if err != nil {
		t.Fatalf("Detect(auto): %v", err)
	}
	if acc.Mode() != access.ModeNative {
		t.Errorf("auto chose %s on a gate-on server, want native", acc.Mode())
	}
	// The probe is a dry run: it leaves no Lease behind.
	leases, err := server.Client().CoordinationV1().Leases(access.ProbeNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "cle-probe-") {
			t.Errorf("the probe left Lease %s behind", l.Name)
		}
	}
}
