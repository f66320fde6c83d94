package lead

import (
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What a candidate's writes of the Lease carry: a renewal (Renewal), a
// hand-over or a release (LetGo), and the fencing token of a term
// (TermToken, HandOverToken).

// ErrTermsExhausted: a term would need a fencing token past the largest
// leaseTransitions there is.
var ErrTermsExhausted = fmt.Errorf("%w: leaseTransitions has reached %d, so a new term cannot have a fencing token above every earlier one", ErrNotLeader, int32(math.MaxInt32))

// Renewal is lease as identity's renewal sent at now writes it, with a
// renewTime later than the stored one (see RenewTimeFor). The first renewal
// of a term (leading false) starts a new term: its leaseTransitions is the
// term's fencing token (see TermToken; seenBefore is what SeenTerms.Before
// says of lease), written in the same conditional write.
func Renewal(lease *coordinationv1.Lease, identity string, now time.Time, leading bool, seenBefore int32, leaseDuration time.Duration) (*coordinationv1.Lease, error) {
	clone := lease.DeepCopy()
	clone.Spec.HolderIdentity = ptr.To(identity)
	if !leading {
		term, ok := TermToken(lease, seenBefore)
		if !ok {
			return nil, ErrTermsExhausted
		}
		clone.Spec.LeaseTransitions = ptr.To(term)
		if clone.Spec.AcquireTime == nil && clone.Spec.RenewTime != nil {
			// The term was acquired when the controller named the holder.
			clone.Spec.AcquireTime = clone.Spec.RenewTime.DeepCopy()
		}
	}
	renew := RenewTimeFor(now, RenewTimeOf(lease))
	if a := clone.Spec.AcquireTime; a != nil && renew.Equal(AtMicro(a.Time)) {
		// acquireTime equal to renewTime marks a Lease nobody has renewed
		// since it was named (see FreshlyNamed); a renewal must not look so.
		renew = renew.Add(time.Microsecond)
	}
	clone.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew))
	clone.Spec.LeaseDurationSeconds = ptr.To(int32(leaseDuration / time.Second))
	return clone, nil
}

// LetGo is lease as a holder letting it go at now writes it: handed over to
// to, or released (to ""). A hand-over names the next holder as the
// controller does: it counts the next term in leaseTransitions
// (HandOverToken over highest, the most this process has seen) and writes
// acquireTime equal to renewTime, so the next holder leads with that count as
// its token. A release names nobody and counts nothing, as client-go's does:
// the controller counts the next term when it names one. An empty holder
// rather than none: kube-apiserver's controller dereferences
// holderIdentity.
func LetGo(lease *coordinationv1.Lease, to string, now time.Time, highest int32) *coordinationv1.Lease {
	at := metav1.NewMicroTime(RenewTimeFor(now, RenewTimeOf(lease)))
	clone := lease.DeepCopy()
	clone.Spec.HolderIdentity = ptr.To(to)
	clone.Spec.PreferredHolder = nil
	clone.Spec.RenewTime = &at
	if to != "" {
		clone.Spec.LeaseTransitions = ptr.To(HandOverToken(lease, highest))
		clone.Spec.AcquireTime = at.DeepCopy()
	}
	return clone
}

// TermToken is the fencing token of a term that starts by renewing lease,
// which names this process; seenBefore is the highest leaseTransitions this
// process saw on any other version of the Lease. It is what the first
// renewal writes as leaseTransitions:
//   - the Lease's own count when the naming counted the term, as
//     cle-controller's election and a hand-over do: they raise
//     leaseTransitions and write acquireTime equal to renewTime (see
//     CountedNaming); so one term is one number, from the naming to the last
//     renewal. Only if that count is above every value this process saw
//     before: a naming that did not count, or a controller that lost the
//     Lease's history, does not hand out a token already used;
//   - otherwise one above both (the controller in kube-apiserver does not
//     count terms).
//
// ok is false when that is past the largest leaseTransitions there is: no
// new term can have a token of its own then.
func TermToken(lease *coordinationv1.Lease, seenBefore int32) (token int32, ok bool) {
	n := ptr.Deref(lease.Spec.LeaseTransitions, 0)
	if CountedNaming(lease) && n > seenBefore {
		return n, true
	}
	return oneAbove(max(n, seenBefore))
}

// HandOverToken is the leaseTransitions of a hand-over of lease, which
// counts the next holder's term: one above the Lease's and every value this
// process saw (highest), or the largest there is when that is reached.
func HandOverToken(lease *coordinationv1.Lease, highest int32) int32 {
	n, _ := oneAbove(max(ptr.Deref(lease.Spec.LeaseTransitions, 0), highest))
	return n
}

// oneAbove is highest+1, or highest and false when that is past the largest
// leaseTransitions there is.
func oneAbove(highest int32) (int32, bool) {
	if highest == math.MaxInt32 {
		return highest, false
	}
	return highest + 1, true
}

// CountedNaming reports a Lease as a naming writes it: acquireTime equal to
// renewTime, which a renewal never writes (see Renewal).
func CountedNaming(lease *coordinationv1.Lease) bool {
	s := lease.Spec
	return s.AcquireTime != nil && s.RenewTime != nil && AtMicro(s.AcquireTime.Time).Equal(AtMicro(s.RenewTime.Time))
}

// Version identifies one version of a Lease as written: its renewTime and
// leaseTransitions, whatever its resourceVersion. Versions compare with ==;
// the zero Version is no version, equal to no Lease's.
type Version struct {
	renew       instantKey
	transitions int32
	set         bool
}

// Fingerprint is the version of the Lease as written.
func Fingerprint(lease *coordinationv1.Lease) Version {
	return Version{keyOf(RenewTimeOf(lease)), ptr.Deref(lease.Spec.LeaseTransitions, 0), true}
}

// IsZero reports whether v is no version.
func (v Version) IsZero() bool { return !v.set }

// String shows v as its renewTime and leaseTransitions ("" for no version).
func (v Version) String() string {
	if !v.set {
		return ""
	}
	return fmt.Sprintf("%s/%d", time.Unix(v.renew.sec, int64(v.renew.nsec)).UTC().Format(time.RFC3339Nano), v.transitions)
}

// HolderOf is the Lease's holder, "" for none or no Lease.
func HolderOf(lease *coordinationv1.Lease) string {
	if lease == nil {
		return ""
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// PreferredOf is the Lease's preferred holder, "" for none or no Lease.
func PreferredOf(lease *coordinationv1.Lease) string {
	if lease == nil {
		return ""
	}
	return ptr.Deref(lease.Spec.PreferredHolder, "")
}
