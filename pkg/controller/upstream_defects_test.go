package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/strategy"
)

// One test per defect of the election controller built into kube-apiserver
// that cle must not have, each named by the behaviour it pins.

// Defect 1: a Lease the API accepts with every optional field nil (or an
// empty holder) made the upstream controller dereference nil pointers.
func TestLeaseWithNilFieldsIsElectedWithoutPanic(t *testing.T) {
	tests := []struct {
		name            string
		lease           *coordinationv1.Lease
		wantTransitions int32
	}{
		{name: "every field nil", lease: lease(), wantTransitions: 1},
		{name: "empty holder, stale preferredHolder, nil transitions", lease: lease(
			func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }, preferring("b")), wantTransitions: 1},
		{name: "nil holder with preferredHolder and zero duration", lease: lease(preferring("a"), durationSeconds(0)), wantTransitions: 1},
		{name: "nil holder with transitions 7", lease: lease(transitions(7)), wantTransitions: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
			h.list(tc.lease)

			h.reconcile()

			got := h.expectOneLeaseWrite("update")
			if holderOf(got) != "a" {
				t.Errorf("holder = %q, want the best live candidate a", holderOf(got))
			}
			if got.Spec.LeaseTransitions == nil || *got.Spec.LeaseTransitions != tc.wantTransitions {
				t.Errorf("leaseTransitions = %v, want %d", got.Spec.LeaseTransitions, tc.wantTransitions)
			}
			if got.Spec.PreferredHolder != nil {
				t.Errorf("preferredHolder = %q, want cleared", *got.Spec.PreferredHolder)
			}
			if ptr.Deref(got.Spec.Strategy, "") != oev {
				t.Errorf("strategy = %v, want %s", got.Spec.Strategy, oev)
			}
			if ptr.Deref(got.Spec.LeaseDurationSeconds, 0) != 15 {
				t.Errorf("leaseDurationSeconds = %v, want the default 15", got.Spec.LeaseDurationSeconds)
			}
			for field, v := range map[string]*metav1.MicroTime{"acquireTime": got.Spec.AcquireTime, "renewTime": got.Spec.RenewTime} {
				if v == nil || !v.Time.Equal(t0) {
					t.Errorf("%s = %v, want now (%s)", field, v, t0)
				}
			}
			if got.ResourceVersion != "1" {
				t.Errorf("update not conditional on the cached resourceVersion: got %q", got.ResourceVersion)
			}
			// A Lease with no history gets its first holder: counted as
			// a new Lease's.
			result := "created"
			if tc.wantTransitions > 1 {
				result = "elected"
			}
			if n := h.metric("cle_elections_total", "result", result); n != 1 {
				t.Errorf("elections{%s} = %v, want 1", result, n)
			}
		})
	}
}

