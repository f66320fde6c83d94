package controller

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

// The proof of death against a real kube-apiserver: library candidates in
// Pods (Pod objects whose status the test writes as their kubelet would,
// from each process's termination message file), a holder that dies without
// a word (no release, its LeaseCandidate left behind), and the controller
// run with --proof-of-death. The candidates' Leases last a minute, so an
// election before that can only come from the proof.

// podLeaseDuration is the candidates' lease duration: far longer than any
// wait of these tests.
const podLeaseDuration = 60 * time.Second

// podProcess is a library candidate running "in" a Pod.
type podProcess struct {
	identity, pod string
	instance      string
	messageFile   string
	stop          func()
}

// startInPod runs a library candidate as a process of the Pod's container
// would: its termination message file is a file of the test's; on stop it
// neither releases the Lease nor deletes its candidate, as a crashed
// process does not.
func (e *env) startInPod(t *testing.T, lease, identity, pod, emulation string) *podProcess {
	t.Helper()
	p := &podProcess{identity: identity, pod: pod, instance: proof.NewInstance(), messageFile: filepath.Join(t.TempDir(), "termination-log")}
	if err := os.WriteFile(p.messageFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p.stop = framework.RunCandidate(t, candidate.Config{
		RestConfig: e.mode.server.Config(), APIMode: e.mode.name,
		Namespace: e.ns, LeaseName: lease, Identity: identity,
		BinaryVersion: "1.31.0", EmulationVersion: emulation,
		LeaseDuration: podLeaseDuration, RenewDeadline: 40 * time.Second, RetryPeriod: 2 * time.Second,
		ReleaseOnCancel: ptr.To(false), DeleteCandidateOnExit: ptr.To(false),
		ProofOfDeath: &candidate.ProofOfDeath{TerminationMessagePath: p.messageFile, Pod: e.ns + "/" + pod, Container: "app", Instance: p.instance},
	})
	return p
}

// createPod creates a running Pod with two containers, "app" (the
// candidate's) and "sidecar", as the kubelet of node-1 reports it.
func (e *env) createPod(t *testing.T, name string) {
	t.Helper()
	pod, err := e.client.CoreV1().Pods(e.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: "node-1", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}, {Name: "sidecar", Image: "example.com/proxy:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Pod %s: %v", name, err)
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "app", Ready: true, Image: "example.com/app:1", State: running},
		{Name: "sidecar", Ready: true, Image: "example.com/proxy:1", State: running},
	}}
	e.writePodStatus(t, pod)
}

// reportExit writes the Pod's status as its kubelet does once the
// container's process has exited: terminated, with the process's
// termination message file as the message; restarted, the container runs
// again and the exit is its last state.
func (e *env) reportExit(t *testing.T, p *podProcess, restarted bool) {
	t.Helper()
	msg, err := os.ReadFile(p.messageFile)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := e.client.CoreV1().Pods(e.ns).Get(context.Background(), p.pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", Message: string(msg),
		StartedAt: pod.Status.ContainerStatuses[0].State.Running.StartedAt, FinishedAt: metav1.Now()}}
	cs := &pod.Status.ContainerStatuses[0]
	if restarted {
		cs.LastTerminationState, cs.RestartCount = exited, cs.RestartCount+1
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	} else {
		cs.State, cs.Ready = exited, false
	}
	e.writePodStatus(t, pod)
}

func (e *env) writePodStatus(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, err := e.client.CoreV1().Pods(e.ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the status of Pod %s: %v", pod.Name, err)
	}
}

// startWithProofOfDeath runs a controller with --proof-of-death on a fresh
// namespace of the mode.
func startWithProofOfDeath(t *testing.T, m apiMode) *env {
	t.Helper()
	return startControllerWith(t, m, framework.ControllerOptions{ProofOfDeath: true})
}

// stampedBy reports a Lease whose last renewal instance p made.
func stampedBy(p *podProcess) func(*coordinationv1.Lease) bool {
	return func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == p.identity && proof.HolderInstance(l) == p.instance
	}
}

// leadingInPods starts library candidates a (the better) and b for lease,
// each in a Pod of its own, and returns them once a leads, with the Lease
// then.
func (e *env) leadingInPods(t *testing.T, lease string) (a, b *podProcess, held *coordinationv1.Lease) {
	t.Helper()
	e.createPod(t, "a-0")
	e.createPod(t, "b-0")
	a = e.startInPod(t, lease, "a", "a-0", "1.30.0")
	b = e.startInPod(t, lease, "b", "b-0", "1.31.0")
	return a, b, e.waitLease(lease, 30*time.Second, "a leads, its renewals stamped", stampedBy(a))
}

