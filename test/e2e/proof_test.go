package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/test/integration/framework"
)

// killsEnv is how many times the node test kills the leader each way
// (default 1; make bench-node asks for 5 and prints the medians).
const killsEnv = "E2E_KILLS"

// TestProofOfDeathOnNode installs the release's chart with the proof of
// death on (proofOfDeath.enabled), runs the example candidates (three
// replicas of the release's image, which find their termination message
// file by themselves) and kills the leader's container three ways: SIGKILL
// through containerd, an out-of-memory kill (leader work allocates past the
// container's memory limit) and a panic in leader work. Each time the next
// leader must start long before the dead one's 15-second Lease would have
// expired, on the kubelet's report alone; it prints the time from the kill
// to the next leader's first renewal.
func TestProofOfDeathOnNode(t *testing.T) {
	n := cluster
	ctx := context.Background()
	helm := toolFromEnv(t, helmEnv)
	chart := n.release.chart(t)
	kills := killCount(t)
	if ds, err := n.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cleDeployment}); err != nil || len(ds.Items) > 0 {
		t.Fatalf("a Deployment %s is already there (%v): the test needs the cluster without one", cleDeployment, err)
	}

	pods := n.installChart(t, helm, chart, "proofOfDeath.enabled=true")
	if args := pods[0].Spec.Containers[0].Args; !slices.Contains(args, "--proof-of-death") {
		t.Fatalf("cle-controller runs with %q, want --proof-of-death", args)
	}

	// The example candidates, able to fail on a signal.
	bundle, err := os.ReadFile(n.release.bundle("cle-examples.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	examples := withArg(t, string(bundle), "--health-addr=:8081", "--signal-faults")
	n.kubectl(t, examples, "apply", "-f", "-")
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "-f", n.release.bundle("cle-examples.yaml"), "--ignore-not-found", "--wait=true", "--timeout=3m")
		n.waitNamespaceGone(t, exampleNamespace)
	})
	n.waitDeploymentReady(t, exampleNamespace, exampleName)

	examplesElection := election{ns: exampleNamespace, lease: exampleLease, deployment: exampleName}
	var report []string
	for _, way := range []struct{ name, signal, reason string }{
		{"SIGKILL through containerd", "SIGKILL", "Error"},
		{"out of memory in leader work", "SIGUSR2", "OOMKilled"},
		{"panic in leader work", "SIGUSR1", "Error"},
	} {
		took := n.killLeaders(t, examplesElection, kills, way.signal, way.reason)
		report = append(report, describeKills("library, "+way.name, took))
	}

	// The adoption path: client-go's LeaderElector on pkg/lock
	// (test/bench/cand --kind=lock), in Pods of its own.
	lockElection := n.runCands(t, "cle-lock", "--kind=lock", "--api-mode=portable")
	report = append(report, describeKills("client-go elector on pkg/lock, SIGKILL through containerd", n.killLeaders(t, lockElection, kills, "SIGKILL", "Error")))
	t.Logf("the leader's container killed, to the next leader's first renewal (cle-controller --proof-of-death):\n  %s", strings.Join(report, "\n  "))
}

// killCount is how many times each way the node tests kill a leader.
func killCount(t *testing.T) int {
	t.Helper()
	s := os.Getenv(killsEnv)
	if s == "" {
		return 1
	}
	kills, err := strconv.Atoi(s)
	if err != nil || kills < 1 {
		t.Fatalf("%s=%q: want a positive number", killsEnv, s)
	}
	return kills
}

// election is a Lease whose candidates run as the Pods of a Deployment, each
// named after its Pod, on the library (directly or through pkg/lock), so
// that their processes stamp their renewals.
type election struct {
	ns, lease, deployment string
}