// Defect 2: a preferredHolder naming a candidate that no longer exists (or no
// longer should lead) was left in place, so the holder kept trying to hand
// over to it.
func TestStalePreferredHolderIsCleared(t *testing.T) {
	t.Run("deleted candidate while the holder is the best: cleared", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("h", "1.30.0", "1.30.0"), candidate("w", "1.31.0", "1.31.0"))
		h.list(lease(heldBy("h"), preferring("ghost")))

		h.reconcile()

		got := h.expectOneLeaseWrite("update")
		if holderOf(got) != "h" || got.Spec.PreferredHolder != nil {
			t.Errorf("got holder %q preferredHolder %v, want holder h and preferredHolder cleared", holderOf(got), got.Spec.PreferredHolder)
		}
		if evs := eventsWithReason(h.takeEvents(), ReasonPreferredHolderSet); len(evs) != 0 {
			t.Errorf("clearing must not announce a preferred holder: %v", evs)
		}
		h.clearWrites()
		h.reconcile()
		h.expectNoWrites("second reconcile")
	})

	t.Run("deleted candidate while a better one is alive: recomputed", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("h", "1.31.0", "1.31.0"))
		h.join(candidate("b", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("h"), preferring("ghost")))

		h.reconcile()

		got := h.expectOneLeaseWrite("update")
		if holderOf(got) != "h" || preferredOf(got) != "b" {
			t.Errorf("got holder %q preferredHolder %q, want holder h preferring b", holderOf(got), preferredOf(got))
		}
	})

	t.Run("preferred candidate deleted after being chosen: cleared", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("h", "1.31.0", "1.31.0"))
		h.join(candidate("p", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("h"), preferring("p")))
		h.reconcile()
		h.expectNoWrites("preferredHolder already right")

		h.deleteCandidate("p")
		h.reconcile()

		if got := h.expectOneLeaseWrite("update"); got.Spec.PreferredHolder != nil {
			t.Errorf("preferredHolder = %q, want cleared once p is gone", *got.Spec.PreferredHolder)
		}
	})

	t.Run("preferred candidate stops answering: cleared after the ping timeout", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("h", "1.31.0", "1.31.0"))
		h.join(candidate("p", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("h"), preferring("p")))
		h.reconcile()
		h.expectNoWrites("preferredHolder already right")

		// p's freshness lapses; the holder keeps renewing the Lease.
		h.step(15 * time.Second)
		h.renewLease(t0.Add(15 * time.Second))
		if d := h.reconcile(); d != 5*time.Second {
			t.Errorf("requeue = %v, want the ping timeout", d)
		}
		if p := h.pings(); len(p) != 1 || p[0] != "p" {
			t.Fatalf("pings = %v, want [p]", p)
		}
		if lw := h.leaseWrites(); len(lw) != 0 {
			t.Errorf("no Lease write while p may still answer, got %v", lw)
		}
		h.clearWrites()

		h.step(5 * time.Second)
		h.renewLease(t0.Add(20 * time.Second))
		h.reconcile()
		if got := h.expectOneLeaseWrite("update"); got.Spec.PreferredHolder != nil || holderOf(got) != "h" {
			t.Errorf("got holder %q preferredHolder %v, want h with preferredHolder cleared", holderOf(got), got.Spec.PreferredHolder)
		}
	})

	t.Run("deleted candidate while pings are out: cleared at once", func(t *testing.T) {
		h := newHarness(t)
		// u ranks above the holder and its liveness is unknown: it is pinged,
		// and meanwhile the holder must not hand over to a ghost.
		h.list(candidate("u", "1.29.0", "1.29.0"))
		h.create(candidate("h", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("h"), preferring("ghost")))

		h.reconcile()

		var cleared bool
		for _, w := range h.writes() {
			if w.lease != nil && w.lease.Spec.PreferredHolder == nil && holderOf(w.lease) == "h" {
				cleared = true
			}
		}
		if p := h.pings(); len(p) != 1 || p[0] != "u" || !cleared {
			t.Errorf("writes = %v, want a ping of u and preferredHolder cleared", h.writes())
		}
	})
}

// Defect 3: candidates with identical versions were ordered by list order, so
// the winner (and preferredHolder) flapped from one reconcile to the next.
func TestTiesOnEqualVersionsDoNotFlap(t *testing.T) {
	tests := []struct {
		name    string
		created map[string]time.Time
		want    string
	}{
		{name: "oldest creationTimestamp wins", want: "y", created: map[string]time.Time{
			"x": t0.Add(-2 * time.Hour), "y": t0.Add(-3 * time.Hour), "z": t0.Add(-time.Hour)}},
		{name: "same creationTimestamp: name decides", want: "x", created: map[string]time.Time{
			"x": t0.Add(-time.Hour), "y": t0.Add(-time.Hour), "z": t0.Add(-time.Hour)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range permutations([]string{"x", "y", "z"}) {
				t.Run(strings.Join(order, ""), func(t *testing.T) {
					h := newHarness(t)
					for _, name := range order {
						h.create(candidate(name, "1.30.0", "1.30.0", created(tc.created[name])))
					}
					h.reconcile()
					if got := h.expectOneLeaseWrite("create"); holderOf(got) != tc.want {
						t.Fatalf("elected %q, want %q", holderOf(got), tc.want)
					}
					h.clearWrites()
					// The holder renews, the others renew their candidates:
					// nothing may be written, ever.
					for i := 1; i <= 4; i++ {
						h.step(5 * time.Second)
						now := t0.Add(time.Duration(i) * 5 * time.Second)
						h.renewLease(now)
						for _, name := range order {
							h.renew(name, now)
						}
						h.reconcile()
					}
					h.expectNoWrites("the tie-winner holds")
				})
			}
		})
	}

	// Equal candidates keep whoever holds: a candidate that only wins the
	// tie-break is neither pinged nor preferred, and a preferredHolder that
	// names one (as an older controller would set it) is cleared once.
	t.Run("tie-loser holds: it keeps the Lease", func(t *testing.T) {
		for _, order := range permutations([]string{"x", "y", "z"}) {
			for _, stalePreferred := range []string{"", "x"} {
				h := newHarness(t)
				for _, name := range order {
					h.list(candidate(name, "1.30.0", "1.30.0"))
				}
				opts := []leaseOpt{heldBy("z")}
				if stalePreferred != "" {
					opts = append(opts, preferring(stalePreferred))
				}
				h.list(lease(opts...))
				h.reconcile()
				if stalePreferred == "" {
					h.expectNoWrites(fmt.Sprintf("order %v", order))
				} else if got := h.expectOneLeaseWrite("update"); preferredOf(got) != "" || holderOf(got) != "z" {
					t.Fatalf("order %v: wrote holder %q preferredHolder %q, want z and none", order, holderOf(got), preferredOf(got))
				}
				h.clearWrites()
				for i := 1; i <= 3; i++ {
					h.step(5 * time.Second)
					h.renewLease(t0.Add(time.Duration(i) * 5 * time.Second))
					h.reconcile()
				}
				h.expectNoWrites(fmt.Sprintf("order %v, stale preferredHolder %q, while z renews", order, stalePreferred))
				if n := h.metric("cle_preemptions_total"); n != 0 {
					t.Errorf("order %v: preemptions = %v, want 0", order, n)
				}
			}
		}
	})
}

