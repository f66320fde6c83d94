package access

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func newFakeDynamic(objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CandidateResource: CandidateKind + "List"}, objects...)
}

func newFakePortable(t *testing.T, kube *fake.Clientset, dyn *dynamicfake.FakeDynamicClient) Interface {
	t.Helper()
	acc, err := NewPortable(Clients{Kube: kube, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

// microTime is t at the precision the API stores.
func microTime(sec int64) *metav1.MicroTime {
	return ptr.To(metav1.NewMicroTime(time.Unix(sec, 123456000).UTC()))
}

func fullCandidate() *coordinationv1beta1.LeaseCandidate {
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{
			Name:              "c1",
			Namespace:         "ns",
			UID:               types.UID("0b0e5a3c-1d6e-4f5a-9f7e-0a1b2c3d4e5f"),
			ResourceVersion:   "42",
			Generation:        3,
			CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0).UTC()),
			Labels:            map[string]string{"app": "x"},
			Annotations:       map[string]string{"cle.dev/priority": "7"},
			Finalizers:        []string{"example.com/keep"},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "u"}},
		},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        "lease",
			PingTime:         microTime(1700000100),
			RenewTime:        microTime(1700000050),
			BinaryVersion:    "1.36.0",
			EmulationVersion: "1.35.0",
			Strategy:         coordinationv1.OldestEmulationVersion,
		},
	}
}

func TestCandidateConversionRoundTrip(t *testing.T) {
	for _, lc := range []*coordinationv1beta1.LeaseCandidate{
		fullCandidate(),
		{ObjectMeta: metav1.ObjectMeta{Name: "bare"}, Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: "l", BinaryVersion: "1.0.0", Strategy: "example.com/x"}},
	} {
		t.Run(lc.Name, func(t *testing.T) {
			u, err := CandidateToUnstructured(lc)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.GetAPIVersion(); got != "cle.dev/v1beta1" {
				t.Errorf("apiVersion = %q, want cle.dev/v1beta1", got)
			}
			if got := u.GetKind(); got != "LeaseCandidate" {
				t.Errorf("kind = %q, want LeaseCandidate", got)
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "creationTimestamp"); found != !lc.CreationTimestamp.IsZero() {
				t.Errorf("creationTimestamp present = %v, want %v", found, !lc.CreationTimestamp.IsZero())
			}
			back, err := CandidateFromUnstructured(u)
			if err != nil {
				t.Fatal(err)
			}
			if back.APIVersion != "" || back.Kind != "" {
				t.Errorf("TypeMeta = %+v, want empty as from a typed client", back.TypeMeta)
			}
			if !apiequality.Semantic.DeepEqual(back, lc) {
				t.Errorf("round trip changed the candidate:\n got %+v\nwant %+v", back, lc)
			}
		})
	}
}

func TestCandidateFromUnstructuredRejectsOtherKinds(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetName("x")
	if _, err := CandidateFromUnstructured(u); err == nil {
		t.Error("converted a ConfigMap into a LeaseCandidate, want an error")
	}
	// A malformed field is an error, not a silently zero value.
	bad, err := CandidateToUnstructured(fullCandidate())
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(bad.Object, int64(5), "spec", "leaseName"); err != nil {
		t.Fatal(err)
	}
	if _, err := CandidateFromUnstructured(bad); err == nil {
		t.Error("converted a candidate whose leaseName is a number, want an error")
	}
}

