package lead

import (
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/nudge"
)

// What a candidate does next is decided here, by Next, from a view of what
// the elector knows; the elector takes the view, performs the action, and
// asks again until the answer is to wait. Next reads nothing but its
// argument and changes nothing, so every rule below is tested by a table
// (next_test.go) without a client, a clock or a goroutine.

// ErrNotLeader is returned when an action needs leadership this process does
// not have (package candidate re-exports it).
var ErrNotLeader = errors.New("not the leader")

// ErrForeignRenewal: the Lease names this identity but another process
// renewed it, and it has not stayed unchanged for a lease duration yet.
var ErrForeignRenewal = fmt.Errorf("%w: another process renewed the Lease under this identity", ErrNotLeader)

// View is what the elector knows when it steps.
type View struct {
	// Now is the local clock's reading. Instants are compared with it;
	// the waits that a suspend must not cut short come as durations the
	// clock measured (its Since), below.
	Now      time.Time
	Identity string
	Timing   Timing
	// RenewsItself is false for an External candidate, whose elector
	// renews through Renew.
	RenewsItself bool

	// Lease is the Lease as last seen (watched or written), nil when it
	// does not exist.
	Lease *coordinationv1.Lease
	// Mine: this process wrote the Lease's renewTime. MayTake: the Lease
	// names this identity and may be taken without waiting (see
	// Ownership).
	Mine, MayTake bool

	// Leading: a term is published. Lapsed: that term may not act any more
	// (its renew deadline has passed, or its context ended). RenewedAt is
	// when its last successful renewal was sent.
	Leading, Lapsed bool
	RenewedAt       time.Time
	// SteppedDown: the elector stepped down earlier in this step.
	SteppedDown bool
	// QuietIn is how long until nothing of this process can act any more
	// on its past renewals, zero when nothing can now.
	QuietIn time.Duration

	// LastAttempt is when the last renewal was sent; RetryAt holds off the
	// next renewal after a failure, HandOverAt the next hand-over.
	LastAttempt, RetryAt, HandOverAt time.Time
	// GoneVersion is the resourceVersion of a Lease whose renewal found it
	// deleted: the watch has yet to show that.
	GoneVersion string
	// Foreign identifies a Lease naming this identity that another process
	// renewed (see Fingerprint), seen unchanged for ForeignFor.
	Foreign    Version
	ForeignFor time.Duration

	// Nudge steers the rule where timing alone decides (package nudge).
	Nudge nudge.Hook
}

// Timing is the durations that the rules use.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Kind is what the elector does next.
type Kind int

const (
	// Wait: nothing to do; step again after Action.After, or on a change.
	Wait Kind = iota
	// Renew the Lease: a leader's renewal, or the first of a term.
	Renew
	// StepDown: end the term, stop leader work and wait for it.
	StepDown
	// HandOver the Lease to its preferred holder.
	HandOver
	// NoteForeign: start counting how long a Lease another process renewed
	// under this identity stays unchanged (Action.Foreign identifies it).
	NoteForeign
)

var kindNames = [...]string{Wait: "wait", Renew: "renew", StepDown: "stepDown", HandOver: "handOver", NoteForeign: "noteForeign"}

func (k Kind) String() string { return kindNames[k] }

// Action is one thing to do.
type Action struct {
	Kind Kind
	// After is how long to wait (Wait).
	After time.Duration
	// Reason and KV say why (StepDown), for the log.
	Reason string
	KV     []any
	// Foreign is the version to note (NoteForeign).
	Foreign Version
}

// waitFor waits d, at least a millisecond so that a loop never spins.
func waitFor(d time.Duration) Action { return Action{Kind: Wait, After: max(d, time.Millisecond)} }

func waitUntil(now time.Time, instants ...time.Time) Action {
	return waitFor(UntilNext(now, instants...))
}

func stepDownFor(reason string, kv ...any) Action {
	return Action{Kind: StepDown, Reason: reason, KV: kv}
}