// Defect 4: the strategy (and the conflict check) depended on the order in
// which the candidates were listed.
func TestElectionIndependentOfListOrder(t *testing.T) {
	t.Run("same holder", func(t *testing.T) {
		cands := []*coordinationv1beta1.LeaseCandidate{
			candidate("p", "1.31.0", "1.30.0"),
			candidate("q", "1.30.0", "1.30.0"),
			candidate("w", "1.31.0", "1.29.0"),
			candidate("s", "1.31.0", "1.31.0"),
			candidate("bad", "1.31", "1.29.0"),
		}
		for _, order := range permutations(cands) {
			h := newHarness(t)
			for _, lc := range order {
				h.create(lc)
			}
			h.reconcile()
			got := h.expectOneLeaseWrite("create")
			if holderOf(got) != "w" || ptr.Deref(got.Spec.Strategy, "") != oev {
				t.Fatalf("order %s: elected %q under %v, want w under %s", names(order), holderOf(got), got.Spec.Strategy, oev)
			}
		}
	})

	t.Run("same strategy from the highest binary version", func(t *testing.T) {
		cands := []*coordinationv1beta1.LeaseCandidate{
			candidate("old1", "1.30.0", "1.30.0", withStrategy(strategy.PriorityName)),
			candidate("old2", "1.30.0", "1.30.0", withStrategy("example.com/Other")),
			candidate("new1", "1.31.0", "1.30.0"),
			candidate("new2", "1.31.0", "1.31.0"),
		}
		for _, order := range permutations(cands) {
			h := newHarness(t)
			for _, lc := range order {
				h.create(lc)
			}
			h.reconcile()
			got := h.expectOneLeaseWrite("create")
			// Every candidate is ranked under the strategy the newest
			// binaries ask for: old1 emulates the oldest version with the
			// oldest binary, and wins the tie with old2 by name.
			if ptr.Deref(got.Spec.Strategy, "") != oev || holderOf(got) != "old1" {
				t.Fatalf("order %s: elected %q under %v, want old1 under %s", names(order), holderOf(got), got.Spec.Strategy, oev)
			}
		}
	})

	t.Run("same conflict", func(t *testing.T) {
		cands := []*coordinationv1beta1.LeaseCandidate{
			candidate("x", "1.31.0", "1.31.0"),
			candidate("y", "1.31.0", "1.30.0", withStrategy(strategy.PriorityName)),
			candidate("z", "1.30.0", "1.30.0"),
			candidate("v", "1.31.0+build.1", "1.29.0"),
		}
		var firstEvent string
		for _, order := range permutations(cands) {
			h := newHarness(t)
			for _, lc := range order {
				h.create(lc)
			}
			h.reconcile()
			h.expectNoWrites("conflict, order " + names(order))
			evs := eventsWithReason(h.takeEvents(), ReasonStrategyConflict)
			if len(evs) != 1 {
				t.Fatalf("order %s: want one StrategyConflict event, got %v", names(order), evs)
			}
			if firstEvent == "" {
				firstEvent = evs[0]
			} else if evs[0] != firstEvent {
				t.Fatalf("order %s: event %q differs from %q", names(order), evs[0], firstEvent)
			}
		}
	})
}