func TestPortableCandidateClient(t *testing.T) {
	ctx := context.Background()
	dyn := newFakeDynamic()
	acc := newFakePortable(t, fake.NewClientset(), dyn)
	if acc.Mode() != ModePortable {
		t.Fatalf("Mode() = %q, want portable", acc.Mode())
	}
	candidates := acc.LeaseCandidates("ns")

	want := fullCandidate()
	want.ResourceVersion, want.UID, want.CreationTimestamp = "", "", metav1.Time{}
	created, err := candidates.Create(ctx, want)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !apiequality.Semantic.DeepEqual(created.Spec, want.Spec) {
		t.Errorf("created spec = %+v, want %+v", created.Spec, want.Spec)
	}
	raw, err := dyn.Resource(CandidateResource).Namespace("ns").Get(ctx, "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("raw Get: %v", err)
	}
	if raw.GetAPIVersion() != "cle.dev/v1beta1" || raw.GetKind() != "LeaseCandidate" {
		t.Errorf("stored %s %s, want cle.dev/v1beta1 LeaseCandidate", raw.GetAPIVersion(), raw.GetKind())
	}
	if got, _, _ := unstructured.NestedString(raw.Object, "spec", "renewTime"); got != want.Spec.RenewTime.UTC().Format(metav1.RFC3339Micro) {
		t.Errorf("stored renewTime = %q, want %q", got, want.Spec.RenewTime.UTC().Format(metav1.RFC3339Micro))
	}

	got, err := candidates.Get(ctx, "c1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	got.Spec.RenewTime = microTime(1700000200)
	updated, err := candidates.Update(ctx, got)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if !updated.Spec.RenewTime.Equal(got.Spec.RenewTime) {
		t.Errorf("updated renewTime = %v, want %v", updated.Spec.RenewTime, got.Spec.RenewTime)
	}

	pre := &metav1.Preconditions{UID: ptr.To(types.UID("u1")), ResourceVersion: ptr.To("7")}
	if err := candidates.Delete(ctx, "c1", pre); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	var deleteOpts *metav1.DeleteOptions
	for _, a := range dyn.Actions() {
		if d, ok := a.(clienttesting.DeleteActionImpl); ok {
			deleteOpts = &d.DeleteOptions
		}
	}
	if deleteOpts == nil || !apiequality.Semantic.DeepEqual(deleteOpts.Preconditions, pre) {
		t.Errorf("delete options = %+v, want preconditions %+v", deleteOpts, pre)
	}
}

func TestPortableLeaseAnnotations(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	acc := newFakePortable(t, kube, newFakeDynamic())
	leases := acc.Leases("ns")
	raw := func() *coordinationv1.Lease {
		t.Helper()
		l, err := kube.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	in := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "l", Annotations: map[string]string{"other": "kept"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:  ptr.To("a"),
			Strategy:        ptr.To(coordinationv1.OldestEmulationVersion),
			PreferredHolder: ptr.To("b"),
			RenewTime:       microTime(1700000000),
		},
	}
	orig := in.DeepCopy()
	created, err := leases.Create(ctx, in)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !apiequality.Semantic.DeepEqual(in, orig) {
		t.Errorf("Create modified its argument")
	}
	if ptr.Deref(created.Spec.Strategy, "") != coordinationv1.OldestEmulationVersion || ptr.Deref(created.Spec.PreferredHolder, "") != "b" {
		t.Errorf("created spec = %+v, want strategy and preferredHolder from the annotations", created.Spec)
	}
	stored := raw()
	if stored.Spec.Strategy != nil || stored.Spec.PreferredHolder != nil {
		t.Errorf("stored spec carries strategy %v / preferredHolder %v, want them only in annotations", stored.Spec.Strategy, stored.Spec.PreferredHolder)
	}
	wantAnn := map[string]string{"other": "kept", StrategyAnnotation: "OldestEmulationVersion", PreferredHolderAnnotation: "b"}
	if !apiequality.Semantic.DeepEqual(stored.Annotations, wantAnn) {
		t.Errorf("stored annotations = %v, want %v", stored.Annotations, wantAnn)
	}

	// A holder's renewal: read through the layer, bump renewTime, write
	// back. The annotations must survive.
	for i := range 3 {
		l, err := leases.Get(ctx, "l")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		l.Spec.RenewTime = microTime(1700000001 + int64(i))
		if _, err := leases.Update(ctx, l); err != nil {
			t.Fatalf("Update: %v", err)
		}
		if got := raw().Annotations; !apiequality.Semantic.DeepEqual(got, wantAnn) {
			t.Fatalf("after renewal %d annotations = %v, want %v", i, got, wantAnn)
		}
	}

	// Handing over: preferredHolder cleared, so its annotation goes.
	l, err := leases.Get(ctx, "l")
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity, l.Spec.PreferredHolder = ptr.To("b"), nil
	updated, err := leases.Update(ctx, l)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if updated.Spec.PreferredHolder != nil {
		t.Errorf("updated preferredHolder = %q, want nil", *updated.Spec.PreferredHolder)
	}
	delete(wantAnn, PreferredHolderAnnotation)
	if got := raw().Annotations; !apiequality.Semantic.DeepEqual(got, wantAnn) {
		t.Errorf("after hand-over annotations = %v, want %v", got, wantAnn)
	}

	// An empty strategy is no strategy.
	updated.Spec.Strategy = ptr.To(coordinationv1.CoordinatedLeaseStrategy(""))
	if _, err := leases.Update(ctx, updated); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got := raw().Annotations; !apiequality.Semantic.DeepEqual(got, map[string]string{"other": "kept"}) {
		t.Errorf("after clearing the strategy annotations = %v, want only other", got)
	}
}

func TestLeaseFromStored(t *testing.T) {
	tests := []struct {
		name                    string
		ann                     map[string]string
		spec                    coordinationv1.LeaseSpec
		wantStrategy, wantPrefr *string
	}{
		{name: "no annotations"},
		{name: "annotations", ann: map[string]string{StrategyAnnotation: "example.com/s", PreferredHolderAnnotation: "p"}, wantStrategy: ptr.To("example.com/s"), wantPrefr: ptr.To("p")},
		{name: "empty annotations", ann: map[string]string{StrategyAnnotation: "", PreferredHolderAnnotation: ""}},
		{
			name: "native fields are not portable mode's",
			spec: coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.OldestEmulationVersion), PreferredHolder: ptr.To("n")},
			ann:  map[string]string{PreferredHolderAnnotation: "p"}, wantPrefr: ptr.To("p"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}, Spec: tc.spec}
			leaseFromStored(l)
			if got := (*string)(l.Spec.Strategy); !apiequality.Semantic.DeepEqual(got, tc.wantStrategy) {
				t.Errorf("strategy = %v, want %v", ptr.Deref(got, "<nil>"), ptr.Deref(tc.wantStrategy, "<nil>"))
			}
			if got := l.Spec.PreferredHolder; !apiequality.Semantic.DeepEqual(got, tc.wantPrefr) {
				t.Errorf("preferredHolder = %v, want %v", ptr.Deref(got, "<nil>"), ptr.Deref(tc.wantPrefr, "<nil>"))
			}
		})
	}
}

