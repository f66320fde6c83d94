package lead

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func leaseRenewedAt(holder string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(holder),
		RenewTime:      ptr.To(metav1.NewMicroTime(renew)),
		AcquireTime:    ptr.To(metav1.NewMicroTime(renew.Add(-time.Minute))),
	}}
}

// TestRefusedForgetsOneAttempt: with its clock behind the stored renewTime,
// a process writes the same renewTime (a microsecond after the stored one)
// in each attempt based on one version. When the first attempt landed but
// was answered with a timeout and the second conflicted with it, the Lease
// carries the first attempt's renewTime: it is still this process's.
func TestRefusedForgetsOneAttempt(t *testing.T) {
	stored := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	renew := RenewTimeFor(stored.Add(-time.Minute), stored)
	o := &Ownership{Identity: "me"}
	o.Wrote(renew) // landed; the answer was a timeout
	o.Wrote(renew) // conflicted with the first
	o.Refused(renew)
	lease := leaseRenewedAt("me", renew)
	if !o.Mine(lease) || !o.MayTake(lease) {
		t.Errorf("the renewal that landed is not taken as this process's: Mine %v, MayTake %v", o.Mine(lease), o.MayTake(lease))
	}
	o.Refused(renew)
	if o.Mine(lease) {
		t.Error("both attempts refused, the renewTime is still taken as this process's")
	}
}
