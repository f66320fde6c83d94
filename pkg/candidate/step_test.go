package candidate

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// stepLease is a Lease as the step tests see it: named to holder (nobody
// when ""), preferring preferred, at resourceVersion "7".
func stepLease(holder, preferred string) *coordinationv1.Lease {
	renewed := metav1.NewMicroTime(t0.Add(-time.Second))
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease, ResourceVersion: "7"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			LeaseTransitions: ptr.To[int32](3), RenewTime: &renewed,
		},
	}
	if preferred != "" {
		l.Spec.PreferredHolder = ptr.To(preferred)
	}
	return l
}

// stepView is a candidate's view at t0 of a Lease named to it that it may
// take, with the default timings; each row changes what it is about.
func stepView(change func(v *view)) view {
	v := view{
		now:          t0,
		identity:     me,
		timing:       timing{leaseDuration: DefaultLeaseDuration, renewDeadline: DefaultRenewDeadline, retryPeriod: DefaultRetryPeriod},
		renewsItself: true,
		lease:        stepLease(me, ""),
		mine:         true,
		mayTake:      true,
	}
	if change != nil {
		change(&v)
	}
	return v
}

// leadingSince makes v a leader whose last renewal (and attempt) was sent ago.
func leadingSince(v *view, ago time.Duration) {
	v.leading, v.renewedAt, v.lastAttempt = true, t0.Add(-ago), t0.Add(-ago)
}

// describe renders an action for comparison: its kind, then what it carries.
func (a action) describe() string {
	switch a.kind {
	case waitAction:
		return fmt.Sprintf("wait %s", a.after)
	case stepDown:
		return "stepDown: " + a.reason
	case noteForeign:
		return "noteForeign " + a.foreign
	default:
		return a.kind.String()
	}
}

