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
	chart := n.publishedChart(t)
	kills := killCount(t)
	if ds, err := n.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cleDeployment}); err != nil || len(ds.Items) > 0 {
		t.Fatalf("a Deployment %s is already there (%v): the test needs the cluster without one", cleDeployment, err)
	}

	// The election of the client-go electors below, fenced by the chart.
	lockNS := "cle-lock"
	pods := n.installChart(t, helm, chart, append([]string{"proofOfDeath.enabled=true"}, fenceValues(election{ns: lockNS, lease: lockNS})...)...)
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

	examplesElection := election{ns: exampleNamespace, lease: exampleLease, deployments: []string{exampleName}}
	var report []string
	for _, way := range killWays {
		took := n.killLeaders(t, examplesElection, kills, way.signal, way.reason)
		report = append(report, describeKills("library, "+way.name, took))
	}

	// The adoption path: client-go's LeaderElector on pkg/lock
	// (test/bench/cand --kind=lock), in Pods of its own.
	lockElection := n.runCands(t, candImage, lockNS, "--kind=lock", "--api-mode=portable")
	n.checkFence(t, lockElection)
	report = append(report, describeKills("client-go elector on pkg/lock, SIGKILL through containerd", n.killLeaders(t, lockElection, kills, "SIGKILL", "Error")))
	// And a controller-runtime manager (contrib/controller-runtime's
	// NewManager, the same lock).
	managerElection := n.runCands(t, managerImage, "cle-manager", "--kind=lock", "--api-mode=portable")
	report = append(report, describeKills("controller-runtime manager, SIGKILL through containerd", n.killLeaders(t, managerElection, kills, "SIGKILL", "Error")))
	t.Logf("the leader's container killed, to the next leader's first renewal (cle-controller --proof-of-death):\n  %s", strings.Join(report, "\n  "))
}

// TestBuiltinCrashFailoverOnNode is the other side of
// TestProofOfDeathOnNode: the election controller built into kube-apiserver
// with client-go's coordinated candidates (test/bench/cand --kind=peer, as
// kube-scheduler elects with the gate on) in three Pods of two
// Deployments. It kills the leader's container the same three ways and
// prints the time from the kill to the moment the next leader's work
// started (its log line, timestamped by the container runtime on this
// node's clock). Nothing bounds it but the test's patience: kube-apiserver
// learns of the death only when the Lease expires.
func TestBuiltinCrashFailoverOnNode(t *testing.T) {
	n := cluster
	ctx := context.Background()
	kills := killCount(t)
	// The built-in controller acts from here on (it was idled from the
	// start, or is back after TestStaticPodNative handed its Lease away).
	if err := n.server.WakeBuiltinController(ctx); err != nil {
		t.Fatal(err)
	}
	n.waitLease(t, framework.BuiltinControllerLeaseNamespace, framework.BuiltinControllerLeaseName, func(holder string) bool {
		return holder != framework.IdlerIdentity && !strings.HasPrefix(holder, "cle-controller")
	})

	// One replica emulating 1.35 and two emulating 1.36, as in make
	// bench's scenario 4: kube-apiserver's controller flips a Lease among
	// candidates equal on merit (docs/benchmarks.md, "Ties"), and its
	// candidates exit on every lost term, so that three equal replicas
	// may have no stable leader to kill. Each kill hits the 1.35 one, once
	// it leads.
	e := n.candNamespace(t, "builtin-peer")
	e.builtin, e.best = true, "best"
	// Their identities are new in each process, as those of kube-scheduler
	// and kube-controller-manager (host name and a UUID): client-go's
	// elector renews a Lease naming its identity whatever process wrote it,
	// so that a container restarted in place under its Pod's name would
	// lead again at once, without any election.
	args := []string{"--kind=peer", "--signal-faults", "--process-identity"}
	n.addCands(t, &e, "best", 1, candImage, append(args, "--emulation-version=1.35.0")...)
	n.addCands(t, &e, "next", 2, candImage, args...)
	var report []string
	for _, way := range killWays {
		report = append(report, describeKills("client-go coordinated candidates, "+way.name, n.killLeaders(t, e, kills, way.signal, way.reason)))
	}
	t.Logf("the leader's container killed, to the next leader's start (kube-apiserver's election controller):\n  %s", strings.Join(report, "\n  "))
}

