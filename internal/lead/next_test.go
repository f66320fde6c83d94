package lead

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/nudge"
)

// The step tests' candidate, Lease and instant, with client-go's timings.
const (
	me            = "me"
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

var t0 = time.Date(2030, time.January, 1, 12, 0, 0, 0, time.UTC)

// stepLease is a Lease as the step tests see it: named to holder (nobody
// when ""), preferring preferred, at resourceVersion "7".
func stepLease(holder, preferred string) *coordinationv1.Lease {
	renewed := metav1.NewMicroTime(t0.Add(-time.Second))
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lease", ResourceVersion: "7"},
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

// stepView is a candidate's View at t0 of a Lease named to it that it may
// take, with the default timings; each row changes what it is about.
func stepView(change func(v *View)) View {
	v := View{
		Now:          t0,
		Identity:     me,
		Timing:       Timing{LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod},
		RenewsItself: true,
		Lease:        stepLease(me, ""),
		Mine:         true,
		MayTake:      true,
	}
	if change != nil {
		change(&v)
	}
	return v
}

// leadingSince makes v a leader whose last renewal (and attempt) was sent ago.
func leadingSince(v *View, ago time.Duration) {
	v.Leading, v.RenewedAt, v.LastAttempt = true, t0.Add(-ago), t0.Add(-ago)
}

// nudgeAt is a Hook that takes point p whenever asked, and no other.
func nudgeAt(p nudge.Point) nudge.Hook { return func(q nudge.Point) bool { return q == p } }

// describe renders an action for comparison: its kind, then what it carries.
func (a Action) describe() string {
	switch a.Kind {
	case Wait:
		return fmt.Sprintf("wait %s", a.After)
	case StepDown:
		return "stepDown: " + a.Reason
	case NoteForeign:
		return "noteForeign " + a.Foreign.String()
	default:
		return a.Kind.String()
	}
}

// TestNext is the table of what a candidate does next: one row per rule of
// next, each a View and the one action it leads to.
func TestNext(t *testing.T) {
	foreignFP := Fingerprint(stepLease(me, ""))
	older := stepLease(me, "")
	older.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Minute)))
	olderFP := Fingerprint(older)
	for _, tc := range []struct {
		name string
		View View
		want string
	}{
		// A leader.
		{"a leader renews a retry period after its last attempt",
			stepView(func(v *View) { leadingSince(v, retryPeriod) }), "renew"},
		{"a leader waits for its next renewal",
			stepView(func(v *View) { leadingSince(v, 500*time.Millisecond) }), "wait 1.5s"},
		{"a nudged leader renews before its next renewal is due",
			stepView(func(v *View) { leadingSince(v, 500*time.Millisecond); v.Nudge = nudgeAt(nudge.LeaderRenewsEarly) }), "renew"},
		{"a nudge at another point leaves the leader waiting",
			stepView(func(v *View) { leadingSince(v, 500*time.Millisecond); v.Nudge = nudgeAt(nudge.PingDeferred) }), "wait 1.5s"},
		{"a leader that renewed at this instant is not nudged to renew again",
			stepView(func(v *View) { leadingSince(v, 0); v.Nudge = nudgeAt(nudge.LeaderRenewsEarly) }), "wait 2s"},
		{"a nudge does not renew a term a preferred holder ends",
			stepView(func(v *View) {
				leadingSince(v, 500*time.Millisecond)
				v.Lease, v.Nudge = stepLease(me, "better"), nudgeAt(nudge.LeaderRenewsEarly)
			}), "stepDown: the controller prefers another holder"},
		{"a leader whose renewals fail retries a retry period after the last attempt, not its renew deadline",
			stepView(func(v *View) {
				leadingSince(v, 8*time.Second)
				v.LastAttempt = t0.Add(-time.Second)
			}), "wait 1s"},
		{"a leader wakes at its renew deadline when that comes first",
			stepView(func(v *View) {
				leadingSince(v, 9500*time.Millisecond)
				v.LastAttempt = t0.Add(-time.Second)
			}), "wait 500ms"},
		{"a lapsed term steps down",
			stepView(func(v *View) { leadingSince(v, 11*time.Second); v.Lapsed = true }),
			"stepDown: no successful renewal within the renew deadline"},
		{"a deleted Lease ends the term",
			stepView(func(v *View) { leadingSince(v, time.Second); v.Lease = nil }), "stepDown: the Lease was deleted"},
		{"a Lease naming another holder ends the term",
			stepView(func(v *View) { leadingSince(v, time.Second); v.Lease = stepLease("other", "") }),
			"stepDown: the Lease names another holder"},
		{"a renewal by another process under this identity ends the term",
			stepView(func(v *View) { leadingSince(v, time.Second); v.Mine = false }),
			"stepDown: another process renewed the Lease under this identity"},
		{"a preferred holder ends the term before the hand-over",
			stepView(func(v *View) { leadingSince(v, time.Second); v.Lease = stepLease(me, "better") }),
			"stepDown: the controller prefers another holder"},
		{"a preference for this process is no reason to step down",
			stepView(func(v *View) { leadingSince(v, retryPeriod); v.Lease = stepLease(me, me) }), "renew"},
		{"an External leader does not renew: it looks again at its renew deadline",
			stepView(func(v *View) { leadingSince(v, 3*time.Second); v.RenewsItself = false }), "wait 7s"},

		// A candidate named holder.
		{"a Lease named to this process is taken at once", stepView(nil), "renew"},
		{"a Lease naming another is left alone", stepView(func(v *View) { v.Lease = stepLease("other", "") }), "wait 2s"},
		{"no Lease, nothing to take", stepView(func(v *View) { v.Lease = nil }), "wait 2s"},
		{"a Lease with no holder is the controller's to fill", stepView(func(v *View) { v.Lease = stepLease("", "") }), "wait 2s"},
		{"after a failed renewal the next waits for retryAt",
			stepView(func(v *View) { v.RetryAt = t0.Add(1200 * time.Millisecond) }), "wait 1.2s"},
		{"a term that ended in this step is not taken up again in it",
			stepView(func(v *View) { v.SteppedDown = true }), "wait 2s"},
		{"a Lease a renewal found deleted is not renewed again until the watch shows what came after",
			stepView(func(v *View) { v.GoneVersion = "7" }), "wait 2s"},
		{"a re-created Lease is renewed at once",
			stepView(func(v *View) { v.GoneVersion = "6" }), "renew"},
		{"an External candidate leads only through Renew",
			stepView(func(v *View) { v.RenewsItself = false }), "wait 2s"},

		// A Lease renewed under this identity by another process.
		{"first sight of a foreign renewal starts the count",
			stepView(func(v *View) { v.MayTake = false }), "noteForeign " + foreignFP.String()},
		{"a foreign renewal is waited on for a lease duration",
			stepView(func(v *View) { v.MayTake, v.Foreign, v.ForeignFor = false, foreignFP, 4*time.Second }), "wait 11s"},
		{"a foreign renewal unchanged for a lease duration is taken",
			stepView(func(v *View) { v.MayTake, v.Foreign, v.ForeignFor = false, foreignFP, leaseDuration }), "renew"},
		{"a new foreign renewal restarts the count",
			stepView(func(v *View) { v.MayTake, v.Foreign, v.ForeignFor = false, olderFP, time.Minute }), "noteForeign " + foreignFP.String()},
		{"an External candidate counts foreign renewals too (Renew refuses until then)",
			stepView(func(v *View) { v.MayTake, v.RenewsItself = false, false }), "noteForeign " + foreignFP.String()},

		// Hand-over by a holder that does not lead.
		{"a named holder that does not lead hands over at once",
			stepView(func(v *View) { v.Lease = stepLease(me, "better") }), "handOver"},
		{"a hand-over waits until nothing acts on past renewals (External)",
			stepView(func(v *View) { v.Lease, v.QuietIn = stepLease(me, "better"), 4*time.Second }), "wait 4s"},
		{"a failed hand-over is retried a retry period later",
			stepView(func(v *View) { v.Lease, v.HandOverAt = stepLease(me, "better"), t0.Add(time.Second) }), "wait 1s"},
		{"a failed renewal does not hold off a hand-over",
			stepView(func(v *View) { v.Lease, v.RetryAt = stepLease(me, "better"), t0.Add(time.Second) }), "handOver"},
		{"a Lease another process renewed under this identity is that process's to hand over",
			stepView(func(v *View) { v.Lease, v.MayTake = stepLease(me, "better"), false }), "wait 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(tc.View).describe(); got != tc.want {
				t.Errorf("next = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNextIsAFunction: next depends on its View alone; asking twice gives
// the same answer, and the View is not changed.
func TestNextIsAFunction(t *testing.T) {
	v := stepView(func(v *View) { leadingSince(v, time.Second); v.Lease = stepLease(me, "better") })
	before := v.Lease.DeepCopy()
	if a, b := Next(v).describe(), Next(v).describe(); a != b {
		t.Errorf("next gave %q, then %q", a, b)
	}
	if v.Lease.ResourceVersion != before.ResourceVersion || ptr.Deref(v.Lease.Spec.PreferredHolder, "") != "better" {
		t.Error("next changed the Lease it was shown")
	}
}

// TestRenewCall is the table of an External's Renew: when it may be sent.
func TestRenewCall(t *testing.T) {
	foreignFP := Fingerprint(stepLease(me, ""))
	for _, tc := range []struct {
		name string
		View View
		want error // nil: the renewal is sent
	}{
		{"a Lease named to this process", stepView(nil), nil},
		{"a leader's renewal", stepView(func(v *View) { leadingSince(v, time.Second) }), nil},
		{"no Lease", stepView(func(v *View) { v.Lease = nil }), ErrNotLeader},
		{"another holder", stepView(func(v *View) { v.Lease = stepLease("other", "") }), ErrNotLeader},
		{"another preferred", stepView(func(v *View) { v.Lease = stepLease(me, "better") }), ErrNotLeader},
		{"this process preferred", stepView(func(v *View) { v.Lease = stepLease(me, me) }), nil},
		{"renewed by another process under this identity", stepView(func(v *View) {
			v.MayTake, v.Foreign, v.ForeignFor = false, foreignFP, time.Second
		}), ErrForeignRenewal},
		{"renewed by another process, unchanged for a lease duration", stepView(func(v *View) {
			v.MayTake, v.Foreign, v.ForeignFor = false, foreignFP, leaseDuration
		}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := RenewCall(tc.View)
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
			got, ok := TermToken(tc.lease, tc.seenBefore)
			if got != tc.want || ok != tc.ok {
				t.Errorf("termToken = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