func names(cands []*coordinationv1beta1.LeaseCandidate) string {
	var out []string
	for _, lc := range cands {
		out = append(out, lc.Name)
	}
	return strings.Join(out, ",")
}

// Defect 5: liveness was judged by comparing the candidates' renewTime with
// the controller's clock, so a candidate whose clock is off was expired, or
// could never answer a ping.
func TestCandidateClockSkewDoesNotAffectLiveness(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Second, -10 * time.Second, 10 * time.Minute, -10 * time.Minute, -45 * time.Minute} {
		t.Run(fmt.Sprintf("created with skew %v: elected at once", skew), func(t *testing.T) {
			h := newHarness(t)
			h.create(candidate("a", "1.30.0", "1.30.0", renewedAt(t0.Add(skew))), candidate("b", "1.31.0", "1.31.0", renewedAt(t0.Add(skew))))

			h.reconcile()

			if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
				t.Fatalf("elected %q, want a", holderOf(got))
			}
			h.clearWrites()
			// 45 minutes of renewals by skewed clocks: nobody expires, nothing
			// is written, nothing is collected.
			for range 15 {
				h.step(3 * time.Minute)
				now := h.clock.Now()
				h.renewLease(now.Add(skew))
				h.renew("a", now.Add(skew))
				h.renew("b", now.Add(skew))
				h.reconcile()
			}
			for _, name := range []string{"a", "b"} {
				if _, err := h.c.collect(h.ctx, keyOf(name)); err != nil {
					t.Fatal(err)
				}
			}
			h.expectNoWrites("skewed candidates renewing")
			if live, _ := liveCandidates(&h.c.opts, h.c.snapshot(leaseKey, h.c.candidatesOf(leaseKey), h.clock.Now())); len(live) != 2 {
				t.Errorf("%d live candidates, want 2", len(live))
			}
		})

		t.Run(fmt.Sprintf("listed with skew %v: pinged, and an answer counts", skew), func(t *testing.T) {
			h := newHarness(t)
			renew := t0.Add(skew)
			h.list(candidate("a", "1.30.0", "1.30.0", renewedAt(renew)))
			h.create(candidate("b", "1.31.0", "1.31.0", renewedAt(renew)))

			h.reconcile()

			ws := h.writes()
			if len(ws) != 1 || ws[0].cand == nil || ws[0].name != "a" {
				t.Fatalf("writes = %v, want one ping of a", ws)
			}
			ping := ws[0].cand.Spec.PingTime
			if ping == nil || !serialized(ping).After(renew) {
				t.Fatalf("pingTime %v is not after the candidate's renewTime %v once stored", ping, renew)
			}
			// Whatever the skew, just after the candidate's renewTime: a
			// client-go candidate answers a ping later than its renewTime
			// with its own clock's time, so a ping at the controller's time
			// would keep one whose clock is behind rewriting its candidate
			// until its clock caught up.
			if !ping.Time.Equal(renew.Add(time.Microsecond)) {
				t.Errorf("pingTime = %v, want just after the candidate's renewTime %v", ping.Time, renew)
			}
			h.clearWrites()

			// a answers a second later, by its own skewed clock, as
			// client-go's candidate does: renewTime = its now. One answer
			// settles the ping: the stored pingTime is before the answer.
			h.step(time.Second)
			h.renew("a", t0.Add(time.Second).Add(skew))
			if stored := h.serverCandidate("a"); !stored.Spec.PingTime.Before(stored.Spec.RenewTime) {
				t.Errorf("after one answer pingTime %v is not before renewTime %v: a client-go candidate would answer again", stored.Spec.PingTime, stored.Spec.RenewTime)
			}
			h.reconcile()
			if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
				t.Fatalf("elected %q, want a (it answered)", holderOf(got))
			}
		})
	}
}

// serialized returns t as the API stores it (microseconds).
func serialized(t *metav1.MicroTime) time.Time {
	data, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	var out metav1.MicroTime
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	return out.Time
}

