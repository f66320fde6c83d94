package controller

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/internal/simworld"
	candidatepkg "github.com/cle-dev/cle/pkg/candidate"
)

// The proof of death in the world (docs/design.md, "Proof of death"): in one
// run in simProofEvery, the controllers run with Pod informers, and each
// library candidate runs in a Pod of its own (<name>-<Lease> in its Lease's
// namespace), one process after another in its container. Each process is
// the library's with a ProofOfDeath of its own: a termination message file
// (a real file, one per process, as the kubelet makes one per container
// instance) and an instance ID drawn from the run's stream.
//
// The Pod's kubelet is modelled: it knows the truth at once (which process
// runs, what the last one that exited wrote into its file, read when it
// exited, as the kubelet does) and writes it to the Pod's status after a
// delay, as its status manager does: the container running (with the last
// exit as lastState), or terminated. Its reports are late (up to 2 s, and one
// in simKubeletPartitioned from a kubelet cut off from the API, 10 s to
// 90 s), lost (one in simKubeletLost: a later change reports the whole truth
// again), and reach the controllers through their Pod watches, late and in
// no order across Pods. A Pod is deleted with --force while its process
// runs on (one process in simForceDeleteEvery): the kubelet's reports of
// that Pod then fail, and the Pod is created again, with a new UID, when the
// candidate's next process starts. And one process in simForgeEvery has its
// instance named in the termination message of someone else's Pod, and one
// in simSiblingForgeEvery in that of another container of its own Pod: a
// sidecar that exits, or an ephemeral container added to debug the Pod
// (each half the time). Neither must count. Adopters' processes run a model
// of the library's elector, which stamps nothing: their terms end by expiry.
//
// All draws come from a stream of their own, so that the runs without the
// proof of death keep their schedules.
const (
	simProofEvery         = 3
	simKubeletLost        = 10
	simKubeletPartitioned = 20
	simForceDeleteEvery   = 8
	simForgeEvery         = 8
	simSiblingForgeEvery  = 4
)

// simPod is a candidate's Pod as its kubelet knows it.
type simPod struct {
	name string
	// uid is the Pod object's the kubelet writes to: a Pod created again
	// is another object, whose kubelet knows nothing of the old one.
	uid types.UID
	// running is the instance of the process running in the container
	// ("" when none); terminated the message of the current terminated
	// state; last the message of the last exit before the running process.
	running          string
	terminated, last string
	restarts         int32
	// sidecar and debug are the termination messages of the Pod's sidecar
	// container and of an ephemeral container, once they have exited ("":
	// running, or none).
	sidecar, debug string
}

// simTempDir is where runs with the proof of death keep their termination
// message files: TMPDIR when it is set, else /dev/shm where anyone may write
// there (a process start creates a file, and on a disk that was 4% of a
// run's CPU time), else the system's temporary directory.
func simTempDir() string {
	if os.Getenv("TMPDIR") == "" {
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() && fi.Mode().Perm()&0o002 != 0 {
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

// proofRun reports whether seed's run has the proof of death.
func proofRun(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x3c6ef372fe94f82b)).IntN(simProofEvery) == 0
}

// podProcessStarts gives a library process starting in c's Pod its proof of
// death, creating the Pod if there is none, and has the kubelet report it
// running.
func (w *simWorld) podProcessStarts(p *simProcess) *candidatepkg.ProofOfDeath {
	c := p.c
	if c.pod == nil {
		// Its own Pod, whatever other candidate shares its Identity.
		c.pod = &simPod{name: c.name + "-" + c.e.name}
	}
	pod := c.pod
	if w.Pod(simKey(c.e.ns, pod.name)) == nil {
		// A Pod created again is another object: its container's history
		// starts over.
		created, err := w.CreatePod(c.e.ns, pod.name, &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-" + c.name}}, "pod controller", w.podWatchers)
		if err != nil {
			panic(err)
		}
		pod.uid, pod.terminated, pod.last, pod.restarts, pod.sidecar, pod.debug = created.UID, "", "", 0, "", ""
	}
	id := fmt.Sprintf("%016x%016x", w.podRng.Uint64(), w.podRng.Uint64())
	w.podFiles++
	path := filepath.Join(w.podDir, fmt.Sprintf("%d", w.podFiles))
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		panic(err)
	}
	p.instance, p.messageFile = id, path
	if pod.terminated != "" {
		pod.last = pod.terminated
		pod.restarts++
	}
	pod.running, pod.terminated = id, ""
	w.kubeletReports(c)
	if w.podRng.IntN(simForgeEvery) == 0 {
		// Someone's Pod names this process in its own termination
		// message: instance IDs are public.
		w.After(simworld.DurationBetween(w.podRng, time.Second, time.Minute), func() { w.forgeExit(c, id) })
	}
	if w.podRng.IntN(simSiblingForgeEvery) == 0 {
		// Another container of its own Pod names it in its own
		// termination message and exits: the kubelet reports that
		// container terminated, truthfully.
		ephemeral, uid := w.podRng.IntN(2) == 0, pod.uid
		w.After(simworld.DurationBetween(w.podRng, time.Second, time.Minute), func() {
			if pod.uid != uid || pod.running != id {
				return
			}
			if ephemeral {
				w.faultOn(c, "exit-forged-by-ephemeral-container")
				pod.debug = proof.Marker(id)
			} else {
				w.faultOn(c, "exit-forged-by-sidecar")
				pod.sidecar = proof.Marker(id)
			}
			w.kubeletReports(c)
		})
	}
	if w.podRng.IntN(simForceDeleteEvery) == 0 {
		uid := pod.uid
		w.After(simworld.DurationBetween(w.podRng, time.Second, time.Minute), func() {
			if cur := w.Pod(simKey(c.e.ns, pod.name)); cur != nil && cur.UID == uid {
				w.faultOn(c, "pod-force-deleted")
				w.DeletePod(c.e.ns, pod.name, "kubectl delete --force", w.podWatchers)
			}
		})
	}
	return &candidatepkg.ProofOfDeath{TerminationMessagePath: path, Pod: c.e.ns + "/" + pod.name, Container: "app", Instance: id}
}

// forgeExit has a Pod of someone else's, in c's namespace, report as exited
// its container whose termination message names instance id (c's process).
func (w *simWorld) forgeExit(c *simCandidate, id string) {
	ns := c.e.ns
	w.faultOn(c, "exit-forged")
	const name = "mallory"
	if w.Pod(simKey(ns, name)) == nil {
		if _, err := w.CreatePod(ns, name, &corev1.Pod{}, "mallory", w.podWatchers); err != nil {
			panic(err)
		}
	}
	status := corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: proof.Marker(id)}}}}}
	if _, err := w.WritePodStatus(ns, name, w.Pod(simKey(ns, name)).UID, status, "mallory", w.podWatchers); err != nil {
		panic(err)
	}
}

