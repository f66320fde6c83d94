package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/strategy"
)

func TestColdElectionCreatesLeaseWithoutPings(t *testing.T) {
	tests := []struct {
		name         string
		opts         func(*Options)
		wantDuration int32
	}{
		{name: "default lease duration", opts: func(*Options) {}, wantDuration: 15},
		{name: "30s lease duration", opts: func(o *Options) { o.LeaseDuration = 30 * time.Second }, wantDuration: 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts)
			h.create(
				candidate("b", "1.31.0", "1.31.0"),
				candidate("a", "1.30.0", "1.30.0"),
				candidate("c", "1.31.0", "1.30.0"),
			)

			if d := h.reconcile(); d != 15*time.Second {
				t.Errorf("requeue = %v, want the winner's freshness window 15s", d)
			}

			got := h.expectOneLeaseWrite("create") // and no ping: no fixed wait
			want := coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To("a"),
				Strategy:             ptr.To(oev),
				LeaseDurationSeconds: ptr.To(tc.wantDuration),
				AcquireTime:          ptr.To(metav1.NewMicroTime(t0)),
				RenewTime:            ptr.To(metav1.NewMicroTime(t0)),
				LeaseTransitions:     ptr.To[int32](1),
			}
			if got.Namespace != testNS || got.Name != testLease {
				t.Errorf("created %s/%s, want %s", got.Namespace, got.Name, leaseKey)
			}
			if !equalSpec(got.Spec, want) {
				t.Errorf("created spec %+v, want %+v", got.Spec, want)
			}
			for metric, want := range map[string]float64{
				"cle_leader_changes_total":      1,
				"cle_election_duration_seconds": 1,
				"cle_pings_total":               0,
			} {
				if got := h.metric(metric); got != want {
					t.Errorf("%s = %v, want %v", metric, got, want)
				}
			}
			if got := h.metric("cle_elections_total", "result", "created"); got != 1 {
				t.Errorf("elections{created} = %v, want 1", got)
			}
			evs := h.takeEvents()
			if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal LeaderElected Elected a under OldestEmulationVersion (term 1)") {
				t.Errorf("events = %q, want one LeaderElected for a", evs)
			}

			// The Lease as created comes back through the informer: nothing
			// more to do, until the Lease would expire.
			h.clearWrites()
			if d := h.reconcile(); d != time.Duration(tc.wantDuration)*time.Second {
				t.Errorf("requeue = %v, want the Lease's expiry", d)
			}
			h.expectNoWrites("second reconcile")
			if evs := h.takeEvents(); len(evs) != 0 {
				t.Errorf("events = %q, want none", evs)
			}
		})
	}
}

func equalSpec(a, b coordinationv1.LeaseSpec) bool {
	eqTime := func(x, y *metav1.MicroTime) bool {
		return (x == nil) == (y == nil) && (x == nil || x.Time.Equal(y.Time))
	}
	return ptr.Equal(a.HolderIdentity, b.HolderIdentity) && ptr.Equal(a.Strategy, b.Strategy) &&
		ptr.Equal(a.LeaseDurationSeconds, b.LeaseDurationSeconds) && ptr.Equal(a.LeaseTransitions, b.LeaseTransitions) &&
		ptr.Equal(a.PreferredHolder, b.PreferredHolder) && eqTime(a.AcquireTime, b.AcquireTime) && eqTime(a.RenewTime, b.RenewTime)
}

func TestNoCandidatesNothingToDo(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("elsewhere", "1.30.0", "1.30.0", forLease("other")))
	h.list(lease(heldBy("x"), durationSeconds(1)))
	h.step(time.Hour)
	if d := h.reconcile(); d != 0 {
		t.Errorf("requeue = %v, want none", d)
	}
	h.expectNoWrites("Lease without candidates")
}

