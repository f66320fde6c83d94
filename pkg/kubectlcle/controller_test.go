package kubectlcle

import (
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

func TestElectionController(t *testing.T) {
	nativeKey := types.NamespacedName{Namespace: "kube-system", Name: access.NativeControllerLock}
	portableKey := types.NamespacedName{Namespace: "kube-system", Name: access.PortableControllerLock}
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	lock := func(holder string, renewedAgo time.Duration, labelled bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          ptr.To(metav1.NewMicroTime(now.Add(-5 * time.Minute))),
			RenewTime:            ptr.To(metav1.NewMicroTime(now.Add(-renewedAgo))),
		}}
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		if labelled {
			l.Labels = map[string]string{access.ControllerHolderLabel: access.ControllerHolderHash(holder)}
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		key   types.NamespacedName
		lock  *coordinationv1.Lease
		err   error
		mode  access.Mode
		state string
		want  string
	}{
		{name: "kube-apiserver acts", key: nativeKey, lock: lock("apiserver-x", time.Second, false), mode: access.ModeNative, state: ControllerActing,
			want: "kube-apiserver (holder apiserver-x), acting for 5m (kube-system/leader-election-controller)"},
		{name: "cle acts in native mode", key: nativeKey, lock: lock("cle-1", time.Second, true), mode: access.ModeNative, state: ControllerActing,
			want: "cle (holder cle-1), acting for 5m (kube-system/leader-election-controller)"},
		{name: "cle acts in portable mode", key: portableKey, lock: lock("cle-1", time.Second, false), mode: access.ModePortable, state: ControllerActing,
			want: "cle (holder cle-1), acting for 5m (kube-system/cle-controller)"},
		{name: "the holder stopped renewing", key: portableKey, lock: lock("cle-1", 3*time.Minute, false), mode: access.ModePortable, state: ControllerNone,
			want: "none acting (holder cle-1 stopped renewing Lease kube-system/cle-controller, last 3m ago)"},
		{name: "no holder", key: portableKey, lock: lock("", time.Second, false), mode: access.ModePortable, state: ControllerNone,
			want: "none acting (Lease kube-system/cle-controller names no holder)"},
		{name: "no lock", key: portableKey, err: apierrors.NewNotFound(leases, access.PortableControllerLock), mode: access.ModePortable, state: ControllerNone,
			want: "none acting (no Lease kube-system/cle-controller)"},
		{name: "forbidden", key: nativeKey, err: apierrors.NewForbidden(leases, access.NativeControllerLock, errors.New("no")), mode: access.ModeNative, state: ControllerUnknown,
			want: "unknown (cannot read Lease kube-system/leader-election-controller: forbidden)"},
		{name: "another error", key: nativeKey, err: errors.New("connection refused"), mode: access.ModeNative, state: ControllerUnknown,
			want: "unknown (cannot read Lease kube-system/leader-election-controller: connection refused)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ElectionController(tc.key, tc.lock, tc.err, tc.mode, now)
			if got.State != tc.state || got.Lock != tc.key.String() {
				t.Errorf("state %q lock %q, want %q %q", got.State, got.Lock, tc.state, tc.key)
			}
			if s := got.Summary(now); s != tc.want {
				t.Errorf("summary %q, want %q", s, tc.want)
			}
		})
	}
}