// podProcessExits is the kubelet seeing p's container exit: it reads the
// termination message file now, and reports.
func (w *simWorld) podProcessExits(p *simProcess) {
	pod := p.c.pod
	if pod == nil || p.messageFile == "" || pod.running != p.instance {
		return
	}
	msg, err := os.ReadFile(p.messageFile)
	if err != nil {
		panic(err)
	}
	pod.running, pod.terminated = "", string(msg)
	w.kubeletReports(p.c)
}

// kubeletReports schedules the kubelet's next status write for c's Pod: of
// the truth as it is when the write is made.
func (w *simWorld) kubeletReports(c *simCandidate) {
	pod := c.pod
	if w.podRng.IntN(simKubeletLost) == 0 {
		w.faultOn(c, "kubelet-status-lost")
		return
	}
	delay := simworld.DurationBetween(w.podRng, 100*time.Millisecond, 2*time.Second)
	if w.podRng.IntN(simKubeletPartitioned) == 0 {
		w.faultOn(c, "kubelet-partitioned")
		delay = simworld.DurationBetween(w.podRng, 10*time.Second, 90*time.Second)
	}
	w.Late(w.Now.Add(delay))
	w.After(delay, func() {
		status := corev1.PodStatus{Phase: corev1.PodRunning}
		cs := corev1.ContainerStatus{Name: "app", RestartCount: pod.restarts}
		if pod.running != "" {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(w.Now.Truncate(time.Second))}
			if pod.last != "" {
				cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Message: pod.last}
			}
		} else {
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Message: pod.terminated}
			if pod.last != "" {
				cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Message: pod.last}
			}
		}
		status.ContainerStatuses = []corev1.ContainerStatus{cs, exitedOrRunning("sidecar", pod.sidecar)}
		if pod.debug != "" {
			status.EphemeralContainerStatuses = []corev1.ContainerStatus{exitedOrRunning("debug", pod.debug)}
		}
		if _, err := w.WritePodStatus(c.e.ns, pod.name, pod.uid, status, "kubelet", w.podWatchers); err != nil {
			w.Tracef("kubelet of %s: %v", pod.name, err)
		}
	})
}

// exitedOrRunning is the status of container name: terminated with message,
// or running when message is "".
func exitedOrRunning(name, message string) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: name}
	if message == "" {
		cs.State.Running = &corev1.ContainerStateRunning{}
	} else {
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Message: message}
	}
	return cs
}

// podWatchers are the watches Pod events go to: every controller's.
func (w *simWorld) podWatchers() []*simworld.Watcher {
	var out []*simworld.Watcher
	for _, sc := range w.ctrls {
		if sc.podWatch != nil {
			out = append(out, sc.podWatch)
		}
	}
	return out
}

// podObjects are the stored Pods, for a list.
func (w *simWorld) podObjects() []*corev1.Pod {
	var out []*corev1.Pod
	for _, key := range w.PodKeys() {
		out = append(out, w.Pod(key).DeepCopy())
	}
	return out
}
