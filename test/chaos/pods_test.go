package chaos

import (
	"fmt"
	"os"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The proof of death under chaos. The candidates of the library and on
// pkg/lock run "in Pods": each has a Pod object named after it, whose status
// the test writes as a kubelet would, and a termination message file of its
// own for each run. cle-controller runs with --proof-of-death. The fault
// killReported SIGKILLs the leader and then, as its kubelet, reports the
// exit at once, late (after the dead leader's Lease has run out), never
// (the kubelet cut off from kube-apiserver), or has the Pod deleted with
// --force instead; the checks are those of every fault: no two leaders act
// at once, the witness never sees an older term after a newer one, and the
// best live candidate leads again within the bound.

// createPod creates the running Pod of candidate name.
func (e *env) createPod(name string) {
	e.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: "node-" + name, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "candidate", Image: "example.com/candidate:1"}}},
	}
	created, err := server.Client().CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create Pod %s: %v", name, err)
	}
	e.writeStatus(created, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}, corev1.ContainerState{})
}

// writeStatus writes the Pod's status as its kubelet does.
func (e *env) writeStatus(pod *corev1.Pod, state, last corev1.ContainerState) error {
	pod = pod.DeepCopy()
	restarts := int32(0)
	if len(pod.Status.ContainerStatuses) > 0 {
		restarts = pod.Status.ContainerStatuses[0].RestartCount
	}
	if last.Terminated != nil {
		restarts++
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "candidate", Image: "example.com/candidate:1", State: state, LastTerminationState: last, RestartCount: restarts,
		Ready: state.Running != nil,
	}}}
	_, err := server.Client().CoreV1().Pods(e.ns).UpdateStatus(e.ctx, pod, metav1.UpdateOptions{})
	return err
}

// killReported SIGKILLs the leader (one in a Pod; another fault if none
// leads) and acts as its kubelet, then restarts it in its Pod.
func killReported(e *env) error {
	p, err := e.theLeader()
	if err != nil {
		return err
	}
	if p.messageDir == "" {
		return e.killLeader("leader-sigkill-reported", syscall.SIGKILL)
	}
	way := [...]string{"at once", "at once", "at once", "late", "never", "force-delete"}[e.rng.IntN(6)]
	e.t.Logf("    SIGKILL %s, its kubelet reporting %s", p.name, way)
	from := time.Now()
	file := p.messageFile
	if err := p.kill(syscall.SIGKILL, 15*time.Second); err != nil {
		return err
	}
	msg, err := os.ReadFile(file) // as the kubelet does once the container exited
	if err != nil {
		return err
	}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", Message: string(msg), FinishedAt: metav1.Now()}}
	report := func() error {
		pod, err := server.Client().CoreV1().Pods(e.ns).Get(e.ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the kubelet of %s: %w", p.name, err)
		}
		return e.writeStatus(pod, exited, corev1.ContainerState{})
	}
	switch way {
	case "at once":
		e.pause(time.Duration(e.rng.IntN(1500)) * time.Millisecond)
		if err := report(); err != nil {
			return err
		}
	case "force-delete":
		zero := int64(0)
		if err := server.Client().CoreV1().Pods(e.ns).Delete(e.ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return err
		}
	}
	e.waitHealthy("leader-sigkill-reported", "the SIGKILL of "+p.name+" (reported "+way+")", from, stuckAfter)
	if way == "late" {
		if err := report(); err != nil {
			return err
		}
	}
	e.pause(time.Duration(e.rng.IntN(1000)) * time.Millisecond)
	from = time.Now()
	if way == "force-delete" {
		// Its replacement, a Pod of its own with no history.
		e.createPod(p.name)
		if err := p.start(); err != nil {
			return err
		}
	} else {
		if err := p.start(); err != nil {
			return err
		}
		// The kubelet reports the container running again, its last exit
		// kept.
		pod, err := server.Client().CoreV1().Pods(e.ns).Get(e.ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := e.writeStatus(pod, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}, exited); err != nil {
			return err
		}
	}
	e.waitHealthy("leader-sigkill-reported", "the restart of "+p.name, from, stuckAfter)
	return nil
}
