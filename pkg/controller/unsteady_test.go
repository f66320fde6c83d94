package controller

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/strategy"
)

// TestUnsteadyCandidate: a candidate that lost two terms within the unsteady
// window without releasing them (its Lease expired, or its process exited) is
// not preferred over a live holder until the older of those losses leaves
// the window. It is still elected when there is no live holder, and never
// kept from a holder of a newer emulation version than its own.
func TestUnsteadyCandidate(t *testing.T) {
	now := t0
	hi := func(emulation string) obsCand {
		return seen(candidate("hi", "1.31.0", emulation, withStrategy(strategy.PriorityName), withAnnotation(strategy.PriorityAnnotation, "10")), now.Add(-time.Second))
	}
	// prio is a candidate ranked between hi and lo by its priority, of
	// binary and emulation version versions.
	prio := func(name, versions, priority string) obsCand {
		return seen(candidate(name, versions, versions, withStrategy(strategy.PriorityName), withAnnotation(strategy.PriorityAnnotation, priority)), now.Add(-time.Second))
	}
	stale := func(c obsCand) obsCand {
		return withRec(c, func(r *candidateRecord) { r.renewedAt = now.Add(-time.Minute) })
	}
	dead := func(c obsCand) obsCand { return withRec(c, func(r *candidateRecord) { r.unresponsive = true }) }
	lo := seen(candidate("lo", "1.31.0", "1.31.0", withStrategy(strategy.PriorityName)), now.Add(-time.Second))
	heldByLo := func() *coordinationv1.Lease { return priorityLease("lo", 4) }
	live := leaseObject{observed: true, holder: "lo", transitions: 4, observedAt: now.Add(-time.Second)}
	lost := func(agos ...time.Duration) leaseHistory {
		h := leaseHistory{held: true, maxTransitions: 4}
		for _, ago := range agos {
			h.losses = append(h.losses, termLoss{candidate: "hi", at: now.Add(-ago)})
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		lease   *coordinationv1.Lease
		record  leaseRecord
		hi      obsCand
		others  []obsCand // ranked between hi and lo
		window  time.Duration
		kind    string // the write's kind ("": none)
		winner  string
		wakeBy  time.Duration // the step looks again within this
		unsteay bool          // the CandidateUnsteady Event
		pings   []string
	}{{
		name: "steady: preferred over the live holder", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost()}, hi: hi("1.31.0"),
		kind: writeSteer, winner: "hi",
	}, {
		name: "one loss: still preferred", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(time.Minute)}, hi: hi("1.31.0"),
		kind: writeSteer, winner: "hi",
	}, {
		name: "two losses within the window: not preferred until the older leaves it", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.31.0"),
		wakeBy: time.Minute, unsteay: true,
	}, {
		name: "two losses, the older out of the window: preferred", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(6*time.Minute, time.Minute)}, hi: hi("1.31.0"),
		kind: writeSteer, winner: "hi",
	}, {
		name: "two losses, but it emulates an older version than the holder: preferred", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.30.0"),
		kind: writeSteer, winner: "hi",
	}, {
		name: "two losses, the holder's Lease expired: elected, as the best there is", lease: heldByLo(),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "lo", transitions: 4, observedAt: now.Add(-20 * time.Second)}, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.31.0"),
		kind: writeElect, winner: "hi",
	}, {
		// Named, mid would hold only until hi, which runs older versions
		// than mid and so is never held back from it, preempts it.
		name: "two losses, the next-ranked runs newer versions than it: the live holder kept", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.31.0"), others: []obsCand{prio("mid", "1.32.0", "5")},
		wakeBy: time.Minute, unsteay: true,
	}, {
		name: "two losses, the next-ranked runs its versions: the next-ranked preferred", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.31.0"), others: []obsCand{prio("mid", "1.31.0", "5")},
		kind: writeSteer, winner: "mid", unsteay: true,
	}, {
		name: "two losses, unresponsive: the next-ranked preferred", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: dead(hi("1.31.0")), others: []obsCand{prio("mid", "1.32.0", "5")},
		kind: writeSteer, winner: "mid", unsteay: true,
	}, {
		// Not renewed within the candidate freshness: asked, and mid waits
		// for the answer.
		name: "two losses, not known to be alive: pinged, the live holder kept meanwhile", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: stale(hi("1.31.0")), others: []obsCand{prio("mid", "1.32.0", "5")},
		pings: []string{"hi"}, wakeBy: DefaultPingTimeout, unsteay: true,
	}, {
		// The version order is never held back: low2 runs older versions
		// than the holder.
		name: "two losses, the next-ranked passed over too: the one below it preferred", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.31.0"), others: []obsCand{prio("mid", "1.32.0", "5"), prio("low2", "1.30.0", "3")},
		kind: writeSteer, winner: "low2", unsteay: true,
	}, {
		name: "two losses, the next-ranked unresponsive and passed over: the one below it preferred", lease: heldByLo(),
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.31.0"), others: []obsCand{dead(prio("mid", "1.32.0", "5")), prio("low2", "1.30.0", "3")},
		kind: writeSteer, winner: "low2", unsteay: true,
	}, {
		name: "two losses, the rule off: preferred", lease: heldByLo(), window: NoUnsteadyWindow,
		record: leaseRecord{leaseObject: live, leaseHistory: lost(4*time.Minute, time.Minute)}, hi: hi("1.31.0"),
		kind: writeSteer, winner: "hi",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.lease.ResourceVersion = "1"
			cands := append([]obsCand{tc.hi, lo}, tc.others...)
			v := &view{key: leaseKey, lease: tc.lease, record: tc.record, candidates: cands, now: now, judgeAt: now}
			opts := Options{ElectionGather: NoElectionGather, UnsteadyWindow: tc.window}
			if err := opts.complete(); err != nil {
				t.Fatal(err)
			}
			d := decide(&opts, v)
			kind, winner := "", ""
			if d.write != nil {
				kind, winner = d.write.kind, d.write.winner
			}
			if kind != tc.kind || winner != tc.winner {
				t.Errorf("write %q naming %q, want %q naming %q", kind, winner, tc.kind, tc.winner)
			}
			var pinged []string
			for _, p := range d.pings {
				pinged = append(pinged, p.candidate)
			}
			if !slices.Equal(pinged, tc.pings) {
				t.Errorf("pinged %v, want %v", pinged, tc.pings)
			}
			said := false
			for _, ev := range d.events {
				said = said || ev.reason == ReasonCandidateUnsteady
			}
			if said != tc.unsteay {
				t.Errorf("CandidateUnsteady said: %v, want %v (events %v)", said, tc.unsteay, d.events)
			}
			if tc.wakeBy > 0 && (d.next.IsZero() || d.next.After(now.Add(tc.wakeBy))) {
				t.Errorf("looks again at %v, want within %s", d.next, tc.wakeBy)
			}
		})
	}
}

