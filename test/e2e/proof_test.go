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
	kills := 1
	if s := os.Getenv(killsEnv); s != "" {
		var err error
		if kills, err = strconv.Atoi(s); err != nil || kills < 1 {
			t.Fatalf("%s=%q: want a positive number", killsEnv, s)
		}
	}
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

	var report []string
	for _, way := range []struct{ name, signal, reason string }{
		{"SIGKILL through containerd", "SIGKILL", "Error"},
		{"out of memory in leader work", "SIGUSR2", "OOMKilled"},
		{"panic in leader work", "SIGUSR1", "Error"},
	} {
		var took []time.Duration
		for range kills {
			leader, instance := n.waitStampedLeader(t, "")
			pod, err := n.client.CoreV1().Pods(exampleNamespace).Get(ctx, leader, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			id, ok := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
			if !ok {
				t.Fatalf("Pod %s: container ID %q is not containerd's", leader, pod.Status.ContainerStatuses[0].ContainerID)
			}
			exits := n.holderExitedEvents(t)
			begin := time.Now()
			if _, err := n.ctrRun(ctx, "task", "kill", "--signal", way.signal, id); err != nil {
				t.Fatal(err)
			}
			// The next term may be the same Pod's, whose container the
			// kubelet restarted at once: another process all the same.
			next, _ := n.waitStampedLeader(t, instance)
			took = append(took, time.Since(begin))
			// The kubelet's report, and the controller's word that it acted
			// on it rather than on the Lease's expiry.
			pod, err = n.client.CoreV1().Pods(exampleNamespace).Get(ctx, leader, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cs := pod.Status.ContainerStatuses[0]; exitReason(cs) != way.reason {
				t.Errorf("%s: Pod %s reports its container's exit as %+v, want reason %s", way.name, leader, cs, way.reason)
			}
			if got := n.holderExitedEvents(t); got <= exits {
				t.Errorf("%s: no HolderExited Event for %s: %s leads after the Lease expired, not on proof of death", way.name, leader, next)
			}
			// A fresh Pod in its place: the killed one's container would
			// restart with the kubelet's crash back-off.
			n.kubectl(t, "", "delete", "pod", "-n", exampleNamespace, leader, "--wait=false")
			n.waitDeploymentReady(t, exampleNamespace, exampleName)
		}
		m := median(took)
		report = append(report, fmt.Sprintf("%s: median %s of %d (%s)", way.name, m.Round(10*time.Millisecond), len(took), roundAll(took)))
		if m >= 15*time.Second {
			t.Errorf("%s: the next leader started %s after the kill, not before the dead one's 15s Lease expired", way.name, m)
		}
	}
	t.Logf("the leader's container killed, to the next leader's first renewal (cle-controller --proof-of-death):\n  %s", strings.Join(report, "\n  "))
}

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

// waitStampedLeader waits until the example's Lease is held by a live Pod
// whose process, another than the instance not, renews it with its instance:
// it renewed its term, so it leads. It returns the holder and its instance.
func (n *node) waitStampedLeader(t *testing.T, not string) (string, string) {
	t.Helper()
	var last *coordinationv1.Lease
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := n.client.CoordinationV1().Leases(exampleNamespace).Get(ctx, exampleLease, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = l
		holder, instance := ptr.Deref(l.Spec.HolderIdentity, ""), proof.HolderInstance(l)
		if holder == "" || instance == "" || instance == not {
			return false, nil
		}
		p, err := n.client.CoreV1().Pods(exampleNamespace).Get(ctx, holder, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp == nil, nil
	})
	if err != nil {
		n.describe(t, exampleNamespace)
		var annotations map[string]string
		if last != nil {
			annotations = last.Annotations
		}
		t.Fatalf("no process but instance %q renewing the example's Lease with its instance (last annotations %v): %v", not, annotations, err)
	}
	return ptr.Deref(last.Spec.HolderIdentity, ""), proof.HolderInstance(last)
}

// holderExitedEvents counts cle-controller's HolderExited Events on the
// example's Lease.
func (n *node) holderExitedEvents(t *testing.T) int32 {
	t.Helper()
	list, err := n.client.EventsV1().Events(exampleNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var count int32
	for _, e := range list.Items {
		if e.Regarding.Kind == "Lease" && e.Regarding.Name == exampleLease && e.Reason == "HolderExited" {
			count++
			if e.Series != nil {
				count += e.Series.Count - 1
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

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func roundAll(ds []time.Duration) string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Round(10*time.Millisecond).String())
	}
	return strings.Join(out, " ")
}