func TestPingsOnlyCandidatesRankedAboveBestAlive(t *testing.T) {
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		// top: best, but the controller does not know it is alive.
		// mid: alive (created while watched).
		// low: below mid and not known alive either: never worth a ping.
		h.list(candidate("top", "1.29.0", "1.29.0"), candidate("low", "1.31.0", "1.31.0"))
		h.create(candidate("mid", "1.30.0", "1.30.0"))
		if d := h.reconcile(); d != 5*time.Second {
			t.Errorf("requeue = %v, want the ping timeout 5s", d)
		}
		ws := h.writes()
		if len(ws) != 1 || ws[0].cand == nil || ws[0].name != "top" {
			t.Fatalf("writes = %v, want only a ping of top", ws)
		}
		ping := ws[0].cand
		// Just after the candidate's own renewTime, not at the controller's
		// time: see TestCandidateClockSkewDoesNotAffectLiveness.
		if want := t0.Add(-time.Minute + time.Microsecond); ping.ResourceVersion != "1" || !ping.Spec.PingTime.Time.Equal(want) {
			t.Errorf("ping: resourceVersion %q pingTime %v, want conditional on %q at %v", ping.ResourceVersion, ping.Spec.PingTime, "1", want)
		}
		if !ping.Spec.RenewTime.Time.Equal(t0.Add(-time.Minute)) || ping.Spec.BinaryVersion != "1.29.0" {
			t.Errorf("a ping must change nothing but pingTime: %+v", ping.Spec)
		}
		if got := h.state("top"); got != pinged {
			t.Errorf("top is %v, want pinged", got)
		}
		h.clearWrites()

		h.step(2 * time.Second)
		if d := h.reconcile(); d != 3*time.Second {
			t.Errorf("requeue = %v, want the rest of the ping timeout", d)
		}
		h.expectNoWrites("while the ping is out (no second ping)")
		return h
	}

	t.Run("the pinged candidate answers", func(t *testing.T) {
		h := setup(t)
		h.renew("top", t0.Add(2*time.Second))
		h.reconcile()
		if got := h.expectOneLeaseWrite("create"); holderOf(got) != "top" {
			t.Errorf("elected %q, want top", holderOf(got))
		}
		if n := h.metric("cle_ping_timeouts_total"); n != 0 {
			t.Errorf("ping timeouts = %v, want 0", n)
		}
	})

	t.Run("the pinged candidate times out", func(t *testing.T) {
		h := setup(t)
		h.step(3 * time.Second)
		h.reconcile()
		if got := h.expectOneLeaseWrite("create"); holderOf(got) != "mid" {
			t.Errorf("elected %q, want mid", holderOf(got))
		}
		if got := h.state("low"); got != unknown {
			t.Errorf("low is %v, want unknown (never pinged)", got)
		}
		if n := h.metric("cle_pings_total"); n != 1 {
			t.Errorf("pings = %v, want 1", n)
		}
	})
}

func TestColdStartPingsUntilOneAnswers(t *testing.T) {
	h := newHarness(t)
	h.list(
		candidate("a", "1.29.0", "1.29.0", noRenewTime()),
		candidate("b", "1.30.0", "1.30.0"),
		candidate("c", "1.31.0", "1.31.0"),
	)
	h.list(lease())
	if d := h.reconcile(); d != 5*time.Second {
		t.Errorf("requeue = %v, want 5s", d)
	}
	// Nobody is known alive: every candidate matters, best first.
	if got := strings.Join(h.pings(), ","); got != "a,b,c" {
		t.Errorf("pings = %s, want a,b,c", got)
	}
	if lw := h.leaseWrites(); len(lw) != 0 {
		t.Errorf("Lease written while waiting: %v", lw)
	}
	// a had no renewTime: its ping is simply now.
	if w := h.writes()[0]; !w.cand.Spec.PingTime.Time.Equal(t0) {
		t.Errorf("ping of a at %v, want %v", w.cand.Spec.PingTime, t0)
	}
	h.clearWrites()

	// b answers first: a may still answer.
	h.step(time.Second)
	h.renew("b", t0)
	if d := h.reconcile(); d != 4*time.Second {
		t.Errorf("requeue = %v, want a's remaining 4s", d)
	}
	h.expectNoWrites("a may still answer")

	// a answers: elected at once, no need to wait for c.
	h.step(time.Second)
	h.renew("a", t0.Add(2*time.Second))
	h.reconcile()
	got := h.expectOneLeaseWrite("update")
	if holderOf(got) != "a" || ptr.Deref(got.Spec.LeaseTransitions, -1) != 1 {
		t.Errorf("got holder %q transitions %v, want a and 1", holderOf(got), got.Spec.LeaseTransitions)
	}
}