// TestNext is the table of what a candidate does next: one row per rule of
// next, each a view and the one action it leads to.
func TestNext(t *testing.T) {
	foreignFP := fingerprint(stepLease(me, ""))
	for _, tc := range []struct {
		name string
		view view
		want string
	}{
		// A leader.
		{"a leader renews a retry period after its last attempt",
			stepView(func(v *view) { leadingSince(v, DefaultRetryPeriod) }), "renew"},
		{"a leader waits for its next renewal",
			stepView(func(v *view) { leadingSince(v, 500*time.Millisecond) }), "wait 1.5s"},
		{"a leader whose renewals fail retries a retry period after the last attempt, not its renew deadline",
			stepView(func(v *view) {
				leadingSince(v, 8*time.Second)
				v.lastAttempt = t0.Add(-time.Second)
			}), "wait 1s"},
		{"a leader wakes at its renew deadline when that comes first",
			stepView(func(v *view) {
				leadingSince(v, 9500*time.Millisecond)
				v.lastAttempt = t0.Add(-time.Second)
			}), "wait 500ms"},
		{"a lapsed term steps down",
			stepView(func(v *view) { leadingSince(v, 11*time.Second); v.lapsed = true }),
			"stepDown: no successful renewal within the renew deadline"},
		{"a deleted Lease ends the term",
			stepView(func(v *view) { leadingSince(v, time.Second); v.lease = nil }), "stepDown: the Lease was deleted"},
		{"a Lease naming another holder ends the term",
			stepView(func(v *view) { leadingSince(v, time.Second); v.lease = stepLease("other", "") }),
			"stepDown: the Lease names another holder"},
		{"a renewal by another process under this identity ends the term",
			stepView(func(v *view) { leadingSince(v, time.Second); v.mine = false }),
			"stepDown: another process renewed the Lease under this identity"},
		{"a preferred holder ends the term before the hand-over",
			stepView(func(v *view) { leadingSince(v, time.Second); v.lease = stepLease(me, "better") }),
			"stepDown: the controller prefers another holder"},
		{"a preference for this process is no reason to step down",
			stepView(func(v *view) { leadingSince(v, DefaultRetryPeriod); v.lease = stepLease(me, me) }), "renew"},
		{"an External leader does not renew: it looks again at its renew deadline",
			stepView(func(v *view) { leadingSince(v, 3*time.Second); v.renewsItself = false }), "wait 7s"},

		// A candidate named holder.
		{"a Lease named to this process is taken at once", stepView(nil), "renew"},
		{"a Lease naming another is left alone", stepView(func(v *view) { v.lease = stepLease("other", "") }), "wait 2s"},
		{"no Lease, nothing to take", stepView(func(v *view) { v.lease = nil }), "wait 2s"},
		{"a Lease with no holder is the controller's to fill", stepView(func(v *view) { v.lease = stepLease("", "") }), "wait 2s"},
		{"after a failed renewal the next waits for retryAt",
			stepView(func(v *view) { v.retryAt = t0.Add(1200 * time.Millisecond) }), "wait 1.2s"},
		{"a term that ended in this step is not taken up again in it",
			stepView(func(v *view) { v.steppedDown = true }), "wait 2s"},
		{"a Lease a renewal found deleted is not renewed again until the watch shows what came after",
			stepView(func(v *view) { v.goneVersion = "7" }), "wait 2s"},
		{"a re-created Lease is renewed at once",
			stepView(func(v *view) { v.goneVersion = "6" }), "renew"},
		{"an External candidate leads only through Renew",
			stepView(func(v *view) { v.renewsItself = false }), "wait 2s"},

		// A Lease renewed under this identity by another process.
		{"first sight of a foreign renewal starts the count",
			stepView(func(v *view) { v.mayTake = false }), "noteForeign " + foreignFP},
		{"a foreign renewal is waited on for a lease duration",
			stepView(func(v *view) { v.mayTake, v.foreign, v.foreignFor = false, foreignFP, 4*time.Second }), "wait 11s"},
		{"a foreign renewal unchanged for a lease duration is taken",
			stepView(func(v *view) { v.mayTake, v.foreign, v.foreignFor = false, foreignFP, DefaultLeaseDuration }), "renew"},
		{"a new foreign renewal restarts the count",
			stepView(func(v *view) { v.mayTake, v.foreign, v.foreignFor = false, "older", time.Minute }), "noteForeign " + foreignFP},
		{"an External candidate counts foreign renewals too (Renew refuses until then)",
			stepView(func(v *view) { v.mayTake, v.renewsItself = false, false }), "noteForeign " + foreignFP},

		// Hand-over by a holder that does not lead.
		{"a named holder that does not lead hands over at once",
			stepView(func(v *view) { v.lease = stepLease(me, "better") }), "handOver"},
		{"a hand-over waits until nothing acts on past renewals (External)",
			stepView(func(v *view) { v.lease, v.quietIn = stepLease(me, "better"), 4*time.Second }), "wait 4s"},
		{"a failed hand-over is retried a retry period later",
			stepView(func(v *view) { v.lease, v.handOverAt = stepLease(me, "better"), t0.Add(time.Second) }), "wait 1s"},
		{"a failed renewal does not hold off a hand-over",
			stepView(func(v *view) { v.lease, v.retryAt = stepLease(me, "better"), t0.Add(time.Second) }), "handOver"},
		{"a Lease another process renewed under this identity is that process's to hand over",
			stepView(func(v *view) { v.lease, v.mayTake = stepLease(me, "better"), false }), "wait 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := next(tc.view).describe(); got != tc.want {
				t.Errorf("next = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNextIsAFunction: next depends on its view alone; asking twice gives
// the same answer, and the view is not changed.
func TestNextIsAFunction(t *testing.T) {
	v := stepView(func(v *view) { leadingSince(v, time.Second); v.lease = stepLease(me, "better") })
	before := v.lease.DeepCopy()
	if a, b := next(v).describe(), next(v).describe(); a != b {
		t.Errorf("next gave %q, then %q", a, b)
	}
	if v.lease.ResourceVersion != before.ResourceVersion || ptr.Deref(v.lease.Spec.PreferredHolder, "") != "better" {
		t.Error("next changed the Lease it was shown")
	}
}

// TestRenewCall is the table of an External's Renew: when it may be sent.
func TestRenewCall(t *testing.T) {
	foreignFP := fingerprint(stepLease(me, ""))
	for _, tc := range []struct {
		name string
		view view
		want error // nil: the renewal is sent
	}{
		{"a Lease named to this process", stepView(nil), nil},
		{"a leader's renewal", stepView(func(v *view) { leadingSince(v, time.Second) }), nil},
		{"no Lease", stepView(func(v *view) { v.lease = nil }), ErrNotLeader},
		{"another holder", stepView(func(v *view) { v.lease = stepLease("other", "") }), ErrNotLeader},
		{"another preferred", stepView(func(v *view) { v.lease = stepLease(me, "better") }), ErrNotLeader},
		{"this process preferred", stepView(func(v *view) { v.lease = stepLease(me, me) }), nil},
		{"renewed by another process under this identity", stepView(func(v *view) {
			v.mayTake, v.foreign, v.foreignFor = false, foreignFP, time.Second
		}), errForeignRenewal},
		{"renewed by another process, unchanged for a lease duration", stepView(func(v *view) {
			v.mayTake, v.foreign, v.foreignFor = false, foreignFP, DefaultLeaseDuration
		}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := renewCall(tc.view)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("renewCall = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestTermToken is the table of a term's fencing token: the count of the
// naming when that naming counted the term and is above everything seen
// before it, one more than everything otherwise.
func TestTermToken(t *testing.T) {
	named := func(transitions int32, counted bool) *coordinationv1.Lease {
		l := stepLease(me, "")
		l.Spec.LeaseTransitions = ptr.To(transitions)
		if counted {
			l.Spec.AcquireTime = l.Spec.RenewTime.DeepCopy()
		}
		return l
	}
	for _, tc := range []struct {
		name       string
		lease      *coordinationv1.Lease
		seenBefore int32
		want       int32
		ok         bool
	}{
		{"cle-controller named this process: its count is the token", named(7, true), 6, 7, true},
		{"a process that saw nothing before the naming takes its count", named(7, true), 0, 7, true},
		{"the first term of a new Lease", named(1, true), 0, 1, true},
		{"kube-apiserver's controller counts nothing: one more", named(7, false), 6, 8, true},
		{"a naming that did not raise the count: one more", named(6, true), 6, 7, true},
		{"a controller that lost the history names below what was seen: one above that", named(2, true), 9, 10, true},
		{"a Lease re-created from zero by kube-apiserver's controller", named(0, false), 9, 10, true},
		{"a counted naming at the largest count", named(math.MaxInt32, true), 5, math.MaxInt32, true},
		{"no count left", named(math.MaxInt32, false), 5, math.MaxInt32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := termToken(tc.lease, tc.seenBefore)
			if got != tc.want || ok != tc.ok {
				t.Errorf("termToken = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
