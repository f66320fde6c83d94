// Package proof holds the rule by which a holder's term may end before its
// Lease expires: proof, from the kubelet, that the process instance holding
// the term has exited.
//
// The binding between a process and the kubelet's report is exact, not
// inferred from clocks. Each process draws a random instance ID when it
// starts and writes it into its container's termination message file (the
// file the kubelet reads, per container instance, once that instance has
// exited, and reports as state.terminated.message). The kubelet creates that
// file anew for every instance of a container, so a terminated state whose
// message carries the ID reports the exit of the container instance that ran
// the process, and with it the exit of every process in that container. The
// process registers the ID on its LeaseCandidate, and each renewal it makes
// of the Lease carries the ID together with the renewTime it writes, so that
// the controller knows which instance made the Lease's last renewal: another
// writer of the Lease (a client-go elector of the same identity, a controller
// naming the next holder) writes another renewTime, and the stamp no longer
// matches.
//
// A report counts only from the container the process registered, in its Pod
// (its LeaseCandidate says which, and the process's own stamps on the Lease
// say it too): instance IDs are public, and any container may write anything
// into its own termination message, a sidecar or an ephemeral debug
// container of the holder's own Pod as well as another Pod's; only the
// kubelet (and whoever may write the status of that very Pod) reports the
// holder's container. Ephemeral containers never count: they are added to a
// running Pod by whoever may debug it, and run none of its own processes.
//
// Everything short of that report is not proof: a Pod deleted (with --force,
// its process may run on a partitioned node), a node NotReady, a Pod phase
// of Failed set by Pod garbage collection, a status that is missing, late or
// says nothing of the instance. Those Leases expire as they always did.
//
// The package is pure: it reads and builds objects, and reads no clock.
package proof

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/pkg/access"
)

// markerPrefix starts the line of a termination message that names the
// process instance: "cle.dev/instance=<id>".
const markerPrefix = access.InstanceAnnotation + "="

// idLen is the length of an instance ID: 16 random bytes in hex.
const idLen = 32

// NewInstance draws a new instance ID.
func NewInstance() string {
	var b [idLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ValidInstance reports whether id has the form NewInstance draws. Only
// such IDs are read from termination messages and annotations, so that no
// text a process writes about something else is taken for one.
func ValidInstance(id string) bool {
	if len(id) != idLen {
		return false
	}
	for _, r := range id {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// Marker is the line a process with instance id writes into its termination
// message file.
func Marker(id string) string { return markerPrefix + id + "\n" }

// InstancesIn returns the instance IDs that a termination message names.
func InstancesIn(message string) []string {
	var ids []string
	for line := range strings.Lines(message) {
		line = strings.TrimSpace(line)
		if id, ok := strings.CutPrefix(line, markerPrefix); ok && ValidInstance(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// Process is one process instance, the Pod it runs in ("namespace/name") and
// the name of its container in that Pod.
type Process struct {
	Instance, Pod, Container string
}

// Known reports whether all three are known: only then can an exit be
// proven.
func (p Process) Known() bool { return p.Instance != "" && p.Pod != "" && p.Container != "" }

// PodOf is the Pod of a Process: the Pod's namespace/name.
func PodOf(namespace, name string) string { return namespace + "/" + name }

// Exited returns the processes that pod's status reports exited: the
// instances named by the message of a terminated state, current or last, of
// one of its init or regular containers, each in that container of this Pod.
// Nothing else in the status is taken as proof; ephemeral containers are
// not read (see the package comment).
func Exited(pod *corev1.Pod) []Process {
	if pod == nil {
		return nil
	}
	var out []Process
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if t == nil {
					continue
				}
				for _, id := range InstancesIn(t.Message) {
					out = append(out, Process{Instance: id, Pod: PodOf(pod.Namespace, pod.Name), Container: cs.Name})
				}
			}
		}
	}
	return out
}

// stampTime is how a stamp writes the renewTime: as the API stores a
// MicroTime.
const stampTime = "2006-01-02T15:04:05.000000Z07:00"

// Stamp marks lease, a renewal about to be written by process p, as written
// by it: HolderInstanceAnnotation carries the instance ID, the renewTime the
// renewal writes, the Pod, the container and the holder it names. A process not Known
// removes any stamp.
func Stamp(lease *coordinationv1.Lease, p Process) {
	if !p.Known() || lease.Spec.RenewTime == nil || lead.HolderOf(lease) == "" {
		Unstamp(lease)
		return
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[access.HolderInstanceAnnotation] = stampOf(p, lease)
}

// stampOf is the stamp of a renewal of lease by process p.
func stampOf(p Process, lease *coordinationv1.Lease) string {
	return stampFor(p, lead.HolderOf(lease), lease.Spec.RenewTime.Time)
}

// stampFor is the stamp of a renewal by process p naming holder at renewTime.
func stampFor(p Process, holder string, renewTime time.Time) string {
	return p.Instance + " " + lead.AtMicro(renewTime).UTC().Format(stampTime) + " " + p.Pod + " " + p.Container + " " + holder
}

// Unstamp removes the stamp: a write that names another holder, or nobody,
// is no renewal of the instance's.
func Unstamp(lease *coordinationv1.Lease) {
	if _, ok := lease.Annotations[access.HolderInstanceAnnotation]; ok {
		delete(lease.Annotations, access.HolderInstanceAnnotation)
		if len(lease.Annotations) == 0 {
			lease.Annotations = nil
		}
	}
}

// HolderProcess returns the process that made the Lease's last renewal: the
// stamp's, if the stamp's renewTime and holder are the Lease's. None when the
// Lease does not say: no stamp, or one left over from a write of somebody
// else's that kept the annotations (a client-go elector renewing under the
// same identity, kube-apiserver's controller naming a holder).
func HolderProcess(lease *coordinationv1.Lease) Process {
	if lease == nil || lease.Spec.RenewTime == nil {
		return Process{}
	}
	return ProcessOf(lease.Annotations[access.HolderInstanceAnnotation], lead.HolderOf(lease), lease.Spec.RenewTime.Time)
}

// ProcessOf is HolderProcess of a Lease whose stamp (the value of
// HolderInstanceAnnotation), holder and renewTime are given: for a reader
// that kept those of a Lease rather than the Lease.
func ProcessOf(stamp, holder string, renewTime time.Time) Process {
	if holder == "" || stamp == "" || renewTime.IsZero() {
		return Process{}
	}
	f := strings.SplitN(stamp, " ", 5)
	if len(f) != 5 || !ValidInstance(f[0]) || f[2] == "" || f[3] == "" {
		return Process{}
	}
	p := Process{Instance: f[0], Pod: f[2], Container: f[3]}
	if stamp != stampFor(p, holder, renewTime) {
		return Process{}
	}
	return p
}

// HolderInstance is the instance of HolderProcess, "" for none.
func HolderInstance(lease *coordinationv1.Lease) string { return HolderProcess(lease).Instance }

// CandidateProcess returns the process a LeaseCandidate registers (its
// annotations), none unless its instance, its Pod and its container are all
// there.
func CandidateProcess(annotations map[string]string) Process {
	p := Process{Instance: annotations[access.InstanceAnnotation], Pod: annotations[access.PodAnnotation],
		Container: annotations[access.ContainerAnnotation]}
	if !ValidInstance(p.Instance) || !p.Known() {
		return Process{}
	}
	return p
}
