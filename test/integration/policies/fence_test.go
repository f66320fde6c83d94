package policies

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/fence"
	"github.com/cle-dev/cle/test/integration/framework"
)

// fencedRuns is how many times TestFencedWrites hands the Lease over and
// back per API mode.
const fencedRuns = 5

// TestFencedWrites: with the policy pkg/fence builds for an election in
// force, kube-apiserver admits the ConfigMap writes of the replicas'
// ServiceAccount only from the Pod whose process holds the Lease: the other
// replica's Pod, a token of the ServiceAccount bound to no Pod, and the
// previous holder's Pod from the moment the Lease names the next holder are
// refused, while the candidates' own writes (Lease, LeaseCandidate), made
// with the same ServiceAccount, go through. It measures how long after the
// Lease names a new holder the old holder's Pod is refused, and what the
// policy adds to a write; with WarnOnly the refused writes go through with a
// warning.
func TestFencedWrites(t *testing.T) {
	forEachMode(t, testFencedWrites)
}

func testFencedWrites(t *testing.T, m *apiMode) {
	ctx := context.Background()
	admin := m.server.Client()
	ns := m.server.CreateNamespace(t)
	const sa, lease = "worker", "work"
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":" + sa
	if err := grant(ctx, m, ns, "worker", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io", "cle.dev"}, Resources: []string{"leasecandidates"}, Verbs: []string{"create", "get", "list", "watch", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "update"}},
	}, user); err != nil {
		t.Fatal(err)
	}
	// Two replicas' Pods (never scheduled: only their tokens are used) and
	// tokens bound to each, and one bound to no Pod.
	pods := map[string]*kubernetes.Clientset{}
	var podConfigs = map[string]*rest.Config{}
	for _, name := range []string{"replica-a", "replica-b"} {
		pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		podConfigs[name] = tokenConfig(t, m, ns, sa, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
		pods[name] = kubernetes.NewForConfigOrDie(podConfigs[name])
	}
	unbound := kubernetes.NewForConfigOrDie(tokenConfig(t, m, ns, sa, nil))

	m.server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name})
	start := func(id, pod, emulation string) func() {
		return runPodCandidate(t, m, podConfigs[pod], ns, lease, id, pod, emulation)
	}
	stopA := start("a", "replica-a", "1.35.0")
	start("b", "replica-b", "1.36.0")
	waitStamped(t, admin, ns, lease, "replica-a")

	// The write each replica's leader work makes, timed.
	write := func(cs kubernetes.Interface, name string) (time.Duration, error) {
		begin := time.Now()
		err := putConfigMap(ctx, cs, ns, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"at": begin.String()}})
		return time.Since(begin), err
	}
	unfenced := latencies(t, 200, func() (time.Duration, error) { return write(pods["replica-a"], "work") })
	// Without the policy, any replica's write lands.
	if _, err := write(pods["replica-b"], "work"); err != nil {
		t.Fatalf("before the fence, the replica that does not lead: %v", err)
	}

	applyFence(t, admin, fence.Election{
		Namespace: ns, Lease: lease, ServiceAccount: sa, Namespaces: []string{ns},
		Rules: configMaps("create", "update", "patch", "delete"),
	})
	// In force once the other replica's write is refused.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := write(pods["replica-b"], "work")
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatalf("the fence never refused the replica that does not lead: %v", err)
	}

	refused := func(cs kubernetes.Interface, what, why string) {
		t.Helper()
		_, err := write(cs, "work")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), why) {
			t.Errorf("a write %s: %v, want refused saying %q", what, err, why)
		}
	}
	if _, err := write(pods["replica-a"], "work"); err != nil {
		t.Errorf("the holder's Pod's write: %v", err)
	}
	refused(pods["replica-b"], "from the Pod that does not lead", "is not the holder's Pod "+ns+"/replica-a")
	refused(unbound, "with a token bound to no Pod", "bound to no Pod")
	if _, err := write(admin, "work"); err != nil {
		t.Errorf("a write of another user: %v", err)
	}
	fenced := latencies(t, 200, func() (time.Duration, error) { return write(pods["replica-a"], "work") })
	t.Logf("%s: a fenced write takes %s at the median (p99 %s), the same write unfenced %s (p99 %s)",
		m.name, fenced[len(fenced)/2], fenced[len(fenced)*99/100], unfenced[len(unfenced)/2], unfenced[len(unfenced)*99/100])

	// Handovers both ways, each timed from the Lease naming the next holder
	// to the old holder's Pod being refused: a stops and hands over to b,
	// then a starts again and b, preempted, hands back.
	var windows, admitted []time.Duration
	handover := func(i int, cause func(), from, to, toID string) {
		t.Helper()
		named := watchHolder(t, admin, ns, lease, toID)
		cause()
		var at time.Time
		select {
		case at = <-named:
		case <-time.After(time.Minute):
			t.Fatalf("handover %d: the Lease never named %s", i, toID)
		}
		var refusedAt time.Time
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, err := write(pods[from], "work")
			refusedAt = time.Now()
			return apierrors.IsForbidden(err), nil
		}); err != nil {
			t.Fatalf("handover %d: the old holder's Pod %s was never refused: %v", i, from, err)
		}
		windows = append(windows, max(refusedAt.Sub(at), 0))
		// The new holder's Pod is admitted once its first renewal has
		// stamped the Lease and kube-apiserver's admission has seen it.
		waitStamped(t, admin, ns, lease, to)
		stamped := time.Now()
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			_, err := write(pods[to], "work")
			return err == nil, nil
		}); err != nil {
			t.Errorf("handover %d: the new holder's Pod %s is not admitted: %v", i, to, err)
		}
		admitted = append(admitted, time.Since(stamped))
	}
	for i := range fencedRuns {
		handover(2*i, func() { go stopA() }, "replica-a", "replica-b", "b")
		handover(2*i+1, func() { stopA = start("a", "replica-a", "1.35.0") }, "replica-b", "replica-a", "a")
	}
	slices.Sort(windows)
	slices.Sort(admitted)
	t.Logf("%s: over %d handovers, the old holder's Pod refused %s after the Lease named the next holder at the median, %s at most; the new holder's Pod admitted %s after the test read its stamp at the median, %s at most",
		m.name, len(windows), windows[len(windows)/2], windows[len(windows)-1], admitted[len(admitted)/2], admitted[len(admitted)-1])

	// The emergency override: the same writes go through, with a warning.
	applyFence(t, admin, fence.Election{
		Namespace: ns, Lease: lease, ServiceAccount: sa, Namespaces: []string{ns}, WarnOnly: true,
		Rules: configMaps("create", "update", "patch", "delete"),
	})
	notHolder := pods["replica-b"]
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := write(notHolder, "work")
		return err == nil, nil
	}); err != nil {
		t.Errorf("with WarnOnly the replica that does not lead is still refused: %v", err)
	}
}