// tokenAbove checks that the term of got is numbered above the dead holder's.
func tokenAbove(t *testing.T, got, held *coordinationv1.Lease) {
	t.Helper()
	if g, h := ptr.Deref(got.Spec.LeaseTransitions, 0), ptr.Deref(held.Spec.LeaseTransitions, 0); g <= h {
		t.Errorf("the next term's token %d is not above the dead holder's %d", g, h)
	}
}

func TestProofOfDeath(t *testing.T) { forEachMode(t, testProofOfDeath) }

func testProofOfDeath(t *testing.T, m apiMode) {
	e := startWithProofOfDeath(t, m)
	a, b, held := e.leadingInPods(t, "pod")
	a.stop() // dies: the Lease still names it, unexpired for a minute

	// What is not proof: the Pod failed without its kubelet (Pod garbage
	// collection on a node that is gone), an exit of another process
	// instance (the container's previous one), and a's own instance named
	// in the termination message of another container (instance IDs are
	// public; anyone who runs a container writes its own message): a's
	// sidecar's, an ephemeral container's added to debug a's Pod, and
	// another Pod's.
	ctx := context.Background()
	pod, err := e.client.CoreV1().Pods(e.ns).Get(ctx, "a-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "example.com/debug:1", TerminationMessagePolicy: corev1.TerminationMessageReadFile}})
	if pod, err = e.client.CoreV1().Pods(e.ns).UpdateEphemeralContainers(ctx, "a-0", pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("add an ephemeral container to a's Pod: %v", err)
	}
	forgedBy := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: "example.com/" + name + ":1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Message: proof.Marker(a.instance)}}}
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 1, Message: proof.Marker(proof.NewInstance())}}
	pod.Status.ContainerStatuses[1] = forgedBy("sidecar")
	pod.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{forgedBy("debugger")}
	e.writePodStatus(t, pod)
	e.createPod(t, "mallory-0")
	forged, err := e.client.CoreV1().Pods(e.ns).Get(context.Background(), "mallory-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: proof.Marker(a.instance)}}
	e.writePodStatus(t, forged)
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		// The previous instance's exit, the sidecar's and mallory's.
		return promtest.Counter(e.metrics.ExitsRead) == 3, nil
	}); err != nil {
		t.Fatalf("the controller did not read the Pod's status: %v", err)
	}
	notBefore := time.Now().Add(2 * time.Second)
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Until(notBefore), true, func(ctx context.Context) (bool, error) {
		l, err := e.acc.Leases(e.ns).Get(ctx, "pod")
		if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "a" {
			t.Fatalf("elected on no proof: %s", describe(l))
		}
		return false, nil
	})

	// The kubelet reports a's process exited: b leads long before a's
	// Lease would have expired.
	reported := time.Now()
	e.reportExit(t, a, false)
	got := e.waitLease("pod", 20*time.Second, "b leads", stampedBy(b))
	t.Logf("%s mode: b renewed its term %s after the kubelet's report", m.name, time.Since(reported).Round(time.Millisecond))
	tokenAbove(t, got, held)
	e.expectEvent(t, "pod", "HolderExited")
	if n := promtest.Counter(e.metrics.HolderExits); n != 1 {
		t.Errorf("cle_holder_exits_total = %v, want 1", n)
	}
}

// A container restarted in place under the same Identity: the next process
// registers a new instance; the report of the last one's exit ends its term,
// and the new process, still the best, leads a new one.
func TestProofOfDeathRestartInPlace(t *testing.T) { forEachMode(t, testProofOfDeathRestartInPlace) }

func testProofOfDeathRestartInPlace(t *testing.T, m apiMode) {
	e := startWithProofOfDeath(t, m)
	a, _, held := e.leadingInPods(t, "restart")
	a.stop()
	next := e.startInPod(t, "restart", "a", "a-0", "1.30.0")
	e.reportExit(t, a, true)
	tokenAbove(t, e.waitLease("restart", 20*time.Second, "the restarted a leads", stampedBy(next)), held)
}

// The adoption path: client-go LeaderElectors on pkg/lock, in processes of
// their own (examples/lock-elector), each "in" a Pod. The leader is
// SIGKILLed; the kubelet's report of its exit has the next elector lead long
// before the dead one's one-minute Lease would have expired.
func TestProofOfDeathLockElector(t *testing.T) { forEachMode(t, testProofOfDeathLockElector) }

