package policies

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cle-dev/cle/pkg/fence"
	"github.com/cle-dev/cle/test/integration/framework"
)

// TestFencedLateWrites: the write of a deposed leader that reaches
// kube-apiserver after the Lease names the next holder is refused by the
// fence, however its term ended. The leader is a client-go LeaderElector on
// pkg/lock in a process of its own (examples/lock-elector) whose leader work
// writes a ConfigMap, one write at a time, with a client no write guard
// covers and requests not tied to its term, through a Gate. Its term ends
// with a write held in the gate, as a write is in flight or queued in the
// API server:
//   - pause: the process is frozen (SIGSTOP) and its Lease expires; it is
//     resumed after the held write was answered;
//   - kill: the process is killed (SIGKILL) and its Lease expires;
//   - preemption: a candidate of an older version registers, and the
//     controller has the elector hand over.
//
// Once the Lease names the next holder, stamped from its Pod, the gate
// opens. Without the fence the held write lands (the ConfigMap's sequence
// number moves on); with it, kube-apiserver answers it and the ConfigMap
// keeps the last write of the term.
func TestFencedLateWrites(t *testing.T) {
	bin := framework.BuildCommand(t, "github.com/cle-dev/cle/examples/lock-elector")
	forEachMode(t, func(t *testing.T, m *apiMode) {
		for _, cause := range []string{"pause", "kill", "preemption"} {
			for _, fenced := range []bool{false, true} {
				name := cause + "/unfenced"
				if fenced {
					name = cause + "/fenced"
				}
				t.Run(name, func(t *testing.T) {
					// Each its own namespace, controller and processes;
					// they mostly wait for a Lease to expire.
					t.Parallel()
					testLateWrite(t, m, bin, cause, fenced)
				})
			}
		}
	})
}

func testLateWrite(t *testing.T, m *apiMode, bin, cause string, fenced bool) {
	ctx := context.Background()
	admin := m.server.Client()
	ns := m.server.CreateNamespace(t)
	const sa, lease, work = "worker", "work", "work"
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := grant(ctx, m, ns, "worker", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "update"}},
		{APIGroups: []string{"coordination.k8s.io", "cle.dev"}, Resources: []string{"leasecandidates"}, Verbs: []string{"create", "get", "list", "watch", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "update"}},
	}, "system:serviceaccount:"+ns+":"+sa); err != nil {
		t.Fatal(err)
	}
	podConfig := func(name string) *rest.Config {
		pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tokenConfig(t, m, ns, sa, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	}
	configA, configB := podConfig("replica-a"), podConfig("replica-b")
	m.server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name})

	// a: the elector, its ConfigMap writes through the gate.
	dir := t.TempDir()
	gate := framework.StartGate(t, strings.TrimPrefix(m.server.URL(), "https://"))
	kubeconfig, workKubeconfig, messageFile := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "work"), filepath.Join(dir, "termination-log")
	if err := m.server.WriteTokenKubeconfig(kubeconfig, m.server.URL(), configA.BearerToken); err != nil {
		t.Fatal(err)
	}
	if err := m.server.WriteTokenKubeconfig(workKubeconfig, "https://"+gate.Addr(), configA.BearerToken); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(messageFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The first to lead: the older version, but in the preemption case,
	// where b comes later with an older one still.
	aVersion, bVersion := "1.35.0", "1.36.0"
	if cause == "preemption" {
		aVersion, bVersion = "1.36.0", "1.35.0"
	}
	a := framework.StartChild(t, "a", bin, "--kubeconfig", kubeconfig, "--api-mode", m.name,
		"--namespace", ns, "--lease", lease, "--identity", "a", "--binary-version", "1.36.0", "--emulation-version", aVersion,
		"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms",
		"--termination-message-path", messageFile, "--pod", ns+"/replica-a", "--container", "app",
		"--configmap", work, "--configmap-kubeconfig", workKubeconfig)
	waitStamped(t, admin, ns, lease, "replica-a")
	if cause != "preemption" {
		runPodCandidate(t, m, configB, ns, lease, "b", "replica-b", bVersion)
		waitCandidate(t, m, ns, "b")
	}

	probeB := kubernetes.NewForConfigOrDie(configB)
	probeA := kubernetes.NewForConfigOrDie(configA)
	probe := func(cs kubernetes.Interface) error {
		return putConfigMap(ctx, cs, ns, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}})
	}
	if fenced {
		applyFence(t, admin, fence.Election{
			Namespace: ns, Lease: lease, ServiceAccount: sa, Namespaces: []string{ns},
			Rules: configMaps("create", "update", "patch", "delete"),
		})
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return apierrors.IsForbidden(probe(probeB)), nil
		}); err != nil {
			t.Fatalf("the fence never refused the Pod that does not lead: %v", err)
		}
	}

	// a's leader work writes; hold its next write.
	seq := func() int {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, work, metav1.GetOptions{})
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(cm.Data["seq"])
		return n
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return seq() >= 3, nil
	}); err != nil {
		t.Fatalf("a's leader work never wrote the ConfigMap:\n%s", a.Logs())
	}
	gate.Hold()
	// A write is held once the gate keeps back more than HTTP/2's control
	// frames would (a write is some 150 bytes, a control frame under 40);
	// a write is sent only after the last was answered, so the ConfigMap
	// now has the last write that landed.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return gate.Held() >= 120, nil
	}); err != nil {
		t.Fatalf("a sent no write to hold:\n%s", a.Logs())
	}
	landed, held := seq(), gate.Held()

	switch cause {
	case "pause":
		if err := a.Pause(); err != nil {
			t.Fatal(err)
		}
	case "kill":
		if err := a.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-a.Exited()
	case "preemption":
		runPodCandidate(t, m, configB, ns, lease, "b", "replica-b", bVersion)
	}
	waitStamped(t, admin, ns, lease, "replica-b")
	if fenced {
		// In force for the new holder once a's Pod is refused.
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return apierrors.IsForbidden(probe(probeA)), nil
		}); err != nil {
			t.Fatalf("the fence never refused a's Pod after b was named: %v", err)
		}
	}
	answered := gate.Answered()
	gate.Open()
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return gate.Answered()-answered >= 150, nil
	}); err != nil {
		t.Fatalf("kube-apiserver never answered the held write")
	}
	// The answer is sent after the write is stored: what the ConfigMap has
	// now is the outcome.
	got := seq()
	if cause == "pause" {
		if err := a.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case fenced && got != landed:
		t.Errorf("%s: a's write held until b was named landed (the ConfigMap went from write %d to %d)", cause, landed, got)
	case !fenced && got != landed+1:
		t.Errorf("%s, without the fence: the ConfigMap has write %d after the held write was answered, want %d: it should have landed", cause, got, landed+1)
	}
	if fenced && cause == "pause" {
		// Nothing a writes once resumed lands either.
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Second, true, func(context.Context) (bool, error) {
			return seq() != landed, nil
		}); err == nil {
			t.Errorf("a resumed, and its write %d landed", seq())
		}
	}
	t.Logf("%s, fenced %t: the last write of a's term to land was %d; after the held one (%d bytes) was answered the ConfigMap had %d", cause, fenced, landed, held, got)
}