// Next is what the elector does next.
func Next(v View) Action {
	holder, preferred := HolderOf(v.Lease), PreferredOf(v.Lease)
	handOverTo := ""
	if preferred != "" && preferred != v.Identity {
		handOverTo = preferred
	}
	t := v.Timing

	if v.Leading {
		deadline := v.RenewedAt.Add(t.RenewDeadline)
		nextRenewal := v.LastAttempt.Add(t.RetryPeriod)
		switch {
		case v.Lapsed:
			// The renew deadline has passed, maybe found by a reader
			// after a pause or a suspend, which has ended the term.
			return stepDownFor("no successful renewal within the renew deadline", "lastRenewal", v.RenewedAt, "renewDeadline", t.RenewDeadline)
		case v.Lease == nil:
			return stepDownFor("the Lease was deleted")
		case holder != v.Identity:
			return stepDownFor("the Lease names another holder", "holder", holder)
		case !v.Mine:
			return stepDownFor("another process renewed the Lease under this identity", "renewTime", v.Lease.Spec.RenewTime)
		case handOverTo != "":
			return stepDownFor("the controller prefers another holder", "preferredHolder", handOverTo)
		case !v.RenewsItself:
			// The external elector renews; look again at the deadline.
			return waitUntil(v.Now, deadline)
		case v.Now.Before(nextRenewal) && (!v.LastAttempt.Before(v.Now) || !v.Nudge.At(nudge.LeaderRenewsEarly)):
			return waitUntil(v.Now, nextRenewal, deadline)
		}
		return Action{Kind: Renew}
	}

	// A candidate: it leads only a Lease that names it.
	if v.Lease == nil || holder != v.Identity {
		return waitFor(t.RetryPeriod)
	}
	if handOverTo != "" {
		// Named but not leading: nothing of this process leads, so the
		// Lease can go once nothing acts on its past renewals either; but
		// not one that another process renewed under this identity, which
		// is that process's to let go.
		if !v.MayTake {
			return waitFor(t.RetryPeriod)
		}
		if v.QuietIn > 0 {
			return waitFor(v.QuietIn)
		}
		if v.Now.Before(v.HandOverAt) {
			return waitUntil(v.Now, v.HandOverAt)
		}
		return Action{Kind: HandOver}
	}
	if !v.MayTake {
		// Renewed under this identity by another process: taken only once
		// it has stayed unchanged for a lease duration, when that process
		// has evidently stopped.
		if fp := Fingerprint(v.Lease); fp != v.Foreign {
			return Action{Kind: NoteForeign, Foreign: fp}
		}
		if v.ForeignFor < t.LeaseDuration {
			return waitFor(t.LeaseDuration - v.ForeignFor)
		}
	}
	if !v.RenewsItself {
		return waitFor(t.RetryPeriod) // it leads only through Renew
	}
	switch {
	case v.SteppedDown:
		// A term that just ended is not taken up again in the same step:
		// the next look is on a change of the Lease or a retry period on.
		return waitFor(t.RetryPeriod)
	case v.Lease.ResourceVersion == v.GoneVersion:
		return waitFor(t.RetryPeriod) // deleted; a re-creation is renewed at once
	case v.Now.Before(v.RetryAt):
		return waitUntil(v.Now, v.RetryAt)
	}
	return Action{Kind: Renew}
}

// RenewCall decides an External elector's Renew, on the view after the
// elector has stepped: nil when the renewal may be sent, otherwise why not.
func RenewCall(v View) error {
	holder, preferred := HolderOf(v.Lease), PreferredOf(v.Lease)
	switch {
	case v.Lease == nil:
		return fmt.Errorf("%w: the Lease does not exist; the election controller creates it", ErrNotLeader)
	case holder != v.Identity:
		return fmt.Errorf("%w: the Lease names %q", ErrNotLeader, holder)
	case preferred != "" && preferred != v.Identity:
		return fmt.Errorf("%w: the election controller prefers %q", ErrNotLeader, preferred)
	case !v.Leading && !v.MayTake && (v.Foreign != Fingerprint(v.Lease) || v.ForeignFor < v.Timing.LeaseDuration):
		return ErrForeignRenewal
	}
	return nil
}

// TermCall decides an External's RenewTerm, after RenewCall: nil when the
// Lease is still in the term the elector acquired (token), otherwise why it
// must acquire the new one. A term can pass to the same identity again (the
// controller names it anew after it lost the Lease), and an elector that
// renewed across would carry its old term's work into the new one.
func TermCall(lease *coordinationv1.Lease, token int32) error {
	if lease == nil {
		return nil // RenewCall refuses it
	}
	if t := ptr.Deref(lease.Spec.LeaseTransitions, 0); t != token {
		return fmt.Errorf("%w: the Lease is in term %d, the elector leads term %d; it must acquire the new term", ErrNotLeader, t, token)
	}
	return nil
}

// UntilNext is the wait before the earliest of the given (non-zero)
// instants, at least a millisecond so that a loop never spins.
func UntilNext(now time.Time, instants ...time.Time) time.Duration {
	var next time.Time
	for _, t := range instants {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if d := next.Sub(now); d > time.Millisecond {
		return d
	}
	return time.Millisecond
}