// An election that ends a term whose Lease expired records the loss against
// the last holder; a holder that hands over records none.
func TestTermLossRecorded(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.create(lease(heldBy("a"), transitions(3)))
	h.reconcile()
	h.step(20 * time.Second) // a's Lease expires; a does not answer
	h.renew("b", h.clock.Now())
	for range 3 {
		h.reconcile()
		h.step(6 * time.Second)
		h.renew("b", h.clock.Now())
	}
	if l := h.serverLease(); l == nil || holderOf(l) != "b" {
		t.Fatalf("Lease %v, want b elected once a's expired", l)
	}
	rec := h.c.obs.lease(keyOf(testLease), nil, h.clock.Now())
	if len(rec.losses) != 1 || rec.losses[0].candidate != "a" {
		t.Errorf("losses recorded %v, want a's", rec.losses)
	}
}

// A candidate ranked first that keeps failing: each time it comes back it is
// preferred over the live holder and takes the Lease, then its Lease expires.
// After its second such loss the controller keeps the sound holder, says why,
// and prefers it again once the older loss has left the unsteady window.
func TestUnsteadyCandidateKeepsTheLiveHolder(t *testing.T) {
	h := newHarness(t)
	h.create(priorityCandidate("hi", "10"), priorityCandidate("lo", "0"))
	h.create(priorityLease("hi", 1))
	h.reconcile()
	// elect runs steps until the Lease names want, lo renewing and hi
	// silent (hi's pings go unanswered).
	elect := func(want string) {
		t.Helper()
		for range 10 {
			h.renew("lo", h.clock.Now())
			h.reconcile()
			if holderOf(h.serverLease()) == want {
				return
			}
			h.step(3 * time.Second)
		}
		t.Fatalf("Lease held by %q, want %q", holderOf(h.serverLease()), want)
	}
	// comesBack has hi register again and reports whether the controller
	// asks the holder to hand the Lease to it.
	comesBack := func() bool {
		t.Helper()
		h.renew("hi", h.clock.Now())
		h.renew("lo", h.clock.Now())
		h.reconcile()
		return preferredOf(h.serverLease()) == "hi"
	}
	// takes has hi take the Lease handed to it, and lets its term lapse.
	takes := func() {
		t.Helper()
		l := h.serverLease()
		l.Spec.HolderIdentity, l.Spec.PreferredHolder = ptr.To("hi"), nil
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
		h.serverUpdate(leasesGVR, l)
		h.reconcile()
		h.step(20 * time.Second) // hi stops renewing
	}
	h.step(20 * time.Second) // hi's first term lapses
	elect("lo")
	if !comesBack() {
		t.Fatal("after one lost term, hi was not preferred over lo")
	}
	takes()
	elect("lo")
	h.takeEvents()
	if comesBack() {
		t.Fatal("after two lost terms within the window, hi was preferred over the live holder lo again")
	}
	if evs := eventsWithReason(h.takeEvents(), ReasonCandidateUnsteady); len(evs) == 0 {
		t.Error("no CandidateUnsteady Event said why hi was not preferred")
	}
	h.step(DefaultUnsteadyWindow)
	h.renewLease(h.clock.Now()) // lo, sound, renews
	if !comesBack() {
		t.Error("hi was not preferred once its older loss had left the unsteady window")
	}
}

