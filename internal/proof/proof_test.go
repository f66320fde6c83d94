package proof

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

const (
	idA = "0123456789abcdef0123456789abcdef"
	idB = "fedcba9876543210fedcba9876543210"
)

func TestNewInstance(t *testing.T) {
	a, b := NewInstance(), NewInstance()
	if !ValidInstance(a) || !ValidInstance(b) || a == b {
		t.Fatalf("NewInstance drew %q and %q", a, b)
	}
	for _, bad := range []string{"", "0123", idA + "0", "0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcdeg"} {
		if ValidInstance(bad) {
			t.Errorf("ValidInstance(%q) = true", bad)
		}
	}
}

func TestInstancesIn(t *testing.T) {
	for _, tc := range []struct {
		message string
		want    []string
	}{
		{"", nil},
		{Marker(idA), []string{idA}},
		{Marker(idA) + "panic: nil map\n", []string{idA}},
		{"exit reason\r\n  " + Marker(idB), []string{idB}},
		{Marker(idA) + Marker(idB), []string{idA, idB}},
		{"cle.dev/instance=" + idA[:31], nil},                      // cut short
		{"said cle.dev/instance=" + idA, nil},                      // not a line of its own
		{"cle.dev/instance=" + idA + " and more", nil},             // not the whole line
		{"cle.dev/instance=0123456789ABCDEF0123456789ABCDEF", nil}, // not drawn by NewInstance
	} {
		if got := InstancesIn(tc.message); !slices.Equal(got, tc.want) {
			t.Errorf("InstancesIn(%q) = %v, want %v", tc.message, got, tc.want)
		}
	}
}

func TestExited(t *testing.T) {
	terminated := func(msg string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Message: msg}}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	a, b := Process{Instance: idA, Pod: "ns/p", Container: "app"}, Process{Instance: idB, Pod: "ns/p", Container: "app"}
	sidecar := Process{Instance: idA, Pod: "ns/p", Container: "sidecar"}
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		want   []Process
	}{
		{"running", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: running}}}, nil},
		{"terminated", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: terminated(Marker(idA))}}}, []Process{a}},
		{"restarted in place", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: running, LastTerminationState: terminated(Marker(idA))}}}, []Process{a}},
		{"an init container (a native sidecar)", corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: terminated(Marker(idB))}},
		}, []Process{b}},
		// A sibling container that writes a's instance into its own
		// message reports its own exit, not a's: a's container runs on.
		{"a sibling container names the instance", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", State: running}, {Name: "sidecar", State: terminated(Marker(idA))},
		}}, []Process{sidecar}},
		// Whoever may debug the Pod adds ephemeral containers: never read.
		{"an ephemeral container names the instance", corev1.PodStatus{
			ContainerStatuses:          []corev1.ContainerStatus{{Name: "app", State: running}},
			EphemeralContainerStatuses: []corev1.ContainerStatus{{Name: "debugger", State: terminated(Marker(idA))}},
		}, nil},
		// Pod garbage collection marks the Pods of a node that is gone
		// Failed without the kubelet: no container says it terminated.
		{"failed by pod GC", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{State: running}}}, nil},
		{"terminated without a marker", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: terminated("OOMKilled")}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Exited(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Status: tc.status}); !slices.Equal(got, tc.want) {
				t.Errorf("Exited = %v, want %v", got, tc.want)
			}
		})
	}
	if got := Exited(nil); got != nil {
		t.Errorf("Exited(nil) = %v", got)
	}
}

