package controller

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	"k8s.io/utils/ptr"
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

// describe renders a decision compactly, with instants relative to now.
func describe(d decision, now time.Time) string {
	var parts []string
	rel := func(t time.Time) string { return t.Sub(now).String() }
	if d.waitForOwnWrite {
		parts = append(parts, "wait for own write")
	}
	if d.confirmAbsent {
		parts = append(parts, "read the Lease")
	}
	if d.forget {
		parts = append(parts, "forget")
	}
	for _, u := range d.unanswered {
		parts = append(parts, "unanswered "+u.lc.Name)
	}
	if len(d.pings) > 0 {
		var names []string
		for _, p := range d.pings {
			names = append(names, p.candidate.Name)
		}
		parts = append(parts, "ping "+strings.Join(names, ","))
	}
	if w := d.write; w != nil {
		s := w.kind
		switch w.kind {
		case writeSteer:
			s += fmt.Sprintf(" preferred=%q", ptr.Deref(w.lease.Spec.PreferredHolder, ""))
		default:
			s += fmt.Sprintf(" %s term %d duration %ds", holderIdentity(w.lease), ptr.Deref(w.lease.Spec.LeaseTransitions, 0),
				ptr.Deref(w.lease.Spec.LeaseDurationSeconds, 0))
		}
		if w.confirmWinner {
			s += " (confirm)"
		}
		parts = append(parts, s)
	}
	for _, e := range d.events {
		parts = append(parts, "event "+e.reason)
	}
	if d.settled {
		parts = append(parts, "settled")
	}
	if d.outcome != "" {
		parts = append(parts, "outcome "+d.outcome)
	}
	if !d.next.IsZero() {
		parts = append(parts, "next "+rel(d.next))
	}
	return strings.Join(parts, "; ")
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
		want   string
	}{{
		name:  "no candidates",
		lease: held("x"),
		want:  "forget",
	}, {
		name:  "no Lease, fresh candidates: create for the best",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), seen(old, now.Add(-time.Second))},
		want:  "create old term 1 duration 15s; outcome optimal; next 14s",
	}, {
		name:  "no Lease, the best's freshness unknown: ping it and wait",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), seen(old, time.Time{})},
		want:  "ping old; outcome vacant; next 5s",
	}, {
		name:  "pinged, within the timeout: wait",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-2*time.Second), true })},
		want:  "outcome vacant; next 3s",
	}, {
		name:  "pinged past the timeout: unresponsive, the next best is elected",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-6*time.Second), true })},
		want:  "unanswered old; create mid term 1 duration 15s; outcome optimal; next 14s",
	}, {
		name:  "no ping reached it within the timeout: passed over, tried again after a backoff",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt = now.Add(-6 * time.Second) })},
		want:  "unanswered old; create mid term 1 duration 15s; outcome optimal; next 4s",
	}, {
		name:  "no ping reached it, the attempt two ping timeouts old (the controller's steps failed since): asked again now",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt = now.Add(-11 * time.Second) })},
		want:  "unanswered old; ping old; outcome vacant; next 5s",
	}, {
		name: "unreachable: not pinged until its backoff is over",
		cands: []obsCand{withRec(seen(old, time.Time{}), func(r *candidateRecord) {
			r.unreachable = unreachable{until: now.Add(3 * time.Second), backoff: 5 * time.Second}
		})},
		want: "event NoEligibleCandidate; outcome vacant; next 3s",
	}, {
		name:   "vacant Lease with a history: elected at once, for the controller's lease duration",
		lease:  held("", transitions(4), durationSeconds(1)),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 4}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   "elect old term 5 duration 15s (confirm); outcome optimal; next 14s",
	}, {
		name:   "live holder, the best: settled",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, time.Time{})},
		want:   "settled; outcome optimal; next 14s",
	}, {
		name:   "live holder, a better candidate alive: preferredHolder",
		lease:  held("mid", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "mid", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, time.Time{})},
		want:   `steer preferred="old"; outcome preempting; next 14s`,
	}, {
		name:   "live holder, a candidate equal on merit: no preemption, not even a ping",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, time.Time{}), seen(twin, time.Time{})},
		want:   "settled; outcome optimal; next 14s",
	}, {
		name:   "vacant with a history, a stale tie-break winner and a live equal: the live one, no ping",
		lease:  held("", transitions(2)),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(twin, time.Time{}), seen(old, now.Add(-time.Second))},
		want:   "elect old term 3 duration 15s (confirm); outcome optimal; next 14s",
	}, {
		name:   "expired holder: elected away from",
		lease:  held("mid", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "mid", transitions: 2, observedAt: now.Add(-16 * time.Second)}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-20*time.Second))},
		want:   "elect old term 3 duration 15s (confirm); outcome optimal; next 14s",
	}, {
		name:   "live holder late: pinged, so that its expiry tells whether it is gone",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-11 * time.Second), renewGap: 2 * time.Second}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, now.Add(-time.Second))},
		want:   "ping old; settled; outcome optimal; next 4s",
	}, {
		name:   "live holder late, pinged, no answer yet: not pinged again",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-12 * time.Second), renewGap: 2 * time.Second}},
		cands:  []obsCand{withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-2*time.Second), true }), seen(mid, now.Add(-time.Second))},
		want:   "settled; outcome optimal; next 3s",
	}, {
		name:   "live holder late that answered: not pinged again",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-12 * time.Second), renewGap: 2 * time.Second}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-time.Second))},
		want:   "settled; outcome optimal; next 3s",
	}, {
		name:   "live holder that renews every 10s on a 15s Lease, 11s since its renewal: not late, not pinged",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-11 * time.Second), renewGap: 10 * time.Second}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, now.Add(-time.Second))},
		want:   "settled; outcome optimal; next 4s",
	}, {
		name:   "live holder whose cadence is not known yet, 11s since its renewal: not late",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-11 * time.Second)}},
		cands:  []obsCand{seen(old, time.Time{}), seen(mid, now.Add(-time.Second))},
		want:   "settled; outcome optimal; next 4s",
	}, {
		name:   "expired holder that answered while late: elected again at once",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-16 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-3*time.Second)), seen(mid, now.Add(-time.Second))},
		want:   "elect old term 3 duration 15s (confirm); outcome optimal; next " + (ttl - 2*time.Second).String(),
	}, {
		name:   "expired holder that did not answer the ping sent while late: the next best at once",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-15 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{withRec(seen(old, now.Add(-30*time.Second)), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-5*time.Second), true }), seen(mid, now.Add(-time.Second))},
		want:   "unanswered old; elect mid term 3 duration 15s (confirm); outcome optimal; next 14s",
	}, {
		name:   "expired holder whose candidate renewed before it was late: suspect, pinged",
		lease:  held("old", transitions(2)),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "old", transitions: 2, observedAt: now.Add(-15 * time.Second), renewGap: 2 * time.Second}, leaseHistory: leaseHistory{held: true, maxTransitions: 2}},
		cands:  []obsCand{seen(old, now.Add(-6*time.Second)), seen(mid, now.Add(-time.Second))},
		want:   "ping old; outcome expired; next 5s",
	}, {
		name:   "held by a non-candidate: left alone, its renewals cost nothing",
		lease:  held("outsider"),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "outsider", observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   "settled; outcome unmanaged; next 14s",
	}, {
		name:  "strategy conflict: an Event, no write",
		lease: held("old"),
		cands: []obsCand{seen(old, now.Add(-time.Second)), seen(candidate("other", "1.30.0", "1.30.0", withStrategy("Other")), now.Add(-time.Second))},
		want:  "event StrategyConflict; settled; outcome conflict; next " + ttl.String(),
	}, {
		name:  "a strategy handled elsewhere: nothing at all",
		cands: []obsCand{seen(candidate("a", "1.30.0", "1.30.0", withStrategy("Other")), now.Add(-time.Second))},
		want:  "settled; outcome unmanaged; next " + ttl.String(),
	}, {
		name:   "first election: gather",
		record: leaseRecord{gathering: gathering{firstJoin: now.Add(-100 * time.Millisecond), lastJoin: now.Add(-100 * time.Millisecond)}},
		cands:  []obsCand{seen(old, now.Add(-100*time.Millisecond))},
		want:   "outcome vacant; next 100ms",
	}, {
		name:   "deleted while held: not before the holder's term runs out",
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 6, departed: departedHolder{holder: "mid", until: now.Add(10 * time.Second)}}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-time.Second))},
		want:   "outcome vacant; next 10s",
	}, {
		name:   "deleted while held, the term over: created above the history",
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 6, departed: departedHolder{holder: "mid", until: now}}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   "create old term 7 duration 15s (confirm); outcome optimal; next 14s",
	}, {
		name:   "deleted while held, created again empty by someone else: nobody named before the holder's term runs out",
		lease:  lease(),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: 6, departed: departedHolder{holder: "mid", until: now.Add(10 * time.Second)}}},
		cands:  []obsCand{seen(old, now.Add(-time.Second)), seen(mid, now.Add(-time.Second))},
		want:   "outcome vacant; next 10s",
	}, {
		name:  "a candidate not known to be alive would decide another strategy: asked first",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), seen(candidate("newer", "1.32.0", "1.32.0", withStrategy("example.com/Future")), time.Time{})},
		want:  "ping newer; outcome vacant; next 5s",
	}, {
		name: "its ping unanswered: it decides nothing, the live candidates' strategy elects",
		cands: []obsCand{seen(mid, now.Add(-time.Second)), withRec(seen(candidate("newer", "1.32.0", "1.32.0", withStrategy("example.com/Future")), time.Time{}),
			func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-6*time.Second), true })},
		want: "unanswered newer; create mid term 1 duration 15s; outcome optimal; next 14s",
	}, {
		name:   "a candidate not known to be alive asks for the same strategy: nobody asked",
		lease:  held("mid"),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "mid", observedAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(mid, now.Add(-time.Minute)), seen(candidate("newer", "1.32.0", "1.32.0"), time.Time{})},
		want:   "settled; outcome optimal; next 14s",
	}, {
		name:   "own write not in the cache yet: wait",
		lease:  held("", transitions(1)),
		record: leaseRecord{pendingWrite: pendingWrite{writing: true, replaced: "1", writtenAt: now.Add(-time.Second)}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   "wait for own write; next 4s",
	}, {
		name:   "own create still not in the cache after the wait: read the API",
		record: leaseRecord{pendingWrite: pendingWrite{writing: true, writtenAt: now.Add(-6 * time.Second), named: "old"}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   "wait for own write; read the Lease; next 5s",
	}, {
		name:   "live holder no strategy can rank, the preferred one pinged and not answered yet: kept while the strategy is written",
		lease:  held("bad", preferring("old"), transitions(2), func(l *coordinationv1.Lease) { l.Spec.Strategy = nil }),
		record: leaseRecord{leaseObject: leaseObject{observed: true, holder: "bad", transitions: 2, observedAt: now.Add(-time.Second)}},
		cands: []obsCand{
			seen(candidate("bad", "1.31.x", "1.30.0"), now.Add(-time.Second)),
			withRec(seen(old, time.Time{}), func(r *candidateRecord) { r.pingedAt, r.pingSent = now.Add(-2*time.Second), true }),
		},
		want: `steer preferred="old"; event InvalidCandidate; outcome optimal; next 3s`,
	}, {
		name:   "token exhausted: no election",
		lease:  held("", transitions(math.MaxInt32)),
		record: leaseRecord{leaseHistory: leaseHistory{held: true, maxTransitions: math.MaxInt32}},
		cands:  []obsCand{seen(old, now.Add(-time.Second))},
		want:   "event FencingTokenExhausted; outcome vacant; next 14s",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lease != nil {
				tc.lease.ResourceVersion = "1"
			}
			v := &view{key: leaseKey, lease: tc.lease, record: tc.record, candidates: tc.cands, now: now, judgeAt: now}
			opts := Options{}
			if err := opts.complete(); err != nil {
				t.Fatal(err)
			}
			if tc.name != "first election: gather" {
				opts.ElectionGather = NoElectionGather
			}
			d := decide(&opts, v)
			if got := describe(d, now); got != tc.want {
				t.Errorf("decision:\n got: %s\nwant: %s", got, tc.want)
			}
			// The same view always gives the same decision.
			if again := describe(decide(&opts, v), now); again != describe(d, now) {
				t.Errorf("a second decision on the same view differs: %s", again)
			}
		})
	}
}