// Defect 6: a dead candidate ranked best was pinged again and again, and
// blocked the election each time.
func TestDeadBestCandidateIsPassedOver(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("dead", "1.29.0", "1.29.0"))
	h.create(candidate("b", "1.30.0", "1.30.0"), candidate("c", "1.31.0", "1.31.0"))

	if d := h.reconcile(); d != 5*time.Second {
		t.Errorf("requeue = %v, want the ping timeout 5s", d)
	}
	if p := h.pings(); len(p) != 1 || p[0] != "dead" {
		t.Fatalf("pings = %v, want [dead]", p)
	}
	if lw := h.leaseWrites(); len(lw) != 0 {
		t.Fatalf("elected before the ping timed out: %v", lw)
	}
	h.clearWrites()

	h.step(2 * time.Second)
	if d := h.reconcile(); d != 3*time.Second {
		t.Errorf("requeue = %v, want the rest of the ping timeout 3s", d)
	}
	h.expectNoWrites("while the ping is out")

	h.step(3 * time.Second)
	h.reconcile()
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "b" {
		t.Fatalf("elected %q, want the next best b", holderOf(got))
	}
	if n := h.metric("cle_ping_timeouts_total"); n != 1 {
		t.Errorf("ping timeouts = %v, want 1", n)
	}
	h.clearWrites()

	// From now on nothing touches the dead candidate, whatever happens
	// around it, until it writes again.
	for i := 1; i <= 10; i++ {
		h.step(7 * time.Second)
		now := h.clock.Now()
		h.renewLease(now)
		if i%2 == 0 {
			h.renew("b", now)
			h.renew("c", now)
		}
		h.reconcile()
		if got := h.state("dead"); got != unresponsive {
			t.Fatalf("round %d: dead is %v, want unresponsive", i, got)
		}
	}
	h.expectNoWrites("after the dead candidate timed out")
	if n := h.metric("cle_pings_total"); n != 1 {
		t.Errorf("pings = %v, want 1", n)
	}

	// It comes back: it is considered again, and being best, preferred.
	h.renew("dead", h.clock.Now().Add(-time.Hour))
	h.renewLease(h.clock.Now())
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); preferredOf(got) != "dead" || holderOf(got) != "b" {
		t.Errorf("got holder %q preferredHolder %q, want b preferring the returned candidate", holderOf(got), preferredOf(got))
	}
}

// Defect 7: a Lease held by a component that does not take part in
// coordinated election was given a preferredHolder it cannot follow, or was
// never taken over when its holder went away.
func TestNonCandidateHolderIsLeftAloneUntilItGoes(t *testing.T) {
	tests := []struct {
		name            string
		lease           *coordinationv1.Lease
		live            time.Duration // how long the Lease is live from t0
		wantTransitions int32
	}{
		{name: "10s lease", lease: lease(heldBy("legacy"), durationSeconds(10), transitions(3)), live: 10 * time.Second, wantTransitions: 4},
		{name: "nil duration, renewTime and transitions", lease: lease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("legacy") }), live: 15 * time.Second, wantTransitions: 1},
		// Asked to hand over, the holder could have counted b's term
		// (1): the next is numbered above it.
		{name: "stale preferredHolder left alone", lease: lease(heldBy("legacy"), durationSeconds(12), preferring("b")), live: 12 * time.Second, wantTransitions: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.list(candidate("stale", "1.29.0", "1.29.0")) // would be pinged if anything were
			h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
			h.list(tc.lease)

			if d := h.reconcile(); d != tc.live {
				t.Errorf("requeue = %v, want the Lease's expiry %v", d, tc.live)
			}
			h.step(tc.live - time.Second)
			// The candidates keep renewing; the legacy holder does not.
			h.renew("a", h.clock.Now())
			h.renew("b", h.clock.Now())
			if d := h.reconcile(); d != time.Second {
				t.Errorf("requeue = %v, want the rest of the Lease 1s", d)
			}
			h.expectNoWrites("while the legacy holder's Lease is live")

			h.step(time.Second)
			h.renew("stale", h.clock.Now()) // it answers nothing, it simply renews
			h.reconcile()
			got := h.expectOneLeaseWrite("update")
			if holderOf(got) != "stale" {
				t.Errorf("holder = %q, want the best candidate", holderOf(got))
			}
			if ptr.Deref(got.Spec.LeaseTransitions, -1) != tc.wantTransitions {
				t.Errorf("leaseTransitions = %v, want %d", got.Spec.LeaseTransitions, tc.wantTransitions)
			}
			if got.Spec.PreferredHolder != nil {
				t.Errorf("preferredHolder = %q, want none", *got.Spec.PreferredHolder)
			}
		})
	}

	t.Run("renewed by its holder: stays", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("legacy"), durationSeconds(10)))
		h.reconcile()
		h.step(8 * time.Second)
		h.renewLease(t0.Add(8 * time.Second))
		h.step(2 * time.Second)
		if d := h.reconcile(); d != 8*time.Second {
			t.Errorf("requeue = %v, want 8s (10s after the renewal was seen)", d)
		}
		h.expectNoWrites("legacy holder renews")
	})

	t.Run("election latency counts from the local expiry", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("legacy"), durationSeconds(10)))
		h.reconcile()
		h.step(12 * time.Second)
		h.reconcile()
		if got := h.expectOneLeaseWrite("update"); holderOf(got) != "a" {
			t.Fatalf("holder = %q, want a", holderOf(got))
		}
		if n, sum := h.metric("cle_election_duration_seconds"), h.histogramSum("cle_election_duration_seconds"); n != 1 || sum != 2 {
			t.Errorf("election latency: %v samples summing to %v, want 1 sample of 2s", n, sum)
		}
	})
}

