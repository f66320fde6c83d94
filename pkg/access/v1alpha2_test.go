package access

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func sampleCandidate() *coordinationv1beta1.LeaseCandidate {
	now := metav1.NewMicroTime(time.Date(2026, 11, 23, 10, 0, 0, 123000, time.UTC))
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "example-a", Labels: map[string]string{"app": "example"}, ResourceVersion: "7"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: "example", PingTime: &now, RenewTime: ptr.To(metav1.NewMicroTime(now.Add(time.Second))),
			BinaryVersion: "1.36.0", EmulationVersion: "1.35.0", Strategy: coordinationv1.OldestEmulationVersion,
		},
	}
}

func TestV1alpha2Conversion(t *testing.T) {
	in := sampleCandidate()
	if out := v1alpha2ToBeta(betaToV1alpha2(in)); !apiequality.Semantic.DeepEqual(in, out) {
		t.Errorf("v1beta1 -> v1alpha2 -> v1beta1 changed the candidate:\n%#v\nwant\n%#v", out, in)
	}
	out := betaToV1alpha2(in)
	out.Spec.PingTime.Time = time.Time{}
	out.Labels["app"] = "changed"
	if in.Spec.PingTime.IsZero() || in.Labels["app"] != "example" {
		t.Error("the conversion shares memory with its input")
	}
}

// TestV1alpha2Access drives native mode over v1alpha2: what is written is a
// v1alpha2 object, and what is read (directly and through the informer) is
// the same candidate as v1beta1.
func TestV1alpha2Access(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fake.NewClientset()
	acc := &native{client: kube, candidates: v1alpha2CandidateAPI}

	want := sampleCandidate()
	want.ResourceVersion = ""
	created, err := acc.LeaseCandidates("ns").Create(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := kube.CoordinationV1alpha2().LeaseCandidates("ns").Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the candidate is not stored as v1alpha2: %v", err)
	}
	if stored.Spec.EmulationVersion != "1.35.0" || stored.Spec.LeaseName != "example" {
		t.Errorf("stored v1alpha2 spec = %+v", stored.Spec)
	}
	if !apiequality.Semantic.DeepEqual(want.Spec, created.Spec) {
		t.Errorf("Create returned the spec %+v, want %+v", created.Spec, want.Spec)
	}

	inf := acc.NewCandidateInformer("ns", 0, nil)
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	got, ok := inf.GetStore().List()[0].(*coordinationv1beta1.LeaseCandidate)
	if !ok || got.Spec.BinaryVersion != "1.36.0" {
		t.Fatalf("informer holds %#v, want the v1beta1 candidate", inf.GetStore().List()[0])
	}

	// A change made through the access layer reaches the informer converted.
	got = got.DeepCopy()
	got.Spec.BinaryVersion = "1.37.0"
	if _, err := acc.LeaseCandidates("ns").Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		obj, exists, _ := inf.GetStore().GetByKey("ns/example-a")
		lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
		return exists && ok && lc.Spec.BinaryVersion == "1.37.0", nil
	})
	if err != nil {
		t.Fatalf("the informer did not see the update: %v", err)
	}
	if err := acc.LeaseCandidates("ns").Delete(ctx, "example-a", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoordinationV1alpha2().LeaseCandidates("ns").Get(ctx, "example-a", metav1.GetOptions{}); err == nil {
		t.Error("the v1alpha2 candidate is still there after Delete")
	}
}