func TestRequeueIsTheNextDeadline(t *testing.T) {
	tests := []struct {
		name  string
		opts  func(*Options)
		setup func(h *harness)
		steps []time.Duration // clock steps before each reconcile after the first
		want  []time.Duration // requeue of each reconcile
	}{
		{
			name:  "ping timeout",
			setup: func(h *harness) { h.list(candidate("a", "1.30.0", "1.30.0")) },
			steps: []time.Duration{time.Second, 1500 * time.Millisecond},
			want:  []time.Duration{5 * time.Second, 4 * time.Second, 2500 * time.Millisecond},
		},
		{
			name:  "custom ping timeout",
			opts:  func(o *Options) { o.PingTimeout = 1200 * time.Millisecond },
			setup: func(h *harness) { h.list(candidate("a", "1.30.0", "1.30.0")) },
			want:  []time.Duration{1200 * time.Millisecond},
		},
		{
			name: "freshness of the preferred holder",
			setup: func(h *harness) {
				h.create(candidate("h", "1.31.0", "1.31.0"))
				h.join(candidate("best", "1.30.0", "1.30.0"))
				h.list(lease(heldBy("h"), durationSeconds(40)))
			},
			steps: []time.Duration{4 * time.Second},
			want:  []time.Duration{15 * time.Second, 11 * time.Second},
		},
		{
			name: "custom freshness",
			opts: func(o *Options) { o.CandidateFreshness = 9 * time.Second },
			setup: func(h *harness) {
				h.create(candidate("h", "1.31.0", "1.31.0"))
				h.join(candidate("best", "1.30.0", "1.30.0"))
				h.list(lease(heldBy("h"), durationSeconds(40)))
			},
			want: []time.Duration{9 * time.Second},
		},
		{
			name: "expiry of the Lease",
			setup: func(h *harness) {
				h.create(candidate("h", "1.30.0", "1.30.0"))
				h.list(lease(heldBy("h"), durationSeconds(10)))
			},
			steps: []time.Duration{3 * time.Second},
			want:  []time.Duration{10 * time.Second, 7 * time.Second},
		},
		{
			name: "expiry of a candidate",
			opts: func(o *Options) { o.CandidateTTL = 10 * time.Minute },
			setup: func(h *harness) {
				h.create(candidate("x", "1.30.0", "1.30.0"), candidate("y", "1.30.0", "1.30.0", withStrategy(strategy.PriorityName)))
			},
			steps: []time.Duration{4 * time.Minute},
			want:  []time.Duration{10 * time.Minute, 6 * time.Minute},
		},
		{
			name: "nothing pending but the candidates' expiry",
			setup: func(h *harness) {
				h.create(candidate("h", "1.30.0", "1.30.0"))
				h.list(lease(heldBy("h"), durationSeconds(3600)))
			},
			want: []time.Duration{30 * time.Minute},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if opts == nil {
				opts = func(*Options) {}
			}
			h := newHarness(t, opts)
			tc.setup(h)
			for i, want := range tc.want {
				if i > 0 {
					h.step(tc.steps[i-1])
				}
				if got := h.reconcile(); got != want {
					t.Errorf("reconcile %d: requeue = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestPreferredHolderSetOnceWhenBetterCandidateJoins(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("old", "1.31.0", "1.31.0"))
	h.list(lease(heldBy("old"), transitions(4)))
	h.reconcile()
	h.expectNoWrites("the only candidate holds")

	h.join(candidate("new", "1.30.0", "1.30.0"))
	h.reconcile()
	got := h.expectOneLeaseWrite("update")
	if holderOf(got) != "old" || preferredOf(got) != "new" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 4 {
		t.Errorf("got holder %q preferred %q transitions %v, want old preferring new, transitions untouched",
			holderOf(got), preferredOf(got), got.Spec.LeaseTransitions)
	}
	if got.ResourceVersion != "1" {
		t.Errorf("update conditional on resourceVersion %q, want the cached 1", got.ResourceVersion)
	}
	evs := eventsWithReason(h.takeEvents(), ReasonPreferredHolderSet)
	if len(evs) != 1 || !strings.Contains(evs[0], "new is better than holder old") {
		t.Errorf("events = %q, want one PreferredHolderSet", evs)
	}
	if n := h.metric("cle_preemptions_total"); n != 1 {
		t.Errorf("preemptions = %v, want 1", n)
	}

	h.clearWrites()
	for range 3 {
		h.reconcile()
		h.step(3 * time.Second)
	}
	h.expectNoWrites("preferredHolder already set")
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("events = %q, want none", evs)
	}

	// The holder hands over as the library does; nothing left to steer.
	l := h.serverLease()
	l.Spec.HolderIdentity, l.Spec.PreferredHolder = ptr.To("new"), nil
	l.Spec.LeaseTransitions = ptr.To[int32](5)
	h.serverUpdate(leasesGVR, l)
	h.reconcile()
	h.expectNoWrites("after the hand-over")
}

func TestPreferredHolderClearedWhenHolderBecomesBest(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("h", "1.30.0", "1.30.0"))
	h.join(candidate("p", "1.30.0", "1.29.0"))
	h.list(lease(heldBy("h"), preferring("p")))
	h.reconcile()
	h.expectNoWrites("p is rightly preferred")

	// p is upgraded (a new binary, emulating its own version): h is best now.
	lc := h.serverCandidate("p")
	lc.Spec.BinaryVersion, lc.Spec.EmulationVersion = "1.31.0", "1.31.0"
	lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0))
	h.serverUpdate(candidatesGVR, lc)
	h.reconcile()
	got := h.expectOneLeaseWrite("update")
	if holderOf(got) != "h" || got.Spec.PreferredHolder != nil {
		t.Errorf("got holder %q preferred %v, want h with preferredHolder cleared", holderOf(got), got.Spec.PreferredHolder)
	}
	if n := h.metric("cle_preemptions_total"); n != 0 {
		t.Errorf("preemptions = %v, want 0", n)
	}
}

func TestHolderWhoseLeaseExpired(t *testing.T) {
	// a holds, then stops renewing the Lease (e.g. it was paused) while its
	// candidate object was renewed just before the expiry: a is suspect, and
	// pinged; b renewed too and is alive.
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
		h.list(lease(heldBy("a"), transitions(2)))
		h.reconcile()
		h.expectNoWrites("a holds")
		h.step(14 * time.Second)
		h.renew("a", h.clock.Now())
		h.renew("b", h.clock.Now())
		h.step(time.Second)
		if d := h.reconcile(); d != 5*time.Second {
			t.Errorf("requeue = %v, want the ping timeout", d)
		}
		if p, lw := h.pings(), h.leaseWrites(); len(p) != 1 || p[0] != "a" || len(lw) != 0 {
			t.Fatalf("writes = %v, want only a ping of the suspect holder a", h.writes())
		}
		h.clearWrites()
		return h
	}

	t.Run("it answers: re-elected in a new term", func(t *testing.T) {
		h := setup(t)
		h.step(time.Second)
		h.renew("a", h.clock.Now())
		h.reconcile()
		got := h.expectOneLeaseWrite("update")
		if holderOf(got) != "a" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 3 {
			t.Errorf("got holder %q transitions %v, want a in a new term 3", holderOf(got), got.Spec.LeaseTransitions)
		}
		if !got.Spec.AcquireTime.Time.Equal(h.clock.Now()) || !got.Spec.RenewTime.Time.Equal(h.clock.Now()) {
			t.Errorf("acquireTime %v renewTime %v, want now", got.Spec.AcquireTime, got.Spec.RenewTime)
		}
	})

	t.Run("it does not answer: the next best takes over", func(t *testing.T) {
		h := setup(t)
		h.step(5 * time.Second)
		h.reconcile()
		got := h.expectOneLeaseWrite("update")
		if holderOf(got) != "b" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 3 {
			t.Errorf("got holder %q transitions %v, want b in term 3", holderOf(got), got.Spec.LeaseTransitions)
		}
		if n := h.metric("cle_ping_timeouts_total"); n != 1 {
			t.Errorf("ping timeouts = %v, want 1", n)
		}
	})
}

