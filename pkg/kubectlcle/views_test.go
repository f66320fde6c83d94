package kubectlcle

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestSchemeKnowsTheKinds(t *testing.T) {
	for kind, obj := range map[string]runtime.Object{
		KindLeaseStatus: &LeaseStatus{}, KindLeaseStatusList: &LeaseStatusList{}, KindLeaseDescription: &LeaseDescription{}, KindLeaseChange: &LeaseChange{},
	} {
		gvks, _, err := Scheme.ObjectKinds(obj)
		if err != nil || len(gvks) != 1 || gvks[0] != SchemeGroupVersion.WithKind(kind) {
			t.Errorf("%T: %v, %v; want %s", obj, gvks, err, SchemeGroupVersion.WithKind(kind))
		}
	}
}

// TestDeepCopy: a copy equals its original, and changing what any pointer
// or slice of the copy points to leaves the original alone.
func TestDeepCopy(t *testing.T) {
	at := func(d time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(d))) }
	status := LeaseStatus{TypeMeta: typeMeta(KindLeaseStatus), Namespace: "ns", Name: "a", Holder: "h", Created: ptr.To(metav1.NewTime(now)), RenewTime: at(0)}
	list := NewLeaseStatusList([]LeaseStatus{status}, &ElectionControllerStatus{Lock: "kube-system/x", Since: ptr.To(metav1.NewTime(now)), RenewTime: at(0)})
	desc := &LeaseDescription{TypeMeta: typeMeta(KindLeaseDescription), Status: status, ElectionController: list.ElectionController.DeepCopy(),
		Candidates: []CandidateStatus{{Name: "c", RenewTime: at(0), PingTime: at(time.Second), Roles: []string{"holder"}}},
		Events:     []EventStatus{{Time: metav1.NewTime(now), Reason: "LeaderElected"}}}
	change := &LeaseChange{TypeMeta: typeMeta(KindLeaseChange), Time: *at(0), Changes: []string{"holder a -> b"}, Lease: status}

	for _, tc := range []struct {
		obj    runtime.Object
		mutate func(runtime.Object)
	}{
		{obj: &status, mutate: func(o runtime.Object) {
			c := o.(*LeaseStatus)
			c.Created.Time = c.Created.Add(time.Hour)
			c.RenewTime.Time = c.RenewTime.Add(time.Hour)
		}},
		{obj: list, mutate: func(o runtime.Object) {
			c := o.(*LeaseStatusList)
			c.Items[0].Holder = "other"
			c.Items[0].RenewTime.Time = c.Items[0].RenewTime.Add(time.Hour)
			c.ElectionController.Since.Time = c.ElectionController.Since.Add(time.Hour)
			c.ElectionController.RenewTime.Time = c.ElectionController.RenewTime.Add(time.Hour)
		}},
		{obj: desc, mutate: func(o runtime.Object) {
			c := o.(*LeaseDescription)
			c.Status.Created.Time = c.Status.Created.Add(time.Hour)
			c.ElectionController.Lock = "changed"
			c.Candidates[0].Roles[0] = "changed"
			c.Candidates[0].PingTime.Time = c.Candidates[0].PingTime.Add(time.Hour)
			c.Events[0].Reason = "changed"
		}},
		{obj: change, mutate: func(o runtime.Object) {
			c := o.(*LeaseChange)
			c.Changes[0] = "changed"
			c.Lease.RenewTime.Time = c.Lease.RenewTime.Add(time.Hour)
		}},
	} {
		orig := tc.obj
		before, err := json.Marshal(orig)
		if err != nil {
			t.Fatal(err)
		}
		cp := tc.obj.DeepCopyObject()
		if !equality.Semantic.DeepEqual(cp, orig) {
			t.Errorf("%T: the copy differs from the original", orig)
		}
		tc.mutate(cp)
		if after, _ := json.Marshal(orig); string(after) != string(before) {
			t.Errorf("%T: changing the copy changed the original:\n%s\nwas\n%s", orig, after, before)
		}
	}
	var nilStatus *LeaseStatus
	if nilStatus.DeepCopyObject() != nil {
		t.Error("a nil LeaseStatus copies to a non-nil runtime.Object")
	}
}
