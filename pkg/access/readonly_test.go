package access

import (
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1alpha2 "k8s.io/api/coordination/v1alpha2"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestDetectReadOnly(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	forbidden := func(resource string) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: resource}, "", errors.New("read-only"))
	}
	beta, alpha := []string{"v1beta1"}, []string{"v1alpha2"}
	readOnlyBoth := fakeServer{candidateVersions: beta, crd: true, probeErr: forbidden("leases")}
	lock := func(name string, renewedAgo time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ProbeNamespace, Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name + "-holder"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: ptr.To(metav1.NewMicroTime(now.Add(-time.Hour))),
				RenewTime:   ptr.To(metav1.NewMicroTime(now.Add(-renewedAgo))),
			},
		}
	}
	nativeLock := lock(NativeControllerLock, 2*time.Second)
	portableLock := lock(PortableControllerLock, 2*time.Second)
	betaCandidate := &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "c"}}
	alphaCandidate := &coordinationv1alpha2.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "c"}}
	portableCandidate := func(t *testing.T) runtime.Object {
		u, err := CandidateToUnstructured(&coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p"}})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	for _, tc := range []struct {
		name           string
		server         fakeServer
		mode           string
		kubeObjects    []runtime.Object
		portableCands  bool
		denyLockReads  bool
		want           Mode
		wantVersion    string
		wantErrs       []error
		wantText       string // in the error, or else in the log
		wantNoDecision bool   // the log says nothing told the modes apart
		namespace      string // shown by the caller; "" for all
	}{
		{name: "the probe is allowed, no CRD: native", server: fakeServer{candidateVersions: beta, keepsStrategy: true}, mode: ModeAuto, want: ModeNative},
		{
			name: "the probe is allowed, both, nothing exists: native", server: fakeServer{candidateVersions: beta, keepsStrategy: true, crd: true}, mode: ModeAuto,
			want: ModeNative, wantNoDecision: true,
		},
		{
			name: "the probe is allowed, both locks renewed, only portable candidates: portable", server: fakeServer{candidateVersions: beta, keepsStrategy: true, crd: true},
			mode: ModeAuto, kubeObjects: []runtime.Object{nativeLock, portableLock}, portableCands: true,
			want: ModePortable, wantText: "Both API modes are possible on this server",
		},
		{name: "no LeaseCandidate API: portable, no probe", server: fakeServer{crd: true}, mode: ModeAuto, want: ModePortable},
		{
			name: "nothing served: the error says both", server: fakeServer{probeErr: forbidden("leases")}, mode: ModeAuto,
			wantErrs: []error{ErrCRDMissing, ErrNativeUnavailable}, wantText: "kubectl apply -k manifests/crd",
		},
		{
			name: "denied probe, no CRD: native", server: fakeServer{candidateVersions: beta, probeErr: forbidden("leases")}, mode: ModeAuto,
			want: ModeNative, wantVersion: "coordination.k8s.io/v1beta1", wantText: "not the portable CRD",
		},
		{
			name: "denied probe, only v1alpha2, no CRD: native on v1alpha2", server: fakeServer{candidateVersions: alpha, probeErr: forbidden("leases")}, mode: ModeAuto,
			want: ModeNative, wantVersion: "coordination.k8s.io/v1alpha2",
		},
		{
			name: "both, the native lock is renewed: native", server: readOnlyBoth, mode: ModeAuto, kubeObjects: []runtime.Object{nativeLock},
			portableCands: true, want: ModeNative, wantText: "Lease kube-system/leader-election-controller is held and renewed by leader-election-controller-holder",
		},
		{
			name: "both, the portable lock is renewed, the native one expired: portable", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{lock(NativeControllerLock, time.Minute), portableLock, betaCandidate},
			want:        ModePortable, wantText: "Lease kube-system/cle-controller is held and renewed by cle-controller-holder",
		},
		{
			name: "both locks renewed, only portable candidates: portable", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{nativeLock, portableLock}, portableCands: true,
			want: ModePortable, wantText: "cle.dev/v1beta1 LeaseCandidates exist",
		},
		{
			name: "no locks, only native candidates: native", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{betaCandidate}, want: ModeNative, wantText: "coordination.k8s.io/v1beta1 LeaseCandidates exist",
		},
		{
			name: "only v1alpha2 and the CRD, native candidates: native on v1alpha2", server: fakeServer{candidateVersions: alpha, crd: true, probeErr: forbidden("leases")}, mode: ModeAuto,
			kubeObjects: []runtime.Object{alphaCandidate}, want: ModeNative, wantVersion: "coordination.k8s.io/v1alpha2", wantText: "coordination.k8s.io/v1alpha2 LeaseCandidates exist",
		},
		{
			name: "lock reads denied, portable candidates: portable", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{nativeLock}, denyLockReads: true, portableCands: true,
			want: ModePortable, wantText: "forbidden",
		},
		{name: "both, nothing exists: native", server: readOnlyBoth, mode: ModeAuto, want: ModeNative, wantNoDecision: true},
		{
			name: "both, everything exists: native", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{nativeLock, portableLock, betaCandidate}, portableCands: true, want: ModeNative, wantNoDecision: true,
		},
		{
			name: "both, everything exists, only portable candidates in the shown namespace: portable", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{nativeLock, portableLock, betaCandidate}, portableCands: true, namespace: "b",
			want: ModePortable, wantText: "cle.dev/v1beta1 LeaseCandidates exist in namespace b",
		},
		{
			name: "both, everything exists, only native candidates in the shown namespace: native", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{nativeLock, portableLock, betaCandidate}, portableCands: true, namespace: "a",
			want: ModeNative, wantText: "coordination.k8s.io/v1beta1 LeaseCandidates exist in namespace a",
		},
		{
			name: "both, everything exists, none in the shown namespace: native", server: readOnlyBoth, mode: ModeAuto,
			kubeObjects: []runtime.Object{nativeLock, portableLock, betaCandidate}, portableCands: true, namespace: "c",
			want: ModeNative, wantNoDecision: true, wantText: "no cle.dev/v1beta1 LeaseCandidates exist in namespace c",
		},
		{
			name: "the probe fails otherwise: the error", server: fakeServer{candidateVersions: beta, crd: true, probeErr: apierrors.NewInternalError(errors.New("etcd down"))},
			mode: ModeAuto, wantText: "etcd down",
		},
		{name: "explicit native, denied probe: native", server: fakeServer{candidateVersions: beta, probeErr: forbidden("leases")}, mode: "native", want: ModeNative},
		{name: "explicit portable without the CRD: the error", server: fakeServer{candidateVersions: beta}, mode: "portable", wantErrs: []error{ErrCRDMissing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(t.Context(), logger)
			clients, kube := tc.server.clients(t)
			for _, obj := range tc.kubeObjects {
				if err := kube.Tracker().Add(obj); err != nil {
					t.Fatal(err)
				}
			}
			if tc.denyLockReads {
				kube.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, forbidden("leases")
				})
			}
			dyn := newFakeDynamic()
			if tc.portableCands {
				dyn = newFakeDynamic(portableCandidate(t))
			}
			clients.Dynamic = dyn

			acc, err := DetectReadOnly(ctx, clients, tc.mode, tc.namespace, testingclock.NewFakePassiveClock(now))

			for _, a := range append(kube.Actions(), dyn.Actions()...) {
				if v := a.GetVerb(); v != "get" && v != "list" && v != "create" {
					t.Errorf("DetectReadOnly wrote: %s %s", v, a.GetResource())
				}
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if tc.want == "" {
				if err == nil {
					t.Fatalf("chose %s, want an error", acc.Mode())
				}
				for _, want := range tc.wantErrs {
					if !errors.Is(err, want) {
						t.Errorf("error %q does not wrap %q", err, want)
					}
				}
				if !strings.Contains(err.Error(), tc.wantText) {
					t.Errorf("error %q does not say %q", err, tc.wantText)
				}
				return
			}
			if err != nil {
				t.Fatalf("DetectReadOnly: %v, want mode %s", err, tc.want)
			}
			if acc.Mode() != tc.want {
				t.Errorf("mode %s, want %s; log:\n%s", acc.Mode(), tc.want, logs)
			}
			if n, ok := acc.(*native); ok && tc.wantVersion != "" && n.CandidateVersion() != tc.wantVersion {
				t.Errorf("LeaseCandidate version %s, want %s", n.CandidateVersion(), tc.wantVersion)
			}
			if !strings.Contains(logs, tc.wantText) {
				t.Errorf("the log does not say %q:\n%s", tc.wantText, logs)
			}
			if got := strings.Contains(logs, "nothing tells the modes apart"); got != tc.wantNoDecision {
				t.Errorf("the log says nothing told the modes apart: %v, want %v:\n%s", got, tc.wantNoDecision, logs)
			}
		})
	}
}
