package controller

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/strategy"
)

// The election rules as tables over decide: a view in, a decision out, no
// client, no clock, no informer.

// obsCand is a candidate with its record, for a view.
type obsCand = observedCandidate

// seen is a candidate the controller saw renewed at renewed (zero: listed at
// start-up, freshness unknown).
func seen(lc *coordinationv1beta1.LeaseCandidate, renewed time.Time) obsCand {
	return obsCand{lc: lc, rec: candidateRecord{uid: lc.UID, renewTime: renewTimeOf(lc), firstSeen: t0.Add(-time.Minute), renewedAt: renewed}}
}

func withRec(c obsCand, f func(*candidateRecord)) obsCand {
	f(&c.rec)
	return c
}

// A decision is compared whole, but for its log lines, which explain it in
// prose. The parts below build one for a row of the table; those that
// write the Lease build the object from the row's view, as a write is a copy
// of the cached Lease.
type part func(v *view, d *decision)

func want(parts ...part) func(v *view) decision {
	return func(v *view) decision {
		var d decision
		for _, p := range parts {
			p(v, &d)
		}
		return d
	}
}

func forget() part            { return func(_ *view, d *decision) { d.forget, d.clearNeeded = true, true } }
func leftAsIs() part          { return func(_ *view, d *decision) { d.settled = true } }
func readLease() part         { return func(_ *view, d *decision) { d.confirmAbsent = true } }
func notNeeded() part         { return func(_ *view, d *decision) { d.clearNeeded = true } }
func waits(w waitReason) part { return func(_ *view, d *decision) { d.waiting = w } }

// next is when the step looks again, after the view's now.
func next(after time.Duration) part {
	return func(v *view, d *decision) { d.next = v.now.Add(after) }
}

// neededSince: the election became needed that long before now.
func neededSince(before time.Duration) part {
	return func(v *view, d *decision) { d.markNeeded, d.neededSince = true, v.now.Add(-before) }
}

// state is the election's state whether or not a write is made; wrote is
// the state once the write is made, and unwritten if it is not.
func state(s leaseState) part { return wrote(s, s) }
func wrote(s, unwritten leaseState) part {
	return func(_ *view, d *decision) { d.outcome, d.unwritten = s, unwritten }
}

// ranked: the strategy was resolved and these candidates ranked valid.
func ranked(names ...string) part {
	return func(_ *view, d *decision) {
		d.resolved = append(d.resolved, ReasonStrategyConflict)
		for _, n := range names {
			d.resolved = append(d.resolved, "candidate/"+n)
		}
	}
}

// hasBest: a candidate can lead, so NoEligibleCandidate is over.
func hasBest() part {
	return func(_ *view, d *decision) { d.resolved = append(d.resolved, ReasonNoEligible) }
}

func unanswered(name string, pingedAgo time.Duration) part {
	return func(v *view, d *decision) {
		d.unanswered = append(d.unanswered, unansweredPing{candidate: name, uid: types.UID("uid-" + name), pingedAt: v.now.Add(-pingedAgo)})
	}
}

// ping asks the candidate, with a ping time just after its renewTime;
// early when no election is due yet (a preemption check, a late holder).
func ping(name string, early bool) part {
	return func(v *view, d *decision) {
		d.pings = append(d.pings, pingIntent{candidate: name, pingTime: v.candidate(name).Spec.RenewTime.Add(time.Microsecond), early: early})
	}
}

func event(e eventIntent) part { return func(_ *view, d *decision) { d.events = append(d.events, e) } }

// create creates the Lease naming holder for term; elect names holder of
// the view's Lease. described lists the candidates, as the LeaderElected
// Event does.
func create(holder string, term int32, confirm bool, described string) part {
	return func(v *view, d *decision) {
		at := metav1.NewMicroTime(v.now)
		d.resolved = append(d.resolved, ReasonTermsExhausted)
		d.write = &leaseWrite{
			kind: writeCreate, winner: holder, confirmWinner: confirm, strategy: oev, candidates: described, first: !v.record.held,
			lease: &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: v.key.Namespace, Name: v.key.Name},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To(holder), Strategy: ptr.To(oev), LeaseDurationSeconds: ptr.To[int32](15),
					AcquireTime: &at, RenewTime: &at, LeaseTransitions: ptr.To(term),
				},
			},
		}
	}
}