// killWays are the three ways the node tests kill a leader's container:
// the signal sent through containerd and the reason the kubelet reports.
var killWays = []struct{ name, signal, reason string }{
	{"SIGKILL through containerd", "SIGKILL", "Error"},
	{"out of memory in leader work", "SIGUSR2", "OOMKilled"},
	{"panic in leader work", "SIGUSR1", "Error"},
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
// named after its Pod: on the library (directly or through pkg/lock), so
// that their processes stamp their renewals, or (builtin) client-go's
// coordinated candidates elected by kube-apiserver, whose leaders are known
// by their log lines.
type election struct {
	ns, lease   string
	deployments []string
	builtin     bool
	best        string // builtin: the Deployment whose Pod must lead before a kill
}

// killLeaders kills the election's leader's container kills times with
// signal, and returns the times from each kill to the next leader's start:
// its first renewal (cle), or the moment its work started (builtin). The
// kubelet must report the exit with reason. In cle's elections that report
// must have ended the term: a HolderExited Event, and the next leader before
// the dead one's 15-second Lease expired.
func (n *node) killLeaders(t *testing.T, e election, kills int, signal, reason string) []time.Duration {
	t.Helper()
	ctx := context.Background()
	var took []time.Duration
	for range kills {
		var leader, process string
		if e.builtin {
			leader = n.waitStartedLeading(t, e, time.Time{})
		} else {
			leader, process = n.waitLeader(t, e, "")
		}
		id := n.containerID(t, e.ns, leader)
		var exits int32
		if !e.builtin {
			exits = n.holderExitedEvents(t, e)
		}
		begin := time.Now()
		if _, err := n.ctrRun(ctx, "task", "kill", "--signal", signal, id); err != nil {
			t.Fatal(err)
		}
		var next string
		if e.builtin {
			// Any Pod's process that starts leader work after the kill,
			// the killed one's restarted container's too.
			n.waitStartedLeading(t, e, begin)
			took = append(took, n.startedAfter(t, e, begin).Sub(begin))
		} else {
			// The next term may be the same Pod's, whose container the
			// kubelet restarted at once: another process all the same.
			next, _ = n.waitLeader(t, e, process)
			took = append(took, time.Since(begin))
		}
		pod, err := n.client.CoreV1().Pods(e.ns).Get(ctx, leader, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := pod.Status.ContainerStatuses[0]; exitReason(cs) != reason {
			t.Errorf("%s: Pod %s reports its container's exit as %+v, want reason %s", signal, leader, cs, reason)
		}
		if e.builtin {
			n.replacePod(t, e, leader)
			continue
		}
		if got := n.holderExitedEvents(t, e); got <= exits {
			t.Errorf("%s: no HolderExited Event for %s: %s leads after the Lease expired, not on proof of death", signal, leader, next)
		}
		if took[len(took)-1] >= 15*time.Second {
			t.Errorf("%s: the next leader led %s after the kill, not before the dead one's 15s Lease expired", signal, took[len(took)-1])
		}
		n.replacePod(t, e, leader)
	}
	return took
}

// replacePod deletes the Pod whose container was killed and waits for the
// Deployment's new one: the killed one's container would restart with the
// kubelet's crash back-off.
func (n *node) replacePod(t *testing.T, e election, pod string) {
	t.Helper()
	n.kubectl(t, "", "delete", "pod", "-n", e.ns, pod, "--wait=false")
	for _, d := range e.deployments {
		n.waitDeploymentReady(t, e.ns, d)
	}
}

// waitStartedLeading waits until the Lease's holder is a process of a live
// Pod of the election that said it started leading after after (its log
// line's timestamp), a Pod of e.best if after is zero, and returns the
// Pod's name.
func (n *node) waitStartedLeading(t *testing.T, e election, after time.Time) string {
	t.Helper()
	var leader string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := n.client.CoordinationV1().Leases(e.ns).Get(ctx, e.lease, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		leader = podOf(holder)
		if leader == "" || after.IsZero() && !strings.HasPrefix(leader, e.best+"-") {
			return false, nil
		}
		p, err := n.client.CoreV1().Pods(e.ns).Get(ctx, leader, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			return false, nil
		}
		started, err := n.startedLeading(ctx, e.ns, leader, holder)
		return err == nil && started.After(after), nil
	})
	if err != nil {
		n.describe(t, e.ns)
		t.Fatalf("Lease %s/%s: no leader that started after %s (last holder %q): %v", e.ns, e.lease, after.Format(time.RFC3339Nano), leader, err)
	}
	return leader
}

// podOf is the Pod of a candidate with a process identity
// (--process-identity: the Pod's name and a suffix).
func podOf(identity string) string {
	if i := strings.LastIndexByte(identity, '-'); i > 0 {
		return identity[:i]
	}
	return identity
}

// startedAfter is the earliest start of leader work after after among the
// election's Pods.
func (n *node) startedAfter(t *testing.T, e election, after time.Time) time.Time {
	t.Helper()
	ctx := context.Background()
	pods, err := n.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var first time.Time
	for _, p := range pods.Items {
		lines, err := n.logLines(ctx, e.ns, p.Name)
		if err != nil {
			t.Fatalf("logs of %s: %v", p.Name, err)
		}
		for _, l := range lines {
			if l.started && l.at.After(after) && (first.IsZero() || l.at.Before(first)) {
				first = l.at
			}
		}
	}
	if first.IsZero() {
		t.Fatalf("no Pod of %s started leading after %s", e.ns, after.Format(time.RFC3339Nano))
	}
	return first
}

// startedLeading is when the process of the Pod's container with identity
// last started leading (zero: never).
func (n *node) startedLeading(ctx context.Context, ns, pod, identity string) (time.Time, error) {
	lines, err := n.logLines(ctx, ns, pod)
	if err != nil {
		return time.Time{}, err
	}
	var last time.Time
	for _, l := range lines {
		if l.started && l.identity == identity {
			last = l.at
		}
	}
	return last, nil
}

// logLine is a line of test/bench/cand's output as the container runtime
// logged it.
type logLine struct {
	at       time.Time
	started  bool   // started-leading
	identity string // of a started-leading line
}

// podLog is the lines of the Pod's container log, each led by the
// runtime's timestamp if timestamps is set.
func (n *node) podLog(ctx context.Context, ns, pod string, timestamps bool) ([]string, error) {
	raw, err := n.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Timestamps: timestamps}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(raw), "\n"), nil
}