func testProofOfDeathLockElector(t *testing.T, m apiMode) {
	e := startWithProofOfDeath(t, m)
	bin := framework.BuildCommand(t, "github.com/cle-dev/cle/examples/lock-elector")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	start := func(identity, emulation string) (*framework.Child, *podProcess) {
		p := &podProcess{identity: identity, pod: identity + "-0", messageFile: filepath.Join(t.TempDir(), "termination-log")}
		if err := os.WriteFile(p.messageFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		e.createPod(t, p.pod)
		child := framework.StartChild(t, identity, bin, "--kubeconfig", kubeconfig, "--api-mode", m.name,
			"--namespace", e.ns, "--lease", "lock", "--identity", identity,
			"--binary-version", "1.31.0", "--emulation-version", emulation,
			"--lease-duration", podLeaseDuration.String(), "--renew-deadline", "40s", "--retry-period", "2s",
			"--termination-message-path", p.messageFile, "--pod", e.ns+"/"+p.pod, "--container", "app")
		// The process draws its instance: read it where the kubelet will.
		if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			b, err := os.ReadFile(p.messageFile)
			if ids := proof.InstancesIn(string(b)); err == nil && len(ids) == 1 {
				p.instance = ids[0]
				return true, nil
			}
			return false, nil
		}); err != nil {
			t.Fatalf("%s wrote no instance into its termination message file: %v", identity, err)
		}
		return child, p
	}
	aChild, a := start("a", "1.30.0")
	_, b := start("b", "1.31.0")
	held := e.waitLease("lock", 30*time.Second, "a's elector leads, its renewals stamped", stampedBy(a))

	if err := aChild.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-aChild.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("a did not exit on SIGKILL")
	}
	reported := time.Now()
	e.reportExit(t, a, false)
	got := e.waitLease("lock", 20*time.Second, "b's elector leads", stampedBy(b))
	t.Logf("%s mode: b's elector renewed its term %s after the kubelet's report", m.name, time.Since(reported).Round(time.Millisecond))
	tokenAbove(t, got, held)
}

// groupInPod runs a replica of group on the library as a process of the
// Pod's container would, as startInPod runs a candidate: on stop it neither
// releases its member Lease nor deletes its candidate.
func (e *env) groupInPod(t *testing.T, group, identity, pod string, count int) *podProcess {
	t.Helper()
	p := &podProcess{identity: identity, pod: pod, instance: proof.NewInstance(), messageFile: filepath.Join(t.TempDir(), "termination-log")}
	if err := os.WriteFile(p.messageFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, p.stop = framework.RunGroup(t, candidate.GroupConfig{
		Config: candidate.Config{
			RestConfig: e.mode.server.Config(), APIMode: e.mode.name,
			Namespace: e.ns, LeaseName: group, Identity: identity,
			BinaryVersion: "1.31.0", Strategy: shard.StrategyShards,
			LeaseDuration: podLeaseDuration, RenewDeadline: 40 * time.Second, RetryPeriod: 500 * time.Millisecond,
			ReleaseOnCancel: ptr.To(false), DeleteCandidateOnExit: ptr.To(false),
			ProofOfDeath: &candidate.ProofOfDeath{TerminationMessagePath: p.messageFile, Pod: e.ns + "/" + pod, Container: "app", Instance: p.instance},
		},
		Shards: count,
	})
	return p
}

// TestShardGroupProofOfDeath: two replicas of a group in Pods, whose member
// Leases last a minute; one dies without a word. The kubelet's report of its
// exit ends its epoch at once, and its shards go to the other replica, which
// only the proof can do before the member Lease expires.
func TestShardGroupProofOfDeath(t *testing.T) { forEachMode(t, testShardGroupProofOfDeath) }

func testShardGroupProofOfDeath(t *testing.T, m apiMode) {
	const group, count = "pods", 8
	e := startWithProofOfDeath(t, m)
	e.createPod(t, "a-0")
	e.createPod(t, "b-0")
	a := e.groupInPod(t, group, "a", "a-0", count)
	e.groupInPod(t, group, "b", "b-0", count)
	e.waitGroup(group, 30*time.Second, "8 shards over a and b", balancedOver(count, "a", "b"))

	a.stop()
	e.reportExit(t, a, false)
	e.waitGroup(group, 20*time.Second, "every shard with b, a's exit reported", balancedOver(count, "b"))
	e.expectEvent(t, group, controller.ReasonShardsFreed)
}