func TestLeaseKeptByRenewals(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.list(lease(heldBy("a")))
	for i := range 8 {
		if d := h.reconcile(); d != 15*time.Second {
			t.Errorf("round %d: requeue = %v, want 15s", i, d)
		}
		h.step(10 * time.Second)
		h.renewLease(h.clock.Now())
	}
	h.expectNoWrites("holder renewing")
}

func TestLeaseDeletedIsCreatedAgain(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.reconcile()
	h.expectOneLeaseWrite("create")
	first := eventsWithReason(h.takeEvents(), ReasonLeaderElected)
	h.deleteHeldLease()
	if rec, ok := h.c.obs.leases[leaseKey]; !ok || rec.observed || !rec.held {
		t.Errorf("the record of the deleted Lease %+v, want its history kept while a candidate references it", rec)
	}
	h.clearWrites()
	h.reconcile()
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
		t.Errorf("elected %q, want a", holderOf(got))
	}
	// A new election is news even if it reads like the last one.
	second := eventsWithReason(h.takeEvents(), ReasonLeaderElected)
	if len(first) != 1 || len(second) != 1 {
		t.Errorf("LeaderElected events: %q then %q, want one each", first, second)
	}
}

func TestStrategyConflict(t *testing.T) {
	h := newHarness(t)
	h.create(
		candidate("x", "1.31.0", "1.31.0"),
		candidate("y", "1.31.0", "1.30.0", withStrategy(strategy.PriorityName)),
		candidate("z", "1.30.0", "1.30.0"),
	)
	h.reconcile()
	h.expectNoWrites("conflict")
	evs := h.takeEvents()
	want := `Warning StrategyConflict Candidates at binary version 1.31.0 ask for different strategies (x: "OldestEmulationVersion", y: "cle.dev/Priority")`
	if len(evs) != 1 || !strings.HasPrefix(evs[0], want) {
		t.Fatalf("events = %q, want one starting %q", evs, want)
	}
	if n := h.metric("cle_strategy_conflicts_total"); n != 1 {
		t.Errorf("conflicts = %v, want 1", n)
	}
	for range 3 {
		h.step(time.Second)
		h.reconcile()
	}
	h.expectNoWrites("conflict persists")
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("events = %q, want none while the conflict is unchanged", evs)
	}
	if n := h.metric("cle_strategy_conflicts_total"); n != 1 {
		t.Errorf("conflicts = %v after reconciling an unchanged conflict, want still 1", n)
	}

	// y agrees: elected (z emulates as old a version, on an older binary).
	lc := h.serverCandidate("y")
	lc.Spec.Strategy = oev
	h.serverUpdate(candidatesGVR, lc)
	h.reconcile()
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "z" {
		t.Errorf("elected %q, want z", holderOf(got))
	}
	h.takeEvents()
	h.clearWrites()

	// y disagrees again: the same conflict is news again. A candidate
	// rewritten with another strategy renews too, as the library does.
	lc = h.serverCandidate("y")
	lc.Spec.Strategy = strategy.PriorityName
	lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
	h.serverUpdate(candidatesGVR, lc)
	// x has not written since it registered: it is asked before its
	// strategy counts, and answers.
	h.reconcile()
	if p := h.pings(); !slices.Equal(p, []string{"x"}) || len(h.leaseWrites()) != 0 {
		t.Fatalf("writes = %v, want only a ping of x, which has not written since it registered", h.writes())
	}
	h.clearWrites()
	h.renew("x", h.clock.Now())
	h.reconcile()
	h.expectNoWrites("conflict on a held Lease")
	if evs := eventsWithReason(h.takeEvents(), ReasonStrategyConflict); len(evs) != 1 {
		t.Errorf("StrategyConflict events = %q, want one for the new conflict", evs)
	}
}

