package candidate

import (
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

// What a candidate does next is decided here, by next, from a view of what
// the elector knows; the elector (lease.go) takes the view, performs the
// action, and asks again until the answer is to wait. next reads nothing
// but its argument and changes nothing, so every rule below is tested by a
// table (step_test.go) without a client, a clock or a goroutine.

// view is what the elector knows when it steps.
type view struct {
	// now is the local clock's reading. Instants are compared with it;
	// the waits that a suspend must not cut short come as durations the
	// clock measured (its Since), below.
	now      time.Time
	identity string
	timing   timing
	// renewsItself is false for an External candidate, whose elector
	// renews through Renew.
	renewsItself bool

	// lease is the Lease as last seen (watched or written), nil when it
	// does not exist.
	lease *coordinationv1.Lease
	// mine: this process wrote the Lease's renewTime. mayTake: the Lease
	// names this identity and may be taken without waiting (see ownership).
	mine, mayTake bool

	// leading: a term is published. lapsed: that term may not act any more
	// (its renew deadline has passed, or its context ended). renewedAt is
	// when its last successful renewal was sent.
	leading, lapsed bool
	renewedAt       time.Time
	// steppedDown: the elector stepped down earlier in this step.
	steppedDown bool
	// quietIn is how long until nothing of this process can act any more
	// on its past renewals, zero when nothing can now (see
	// renewalMode.quietIn).
	quietIn time.Duration

	// lastAttempt is when the last renewal was sent; retryAt holds off the
	// next renewal after a failure, handOverAt the next hand-over.
	lastAttempt, retryAt, handOverAt time.Time
	// goneVersion is the resourceVersion of a Lease whose renewal found it
	// deleted: the watch has yet to show that.
	goneVersion string
	// foreign identifies a Lease naming this identity that another process
	// renewed (see fingerprint), seen unchanged for foreignFor.
	foreign    string
	foreignFor time.Duration
}

// timing is the Config's durations that the rules use.
type timing struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// actionKind is what the elector does next.
type actionKind int

const (
	// waitAction: nothing to do; step again after action.after, or on a change.
	waitAction actionKind = iota
	// renew the Lease: a leader's renewal, or the first of a term.
	renew
	// stepDown: end the term, stop leader work and wait for it.
	stepDown
	// handOver the Lease to its preferred holder.
	handOver
	// noteForeign: start counting how long a Lease another process renewed
	// under this identity stays unchanged (action.foreign identifies it).
	noteForeign
)

var actionNames = [...]string{waitAction: "wait", renew: "renew", stepDown: "stepDown", handOver: "handOver", noteForeign: "noteForeign"}

func (k actionKind) String() string { return actionNames[k] }

// action is one thing to do.
type action struct {
	kind actionKind
	// after is how long to wait (wait).
	after time.Duration
	// reason and kv say why (stepDown), for the log.
	reason string
	kv     []any
	// foreign is the fingerprint to note (noteForeign).
	foreign string
}

func waitFor(d time.Duration) action { return action{kind: waitAction, after: d} }

func waitUntil(now time.Time, instants ...time.Time) action {
	return waitFor(untilNext(now, instants...))
}

func stepDownFor(reason string, kv ...any) action {
	return action{kind: stepDown, reason: reason, kv: kv}
}

// next is what the elector does next.
func next(v view) action {
	holder, preferred := holderOf(v.lease), preferredOf(v.lease)
	handOverTo := ""
	if preferred != "" && preferred != v.identity {
		handOverTo = preferred
	}
	t := v.timing

	if v.leading {
		deadline := v.renewedAt.Add(t.renewDeadline)
		nextRenewal := v.lastAttempt.Add(t.retryPeriod)
		switch {
		case v.lapsed:
			// The renew deadline has passed, maybe found by a reader
			// after a pause or a suspend, which has ended the term.
			return stepDownFor("no successful renewal within the renew deadline", "lastRenewal", v.renewedAt, "renewDeadline", t.renewDeadline)
		case v.lease == nil:
			return stepDownFor("the Lease was deleted")
		case holder != v.identity:
			return stepDownFor("the Lease names another holder", "holder", holder)
		case !v.mine:
			return stepDownFor("another process renewed the Lease under this identity", "renewTime", v.lease.Spec.RenewTime)
		case handOverTo != "":
			return stepDownFor("the controller prefers another holder", "preferredHolder", handOverTo)
		case !v.renewsItself:
			// The external elector renews; look again at the deadline.
			return waitUntil(v.now, deadline)
		case v.now.Before(nextRenewal):
			return waitUntil(v.now, nextRenewal, deadline)
		}
		return action{kind: renew}
	}

	// A candidate: it leads only a Lease that names it.
	if v.lease == nil || holder != v.identity {
		return waitFor(t.retryPeriod)
	}
	if handOverTo != "" {
		// Named but not leading: nothing of this process leads, so the
		// Lease can go once nothing acts on its past renewals either; but
		// not one that another process renewed under this identity, which
		// is that process's to let go.
		if !v.mayTake {
			return waitFor(t.retryPeriod)
		}
		if v.quietIn > 0 {
			return waitFor(v.quietIn)
		}
		if v.now.Before(v.handOverAt) {
			return waitUntil(v.now, v.handOverAt)
		}
		return action{kind: handOver}
	}
	if !v.mayTake {
		// Renewed under this identity by another process: taken only once
		// it has stayed unchanged for a lease duration, when that process
		// has evidently stopped.
		if fp := fingerprint(v.lease); fp != v.foreign {
			return action{kind: noteForeign, foreign: fp}
		}
		if v.foreignFor < t.leaseDuration {
			return waitFor(t.leaseDuration - v.foreignFor)
		}
	}
	if !v.renewsItself {
		return waitFor(t.retryPeriod) // it leads only through Renew
	}
	switch {
	case v.steppedDown:
		// A term that just ended is not taken up again in the same step:
		// the next look is on a change of the Lease or a retry period on.
		return waitFor(t.retryPeriod)
	case v.lease.ResourceVersion == v.goneVersion:
		return waitFor(t.retryPeriod) // deleted; a re-creation is renewed at once
	case v.now.Before(v.retryAt):
		return waitUntil(v.now, v.retryAt)
	}
	return action{kind: renew}
}

// renewCall decides an external elector's Renew, on the view after the
// elector has stepped: nil when the renewal may be sent, otherwise why not.
func renewCall(v view) error {
	holder, preferred := holderOf(v.lease), preferredOf(v.lease)
	switch {
	case v.lease == nil:
		return fmt.Errorf("%w: the Lease does not exist; the election controller creates it", ErrNotLeader)
	case holder != v.identity:
		return fmt.Errorf("%w: the Lease names %q", ErrNotLeader, holder)
	case preferred != "" && preferred != v.identity:
		return fmt.Errorf("%w: the election controller prefers %q", ErrNotLeader, preferred)
	case !v.leading && !v.mayTake && (v.foreign != fingerprint(v.lease) || v.foreignFor < v.timing.leaseDuration):
		return errForeignRenewal
	}
	return nil
}

// fingerprint identifies one version of the Lease as written (renewTime and
// leaseTransitions), whatever its resourceVersion.
func fingerprint(lease *coordinationv1.Lease) string {
	return fmt.Sprintf("%s/%d", renewTimeOf(lease).Format(time.RFC3339Nano), ptr.Deref(lease.Spec.LeaseTransitions, 0))
}

// termToken is the fencing token of a term that starts by renewing lease,
// which names this process; seenBefore is the highest leaseTransitions this
// process saw on any other version of the Lease. It is what the first
// renewal writes as leaseTransitions:
//   - the Lease's own count when the naming counted the term, as
//     cle-controller's election and the library's hand-over do: they raise
//     leaseTransitions and write acquireTime equal to renewTime (see
//     countedNaming); so one term is one number, from the naming to the last
//     renewal. Only if that count is above every value this process saw
//     before: a naming that did not count, or a controller that lost the
//     Lease's history, does not hand out a token already used;
//   - otherwise one above both (the controller in kube-apiserver does not
//     count terms).
//
// ok is false when that is past the largest leaseTransitions there is: no
// new term can have a token of its own then.
func termToken(lease *coordinationv1.Lease, seenBefore int32) (token int32, ok bool) {
	n := ptr.Deref(lease.Spec.LeaseTransitions, 0)
	if countedNaming(lease) && n > seenBefore {
		return n, true
	}
	return oneAbove(max(n, seenBefore))
}

// handOverToken is the leaseTransitions of a hand-over of lease, which
// counts the next holder's term: one above the Lease's and every value this
// process saw (highest), or the largest there is when that is reached.
func handOverToken(lease *coordinationv1.Lease, highest int32) int32 {
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

// countedNaming reports a Lease as a naming writes it: acquireTime equal to
// renewTime, which a renewal never writes (see renewalOf).
func countedNaming(lease *coordinationv1.Lease) bool {
	s := lease.Spec
	return s.AcquireTime != nil && s.RenewTime != nil && atMicro(s.AcquireTime.Time).Equal(atMicro(s.RenewTime.Time))
}