// tokenConfig is a client config of the ServiceAccount with a token from
// the TokenRequest API, bound to the object (nil: to none).
func tokenConfig(t *testing.T, m *apiMode, ns, sa string, bound *authenticationv1.BoundObjectReference) *rest.Config {
	t.Helper()
	tr, err := m.server.Client().CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600), BoundObjectRef: bound},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", ns, sa, err)
	}
	cfg := rest.AnonymousClientConfig(m.server.Config())
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// runPodCandidate runs a library candidate with the given client config,
// as the process of a container of Pod ns/pod (its proof of death stamps
// its renewals with that Pod), until the test ends or stop is called.
func runPodCandidate(t *testing.T, m *apiMode, cfg *rest.Config, ns, lease, id, pod, emulation string) func() {
	t.Helper()
	// The termination message file, as the kubelet creates it.
	file := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return framework.RunCandidate(t, candidate.Config{
		RestConfig: cfg, APIMode: m.name, Namespace: ns, LeaseName: lease, Identity: id,
		BinaryVersion: "1.36.0", EmulationVersion: emulation,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		ProofOfDeath: &candidate.ProofOfDeath{
			TerminationMessagePath: file, Pod: ns + "/" + pod, Container: "app",
		},
	})
}

// waitStamped waits until the Lease's holder has renewed it from Pod ns/pod.
func waitStamped(t *testing.T, admin kubernetes.Interface, ns, lease, pod string) {
	t.Helper()
	var last *coordinationv1.Lease
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := admin.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = l
		f := strings.Fields(l.Annotations["cle.dev/holder-instance"])
		return len(f) == 5 && f[2] == ns+"/"+pod && f[4] == ptr.Deref(l.Spec.HolderIdentity, ""), nil
	}); err != nil {
		t.Fatalf("Lease %s/%s never stamped by Pod %s (last: %v): %v", ns, lease, pod, last, err)
	}
}