func TestInvalidCandidateSkippedWithEventOnce(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("unparsed", "1.30", "1.29.0"))
	h.create(
		candidate("ahead", "1.30.0", "1.31.0"), // emulates a version newer than its binary
		candidate("good", "1.31.0", "1.31.0"),
	)
	h.reconcile()
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "good" {
		t.Errorf("elected %q, want good", holderOf(got))
	}
	evs := eventsWithReason(h.takeEvents(), ReasonInvalidCandidate)
	if len(evs) != 2 ||
		!strings.HasPrefix(evs[0], `Warning InvalidCandidate Candidate ahead cannot take part under strategy OldestEmulationVersion: spec.emulationVersion "1.31.0" is newer`) ||
		!strings.HasPrefix(evs[1], `Warning InvalidCandidate Candidate unparsed cannot take part under strategy OldestEmulationVersion: spec.binaryVersion "1.30" is not a strict semantic version`) {
		t.Errorf("InvalidCandidate events = %q, want one for ahead and one for unparsed", evs)
	}
	if n := h.metric("cle_invalid_candidates_total"); n != 2 {
		t.Errorf("invalid candidates = %v, want 2", n)
	}
	h.clearWrites()
	for range 3 {
		h.step(time.Second)
		h.reconcile()
	}
	h.expectNoWrites("invalid candidates are not pinged")
	if evs := h.takeEvents(); len(evs) != 0 {
		t.Errorf("events = %q, want none", evs)
	}
	if n := h.metric("cle_invalid_candidates_total"); n != 2 {
		t.Errorf("invalid candidates = %v after reconciling unchanged ones, want still 2", n)
	}

	// ahead is fixed and renews: it is a candidate like the others, and best.
	lc := h.serverCandidate("ahead")
	lc.Spec.EmulationVersion = "1.30.0"
	lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
	h.serverUpdate(candidatesGVR, lc)
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); preferredOf(got) != "ahead" {
		t.Errorf("preferredHolder = %q, want ahead", preferredOf(got))
	}
	h.takeEvents()

	// Broken the same way again: that is news again.
	lc = h.serverCandidate("ahead")
	lc.Spec.EmulationVersion = "1.31.0"
	h.serverUpdate(candidatesGVR, lc)
	h.reconcile()
	if evs := eventsWithReason(h.takeEvents(), ReasonInvalidCandidate); len(evs) != 1 {
		t.Errorf("InvalidCandidate events = %q, want one", evs)
	}
}

