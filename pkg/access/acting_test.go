package access

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestJudgeActingController(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	lock := func(holder string, labelled string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          ptr.To(metav1.NewMicroTime(now.Add(-time.Hour))),
		}}
		if labelled != "" {
			l.Labels = map[string]string{ControllerHolderLabel: ControllerHolderHash(labelled)}
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		lock    *coordinationv1.Lease
		mode    Mode
		renewed time.Time
		want    string
	}{
		{"no lock", nil, ModeNative, now, ""},
		{"no holder", &coordinationv1.Lease{}, ModeNative, now, ""},
		{"cle holds it", lock("host_a", "host_a"), ModeNative, now.Add(-14 * time.Second), ActingCle},
		{"kube-apiserver took it from cle: the label names cle's last holder", lock("host_b", "host_a"), ModeNative, now, ActingKubeAPIServer},
		{"kube-apiserver, never cle", lock("host_b", ""), ModeNative, now, ActingKubeAPIServer},
		{"portable: only cle takes its lock", lock("host_b", ""), ModePortable, now, ActingCle},
		{"the holder stopped renewing", lock("host_a", "host_a"), ModeNative, now.Add(-15 * time.Second), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := JudgeActingController(tc.lock, tc.mode, tc.renewed, now)
			if got.Controller != tc.want {
				t.Fatalf("Controller = %q, want %q (%+v)", got.Controller, tc.want, got)
			}
			if tc.lock != nil && tc.lock.Spec.AcquireTime != nil && !got.Since.Equal(now.Add(-time.Hour)) {
				t.Errorf("Since = %v, want the acquire time", got.Since)
			}
		})
	}
}
