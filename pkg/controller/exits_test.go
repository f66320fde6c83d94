package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
)

func TestExits(t *testing.T) {
	a := proof.Process{Instance: "0123456789abcdef0123456789abcdef", Pod: "ns/a-0", Container: "app"}
	b := proof.Process{Instance: "fedcba9876543210fedcba9876543210", Pod: "ns/b-0", Container: "app"}
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
	forged := proof.Process{Instance: a.Instance, Pod: "other/attacker", Container: "app"}
	x.record(forged, t0)
	if !x.exitedAt(proof.Process{Instance: a.Instance, Pod: "ns/a-1", Container: "app"}).IsZero() {
		t.Error("an exit reported by another Pod counts for the process")
	}
	// Nor as reported by a sibling container of its own Pod.
	x.record(proof.Process{Instance: b.Instance, Pod: b.Pod, Container: "sidecar"}, t0)
	if !x.exitedAt(b).IsZero() {
		t.Error("an exit reported by a sibling container counts for the process")
	}
	// Kept for the candidate TTL (and at most a tenth longer), then
	// forgotten.
	x.record(b, t0.Add(29*time.Minute))
	x.record(proof.Process{Instance: "11111111111111111111111111111111", Pod: "ns/c-0", Container: "app"}, t0.Add(33*time.Minute))
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
	want := []proof.Process{{Instance: id, Pod: "team/app-0", Container: "app"}}
	if got := podExits(full); !cmp.Equal(got, want) {
		t.Errorf("the Pod reports exits %v, want %v", got, want)
	}
	if got := podExits(slim); !cmp.Equal(got, want) {
		t.Errorf("the slim Pod reports exits %v, want %v", got, want)
	}
	if got, want := slim, (&podReport{namespace: "team", name: "app-0", exited: "app " + id + "\n"}); !cmp.Equal(got, want, cmp.AllowUnexported(podReport{})) {
		t.Errorf("slim Pod keeps more or less than it should: %+v, want %+v", got, want)
	}
	again, _ := slimPod(slim)
	if again != slim {
		t.Error("slimPod is not idempotent")
	}
	// A Pod with no exit keeps nothing of its status.
	running := full.DeepCopy()
	running.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{}
	if s, _ := slimPod(running); s.(*podReport).exited != "" || podExits(s) != nil {
		t.Errorf("slim Pod of a running one keeps %+v", s)
	}
}

// TestPodWatch: the proof of death's Pod watch, on a fake client, tells its
// handlers of each Pod whose status reports a new exit (a handler added
// later, of every report held) and keeps nothing of Pods that report none.
func TestPodWatch(t *testing.T) {
	const id, id2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	pod := func(name, rv string, ids ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, ResourceVersion: rv}}
		for _, id := range ids {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "app",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: proof.Marker(id)}}})
		}
		return p
	}
	client := fake.NewClientset(pod("quiet", "1"), pod("exited", "2", id))
	// The fake's watch does not replay what happened before it began: wait
	// for it before writing.
	watching := make(chan struct{}, 1)
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		watching <- struct{}{}
		return true, w, err
	})
	w := NewPodWatch(client, "team", "")
	reports := make(chan []proof.Process, 10)
	handler := cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { reports <- podExits(obj) }}
	reg, err := w.AddEventHandler(handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("no sync")
	}
	next := func(what string) []proof.Process {
		t.Helper()
		select {
		case got := <-reports:
			return got
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatalf("%s: not told", what)
			return nil
		}
	}
	if got, want := next("the list"), []proof.Process{{Instance: id, Pod: "team/exited", Container: "app"}}; !cmp.Equal(got, want) {
		t.Errorf("the list reports %v, want %v", got, want)
	}
	w.mu.Lock()
	if _, ok := w.reports["team/quiet"]; ok || len(w.reports) != 1 {
		t.Errorf("the watch holds %v, want the one Pod that reports an exit", w.reports)
	}
	w.mu.Unlock()
	<-watching
	// An exit reported by a status update; a status that reports no new
	// exit is not news.
	if _, err := client.CoreV1().Pods("team").UpdateStatus(ctx, pod("quiet", "3", id2), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("team").UpdateStatus(ctx, pod("exited", "4", id), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("team").Delete(ctx, "exited", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := next("the update"), []proof.Process{{Instance: id2, Pod: "team/quiet", Container: "app"}}; !cmp.Equal(got, want) {
		t.Errorf("the update reports %v, want %v", got, want)
	}
	// A handler added now is told of what is held.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.reports) == 1, nil
	}); err != nil {
		t.Fatalf("the deleted Pod's report is still held: %v", w.reports)
	}
	late, err := w.AddEventHandler(handler)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := next("a handler added late"), []proof.Process{{Instance: id2, Pod: "team/quiet", Container: "app"}}; !cmp.Equal(got, want) {
		t.Errorf("a handler added late is told %v, want %v", got, want)
	}
	if err := w.RemoveEventHandler(late); err != nil {
		t.Fatal(err)
	}
	if err := w.RemoveEventHandler(late); err == nil {
		t.Error("a handler removed twice")
	}
	select {
	case got := <-reports:
		t.Errorf("told again: %v", got)
	default:
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
				Annotations: map[string]string{access.InstanceAnnotation: id, access.PodAnnotation: "ns/" + name, access.ContainerAnnotation: "app"}},
			Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: lease},
		}
	}
	stamped := func(name, holder, id string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: ptr.To(metav1.NewMicroTime(t0))},
		}
		proof.Stamp(l, proof.Process{Instance: id, Pod: "ns/" + holder, Container: "app"})
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