// A holder asked to hand over (the Lease names a preferredHolder) that does
// so by letting its Lease expire, as client-go electors without
// ReleaseOnCancel and pkg/lock adopters without ElectorContext do, has lost
// no term: an operator who raises another candidate's priority and lowers it
// again, twice, must not leave the best candidate held back as unsteady.
func TestHandoverByExpiryIsNoLoss(t *testing.T) {
	h := newHarness(t)
	h.create(priorityCandidate("hi", "10"), priorityCandidate("lo", "0"))
	h.create(priorityLease("hi", 1))
	h.renew("hi", h.clock.Now())
	h.renew("lo", h.clock.Now())
	h.reconcile()
	setPriority := func(name, p string) {
		t.Helper()
		lc := h.serverCandidate(name)
		lc.Annotations[strategy.PriorityAnnotation] = p
		lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
		h.serverUpdate(candidatesGVR, lc)
		h.renew("hi", h.clock.Now())
	}
	// handOver has the holder, asked to hand the Lease to want, stop
	// renewing it; both candidates stay alive, until want is elected.
	handOver := func(want string) {
		t.Helper()
		h.reconcile()
		if got := preferredOf(h.serverLease()); got != want {
			t.Fatalf("preferredHolder %q, want %q", got, want)
		}
		for range 20 {
			h.step(3 * time.Second)
			h.renew("hi", h.clock.Now())
			h.renew("lo", h.clock.Now())
			h.reconcile()
			if holderOf(h.serverLease()) == want {
				h.renewLease(h.clock.Now())
				return
			}
		}
		t.Fatalf("Lease held by %q, want %q", holderOf(h.serverLease()), want)
	}
	for range 2 {
		setPriority("lo", "20")
		handOver("lo")
		h.takeEvents()
		setPriority("lo", "0")
		handOver("hi")
		if evs := eventsWithReason(h.takeEvents(), ReasonCandidateUnsteady); len(evs) > 0 {
			t.Fatalf("a candidate that handed over by expiry was called unsteady: %v", evs)
		}
	}
	if rec := h.c.obs.lease(keyOf(testLease), nil, h.clock.Now()); len(rec.losses) != 0 {
		t.Errorf("losses recorded %v, want none: every term ended by a requested handover", rec.losses)
	}
}

// priorityCandidate is a candidate of versions 1.31.0 under cle.dev/Priority,
// of priority p.
func priorityCandidate(name, p string) *coordinationv1beta1.LeaseCandidate {
	return candidate(name, "1.31.0", "1.31.0", withStrategy(strategy.PriorityName), withAnnotation(strategy.PriorityAnnotation, p))
}

// priorityLease is the test Lease under cle.dev/Priority, held by holder in
// term term.
func priorityLease(holder string, term int32) *coordinationv1.Lease {
	l := lease(heldBy(holder), transitions(term))
	l.Spec.Strategy = ptr.To(strategy.PriorityName)
	return l
}