func elect(holder string, term int32, described string) part {
	return func(v *view, d *decision) {
		at := metav1.NewMicroTime(v.now)
		l := v.lease.DeepCopy()
		previous := holderIdentity(l)
		previousPreferred, previousStrategy := ptr.Deref(l.Spec.PreferredHolder, ""), ptr.Deref(l.Spec.Strategy, "")
		l.Spec.HolderIdentity, l.Spec.PreferredHolder, l.Spec.Strategy = ptr.To(holder), nil, ptr.To(oev)
		l.Spec.AcquireTime, l.Spec.RenewTime = &at, &at
		l.Spec.LeaseDurationSeconds, l.Spec.LeaseTransitions = ptr.To[int32](15), ptr.To(term)
		d.resolved = append(d.resolved, ReasonTermsExhausted)
		d.write = &leaseWrite{
			kind: writeElect, lease: l, winner: holder, confirmWinner: true, strategy: oev, candidates: described, first: !v.record.held,
			previousHolder: previous, previousPreferred: previousPreferred, previousStrategy: previousStrategy,
		}
	}
}

// under: the write is made under strategy s.
func under(s coordinationv1.CoordinatedLeaseStrategy) part {
	return func(_ *view, d *decision) {
		d.write.strategy, d.write.lease.Spec.Strategy = s, ptr.To(s)
	}
}

// cleOEV is lc asking for cle's OldestEmulationVersion.
func cleOEV(lc *coordinationv1beta1.LeaseCandidate) *coordinationv1beta1.LeaseCandidate {
	lc = lc.DeepCopy()
	lc.Spec.Strategy = strategy.OldestEmulationVersionByCleName
	return lc
}

// endsTerm: the election ends holder's term unreleased (its Lease expired,
// or its process exited).
func endsTerm(holder string) part { return func(_ *view, d *decision) { d.write.lostBy = holder } }

// steer sets preferredHolder ("" clears it) and the strategy.
func steer(preferred string) part {
	return func(v *view, d *decision) {
		l := v.lease.DeepCopy()
		l.Spec.PreferredHolder, l.Spec.Strategy = nil, ptr.To(oev)
		if preferred != "" {
			l.Spec.PreferredHolder = ptr.To(preferred)
		}
		d.write = &leaseWrite{
			kind: writeSteer, lease: l, winner: preferred, previousHolder: holderIdentity(v.lease),
			previousPreferred: ptr.Deref(v.lease.Spec.PreferredHolder, ""), previousStrategy: ptr.Deref(v.lease.Spec.Strategy, ""),
			strategy: oev,
		}
	}
}

// compareDecisions compares decisions whole but for their log lines.
var compareDecisions = []cmp.Option{
	cmp.AllowUnexported(decision{}, eventIntent{}, pingIntent{}, unansweredPing{}, leaseWrite{}),
	cmpopts.IgnoreFields(decision{}, "logs"),
	cmpopts.IgnoreFields(eventIntent{}, "log"),
	cmpopts.EquateEmpty(),
}