// Defect 8: Leases whose candidates ask for a strategy this controller does
// not implement were pinged and written anyway. The candidates are alive
// (they answer a ping); a dead one that alone asks for the strategy is
// TestDeadCandidateDoesNotDecideTheStrategy's.
func TestThirdPartyStrategyIsLeftAlone(t *testing.T) {
	const other = coordinationv1.CoordinatedLeaseStrategy("example.com/Other")
	tests := []struct {
		name  string
		cands []*coordinationv1beta1.LeaseCandidate
		lease *coordinationv1.Lease
	}{
		{name: "no Lease", cands: []*coordinationv1beta1.LeaseCandidate{
			candidate("a", "1.30.0", "1.30.0", withStrategy(other)), candidate("b", "1.31.0", "1.31.0", withStrategy(other))}},
		{name: "vacant Lease", lease: lease(), cands: []*coordinationv1beta1.LeaseCandidate{
			candidate("a", "1.30.0", "1.30.0", withStrategy(other)), candidate("b", "1.31.0", "1.31.0", withStrategy(other))}},
		{name: "held by a worse candidate", lease: lease(heldBy("b")), cands: []*coordinationv1beta1.LeaseCandidate{
			candidate("a", "1.30.0", "1.30.0", withStrategy(other)), candidate("b", "1.31.0", "1.31.0", withStrategy(other))}},
		{name: "decided by the highest binary", lease: lease(), cands: []*coordinationv1beta1.LeaseCandidate{
			candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0", withStrategy(other))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.list(candidate("stale", "1.29.0", "1.29.0", withStrategy(other)))
			var objs []runtime.Object
			for _, lc := range tc.cands {
				objs = append(objs, lc)
			}
			h.create(objs...)
			if tc.lease != nil {
				h.list(tc.lease)
			}
			var pinged []string
			for i := range 4 {
				d := h.reconcile()
				if want := 30*time.Minute - time.Duration(i)*20*time.Second; d != want && h.answerPings() == 0 {
					t.Errorf("round %d: requeue = %v, want the first candidate expiry %v", i, d, want)
				}
				h.step(20 * time.Second)
			}
			for _, w := range h.writes() {
				if w.resource != "leasecandidates" {
					t.Errorf("third-party strategy: wrote %v", w)
				} else {
					pinged = append(pinged, w.name)
				}
			}
			if tc.name == "decided by the highest binary" {
				// b alone asks for the strategy: it is asked whether it
				// lives when it decides an election that is due.
				if slices.ContainsFunc(pinged, func(n string) bool { return n != "b" }) {
					t.Errorf("pinged %v, want only b, whose strategy decides", pinged)
				}
			} else if len(pinged) > 0 {
				t.Errorf("pinged %v, want nobody: every candidate asks for the strategy", pinged)
			}
			if evs := h.takeEvents(); len(evs) != 0 {
				t.Errorf("events = %v, want none", evs)
			}
		})
	}
}