// TestPortableInformers checks that both informers' stores hold the typed,
// mapped objects and that handlers see them on add, update and delete.
func TestPortableInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	existing, err := CandidateToUnstructured(fullCandidate())
	if err != nil {
		t.Fatal(err)
	}
	existing.SetResourceVersion("")
	kube := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", Annotations: map[string]string{StrategyAnnotation: "OldestEmulationVersion"}},
	})
	dyn := newFakeDynamic(existing)
	acc := newFakePortable(t, kube, dyn)

	candInf := acc.NewCandidateInformer("ns", 0, nil)
	leaseInf := acc.NewLeaseInformer("ns", 0, nil)
	deleted := make(chan any, 1)
	if _, err := candInf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) { deleted <- obj }}); err != nil {
		t.Fatal(err)
	}
	go candInf.RunWithContext(ctx)
	go leaseInf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), candInf.HasSynced, leaseInf.HasSynced) {
		t.Fatal("caches not synced")
	}

	obj, exists, err := candInf.GetStore().GetByKey("ns/c1")
	if err != nil || !exists {
		t.Fatalf("candidate ns/c1 not in the store: exists=%v err=%v", exists, err)
	}
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		t.Fatalf("candidate store holds %T, want *LeaseCandidate", obj)
	}
	if lc.Spec.LeaseName != "lease" || lc.Spec.BinaryVersion != "1.36.0" {
		t.Errorf("stored candidate spec = %+v", lc.Spec)
	}
	obj, exists, err = leaseInf.GetStore().GetByKey("ns/l")
	if err != nil || !exists {
		t.Fatalf("lease ns/l not in the store: exists=%v err=%v", exists, err)
	}
	if l, ok := obj.(*coordinationv1.Lease); !ok || ptr.Deref(l.Spec.Strategy, "") != coordinationv1.OldestEmulationVersion {
		t.Errorf("lease store holds %#v, want a *Lease with spec.strategy from its annotation", obj)
	}

	// Watched changes arrive converted too.
	if _, err := acc.Leases("ns").Update(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns"},
		Spec:       coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.OldestEmulationVersion), PreferredHolder: ptr.To("z")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		obj, _, _ := leaseInf.GetStore().GetByKey("ns/l")
		l, _ := obj.(*coordinationv1.Lease)
		return l != nil && ptr.Deref(l.Spec.PreferredHolder, "") == "z", nil
	}); err != nil {
		t.Errorf("watched Lease update did not reach the store with preferredHolder z: %v", err)
	}

	if err := acc.LeaseCandidates("ns").Delete(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case obj := <-deleted:
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if _, ok := obj.(*coordinationv1beta1.LeaseCandidate); !ok {
			t.Errorf("delete handler got %T, want *LeaseCandidate", obj)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delete event for the candidate")
	}
}

