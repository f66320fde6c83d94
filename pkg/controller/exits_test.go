package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
)

func TestExits(t *testing.T) {
	a := proof.Process{Instance: "0123456789abcdef0123456789abcdef", Pod: "ns/a-0"}
	b := proof.Process{Instance: "fedcba9876543210fedcba9876543210", Pod: "ns/b-0"}
	x := newExits(30 * time.Minute)
	if !x.record(a, t0) || x.record(a, t0.Add(time.Second)) {
		t.Fatal("record: the first report is news, the same one again is not")
	}
	if got := x.exitedAt(a); !got.Equal(t0) {
		t.Errorf("exitedAt = %v, want when it was first read, %v", got, t0)
	}
	if !x.exitedAt(proof.Process{}).IsZero() || !x.exitedAt(b).IsZero() || !(*exits)(nil).exitedAt(a).IsZero() {
		t.Error("an exit for no process, an unknown one, or without the proof of death")
	}
	// The exit of a's instance as reported by another Pod (any container
	// may write any instance into its own termination message) is not a's.
	forged := proof.Process{Instance: a.Instance, Pod: "other/attacker"}
	x.record(forged, t0)
	if !x.exitedAt(proof.Process{Instance: a.Instance, Pod: "ns/a-1"}).IsZero() {
		t.Error("an exit reported by another Pod counts for the process")
	}
	// Kept for the candidate TTL (and at most a tenth longer), then
	// forgotten.
	x.record(b, t0.Add(29*time.Minute))
	x.record(proof.Process{Instance: "11111111111111111111111111111111", Pod: "ns/c-0"}, t0.Add(33*time.Minute))
	if !x.exitedAt(a).IsZero() || x.exitedAt(b).IsZero() || len(x.at) != 2 {
		t.Errorf("after 33 minutes: exits of a at %v, b at %v, %d kept; want a forgotten, b kept, 2", x.exitedAt(a), x.exitedAt(b), len(x.at))
	}
}

func TestSlimPod(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef"
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app-0", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"big": "value"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", RestartCount: 1,
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Message: proof.Marker(id) + "panic: boom\n"}}},
			{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
	slim, err := slimPod(full)
	if err != nil {
		t.Fatal(err)
	}
	want := []proof.Process{{Instance: id, Pod: "team/app-0"}}
	if got := podExits(full); !cmp.Equal(got, want) {
		t.Errorf("the Pod reports exits %v, want %v", got, want)
	}
	if got := podExits(slim); !cmp.Equal(got, want) {
		t.Errorf("the slim Pod reports exits %v, want %v", got, want)
	}
	pod := slim.(*metav1.PartialObjectMetadata)
	if pod.Name != "app-0" || pod.Namespace != "team" || pod.UID != "u1" || pod.ResourceVersion != "7" || pod.Labels != nil || len(pod.Annotations) != 1 {
		t.Errorf("slim Pod keeps more or less than it should: %+v", pod)
	}
	again, _ := slimPod(pod)
	if diff := cmp.Diff(slim, again); diff != "" {
		t.Errorf("slimPod is not idempotent (-once +twice):\n%s", diff)
	}
	// A Pod with no exit keeps nothing of its status.
	running := full.DeepCopy()
	running.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{}
	if s, _ := slimPod(running); s.(*metav1.PartialObjectMetadata).Annotations != nil || podExits(s) != nil {
		t.Errorf("slim Pod of a running one keeps %+v", s)
	}
}

// TestLeasesOfInstance: an exit concerns the Leases whose candidates
// registered the instance and those whose last renewal it made, and no
// other, even when their instances share the index's bucket.
func TestLeasesOfInstance(t *testing.T) {
	const dead, other = "ab000000000000000000000000000000", "ab111111111111111111111111111111"
	candidate := func(name, lease, id string) *coordinationv1beta1.LeaseCandidate {
		return &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
				Annotations: map[string]string{access.InstanceAnnotation: id, access.PodAnnotation: "ns/" + name}},
			Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: lease},
		}
	}
	stamped := func(name, holder, id string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: ptr.To(metav1.NewMicroTime(t0))},
		}
		proof.Stamp(l, proof.Process{Instance: id, Pod: "ns/" + holder})
		return l
	}
	candidates := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byInstanceIndex: indexByInstance})
	leases := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byHolderInstanceIndex: indexByHolderInstance})
	for _, lc := range []*coordinationv1beta1.LeaseCandidate{
		candidate("a", "registered", dead), candidate("b", "same-bucket", other), candidate("c", "unregistered", ""),
	} {
		if err := candidates.Add(lc); err != nil {
			t.Fatal(err)
		}
	}
	// "renewed": its candidate has registered the next instance already;
	// the Lease still carries the dead one's last renewal.
	for _, l := range []*coordinationv1.Lease{stamped("renewed", "d", dead), stamped("renewed-by-other", "e", other)} {
		if err := leases.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	got := leasesOfInstance(map[string][]cache.Indexer{"": {candidates}}, map[string][]cache.Indexer{"": {leases}}, dead)
	want := map[types.NamespacedName]bool{{Namespace: "ns", Name: "registered"}: true, {Namespace: "ns", Name: "renewed"}: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Leases of the dead instance (-want +got):\n%s", diff)
	}
}
