package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// fenceValues are the chart values that fence e's ConfigMap writes: the
// replicas run as the ServiceAccount cand of runCands.
func fenceValues(e election) []string {
	return []string{
		"fences[0].namespace=" + e.ns, "fences[0].lease=" + e.lease,
		"fences[0].serviceAccount=cand", "fences[0].resources={configmaps}",
	}
}

// checkFence checks the chart's fence of e's election (fenceValues) on the
// node, with the tokens the kubelet mounted in the replicas' Pods: a
// ConfigMap write with the holder's Pod's token is admitted and one with
// another replica's is refused; then the holder's container is frozen (as
// SIGSTOP freezes a process) until the Lease names the next holder, and its
// Pod's token is refused from then on, also once it is thawed, while the new
// holder's is admitted.
func (n *node) checkFence(t *testing.T, e election) {
	t.Helper()
	ctx := context.Background()
	n.kubectl(t, strings.ReplaceAll(fenceRBAC, "NS", e.ns), "apply", "-f", "-")
	leader, instance := n.waitLeader(t, e, "")
	pods, err := n.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var other string
	for _, p := range pods.Items {
		if p.Name != leader && p.Status.Phase == corev1.PodRunning {
			other = p.Name
			break
		}
	}
	if other == "" {
		t.Fatalf("no replica of %s runs beside the holder %s", e.ns, leader)
	}
	// A client per Pod, made once: the token the kubelet mounted stays
	// valid for the test's minutes.
	clients := map[string]kubernetes.Interface{}
	write := func(pod string) error {
		cs, ok := clients[pod]
		if !ok {
			cs = n.podClient(t, e.ns, pod)
			clients[pod] = cs
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fenced"}, Data: map[string]string{"by": pod}}
		_, err := cs.CoreV1().ConfigMaps(e.ns).Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cs.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{})
		}
		return err
	}
	// until polls the Pod's write until its outcome is the one wanted, and
	// says how long that took.
	until := func(pod, why, want string, wanted func(error) bool) time.Duration {
		t.Helper()
		begin := time.Now()
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			last = write(pod)
			return wanted(last), nil
		}); err != nil {
			t.Fatalf("%s: the write of Pod %s is not %s: %v", why, pod, want, last)
		}
		return time.Since(begin)
	}
	admitted := func(pod, why string) time.Duration {
		t.Helper()
		return until(pod, why, "admitted", func(err error) bool { return err == nil })
	}
	refused := func(pod, why string) time.Duration {
		t.Helper()
		return until(pod, why, "refused by the fence", func(err error) bool {
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is not the holder's Pod")
		})
	}
	admitted(leader, "the holder")
	if err := write(other); !apierrors.IsForbidden(err) {
		t.Fatalf("the write of Pod %s, which does not hold the Lease: %v, want it refused", other, err)
	}

	id := n.containerID(t, e.ns, leader)
	if _, err := n.ctrRun(ctx, "task", "pause", id); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if _, err := n.ctrRun(ctx, "task", "resume", id); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	next, _ := n.waitLeader(t, e, instance)
	window := refused(leader, "the frozen holder's Pod, once the Lease names "+next)
	thaw()
	refused(leader, "the thawed old holder's Pod")
	took := admitted(next, "the new holder")
	t.Logf("fence on the node: the frozen holder %s's token refused %s after the test saw the Lease name %s, whose token was admitted %s after that",
		leader, window.Round(time.Millisecond), next, (window + took).Round(time.Millisecond))
}

// podClient is a client with the ServiceAccount token the kubelet mounted in
// the Pod: bound to it, as every request of its containers is.
func (n *node) podClient(t *testing.T, ns, name string) kubernetes.Interface {
	t.Helper()
	pod, err := n.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(n.dir, "kubelet", "root", "pods", string(pod.UID), "volumes", "kubernetes.io~projected", "kube-api-access-*", "token"))
	if err != nil || len(files) != 1 {
		t.Fatalf("Pod %s/%s: the kubelet's token %v (%v), want one", ns, name, files, err)
	}
	token, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(n.server.Config())
	cfg.BearerToken = string(token)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// containerID is containerd's ID of the Pod's first container.
func (n *node) containerID(t *testing.T, ns, name string) string {
	t.Helper()
	pod, err := n.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, ok := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if !ok {
		t.Fatalf("Pod %s: container ID %q is not containerd's", name, pod.Status.ContainerStatuses[0].ContainerID)
	}
	return id
}

// fenceRBAC lets the ServiceAccount cand of namespace NS write ConfigMaps
// there: what the fence then allows the holder's Pod alone.
const fenceRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: configmaps
  namespace: NS
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: configmaps
  namespace: NS
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: configmaps
subjects:
  - kind: ServiceAccount
    name: cand
    namespace: NS
`