// waitCandidate waits until candidate id has registered.
func waitCandidate(t *testing.T, m *apiMode, ns, id string) {
	t.Helper()
	acc := accessAs(t, m, framework.AdminUser)
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		lc, err := acc.LeaseCandidates(ns).Get(ctx, id)
		return err == nil && lc.Spec.RenewTime != nil, nil
	}); err != nil {
		t.Fatalf("candidate %s never registered: %v", id, err)
	}
}

// watchHolder reports when the Lease first names holder, from a watch
// started now.
func watchHolder(t *testing.T, admin kubernetes.Interface, ns, lease, holder string) <-chan time.Time {
	t.Helper()
	w, err := admin.CoordinationV1().Leases(ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", lease).String()})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan time.Time, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Deleted && ptr.Deref(l.Spec.HolderIdentity, "") == holder {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}

// applyFence creates or replaces the policy and binding pkg/fence builds for
// e; they are deleted when the test ends.
func applyFence(t *testing.T, admin kubernetes.Interface, e fence.Election) {
	t.Helper()
	policy, binding, err := fence.Objects(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	policies, bindings := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies(), admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if cur, err := policies.Get(ctx, policy.Name, metav1.GetOptions{}); err == nil {
		policy.ResourceVersion = cur.ResourceVersion
		_, err = policies.Update(ctx, policy, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if _, err := policies.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if cur, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{}); err == nil {
		binding.ResourceVersion = cur.ResourceVersion
		_, err = bindings.Update(ctx, binding, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bindings.Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = policies.Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
}

// configMaps is a fence's rule for ConfigMap writes of the verbs.
func configMaps(verbs ...string) []fence.Rule {
	return []fence.Rule{{Group: "", Resource: "configmaps", Verbs: verbs}}
}

// putConfigMap writes cm as leader work does: an update, or a create when
// it does not exist yet.
func putConfigMap(ctx context.Context, cs kubernetes.Interface, ns string, cm *corev1.ConfigMap) error {
	_, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	}
	return err
}

// latencies makes n calls of f and returns how long each took, sorted.
func latencies(t *testing.T, n int, f func() (time.Duration, error)) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		d, err := f()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// TestFencedByToken: with the policy of an Election that is ByToken in
// force, an update stamped (fence.Stamp) with a lower fencing token than the
// object carries is refused, whoever makes it: the write of a leader that
// was preempted, after its successor wrote. No Pod or proof of death takes
// part.
func TestFencedByToken(t *testing.T) {
	forEachMode(t, testFencedByToken)
}

func testFencedByToken(t *testing.T, m *apiMode) {
	ctx := context.Background()
	admin := m.server.Client()
	ns := m.server.CreateNamespace(t)
	const lease = "work"
	write := func(name string, token int32, stamped bool) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"token": fmt.Sprint(token)}}
		if stamped {
			fence.Stamp(cm, token)
		}
		return putConfigMap(ctx, admin, ns, cm)
	}
	// Without the policy, a lower token lands.
	if err := write("probe", 2, true); err != nil {
		t.Fatal(err)
	}
	if err := write("probe", 1, true); err != nil {
		t.Fatalf("before the fence: %v", err)
	}
	applyFence(t, admin, fence.Election{
		Namespace: ns, Lease: lease, ByToken: true, Namespaces: []string{ns},
		Rules: configMaps("update", "patch"),
	})
	// In force once a lower token than the object's is refused.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if err := write("probe", 3, true); err != nil {
			return false, err
		}
		return write("probe", 1, true) != nil, nil
	}); err != nil {
		t.Fatalf("the fence never refused a lower token: %v", err)
	}

	m.server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name})
	tokenOf := func(holder string) int32 {
		t.Helper()
		return ptr.Deref(waitTerm(t, admin, ns, lease, holder).Spec.LeaseTransitions, 0)
	}
	runPodCandidate(t, m, m.server.Config(), ns, lease, "a", "pod-a", "1.35.0")
	first := tokenOf("a")
	if err := write("work", first, true); err != nil {
		t.Fatalf("the leader's write with token %d: %v", first, err)
	}
	// A better candidate preempts a; its leader work writes with its token.
	runPodCandidate(t, m, m.server.Config(), ns, lease, "b", "pod-b", "1.34.0")
	second := tokenOf("b")
	if second <= first {
		t.Fatalf("b's token %d is not above a's %d", second, first)
	}
	if err := write("work", second, true); err != nil {
		t.Fatalf("the new leader's write with token %d: %v", second, err)
	}
	// a's late write, with its term's token, and a write that carries none.
	err := write("work", first, true)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), fmt.Sprintf("carries fencing token %d and the object already has %d", first, second)) {
		t.Errorf("the deposed leader's write with token %d: %v, want refused", first, err)
	}
	if err := write("work", 0, false); err == nil || !strings.Contains(err.Error(), "carries fencing token none") {
		t.Errorf("a write without a token: %v, want refused", err)
	}
}