func TestNoEligibleCandidate(t *testing.T) {
	t.Run("every candidate invalid: one event however often", func(t *testing.T) {
		h := newHarness(t)
		h.create(
			candidate("a", "1.30.0", "1.31.0"),
			candidate("b", "1.30.0", "1.32.0"),
			candidate("c", "1.30.0", "1.33.0"),
			candidate("d", "1.30.0", "1.34.0"),
		)
		for range 30 {
			h.reconcile()
		}
		h.expectNoWrites("nobody can lead")
		evs := eventsWithReason(h.takeEvents(), ReasonNoEligible)
		want := "Warning NoEligibleCandidate None of the 4 candidates can lead: a(binary 1.30.0, emulation 1.31.0), b(binary 1.30.0, emulation 1.32.0), c(binary 1.30.0, emulation 1.33.0), d(binary 1.30.0, emulation 1.34.0)"
		if len(evs) != 1 || evs[0] != want {
			t.Errorf("NoEligibleCandidate events = %q, want exactly [%q]", evs, want)
		}
		if n := h.metric("cle_elections_total", "result", "no_eligible"); n != 1 {
			t.Errorf("elections{no_eligible} = %v after 30 reconciles of one situation, want 1", n)
		}
	})

	t.Run("no candidate has a valid binaryVersion", func(t *testing.T) {
		h := newHarness(t)
		h.list(candidate("b", "", "1.30.0"), candidate("a", "1.30", "1.30.0"))
		for range 3 {
			h.reconcile()
		}
		h.expectNoWrites("no strategy can be resolved")
		evs := eventsWithReason(h.takeEvents(), ReasonInvalidCandidate)
		if len(evs) != 2 ||
			!strings.HasPrefix(evs[0], `Warning InvalidCandidate Candidate a cannot take part under any strategy: binaryVersion "1.30" is not a strict semantic version`) ||
			!strings.HasPrefix(evs[1], `Warning InvalidCandidate Candidate b cannot take part under any strategy: binaryVersion "" is not`) {
			t.Errorf("InvalidCandidate events = %q, want one each for a and b", evs)
		}
		if n := h.metric("cle_invalid_candidates_total"); n != 2 {
			t.Errorf("invalid candidates = %v, want 2", n)
		}
	})

	t.Run("every candidate unresponsive, then one comes back", func(t *testing.T) {
		h := newHarness(t)
		h.list(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
		h.reconcile()
		h.step(5 * time.Second)
		h.clearWrites()
		if d := h.reconcile(); d != 30*time.Minute-5*time.Second {
			t.Errorf("requeue = %v, want the candidates' expiry", d)
		}
		h.expectNoWrites("nobody answered")
		if evs := eventsWithReason(h.takeEvents(), ReasonNoEligible); len(evs) != 1 {
			t.Errorf("NoEligibleCandidate events = %q, want one", evs)
		}
		h.renew("b", t0)
		h.reconcile()
		if got := h.expectOneLeaseWrite("create"); holderOf(got) != "b" {
			t.Errorf("elected %q, want b", holderOf(got))
		}
	})

	t.Run("nobody eligible again after an election: news again", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.31.0"))
		h.reconcile()
		if evs := eventsWithReason(h.takeEvents(), ReasonNoEligible); len(evs) != 1 {
			t.Fatalf("NoEligibleCandidate events = %q, want one", evs)
		}
		setEmulation := func(v string) {
			lc := h.serverCandidate("a")
			lc.Spec.EmulationVersion = v
			lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
			h.serverUpdate(candidatesGVR, lc)
		}
		setEmulation("1.30.0")
		h.reconcile()
		h.expectOneLeaseWrite("create")
		setEmulation("1.31.0")
		h.step(15 * time.Second) // a's Lease expires: it does not renew it
		h.reconcile()
		if evs := eventsWithReason(h.takeEvents(), ReasonNoEligible); len(evs) != 1 {
			t.Errorf("NoEligibleCandidate events = %q, want one more", evs)
		}
	})
}

func TestPriorityStrategy(t *testing.T) {
	h := newHarness(t)
	h.create(
		candidate("a", "1.30.0", "1.30.0", withStrategy(strategy.PriorityName), withAnnotation(strategy.PriorityAnnotation, "1")),
		candidate("b", "1.31.0", "1.31.0", withStrategy(strategy.PriorityName), withAnnotation(strategy.PriorityAnnotation, "10")),
		candidate("c", "1.31.0", "1.31.0", withStrategy(strategy.PriorityName)),
	)
	h.reconcile()
	got := h.expectOneLeaseWrite("create")
	if holderOf(got) != "b" || ptr.Deref(got.Spec.Strategy, "") != strategy.PriorityName {
		t.Errorf("elected %q under %v, want b under %s", holderOf(got), got.Spec.Strategy, strategy.PriorityName)
	}
}

