package lead

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestFingerprint pins what tells two versions of a Lease apart: the
// instant of its renewTime (not its location or resourceVersion) and its
// leaseTransitions; no version is unlike every Lease's.
func TestFingerprint(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	lease := func(renew time.Time, transitions int32, rv string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
		l.Spec.LeaseTransitions = ptr.To(transitions)
		if !renew.IsZero() {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew))
		}
		return l
	}
	base := Fingerprint(lease(at, 3, "1"))
	for _, tc := range []struct {
		name  string
		other Version
		same  bool
	}{
		{"another resourceVersion", Fingerprint(lease(at, 3, "2")), true},
		{"the same instant elsewhere", Fingerprint(lease(at.In(time.FixedZone("x", 3600)), 3, "1")), true},
		{"nanoseconds the API does not keep", Fingerprint(lease(at.Add(999), 3, "1")), true},
		{"another renewTime", Fingerprint(lease(at.Add(time.Microsecond), 3, "1")), false},
		{"another term", Fingerprint(lease(at, 4, "1")), false},
		{"no renewTime", Fingerprint(lease(time.Time{}, 3, "1")), false},
		{"no version", Version{}, false},
	} {
		if got := tc.other == base; got != tc.same {
			t.Errorf("%s: %v == %v is %t, want %t", tc.name, tc.other, base, got, tc.same)
		}
	}
	if !(Version{}).IsZero() || base.IsZero() || Fingerprint(lease(time.Time{}, 0, "")).IsZero() {
		t.Errorf("IsZero: only the zero Version is no version")
	}
	if got, want := base.String(), "2030-01-02T03:04:05.000006Z/3"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