func TestConvertWatch(t *testing.T) {
	src := watch.NewFakeWithChanSize(4, false)
	boom := errors.New("boom")
	w := convertWatch(src, func(obj runtime.Object) (runtime.Object, error) {
		if obj.(*coordinationv1.Lease).Name == "bad" {
			return nil, boom
		}
		return &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Name: "converted"}}, nil
	})
	status := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired}
	src.Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "good"}})
	src.Error(status)
	src.Modify(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bad"}})
	src.Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "pending"}})
	next := func() watch.Event {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
			return watch.Event{}
		}
	}
	if ev := next(); ev.Type != watch.Added || ev.Object.(*coordinationv1beta1.LeaseCandidate).Name != "converted" {
		t.Errorf("first event = %v %#v, want Added of the converted object", ev.Type, ev.Object)
	}
	if ev := next(); ev.Type != watch.Error || ev.Object != status {
		t.Errorf("second event = %v %#v, want the server's Error event unchanged", ev.Type, ev.Object)
	}
	if ev := next(); ev.Type != watch.Error {
		t.Errorf("third event = %v, want Error for an object that does not convert", ev.Type)
	}
	// The fourth event is taken from the source but never received: Stop
	// must still end the converting goroutine, which closes the result
	// channel.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(src.ResultChan()) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	w.Stop() // idempotent
	select {
	case <-w.(*convertingWatch).done:
	case <-time.After(10 * time.Second):
		t.Fatal("converting goroutine still running 10s after Stop, with an event nobody receives")
	}
}

// TestCandidateReference pins that each mode refers to a candidate where it
// is served: Events name it as their related object.
func TestCandidateReference(t *testing.T) {
	lc := &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a", ResourceVersion: "7"}}
	for _, tc := range []struct {
		acc        Interface
		apiVersion string
	}{
		{NewNative(fake.NewClientset()), "coordination.k8s.io/v1beta1"},
		{newFakePortable(t, fake.NewClientset(), newFakeDynamic()), "cle.dev/v1beta1"},
	} {
		got := tc.acc.CandidateReference(lc)
		want := corev1.ObjectReference{APIVersion: tc.apiVersion, Kind: "LeaseCandidate", Namespace: "ns", Name: "a", UID: "uid-a", ResourceVersion: "7"}
		if *got != want {
			t.Errorf("%s: %+v, want %+v", tc.acc.Mode(), *got, want)
		}
	}
}