func TestStampAndHolderInstance(t *testing.T) {
	at := time.Date(2026, 11, 28, 4, 5, 6, 123456789, time.UTC)
	lease := func(holder string, renew time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: ptr.To(metav1.NewMicroTime(renew))}}
	}
	p := Process{Instance: idA, Pod: "ns/a-0", Container: "app"}
	stamped := lease("a", at)
	Stamp(stamped, p)
	if got := HolderProcess(stamped); got != p {
		t.Fatalf("HolderProcess of a stamped renewal = %+v, want %+v (stamp %q)", got, p, stamped.Annotations[access.HolderInstanceAnnotation])
	}
	// The stored MicroTime loses the nanoseconds: the stamp still matches.
	stored := stamped.DeepCopy()
	stored.Spec.RenewTime = ptr.To(metav1.NewMicroTime(at.Truncate(time.Microsecond)))
	if got := HolderInstance(stored); got != idA {
		t.Errorf("HolderInstance after the API's truncation = %q, want %q", got, idA)
	}

	for name, change := range map[string]func(l *coordinationv1.Lease){
		// Somebody else renewed, keeping the annotations (client-go's
		// elector under the same identity).
		"renewed by another writer": func(l *coordinationv1.Lease) {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(at.Add(2 * time.Second)))
		},
		// A controller named another holder, keeping renewTime and the
		// annotations.
		"another holder named": func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b") },
		"released":             func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") },
		"no renewTime":         func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil },
		"unstamped":            Unstamp,
		"malformed": func(l *coordinationv1.Lease) {
			l.Annotations[access.HolderInstanceAnnotation] = "not-an-id " + at.Format(time.RFC3339Nano) + " ns/a-0 a"
		},
		"no Pod": func(l *coordinationv1.Lease) {
			l.Annotations[access.HolderInstanceAnnotation] = idA + " " + at.UTC().Format(stampTime) + "  app a"
		},
		"no container": func(l *coordinationv1.Lease) {
			l.Annotations[access.HolderInstanceAnnotation] = idA + " " + at.UTC().Format(stampTime) + " ns/a-0  a"
		},
		// A stamp that names no container (written before containers
		// were named) proves nothing.
		"a stamp without a container": func(l *coordinationv1.Lease) {
			l.Annotations[access.HolderInstanceAnnotation] = idA + " " + at.UTC().Format(stampTime) + " ns/a-0 a"
		},
	} {
		l := stamped.DeepCopy()
		change(l)
		if got := HolderInstance(l); got != "" {
			t.Errorf("%s: HolderInstance = %q, want none", name, got)
		}
	}
	if HolderInstance(nil) != "" {
		t.Error("HolderInstance(nil) names an instance")
	}

	// A holder whose identity has spaces is still told apart.
	spaced := lease("a b", at)
	Stamp(spaced, p)
	if got := HolderProcess(spaced); got != p {
		t.Errorf("HolderProcess with holder %q = %+v, want %+v", "a b", got, p)
	}

	// Stamping with no process (or one whose Pod or container is unknown) removes an
	// earlier stamp, and the map when it is left empty.
	Stamp(stamped, Process{Instance: idA, Pod: "ns/a-0"})
	if stamped.Annotations != nil {
		t.Errorf("annotations after Stamp with no instance = %v, want none", stamped.Annotations)
	}
}

func TestCandidateProcess(t *testing.T) {
	want := Process{Instance: idA, Pod: "ns/a-0", Container: "app"}
	if got := CandidateProcess(map[string]string{access.InstanceAnnotation: idA, access.PodAnnotation: "ns/a-0", access.ContainerAnnotation: "app"}); got != want {
		t.Errorf("CandidateProcess = %+v, want %+v", got, want)
	}
	for _, annotations := range []map[string]string{
		{access.InstanceAnnotation: "x", access.PodAnnotation: "ns/a-0", access.ContainerAnnotation: "app"}, // malformed
		{access.InstanceAnnotation: idA, access.ContainerAnnotation: "app"},                                 // no Pod: nothing binds a report to it
		{access.InstanceAnnotation: idA, access.PodAnnotation: "ns/a-0"},                                    // no container: any of the Pod's could report it
		nil,
	} {
		if got := CandidateProcess(annotations); got.Known() {
			t.Errorf("CandidateProcess(%v) = %+v, want none", annotations, got)
		}
	}
}
