package access

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestStripManagedFields runs the transform on both modes' informers: their
// stores hold the objects without managedFields and with everything else,
// in particular what a write back from the cache must keep.
func TestStripManagedFields(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	managed := []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: ptr.To(metav1.Now())}}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: "l", Namespace: "ns", ManagedFields: managed,
			Labels: map[string]string{"app": "x"}, Annotations: map[string]string{StrategyAnnotation: "OldestEmulationVersion", "other": "kept"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n", UID: "u"}},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a")},
	}
	cand := fullCandidate()
	cand.ManagedFields = managed
	candU, err := CandidateToUnstructured(cand)
	if err != nil {
		t.Fatal(err)
	}
	candU.SetResourceVersion("")
	nativeCand := cand.DeepCopy()
	nativeCand.ResourceVersion = ""

	kube := fake.NewClientset(lease, nativeCand)
	portableAcc := newFakePortable(t, kube, newFakeDynamic(candU))
	for _, acc := range []Interface{NewNative(kube), portableAcc} {
		t.Run(string(acc.Mode()), func(t *testing.T) {
			leaseInf := acc.NewLeaseInformer("ns", 0, nil)
			candInf := acc.NewCandidateInformer("ns", 0, nil)
			for _, inf := range []cache.SharedIndexInformer{leaseInf, candInf} {
				if err := inf.SetTransform(StripManagedFields); err != nil {
					t.Fatal(err)
				}
				go inf.RunWithContext(ctx)
			}
			syncCtx, cancelSync := context.WithTimeout(ctx, 10*time.Second)
			defer cancelSync()
			if !cache.WaitForCacheSync(syncCtx.Done(), leaseInf.HasSynced, candInf.HasSynced) {
				t.Fatal("caches not synced")
			}
			obj, ok, err := leaseInf.GetStore().GetByKey("ns/l")
			if err != nil || !ok {
				t.Fatalf("Lease not cached: %v", err)
			}
			got := obj.(*coordinationv1.Lease)
			if got.ManagedFields != nil {
				t.Errorf("cached Lease has managedFields %v", got.ManagedFields)
			}
			if got.Labels["app"] != "x" || got.Annotations["other"] != "kept" || len(got.OwnerReferences) != 1 || ptr.Deref(got.Spec.HolderIdentity, "") != "a" {
				t.Errorf("cached Lease lost more than managedFields: %+v", got)
			}
			obj, ok, err = candInf.GetStore().GetByKey("ns/c1")
			if err != nil || !ok {
				t.Fatalf("LeaseCandidate not cached: %v", err)
			}
			gotCand := obj.(interface {
				GetManagedFields() []metav1.ManagedFieldsEntry
			})
			if mf := gotCand.GetManagedFields(); mf != nil {
				t.Errorf("cached LeaseCandidate has managedFields %v", mf)
			}
		})
	}
	// Idempotent, and harmless on what is not an object.
	if _, err := StripManagedFields(lease); err != nil {
		t.Fatal(err)
	}
	if _, err := StripManagedFields(cache.DeletedFinalStateUnknown{Key: "ns/l"}); err != nil {
		t.Fatal(err)
	}
}
