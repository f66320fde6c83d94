package access

import (
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// fakeServer is what a Detect test's server serves.
type fakeServer struct {
	// candidateVersions are the coordination.k8s.io versions that serve
	// leasecandidates.
	candidateVersions []string
	keepsStrategy     bool // the dry-run Lease comes back with spec.strategy
	crd               bool // cle.dev/v1beta1 leasecandidates
	probeErr          error
}

func (s fakeServer) clients(t *testing.T) (Clients, *fake.Clientset) {
	t.Helper()
	kube := fake.NewClientset()
	disc := kube.Discovery().(*fakediscovery.FakeDiscovery)
	for _, v := range s.candidateVersions {
		disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "coordination.k8s.io/" + v, APIResources: []metav1.APIResource{{Name: "leasecandidates", Namespaced: true, Kind: "LeaseCandidate"}}})
	}
	if s.crd {
		disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "cle.dev/v1beta1", APIResources: []metav1.APIResource{{Name: "leasecandidates", Namespaced: true, Kind: "LeaseCandidate"}}})
	}
	kube.PrependReactor("create", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		create := action.(clienttesting.CreateActionImpl)
		if len(create.CreateOptions.DryRun) == 0 {
			t.Errorf("the probe created a Lease without dry-run")
		}
		if s.probeErr != nil {
			return true, nil, s.probeErr
		}
		lease := create.Object.(*coordinationv1.Lease).DeepCopy()
		if !s.keepsStrategy {
			lease.Spec.Strategy = nil
		}
		return true, lease, nil
	})
	return Clients{Kube: kube, Dynamic: newFakeDynamic()}, kube
}

func TestDetect(t *testing.T) {
	beta, alpha, both := []string{"v1beta1"}, []string{"v1alpha2"}, []string{"v1alpha2", "v1beta1"}
	gateOn := fakeServer{candidateVersions: beta, keepsStrategy: true}
	tests := []struct {
		name   string
		server fakeServer
		mode   string
		want   Mode
		// wantErrs are sentinels the error must wrap; wantText, a part of
		// its message.
		wantErrs  []error
		wantText  string
		wantProbe bool
		// wantVersion is the LeaseCandidate version of a native result.
		wantVersion string
	}{
		{name: "auto on a gate-on server", server: gateOn, mode: ModeAuto, want: ModeNative, wantProbe: true, wantVersion: "coordination.k8s.io/v1beta1"},
		{name: "auto on a server with v1alpha2 and v1beta1", server: fakeServer{candidateVersions: both, keepsStrategy: true}, mode: ModeAuto, want: ModeNative, wantProbe: true, wantVersion: "coordination.k8s.io/v1beta1"},
		{name: "auto on a server with only v1alpha2", server: fakeServer{candidateVersions: alpha, keepsStrategy: true, crd: true}, mode: ModeAuto, want: ModeNative, wantProbe: true, wantVersion: "coordination.k8s.io/v1alpha2"},
		{name: "native on a server with only v1alpha2", server: fakeServer{candidateVersions: alpha, keepsStrategy: true}, mode: "native", want: ModeNative, wantProbe: true, wantVersion: "coordination.k8s.io/v1alpha2"},
		{name: "native without a LeaseCandidate API", server: fakeServer{keepsStrategy: true, crd: true}, mode: "native", wantErrs: []error{ErrNativeUnavailable}, wantText: "tried coordination.k8s.io/v1beta1, coordination.k8s.io/v1alpha2"},
		{name: "auto on a gate-on server with the CRD", server: fakeServer{candidateVersions: beta, keepsStrategy: true, crd: true}, mode: ModeAuto, want: ModeNative, wantProbe: true},
		{name: "auto without v1beta1", server: fakeServer{crd: true}, mode: ModeAuto, want: ModePortable},
		{name: "auto when the server strips strategy", server: fakeServer{candidateVersions: beta, crd: true}, mode: ModeAuto, want: ModePortable, wantProbe: true},
		{
			name: "auto without native or CRD", server: fakeServer{}, mode: ModeAuto,
			wantErrs: []error{ErrCRDMissing, ErrNativeUnavailable}, wantText: "kubectl apply -k manifests/crd",
		},
		{
			name: "auto when the probe is denied", server: fakeServer{candidateVersions: beta, crd: true, probeErr: apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("no"))},
			mode: ModeAuto, wantText: "forbidden", wantProbe: true,
		},
		{name: "native on a gate-on server", server: gateOn, mode: "native", want: ModeNative, wantProbe: true},
		{
			name: "native when the probe is denied", server: fakeServer{candidateVersions: beta, probeErr: apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("no"))},
			mode: "native", want: ModeNative, wantProbe: true, wantVersion: "coordination.k8s.io/v1beta1",
		},
		{
			name: "native when the probe fails otherwise", server: fakeServer{candidateVersions: beta, probeErr: apierrors.NewInternalError(errors.New("etcd down"))},
			mode: "native", wantText: "etcd down", wantProbe: true,
		},
		{name: "native when the server strips strategy", server: fakeServer{candidateVersions: beta, crd: true}, mode: "native", wantErrs: []error{ErrNativeUnavailable}, wantProbe: true},
		{name: "portable on a gate-on server with the CRD", server: fakeServer{candidateVersions: beta, keepsStrategy: true, crd: true}, mode: "portable", want: ModePortable},
		{name: "portable without the CRD", server: gateOn, mode: "portable", wantErrs: []error{ErrCRDMissing}, wantText: CRDManifestFile},
		{name: "unknown mode", server: gateOn, mode: "sideways", wantText: `unknown API mode "sideways"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			clients, kube := tc.server.clients(t)
			acc, err := Detect(ctx, clients, tc.mode)
			probed := false
			for _, a := range kube.Actions() {
				probed = probed || a.Matches("create", "leases")
			}
			if probed != tc.wantProbe {
				t.Errorf("probed with a dry-run Lease = %v, want %v", probed, tc.wantProbe)
			}
			if tc.want != "" {
				if err != nil {
					t.Fatalf("Detect: %v, want mode %s", err, tc.want)
				}
				if acc.Mode() != tc.want {
					t.Errorf("mode = %s, want %s", acc.Mode(), tc.want)
				}
				if n, ok := acc.(*native); ok && tc.wantVersion != "" && n.CandidateVersion() != tc.wantVersion {
					t.Errorf("LeaseCandidate version = %s, want %s", n.CandidateVersion(), tc.wantVersion)
				}
				return
			}
			if err == nil {
				t.Fatalf("Detect chose %s, want an error", acc.Mode())
			}
			for _, want := range tc.wantErrs {
				if !errors.Is(err, want) {
					t.Errorf("error %q does not wrap %q", err, want)
				}
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q does not say %q", err, tc.wantText)
			}
		})
	}
}

func TestDetectPortableNeedsDynamic(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clients, _ := fakeServer{crd: true}.clients(t)
	clients.Dynamic = nil
	if _, err := Detect(ctx, clients, "portable"); err == nil {
		t.Error("portable mode without a dynamic client: no error")
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"native": ModeNative, "portable": ModePortable} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ModeAuto, "Native", "crd"} {
		if got, err := ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q) = %q, want an error", in, got)
		}
	}
}