// logLines reads the Pod's container log with the runtime's timestamps.
func (n *node) logLines(ctx context.Context, ns, pod string) ([]logLine, error) {
	raw, err := n.podLog(ctx, ns, pod, true)
	if err != nil {
		return nil, err
	}
	var lines []logLine
	for _, line := range raw {
		stamp, text, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			continue
		}
		id, started := strings.CutPrefix(text, "started-leading identity=")
		lines = append(lines, logLine{at: at, started: started, identity: id})
	}
	return lines, nil
}

func describeKills(what string, took []time.Duration) string {
	return fmt.Sprintf("%s: median %s of %d (%s)", what, framework.Median(took).Round(10*time.Millisecond), len(took), roundAll(took))
}

// runCands runs three replicas of image (test/bench/cand or benchmanager)
// with args, each named after its Pod, in a namespace of their own (ns,
// which is also the Lease's and the Deployment's name) with the rights a
// candidate needs, until the test ends; it returns their election once they
// are Ready.
func (n *node) runCands(t *testing.T, image, ns string, args ...string) election {
	t.Helper()
	e := n.candNamespace(t, ns)
	n.addCands(t, &e, ns, 3, image, args...)
	return e
}

// candNamespace creates namespace ns with the rights a candidate needs,
// deleted when the test ends, and returns the election on the Lease named
// ns there, without candidates yet.
func (n *node) candNamespace(t *testing.T, ns string) election {
	t.Helper()
	n.kubectl(t, strings.ReplaceAll(candsRBAC, "NS", ns), "apply", "-f", "-")
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=3m")
	})
	return election{ns: ns, lease: ns}
}

// addCands adds a Deployment name of replicas candidates to e, as runCands
// describes, and waits until they are Ready.
func (n *node) addCands(t *testing.T, e *election, name string, replicas int, image string, args ...string) {
	t.Helper()
	var quoted []string
	for _, a := range append([]string{"--namespace=$(POD_NAMESPACE)", "--lease=" + e.lease, "--identity=$(POD_NAME)", "--binary-version=1.36.0"}, args...) {
		quoted = append(quoted, strconv.Quote(a))
	}
	manifest := strings.NewReplacer("DEPLOY", name, "NS", e.ns, "REPLICAS", strconv.Itoa(replicas), "IMAGE", image, "ARGS", strings.Join(quoted, ", ")).Replace(candsDeployment)
	n.kubectl(t, manifest, "apply", "-f", "-")
	n.waitDeploymentReady(t, e.ns, name)
	e.deployments = append(e.deployments, name)
}

// candsRBAC is runCands's namespace and rights (NS is replaced): those of
// cle's candidates and of client-go's.
const candsRBAC = `apiVersion: v1
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
  - apiGroups: [cle.dev, coordination.k8s.io]
    resources: [leasecandidates]
    verbs: [get, list, watch, create, update, delete]
  - apiGroups: ["", events.k8s.io]
    resources: [events]
    verbs: [create, patch, update]
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
`

// candsDeployment is addCands's Deployment: DEPLOY, NS, REPLICAS, IMAGE
// and ARGS are replaced.
const candsDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: DEPLOY
  namespace: NS
spec:
  replicas: REPLICAS
  selector:
    matchLabels: {app: DEPLOY}
  template:
    metadata:
      labels: {app: DEPLOY}
    spec:
      serviceAccountName: cand
      terminationGracePeriodSeconds: 15
      containers:
        - name: cand
          image: IMAGE
          imagePullPolicy: Never
          args: [ARGS]
          # Leader work that exhausts memory (--signal-faults) is killed here.
          resources:
            limits: {memory: 64Mi}
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