func TestDecide(t *testing.T) {
	now := t0
	old, mid := candidate("old", "1.30.0", "1.30.0"), candidate("mid", "1.31.0", "1.31.0")
	twin := candidate("twin", "1.30.0", "1.30.0", created(t0.Add(-2*time.Hour))) // old's equal on merit, older
	held := func(holder string, opts ...leaseOpt) *coordinationv1.Lease {
		return lease(append([]leaseOpt{heldBy(holder)}, opts...)...)
	}
	ttl := DefaultCandidateTTL - time.Second // the candidates' expiry, seen a second ago
	for _, tc := range []struct {
		name   string
		lease  *coordinationv1.Lease
		record leaseRecord
		cands  []obsCand
		// gather: the default gathering window (else none); spread: how
		// late the watch may deliver a write made now.
		gather bool
		spread time.Duration
		// exited: when the kubelet's report that the holder's process
		// exited was read (zero: none); departedExited: the deleted Lease's
		// holder's.
		exited         time.Time
		departedExited bool
		// builtinLeft: kube-apiserver's controller elects the built-in
		// strategies (Options.ElectsBuiltin is false).
		builtinLeft bool
		want        func(*view) decision
	}{{
		name:  "no candidates",
		lease: held("x"),
		want:  want(forget()),
	}, {
		name:  "no Lease, fresh candidates: create for the best",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), seen(old, now.Add(-time.Second))},
		want:  want(ranked("old", "mid"), hasBest(), create("old", 1, false, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:        "no Lease, fresh candidates of OldestEmulationVersion while kube-apiserver's controller elects it: left alone",
		cands:       []obsCand{seen(mid, now.Add(-time.Second)), seen(old, now.Add(-time.Second))},
		builtinLeft: true,
		want:        want(ranked(), leftAsIs(), state(leaseUnmanaged), next(ttl)),
	}, {
		name:        "no Lease, fresh candidates of cle's OldestEmulationVersion while kube-apiserver's controller elects the built-in one: created",
		cands:       []obsCand{seen(cleOEV(mid), now.Add(-time.Second)), seen(cleOEV(old), now.Add(-time.Second))},
		builtinLeft: true,
		want:        want(ranked("old", "mid"), hasBest(), create("old", 1, false, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), under(strategy.OldestEmulationVersionByCleName), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:  "no Lease, the best's freshness unknown: ping it and wait",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), seen(old, time.Time{})},
		want:  want(waits(waitAnswer), ranked("old", "mid"), hasBest(), ping("old", false), neededSince(0), state(leaseVacant), next(5*time.Second)),
	}, {
		name:  "pinged, within the timeout: wait",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-2*time.Second), true })},
		want:  want(waits(waitAnswer), ranked("old", "mid"), hasBest(), neededSince(0), state(leaseVacant), next(3*time.Second)),
	}, {
		name:  "pinged past the timeout: unresponsive, the next best is elected",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-6*time.Second), true })},
		want:  want(ranked("old", "mid"), hasBest(), unanswered("old", 6*time.Second), create("mid", 1, false, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:  "no ping reached it within the timeout: passed over, tried again after a backoff",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt = now.Add(-6 * time.Second) })},
		want:  want(ranked("old", "mid"), hasBest(), unanswered("old", 6*time.Second), create("mid", 1, false, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(4*time.Second)),
	}, {
		name:  "no ping reached it, the attempt two ping timeouts old (the controller's steps failed since): asked again now",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt = now.Add(-11 * time.Second) })},
		want:  want(waits(waitAnswer), ranked("old", "mid"), hasBest(), unanswered("old", 11*time.Second), ping("old", false), neededSince(0), state(leaseVacant), next(5*time.Second)),
	}, {
		name: "unreachable: not pinged until its backoff is over",
		cands: []obsCand{withRec(seen(old, time.Time{}), func(r *candidateRecord) {
			r.unreachable = unreachable{until: now.Add(3 * time.Second), backoff: 5 * time.Second}
		})},
		want: want(ranked("old"), event(eventIntent{topic: "NoEligibleCandidate", eventType: "Warning", reason: "NoEligibleCandidate", action: "Elect", note: "None of the 1 candidates can lead: old(binary 1.30.0, emulation 1.30.0)", counter: countNoEligible}), neededSince(0), state(leaseVacant), next(3*time.Second)),
	}, {
		name:   "vacant Lease with a history: elected at once, for the controller's lease duration",
		lease:  held("", transitions(4), durationSeconds(1)),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 4}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   want(ranked("old"), hasBest(), elect("old", 5, "old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:   "live holder, the best: settled",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, time.Time{})},
		want:   want(ranked("old", "mid"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(14*time.Second)),
	}, {
		// The allowance is what writes took lately; a prompt write can
		// end it at any moment (see WatchLag.Spread). Looking again only
		// at the expiry computed with it would leave a holder that died
		// meanwhile unpinged for as long as the allowance was.
		name:   "live holder, writes showing 4s late: looks again when the Lease would expire without that allowance",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, time.Time{})},
		spread: 4 * time.Second,
		want:   want(ranked("old", "mid"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(14*time.Second)),
	}, {
		name:   "live holder, a better candidate alive: preferredHolder",
		lease:  held("mid", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "mid", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, time.Time{})},
		want:   want(ranked("old", "mid"), hasBest(), steer("old"), notNeeded(), state(leasePreempting), next(14*time.Second)),
	}, {
		name:   "live holder, a candidate equal on merit: no preemption, not even a ping",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, time.Time{}), seen(twin, time.Time{})},
		want:   want(ranked("twin", "old"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(14*time.Second)),
	}, {
		name:   "vacant with a history, a stale tie-break winner and a live equal: the live one, no ping",
		lease:  held("", transitions(2)),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(twin, time.Time{}), seen(old, now.Add(-time.Second))},
		want:   want(ranked("twin", "old"), hasBest(), elect("old", 3, "old(binary 1.30.0, emulation 1.30.0), twin(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:   "expired holder: elected away from",
		lease:  held("mid", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "mid", transitions: 2, observedAt: now.Add(-16 * time.Second)}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-20*time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), elect("old", 3, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), endsTerm("mid"), neededSince(time.Second), wrote(leaseOptimal, leaseExpired), next(14*time.Second)),
	}, {
		name:   "live holder late: pinged, so that its expiry tells whether it is gone",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-11 * time.Second), renewGap: 2 * time.Second}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, now.Add(-time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), ping("old", true), leftAsIs(), notNeeded(), state(leaseOptimal), next(4*time.Second)),
	}, {
		// Its renewal may be queued at a server whose writes take that
		// long: the controller's own took up to 5s lately.
		name:   "live holder unseen for its lease duration, writes showing 5s late, the watch caught up: not expired yet",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-16 * time.Second)}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-20*time.Second)), seen(mid, now.Add(-time.Second))},
		spread: 5 * time.Second,
		want:   want(ranked("old", "mid"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(4*time.Second)),
	}, {
		name:   "live holder late, pinged, no answer yet: not pinged again",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-12 * time.Second), renewGap: 2 * time.Second}},
		cands:  []obsCand{withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-2*time.Second), true }), seen(mid, now.Add(-time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(3*time.Second)),
	}, {
		name:   "live holder late that answered: not pinged again",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-12 * time.Second), renewGap: 2 * time.Second}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(3*time.Second)),
	}, {
		name:   "live holder that renews every 10s on a 15s Lease, 11s since its renewal: not late, not pinged",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-11 * time.Second), renewGap: 10 * time.Second}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, now.Add(-time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(4*time.Second)),
	}, {
		name:   "live holder whose cadence is not known yet, 11s since its renewal: not late",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-11 * time.Second)}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, now.Add(-time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(4*time.Second)),
	}, {
		name:   "expired holder that answered while late: elected again at once",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-16 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-3*time.Second)), seen(mid, now.Add(-time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), elect("old", 3, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), endsTerm("old"), neededSince(time.Second), wrote(leaseOptimal, leaseExpired), next(ttl-2*time.Second)),
	}, {
		name:   "expired holder that did not answer the ping sent while late: the next best at once",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-15 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{withRec(seen(old, now.Add(-30*time.Second)), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-5*time.Second), true }), seen(mid, now.Add(-time.Second))},
		want:   want(ranked("old", "mid"), hasBest(), unanswered("old", 5*time.Second), elect("mid", 3, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), endsTerm("old"), neededSince(0), wrote(leaseOptimal, leaseExpired), next(14*time.Second)),
	}, {
		name:   "expired holder whose candidate renewed before it was late: suspect, pinged",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-15 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-6*time.Second)), seen(mid, now.Add(-time.Second))},
		want:   want(waits(waitAnswer), ranked("old", "mid"), hasBest(), ping("old", false), neededSince(0), state(leaseExpired), next(5*time.Second)),
	}, {
		name:   "held by a non-candidate: left alone, its renewals cost nothing",
		lease:  held("outsider"),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "outsider", observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   want(ranked("old"), leftAsIs(), notNeeded(), state(leaseUnmanaged), next(14*time.Second)),
	}, {
		// A fresh replica knows nobody to be alive, and the dead candidate
		// of the newest binary decides while the Lease is live: once it
		// expires, it is pinged and the live candidates' strategy elects.
		name:   "held by a non-candidate, a dead candidate's strategy handled elsewhere: looked at again when the Lease expires",
		lease:  held("outsider"),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "outsider", observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(mid, time.Time{}), seen(candidate("newer", "1.32.0", "1.32.0", withStrategy("example.com/Future")), time.Time{})},
		want:   want(ranked(), leftAsIs(), state(leaseUnmanaged), next(14*time.Second)),
	}, {
		name:  "strategy conflict: an Event, no write",
		lease: held("old"),
		cands: []obsCand{seen(old, now.Add(-time.Second)), seen(candidate("other", "1.30.0", "1.30.0", withStrategy("Other")), now.Add(-time.Second))},
		want:  want(event(eventIntent{topic: "StrategyConflict", eventType: "Warning", reason: "StrategyConflict", action: "Elect", note: "Candidates at binary version 1.30.0 ask for different strategies (old: \"OldestEmulationVersion\", other: \"Other\"); not electing until they agree", counter: countConflict}), leftAsIs(), state(leaseConflict), next(ttl)),
	}, {
		name:  "a strategy handled elsewhere: nothing at all",
		cands: []obsCand{seen(candidate("a", "1.30.0", "1.30.0", withStrategy("Other")), now.Add(-time.Second))},
		want:  want(ranked(), leftAsIs(), state(leaseUnmanaged), next(ttl)),
	}, {
		name: "every candidate passed over, a dead one asking for a strategy handled elsewhere: looked at again when the unreachable one may be pinged",
		cands: []obsCand{
			withRec(seen(mid, time.Time{}), func(r *candidateRecord) { r.unreachable = unreachable{until: now.Add(3 * time.Second)} }),
			withRec(seen(candidate("newer", "1.32.0", "1.32.0", withStrategy("example.com/Future")), time.Time{}), func(r *candidateRecord) { r.unresponsive = true }),
		},
		want: want(ranked(), leftAsIs(), state(leaseUnmanaged), next(3*time.Second)),
	}, {
		name:   "first election: gather",
		record: leaseRecord{gathering: gathering{firstJoin: now.Add(-100 * time.Millisecond), lastJoin: now.Add(-100 * time.Millisecond)}},
		cands:  []obsCand{seen(old, now.Add(-100*time.Millisecond))},
		gather: true,
		want:   want(waits(waitGathering), ranked("old"), hasBest(), neededSince(0), state(leaseVacant), next(100*time.Millisecond)),
	}, {
		// Candidates that started together reach a loaded server's watch
		// seconds apart: the window is that spread longer.
		name:   "first election on a lagging watch: the window covers the lag",
		record: leaseRecord{gathering: gathering{firstJoin: now.Add(-900 * time.Millisecond), lastJoin: now.Add(-900 * time.Millisecond)}},
		cands:  []obsCand{seen(old, now.Add(-900*time.Millisecond))},
		gather: true,
		spread: 3 * time.Second,
		want:   want(waits(waitGathering), ranked("old"), hasBest(), neededSince(0), state(leaseVacant), next(2300*time.Millisecond)),
	}, {
		// The watch keeps up, but the server's writes take up to 400ms to
		// show: candidates that started together arrive that far apart.
		name:   "first election, writes showing 400ms late, the watch caught up: the early close waits for them",
		record: leaseRecord{gathering: gathering{firstJoin: now.Add(-300 * time.Millisecond), lastJoin: now.Add(-300 * time.Millisecond)}},
		cands:  []obsCand{seen(old, now.Add(-300*time.Millisecond))},
		gather: true,
		spread: 400 * time.Millisecond,
		want:   want(waits(waitGathering), ranked("old"), hasBest(), neededSince(0), state(leaseVacant), next(300*time.Millisecond)),
	}, {
		name:   "first election on a lagging watch, the window and the lag passed: elect",
		record: leaseRecord{gathering: gathering{firstJoin: now.Add(-4 * time.Second), lastJoin: now.Add(-4 * time.Second)}},
		cands:  []obsCand{seen(old, now.Add(-4*time.Second))},
		gather: true,
		spread: 3 * time.Second,
		want:   want(ranked("old"), hasBest(), create("old", 1, false, "old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(11*time.Second)),
	}, {
		name:   "deleted while held: not before the holder's term runs out",
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 6, departed: departedHolder{holder: "mid", until: now.Add(10 * time.Second)}}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-time.Second))},
		want:   want(waits(waitDeparted), ranked("old", "mid"), hasBest(), neededSince(0), state(leaseVacant), next(10*time.Second)),
	}, {
		name:           "deleted while held, the holder's process exited: created at once, above the history",
		record:         leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 6, departed: departedHolder{holder: "mid", until: now.Add(10 * time.Second), process: proof.Process{Instance: "0123456789abcdef0123456789abcdef", Pod: "ns/mid-0", Container: "app"}}}},
		cands:          []obsCand{seen(old, now.Add(-time.Second)), withRec(seen(mid, now.Add(-time.Second)), func(r *candidateRecord) { r.exited = true })},
		departedExited: true,
		want:           want(ranked("old", "mid"), hasBest(), create("old", 7, true, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:   "deleted while held, the term over: created above the history",
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 6, departed: departedHolder{holder: "mid", until: now}}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   want(ranked("old"), hasBest(), create("old", 7, true, "old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:   "deleted while held, created again empty by someone else: nobody named before the holder's term runs out",
		lease:  lease(),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 6, departed: departedHolder{holder: "mid", until: now.Add(10 * time.Second)}}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-time.Second))},
		want:   want(waits(waitDeparted), ranked("old", "mid"), hasBest(), neededSince(0), state(leaseVacant), next(10*time.Second)),
	}, {
		name:  "a candidate not known to be alive would decide another strategy: asked first",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), seen(candidate("newer", "1.32.0", "1.32.0", withStrategy("example.com/Future")), time.Time{})},
		want:  want(waits(waitStrategy), ping("newer", false), state(leaseVacant), next(5*time.Second)),
	}, {
		name: "its ping unanswered: it decides nothing, the live candidates' strategy elects",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(candidate("newer", "1.32.0", "1.32.0", withStrategy("example.com/Future")), time.Time{}),
			func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-6*time.Second), true })},
		want: want(ranked("mid", "newer"), hasBest(), unanswered("newer", 6*time.Second), create("mid", 1, false, "mid(binary 1.31.0, emulation 1.31.0), newer(binary 1.32.0, emulation 1.32.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:   "a candidate not known to be alive asks for the same strategy: nobody asked",
		lease:  held("mid"),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "mid", observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(mid, now.Add(-time.Minute)), seen(candidate("newer", "1.32.0", "1.32.0"), time.Time{})},
		want:   want(ranked("mid", "newer"), hasBest(), leftAsIs(), notNeeded(), state(leaseOptimal), next(14*time.Second)),
	}, {
		name:   "own write not in the cache yet: wait",
		lease:  held("", transitions(1)),
		record: leaseRecord{pendingWrite: pendingWrite{writing: true, replaced: "1", writtenAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   want(waits(waitOwnWrite), next(4*time.Second)),
	}, {
		name:   "own create still not in the cache after the wait: read the API",
		record: leaseRecord{pendingWrite: pendingWrite{writing: true, writtenAt: now.Add(-6 * time.Second), named: "old"}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   want(waits(waitOwnWrite), readLease(), next(5*time.Second)),
	}, {
		name:   "live holder no strategy can rank, the preferred one pinged and not answered yet: kept while the strategy is written",
		lease:  held("bad", preferring("old"), transitions(2), func(l *coordinationv1.Lease) { l.Spec.Strategy = nil }),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "bad", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands: []obsCand{
			seen(candidate("bad", "1.31.x", "1.30.0"), now.Add(-time.Second)),
			withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-2*time.Second), true }),
		},
		want: want(ranked("old"), event(eventIntent{topic: "candidate/bad", related: "bad", eventType: "Warning", reason: "InvalidCandidate", action: "Elect", note: "Candidate bad cannot take part under strategy OldestEmulationVersion: spec.binaryVersion \"1.31.x\" is not a strict semantic version: illegal version string \"1.31.x\"", counter: countInvalid}), steer("old"), notNeeded(), state(leaseOptimal), next(3*time.Second)),
	}, {
		name:   "live holder whose process exited: the next best at once, not at the expiry",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-2 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{withRec(seen(old, now.Add(-time.Second)), func(r *candidateRecord) { r.exited = true }), seen(mid, now.Add(-time.Second))},
		exited: now.Add(-100 * time.Millisecond),
		want: want(event(eventIntent{topic: ReasonHolderExited, eventType: "Normal", reason: ReasonHolderExited, action: "Elect",
			note: "The kubelet reports that the process of holder old has exited; its term (leaseTransitions 2) is over before its Lease expires", counter: countHolderExited}),
			ranked("old", "mid"), hasBest(), elect("mid", 3, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), endsTerm("old"), neededSince(100*time.Millisecond), wrote(leaseOptimal, leaseExpired), next(14*time.Second)),
	}, {
		// Restarted in place: the container's next process registered a
		// new instance before the report of the last one's exit was read.
		// It may well be the best again, once it answers.
		name:   "live holder whose process exited, its next process registered since: asked, then elected",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-2 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-time.Second))},
		exited: now.Add(-100 * time.Millisecond),
		want: want(event(eventIntent{topic: ReasonHolderExited, eventType: "Normal", reason: ReasonHolderExited, action: "Elect",
			note: "The kubelet reports that the process of holder old has exited; its term (leaseTransitions 2) is over before its Lease expires", counter: countHolderExited}),
			waits(waitAnswer), ranked("old", "mid"), hasBest(), ping("old", false), neededSince(100*time.Millisecond), state(leaseExpired), next(5*time.Second)),
	}, {
		name:  "a candidate whose process exited: passed over without a ping",
		cands: []obsCand{withRec(seen(old, now.Add(-time.Second)), func(r *candidateRecord) { r.exited = true }), seen(mid, now.Add(-time.Second))},
		want:  want(ranked("old", "mid"), hasBest(), create("mid", 1, false, "mid(binary 1.31.0, emulation 1.31.0), old(binary 1.30.0, emulation 1.30.0)"), neededSince(0), wrote(leaseOptimal, leaseVacant), next(14*time.Second)),
	}, {
		name:   "token exhausted: no election",
		lease:  held("", transitions(math.MaxInt32)),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: math.MaxInt32}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   want(ranked("old"), hasBest(), event(eventIntent{topic: "FencingTokenExhausted", eventType: "Warning", reason: "FencingTokenExhausted", action: "Elect", note: "Cannot elect old: leaseTransitions has reached 2147483647, the highest fencing token there is"}), neededSince(0), state(leaseVacant), next(14*time.Second)),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lease != nil {
				tc.lease.ResourceVersion = "1"
			}
			v := &view{key: leaseKey, lease: tc.lease, record: tc.record, candidates: tc.cands, now: now, judgeAt: now, spread: tc.spread, holderExitedAt: tc.exited, departedExited: tc.departedExited, builtinLeft: tc.builtinLeft}
			opts := Options{}
			if err := opts.complete(); err != nil {
				t.Fatal(err)
			}
			if !tc.gather {
				opts.ElectionGather = NoElectionGather
			}
			d := decide(&opts, v)
			if diff := cmp.Diff(tc.want(v), d, compareDecisions...); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			// The same view always gives the same decision.
			if diff := cmp.Diff(d, decide(&opts, v), compareDecisions...); diff != "" {
				t.Errorf("a second decision on the same view differs (-first +second):\n%s", diff)
			}
		})
	}
}