// killLeaders kills the election's leader's container kills times with
// signal, and returns the times from each kill to the next leader's first
// renewal. The kubelet's report of the exit (with reason) must have ended
// the term: a HolderExited Event, and the next leader before the dead one's
// 15-second Lease expired.
func (n *node) killLeaders(t *testing.T, e election, kills int, signal, reason string) []time.Duration {
	t.Helper()
	ctx := context.Background()
	var took []time.Duration
	for range kills {
		leader, process := n.waitLeader(t, e, "")
		pod, err := n.client.CoreV1().Pods(e.ns).Get(ctx, leader, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		id, ok := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
		if !ok {
			t.Fatalf("Pod %s: container ID %q is not containerd's", leader, pod.Status.ContainerStatuses[0].ContainerID)
		}
		exits := n.holderExitedEvents(t, e)
		begin := time.Now()
		if _, err := n.ctrRun(ctx, "task", "kill", "--signal", signal, id); err != nil {
			t.Fatal(err)
		}
		// The next term may be the same Pod's, whose container the kubelet
		// restarted at once: another process all the same.
		next, _ := n.waitLeader(t, e, process)
		took = append(took, time.Since(begin))
		pod, err = n.client.CoreV1().Pods(e.ns).Get(ctx, leader, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := pod.Status.ContainerStatuses[0]; exitReason(cs) != reason {
			t.Errorf("%s: Pod %s reports its container's exit as %+v, want reason %s", signal, leader, cs, reason)
		}
		if got := n.holderExitedEvents(t, e); got <= exits {
			t.Errorf("%s: no HolderExited Event for %s: %s leads after the Lease expired, not on proof of death", signal, leader, next)
		}
		if took[len(took)-1] >= 15*time.Second {
			t.Errorf("%s: the next leader led %s after the kill, not before the dead one's 15s Lease expired", signal, took[len(took)-1])
		}
		// A fresh Pod in its place: the killed one's container would
		// restart with the kubelet's crash back-off.
		n.kubectl(t, "", "delete", "pod", "-n", e.ns, leader, "--wait=false")
		n.waitDeploymentReady(t, e.ns, e.deployment)
	}
	return took
}

func describeKills(what string, took []time.Duration) string {
	return fmt.Sprintf("%s: median %s of %d (%s)", what, framework.Median(took).Round(10*time.Millisecond), len(took), roundAll(took))
}

// runCands runs three replicas of test/bench/cand with args, each named
// after its Pod, in a namespace of their own (ns, which is also the Lease's
// and the Deployment's name) with the rights a candidate needs, until the
// test ends; it returns their election once they are Ready.
func (n *node) runCands(t *testing.T, ns string, args ...string) election {
	t.Helper()
	e := election{ns: ns, lease: ns, deployment: ns}
	var quoted []string
	for _, a := range append([]string{"--namespace=$(POD_NAMESPACE)", "--lease=" + ns, "--identity=$(POD_NAME)", "--binary-version=1.36.0"}, args...) {
		quoted = append(quoted, strconv.Quote(a))
	}
	manifest := strings.NewReplacer("NS", ns, "IMAGE", candImage, "ARGS", strings.Join(quoted, ", ")).Replace(candsManifest)
	n.kubectl(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=3m")
	})
	n.waitDeploymentReady(t, ns, ns)
	return e
}

// candsManifest is runCands's: NS, IMAGE and ARGS are replaced.
const candsManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: NS
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cand
  namespace: NS
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: cand
  namespace: NS
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, list, watch, update]
  - apiGroups: [cle.dev]
    resources: [leasecandidates]
    verbs: [get, list, watch, create, update, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: cand
  namespace: NS
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: cand
subjects:
  - kind: ServiceAccount
    name: cand
    namespace: NS
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: NS
  namespace: NS
spec:
  replicas: 3
  selector:
    matchLabels: {app: cand}
  template:
    metadata:
      labels: {app: cand}
    spec:
      serviceAccountName: cand
      terminationGracePeriodSeconds: 15
      containers:
        - name: cand
          image: IMAGE
          imagePullPolicy: Never
          args: [ARGS]
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
`

// withArg adds arg after the line of the bundle's container arguments that
// holds after, with the same indentation.
func withArg(t *testing.T, bundle, after, arg string) string {
	t.Helper()
	lines := strings.Split(bundle, "\n")
	for i, line := range lines {
		if strings.TrimSpace(line) == "- "+after {
			indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
			return strings.Join(slices.Insert(lines, i+1, indent+"- "+arg), "\n")
		}
	}
	t.Fatalf("the bundle has no argument %s", after)
	return ""
}

// waitLeader waits until the election's Lease is renewed by a live Pod's
// process, stamped with its instance, other than the instance not. It
// returns the holder and its instance.
func (n *node) waitLeader(t *testing.T, e election, not string) (string, string) {
	t.Helper()
	var last *coordinationv1.Lease
	var holder, instance string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := n.client.CoordinationV1().Leases(e.ns).Get(ctx, e.lease, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = l
		holder, instance = ptr.Deref(l.Spec.HolderIdentity, ""), proof.HolderInstance(l)
		if holder == "" || instance == "" || instance == not {
			return false, nil
		}
		p, err := n.client.CoreV1().Pods(e.ns).Get(ctx, holder, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp == nil, nil
	})
	if err != nil {
		n.describe(t, e.ns)
		var annotations map[string]string
		if last != nil {
			annotations = last.Annotations
		}
		t.Fatalf("Lease %s/%s: no process but instance %q renewing it (last: holder %q, annotations %v): %v", e.ns, e.lease, not, holder, annotations, err)
	}
	return holder, instance
}

// holderExitedEvents counts cle-controller's HolderExited Events on the
// election's Lease.
func (n *node) holderExitedEvents(t *testing.T, e election) int32 {
	t.Helper()
	list, err := n.client.EventsV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var count int32
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "Lease" && ev.Regarding.Name == e.lease && ev.Reason == "HolderExited" {
			count++
			if ev.Series != nil {
				count += ev.Series.Count - 1
			}
		}
	}
	return count
}

// exitReason is the reason of the container's exit the status reports: its
// current state's, or its last one's once it has restarted.
func exitReason(cs corev1.ContainerStatus) string {
	if t := cs.State.Terminated; t != nil {
		return t.Reason
	}
	if t := cs.LastTerminationState.Terminated; t != nil {
		return t.Reason
	}
	return ""
}

func roundAll(ds []time.Duration) string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Round(10*time.Millisecond).String())
	}
	return strings.Join(out, " ")
}
