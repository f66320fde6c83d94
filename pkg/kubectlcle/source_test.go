package kubectlcle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

func fakeSource(objects ...runtime.Object) (Source, *fake.Clientset) {
	kube := fake.NewClientset(objects...)
	return Source{Access: access.NewNative(kube), Kube: kube}, kube
}

func namedLease(ns, name string, labels map[string]string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.OldestEmulationVersion)}}
}

// TestSnapshotSelectors: -A leaves kube-node-lease out and -l selects
// Leases, both in the requests, for the server to apply.
func TestSnapshotSelectors(t *testing.T) {
	for _, tc := range []struct {
		name          string
		namespace     string
		exclude       []string
		leaseSelector string
		wantLeases    string // field selector, label selector of the Lease list
		wantCands     string
	}{
		{name: "all namespaces", exclude: []string{"kube-node-lease"},
			wantLeases: "metadata.namespace!=kube-node-lease|", wantCands: "metadata.namespace!=kube-node-lease|"},
		{name: "all namespaces with node Leases", wantLeases: "|", wantCands: "|"},
		{name: "one namespace", namespace: "kube-node-lease", exclude: []string{"kube-node-lease"}, wantLeases: "|", wantCands: "|"},
		{name: "selector", namespace: "ns", leaseSelector: "app=x", wantLeases: "|app=x", wantCands: "|"},
		{name: "both", exclude: []string{"kube-node-lease", "other"}, leaseSelector: "app=x",
			wantLeases: "metadata.namespace!=kube-node-lease,metadata.namespace!=other|app=x", wantCands: "metadata.namespace!=kube-node-lease,metadata.namespace!=other|"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			src, kube := fakeSource(namedLease("ns", "a", map[string]string{"app": "x"}), namedLease("ns", "b", nil))
			src.ExcludeNamespaces, src.LeaseSelector = tc.exclude, tc.leaseSelector
			leases, _, err := src.Snapshot(ctx, tc.namespace)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, a := range kube.Actions() {
				if l, ok := a.(clienttesting.ListAction); ok {
					r := l.GetListRestrictions()
					got[a.GetResource().Resource] = r.Fields.String() + "|" + r.Labels.String()
				}
			}
			if got["leases"] != tc.wantLeases || got["leasecandidates"] != tc.wantCands {
				t.Errorf("lists of leases %q, leasecandidates %q; want %q, %q", got["leases"], got["leasecandidates"], tc.wantLeases, tc.wantCands)
			}
			if tc.leaseSelector != "" && (len(leases) != 1 || leases[0].Name != "a") {
				t.Errorf("the selector does not select Lease a alone: %v", leases)
			}
		})
	}
}

// TestSnapshotForbidden: a denied list ends the snapshot with the error and
// what grants the right, instead of retrying for ever.
func TestSnapshotForbidden(t *testing.T) {
	for _, resource := range []string{"leases", "leasecandidates"} {
		t.Run(resource, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			src, kube := fakeSource()
			kube.PrependReactor("list", resource, func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: resource}, "", errors.New(`User "viewer" cannot list resource`))
			})
			_, _, err := src.Snapshot(ctx, "ns")
			if err == nil || ctx.Err() != nil {
				t.Fatalf("Snapshot: %v (context: %v), want the Forbidden error at once", err, ctx.Err())
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cle-viewer") {
				t.Errorf("error %q is not Forbidden or does not name cle-viewer", err)
			}
		})
	}
}

func TestSourceElectionController(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lock := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: access.NativeControllerLock},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("apiserver-x"), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: ptr.To(metav1.NewMicroTime(now.Add(-time.Minute))), RenewTime: ptr.To(metav1.NewMicroTime(now))},
	}
	src, kube := fakeSource(lock)
	if got := src.ElectionController(ctx, now); got.State != ControllerActing || got.Controller != access.ActingKubeAPIServer {
		t.Errorf("got %+v, want kube-apiserver acting", got)
	}
	kube.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, access.NativeControllerLock, errors.New("no"))
	})
	if got := src.ElectionController(ctx, now); got.State != ControllerUnknown || !strings.Contains(got.Summary(now), "forbidden") {
		t.Errorf("got %+v, want unknown: forbidden", got)
	}
}

func TestGroup(t *testing.T) {
	leases := []*coordinationv1.Lease{namedLease("ns", "selected", nil), {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}}}
	candidate := func(name, lease string) *coordinationv1beta1.LeaseCandidate {
		return &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: lease}}
	}
	cands := []*coordinationv1beta1.LeaseCandidate{candidate("c1", "selected"), candidate("c2", "unlisted")}
	keys := func(in []Input) string {
		var s []string
		for _, i := range in {
			s = append(s, i.Key.String())
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		name    string
		sel     Selection
		want    string
		wantErr bool
	}{
		{name: "all under election", want: "ns/selected ns/unlisted"},
		{name: "listed only", sel: Selection{ListedOnly: true}, want: "ns/selected"},
		{name: "one plain Lease by name", sel: Selection{Namespace: "ns", Name: "plain"}, want: "ns/plain"},
		{name: "a Lease only candidates name", sel: Selection{Namespace: "ns", Name: "unlisted"}, want: "ns/unlisted"},
		{name: "missing", sel: Selection{Namespace: "ns", Name: "missing"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Group(leases, cands, tc.sel)
			if tc.wantErr {
				if !apierrors.IsNotFound(err) {
					t.Errorf("error %v, want NotFound", err)
				}
				return
			}
			if err != nil || keys(got) != tc.want {
				t.Errorf("got %q, %v; want %q", keys(got), err, tc.want)
			}
		})
	}
}