// waitTerm waits until holder has begun its term of the Lease, and returns
// the Lease then.
func waitTerm(t *testing.T, admin kubernetes.Interface, ns, lease, holder string) *coordinationv1.Lease {
	t.Helper()
	var got *coordinationv1.Lease
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := admin.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = l
		return framework.TermBegun(l, holder), nil
	}); err != nil {
		t.Fatalf("Lease %s/%s never renewed by %s: %v", ns, lease, holder, err)
	}
	return got
}

// TestFenceWithoutItsLease: while the fenced election's Lease does not exist
// the policy does not apply, to anyone: kube-apiserver looks the parameter up
// before it evaluates the match condition on the user, so refusing there
// would refuse every user's writes of the fenced resources (kube-controller-
// manager's kube-root-ca.crt ConfigMap of a new namespace among them). Once
// the Lease exists with no holder, the replicas' writes are refused and
// other users' still go through.
func TestFenceWithoutItsLease(t *testing.T) {
	forEachMode(t, func(t *testing.T, m *apiMode) {
		ctx := context.Background()
		admin := m.server.Client()
		ns := m.server.CreateNamespace(t)
		const sa, lease = "worker", "not-yet"
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := grant(ctx, m, ns, "worker", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "update"}},
		}, "system:serviceaccount:"+ns+":"+sa); err != nil {
			t.Fatal(err)
		}
		replica := kubernetes.NewForConfigOrDie(tokenConfig(t, m, ns, sa, nil))
		applyFence(t, admin, fence.Election{
			Namespace: ns, Lease: lease, ServiceAccount: sa,
			Rules: configMaps("create", "update"),
		})
		// In force once the Lease exists without a holder: the replica's
		// write is refused, another user's is not.
		if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		write := func(cs kubernetes.Interface, name string) error {
			return putConfigMap(ctx, cs, ns, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return apierrors.IsForbidden(write(replica, "replica")), nil
		}); err != nil {
			t.Fatalf("the fence never refused the replica while its Lease has no holder: %v", err)
		}
		if err := write(admin, "admin"); err != nil {
			t.Errorf("another user's write while the Lease has no holder: %v", err)
		}
		// Without the Lease, nobody's write is refused.
		if err := admin.CoordinationV1().Leases(ns).Delete(ctx, lease, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return write(replica, "replica") == nil, nil
		}); err != nil {
			t.Fatalf("with its Lease gone the fence still refuses the replica: %v", err)
		}
		if err := write(admin, "admin"); err != nil {
			t.Errorf("another user's write with the Lease gone: %v", err)
		}
	})
}