func TestCustomRegistryLeavesOtherStrategiesAlone(t *testing.T) {
	reg, err := strategy.NewRegistry(strategy.Priority{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(o *Options) { o.Strategies = reg })
	h.list(candidate("a", "1.30.0", "1.30.0"))
	h.reconcile()
	h.expectNoWrites("OldestEmulationVersion is not registered here")
}

func TestExpiredCandidatesAreIgnored(t *testing.T) {
	h := newHarness(t)
	// best never renews after t0; other renews every 10 minutes.
	h.create(candidate("best", "1.29.0", "1.29.0"), candidate("other", "1.30.0", "1.30.0"))
	for range 3 {
		h.step(10 * time.Minute)
		h.renew("other", h.clock.Now())
	}
	live, next := liveCandidates(&h.c.opts, h.c.snapshot(leaseKey, h.c.candidatesOf(leaseKey), h.clock.Now()))
	if len(live) != 1 || live[0].Name != "other" || !next.Equal(h.clock.Now().Add(30*time.Minute)) {
		t.Errorf("live candidates %v until %v, want [other] until %v", names(live), next, h.clock.Now().Add(30*time.Minute))
	}
	h.reconcile()
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "other" {
		t.Errorf("elected %q, want other (best expired, and is not pinged)", holderOf(got))
	}
}

func TestWriteErrorsAreReturned(t *testing.T) {
	internal := apierrors.NewInternalError(errors.New("etcd is sad"))
	tests := []struct {
		name      string
		setup     func(h *harness)
		fail      func(h *harness)
		isErr     func(error) bool
		checkNone func(t *testing.T, h *harness) // nothing recorded as done
		checkDone func(t *testing.T, h *harness) // after the retry
	}{
		{
			name:  "create conflict",
			setup: func(h *harness) { h.create(candidate("a", "1.30.0", "1.30.0")) },
			fail: func(h *harness) {
				h.failOn("create", "leases", 1, apierrors.NewAlreadyExists(leasesGVR.GroupResource(), testLease))
			},
			isErr: apierrors.IsAlreadyExists,
			checkNone: func(t *testing.T, h *harness) {
				if h.serverLease() != nil {
					t.Error("Lease exists")
				}
				if n := h.metric("cle_elections_total", "result", "error"); n != 0 {
					t.Errorf("elections{error} = %v, want 0: losing the race to create is not an error", n)
				}
				if n := h.metric("cle_leader_changes_total") + h.metric("cle_election_duration_seconds"); n != 0 {
					t.Errorf("leader changes + latency samples = %v, want 0", n)
				}
			},
			checkDone: func(t *testing.T, h *harness) {
				// The create lost to a Lease the cache does not show: its
				// holder, unseen, may lead. The controller waits for the
				// cache, then reads the API: no Lease (it was deleted
				// meanwhile), so the unseen holder is given a lease
				// duration from then before anyone is named.
				if h.serverLease() != nil {
					t.Fatalf("created again 1s after losing to a Lease the cache does not show")
				}
				wait := ownWriteWait + h.c.opts.LeaseDuration
				h.runSteps(wait - 2*time.Second)
				if h.serverLease() != nil {
					t.Fatalf("created before the unseen holder's term ran out")
				}
				h.renew("a", h.clock.Now())
				h.runSteps(2 * time.Second)
				if holderOf(h.serverLease()) != "a" {
					t.Errorf("holder = %q, want a", holderOf(h.serverLease()))
				}
				if n := h.histogramSum("cle_election_duration_seconds"); n < wait.Seconds() {
					t.Errorf("election latency = %vs, want at least %s (since the first attempt)", n, wait)
				}
			},
		},
		{
			name: "elect update conflict",
			setup: func(h *harness) {
				h.create(candidate("a", "1.30.0", "1.30.0"))
				h.list(lease())
			},
			fail:  func(h *harness) { h.failOn("update", "leases", 1, conflictErr("leases", testLease)) },
			isErr: apierrors.IsConflict,
			checkNone: func(t *testing.T, h *harness) {
				if holderOf(h.serverLease()) != "" {
					t.Errorf("holder = %q, want none", holderOf(h.serverLease()))
				}
				if n := h.metric("cle_leader_changes_total"); n != 0 {
					t.Errorf("leader changes = %v, want 0", n)
				}
			},
			checkDone: func(t *testing.T, h *harness) {
				if l := h.serverLease(); holderOf(l) != "a" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 {
					t.Errorf("holder %q transitions %v, want a and 1", holderOf(l), l.Spec.LeaseTransitions)
				}
			},
		},
		{
			name: "elect with a stale cache",
			setup: func(h *harness) {
				h.create(candidate("a", "1.30.0", "1.30.0"))
				h.list(lease())
			},
			fail: func(h *harness) {
				// Someone else wrote the Lease; the cache has not seen it.
				l := h.serverLease()
				l.Labels = map[string]string{"touched": "yes"}
				mustMeta(l).SetResourceVersion(h.nextRV())
				if err := h.client.Tracker().Update(leasesGVR, l, testNS); err != nil {
					t.Fatal(err)
				}
			},
			isErr:     apierrors.IsConflict,
			checkNone: func(t *testing.T, h *harness) {},
			checkDone: func(t *testing.T, h *harness) {
				if l := h.serverLease(); holderOf(l) != "a" || l.Labels["touched"] != "yes" {
					t.Errorf("holder %q labels %v, want a, with the other write kept", holderOf(l), l.Labels)
				}
			},
		},
		{
			name: "steer conflict",
			setup: func(h *harness) {
				h.create(candidate("h", "1.31.0", "1.31.0"))
				h.join(candidate("a", "1.30.0", "1.30.0"))
				h.list(lease(heldBy("h")))
			},
			fail:  func(h *harness) { h.failOn("update", "leases", 1, conflictErr("leases", testLease)) },
			isErr: apierrors.IsConflict,
			checkNone: func(t *testing.T, h *harness) {
				if n := h.metric("cle_preemptions_total"); n != 0 {
					t.Errorf("preemptions = %v, want 0", n)
				}
				if evs := eventsWithReason(h.takeEvents(), ReasonPreferredHolderSet); len(evs) != 0 {
					t.Errorf("events = %q, want none", evs)
				}
			},
			checkDone: func(t *testing.T, h *harness) {
				if p := preferredOf(h.serverLease()); p != "a" {
					t.Errorf("preferredHolder = %q, want a", p)
				}
				if evs := eventsWithReason(h.takeEvents(), ReasonPreferredHolderSet); len(evs) != 1 {
					t.Errorf("events = %q, want one PreferredHolderSet", evs)
				}
			},
		},
		{
			name:  "ping error",
			setup: func(h *harness) { h.list(candidate("a", "1.30.0", "1.30.0")) },
			fail:  func(h *harness) { h.failOn("update", "leasecandidates", 1, internal) },
			isErr: apierrors.IsInternalError,
			checkNone: func(t *testing.T, h *harness) {
				if n := h.metric("cle_pings_total"); n != 0 {
					t.Errorf("pings = %v, want 0", n)
				}
				// The ping timeout runs from the failed attempt.
				if s := h.state("a"); s != pinged {
					t.Errorf("a is %v, want pinged (attempted)", s)
				}
			},
			checkDone: func(t *testing.T, h *harness) {
				if s := h.state("a"); s != pinged {
					t.Errorf("a is %v, want pinged", s)
				}
				if h.serverCandidate("a").Spec.PingTime == nil {
					t.Error("no pingTime on the server")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.setup(h)
			tc.fail(h)
			_, err := h.c.reconcile(h.ctx, leaseKey)
			if err == nil || !tc.isErr(err) {
				t.Fatalf("reconcile error = %v, want the write's error", err)
			}
			h.sync()
			tc.checkNone(t, h)

			h.step(time.Second)
			h.reconcile()
			tc.checkDone(t, h)
		})
	}
}

func TestUntilDeadlineAndEarliest(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		deadline time.Time
		want     time.Duration
	}{
		{time.Time{}, 0},
		{now.Add(3 * time.Second), 3 * time.Second},
		{now, time.Nanosecond},
		{now.Add(-time.Hour), time.Nanosecond},
	} {
		if got := untilDeadline(now, tc.deadline); got != tc.want {
			t.Errorf("untilDeadline(%v) = %v, want %v", tc.deadline, got, tc.want)
		}
	}
	a, b := now, now.Add(time.Second)
	for _, tc := range []struct{ x, y, want time.Time }{
		{time.Time{}, time.Time{}, time.Time{}},
		{time.Time{}, a, a},
		{a, time.Time{}, a},
		{a, b, a},
		{b, a, a},
	} {
		if got := earliest(tc.x, tc.y); !got.Equal(tc.want) {
			t.Errorf("earliest(%v, %v) = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
	if s := liveness(3).String(); s != "unresponsive" {
		t.Errorf("liveness(3) = %q", s)
	}
}

func TestPingTimeIsAfterRenewTimeOnceStored(t *testing.T) {
	// The controller's clock is 0.5µs past the candidate's renewTime: the API
	// stores microseconds, so a ping at "now" would read as equal to the
	// renewTime, and client-go's candidates only answer a later ping.
	h := newHarness(t)
	h.clock.SetTime(t0.Add(500 * time.Nanosecond))
	h.list(candidate("a", "1.30.0", "1.30.0", renewedAt(t0)))
	h.reconcile()
	ws := h.writes()
	if len(ws) != 1 || ws[0].cand == nil {
		t.Fatalf("writes = %v, want one ping", ws)
	}
	if ping := serialized(ws[0].cand.Spec.PingTime); !ping.After(t0) {
		t.Errorf("stored pingTime %v is not after renewTime %v", ping, t0)
	}
}

func TestCandidateOfOtherNamespaceIgnored(t *testing.T) {
	h := newHarness(t)
	other := candidate("a", "1.30.0", "1.30.0")
	other.Namespace = "elsewhere"
	h.create(other)
	if got := h.c.candidatesOf(leaseKey); len(got) != 0 {
		t.Errorf("candidates of %s: %v", leaseKey, names(got))
	}
	if got := h.c.candidatesOf(types.NamespacedName{Namespace: "elsewhere", Name: testLease}); len(got) != 1 {
		t.Errorf("candidates of elsewhere/%s: %v, want a", testLease, names(got))
	}
}
