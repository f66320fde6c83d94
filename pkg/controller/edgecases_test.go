package controller

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/strategy"
)

// TestFencingTokenSurvivesLeaseDeletion pins that leaseTransitions never goes
// backwards: a Lease deleted and created again continues from the highest
// value this controller saw.
func TestFencingTokenSurvivesLeaseDeletion(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.list(lease(heldBy("a"), transitions(7)))
	h.reconcile()
	h.expectNoWrites("held")
	h.deleteHeldLease()
	h.reconcile()
	got := h.expectOneLeaseWrite("create")
	if n := ptr.Deref(got.Spec.LeaseTransitions, 0); n != 8 {
		t.Errorf("leaseTransitions of the re-created Lease = %d, want 8", n)
	}
	// And an update elects above the highest value seen, even when the
	// stored Lease says less.
	h.clearWrites()
	l := h.serverLease()
	l.Spec.HolderIdentity = ptr.To("")
	l.Spec.LeaseTransitions = ptr.To[int32](2)
	h.serverUpdate(leasesGVR, l)
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); ptr.Deref(got.Spec.LeaseTransitions, 0) != 9 {
		t.Errorf("leaseTransitions = %d, want 9", ptr.Deref(got.Spec.LeaseTransitions, 0))
	}
}

// TestCandidateSeenInStoreBeforeItsHandler pins the window in which the
// informer has stored a new candidate and not yet called the handler: the
// candidate is judged as just created (alive), not as one of unknown
// freshness to be pinged, and reading it records nothing, so that the handler
// still records it as seen created.
func TestCandidateSeenInStoreBeforeItsHandler(t *testing.T) {
	h := newHarness(t)
	h.holdHandlers = true
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.reconcile()
	if got := h.pings(); len(got) != 0 {
		t.Errorf("pinged %v, want none: the candidate was just created", got)
	}
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
		t.Errorf("holder %q, want a", holderOf(got))
	}
	if n := len(h.c.obs.snapshot()); n != 0 {
		t.Errorf("%d candidate records before the handler ran, want 0: only handlers record", n)
	}
	h.runHandlers()
	if s := h.state("a"); s != alive {
		t.Errorf("a is %v after its handler ran, want alive (seen created)", s)
	}

	// A candidate deleted while a reconcile read it leaves no record behind.
	h.clearWrites()
	h.deleteCandidate("a")
	h.reconcile()
	if n := len(h.c.obs.snapshot()); n != 0 {
		t.Errorf("%d candidate records after the deletion, want 0", n)
	}
	if v := h.metric("cle_candidates", "state", "unknown"); v != 0 {
		t.Errorf("cle_candidates{state=unknown} = %v, want 0", v)
	}
}

// TestUnpingableCandidateDoesNotBlockTheElection pins that a candidate whose
// pings always fail (an admission policy, an object that no longer
// validates) is given up on at the ping timeout, as one that does not answer
// is: the next best is elected, or steered to.
func TestUnpingableCandidateDoesNotBlockTheElection(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leasecandidates"}, "top", nil)
	failPingsOf := func(h *harness, name string) {
		h.client.PrependReactor("update", "leasecandidates", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if mustMeta(a.(clienttesting.UpdateAction).GetObject()).GetName() == name {
				return true, nil, forbidden
			}
			return false, nil, nil
		})
	}
	t.Run("vacant Lease", func(t *testing.T) {
		h := newHarness(t)
		h.list(candidate("top", "1.29.0", "1.29.0"))
		h.create(candidate("mid", "1.30.0", "1.30.0"))
		failPingsOf(h, "top")
		d, err := h.reconcileOnly()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("reconcile error = %v, want the ping's Forbidden (retried)", err)
		}
		if d != time.Second {
			t.Errorf("requeue = %v, want a fifth of the ping timeout: a failed ping is retried within it", d)
		}
		h.step(2 * time.Second)
		if _, err := h.reconcileOnly(); !apierrors.IsForbidden(err) {
			t.Fatalf("retry: error = %v, want the ping's Forbidden", err)
		}
		if got := h.leaseWrites(); len(got) != 0 {
			t.Errorf("Lease writes before the ping timeout: %v", got)
		}
		h.step(3 * time.Second)
		h.clearWrites()
		h.reconcile()
		if got := h.expectOneLeaseWrite("create"); holderOf(got) != "mid" {
			t.Fatalf("holder %q, want mid", holderOf(got))
		}
		if evs := eventsWithReason(h.takeEvents(), ReasonPingFailed); len(evs) != 1 {
			t.Errorf("PingFailed events = %q, want one", evs)
		}
	})
	t.Run("held Lease", func(t *testing.T) {
		h := newHarness(t)
		h.list(candidate("top", "1.29.0", "1.29.0"), candidate("low", "1.31.0", "1.31.0"), lease(heldBy("low")))
		h.join(candidate("mid", "1.30.0", "1.30.0"))
		failPingsOf(h, "top")
		if _, err := h.reconcileOnly(); !apierrors.IsForbidden(err) {
			t.Fatalf("reconcile error = %v, want the ping's Forbidden", err)
		}
		h.step(5 * time.Second)
		h.renewLease(h.clock.Now())
		h.clearWrites()
		h.reconcile()
		if got := h.expectOneLeaseWrite("update"); preferredOf(got) != "mid" {
			t.Fatalf("preferredHolder %q, want mid", preferredOf(got))
		}
	})
}

// TestNoRepeatedWriteBeforeTheCacheCatchesUp pins that a reconcile running
// after the controller's own write, but before the informer delivered it,
// does not repeat the write on the old resourceVersion (a certain conflict).
func TestNoRepeatedWriteBeforeTheCacheCatchesUp(t *testing.T) {
	t.Run("create", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		if _, err := h.reconcileOnly(); err != nil {
			t.Fatal(err)
		}
		h.clearWrites()
		d, err := h.reconcileOnly()
		if err != nil {
			t.Fatalf("second reconcile before the cache caught up: %v", err)
		}
		h.expectNoWrites("before the cache shows the create")
		if d <= 0 || d > ownWriteWait {
			t.Errorf("requeue = %v, want a bounded wait", d)
		}
		h.sync()
		h.reconcile()
		h.expectNoWrites("after the cache caught up")
	})
	t.Run("update", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("gone"), durationSeconds(1)))
		h.step(2 * time.Second)
		if _, err := h.reconcileOnly(); err != nil {
			t.Fatal(err)
		}
		h.clearWrites()
		if _, err := h.reconcileOnly(); err != nil {
			t.Fatalf("second reconcile before the cache caught up: %v", err)
		}
		h.expectNoWrites("before the cache shows the update")
		if n := h.metric("cle_elections_total", "result", resultError); n != 0 {
			t.Errorf("failed elections = %v, want 0", n)
		}
	})
	t.Run("a conflict is not a failed election", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("gone"), durationSeconds(1)))
		h.step(2 * time.Second)
		h.failOn("update", "leases", 1, conflictErr("leases", testLease))
		if _, err := h.reconcileOnly(); !apierrors.IsConflict(err) {
			t.Fatalf("error = %v, want the conflict", err)
		}
		if n := h.metric("cle_elections_total", "result", resultError); n != 0 {
			t.Errorf("failed elections = %v, want 0 for a conflict", n)
		}
	})
}

// TestRenewalOfASettledLeaseIsNotReconciled pins the steady-state cost: a
// holder's renewal of a Lease whose election is settled does not enqueue it;
// the Lease is looked at again only at its expiry deadline, or, once the
// holder's cadence is known, when it would be late (see pingLateHolder).
func TestRenewalOfASettledLeaseIsNotReconciled(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("a", "1.30.0", "1.30.0"), lease(heldBy("a")))
	drain(h)
	if d := h.reconcile(); d != 15*time.Second {
		t.Fatalf("requeue = %v, want the lease duration", d)
	}
	for i := range 5 {
		h.step(2 * time.Second)
		h.renewLease(h.clock.Now())
		if got := drain(h); len(got) != 0 {
			t.Fatalf("renewal %d enqueued %v, want nothing", i, got)
		}
	}
	// At the old deadline the Lease is live, by the renewals recorded.
	h.step(5 * time.Second)
	if d := h.reconcile(); d != 5*time.Second {
		t.Errorf("requeue = %v, want 5s (10s after the last renewal: a holder renewing every 2s is late then)", d)
	}
	h.expectNoWrites("holder renewing")
	// A change other than a renewal is reconciled.
	l := h.serverLease()
	l.Spec.PreferredHolder = ptr.To("x")
	h.serverUpdate(leasesGVR, l)
	if got := drain(h); len(got) != 1 {
		t.Errorf("a preferredHolder change enqueued %v, want the Lease", got)
	}
}

// TestHeldLeaseFollowsTheCandidatesStrategy pins that a held Lease's strategy
// is updated when its candidates move to another strategy.
func TestHeldLeaseFollowsTheCandidatesStrategy(t *testing.T) {
	h := newHarness(t)
	h.list(
		candidate("a", "1.30.0", "1.30.0", withStrategy(strategy.PriorityName)),
		candidate("b", "1.30.0", "1.30.0", withStrategy(strategy.PriorityName)),
		lease(heldBy("a")),
	)
	h.reconcile()
	got := h.expectOneLeaseWrite("update")
	if s := ptr.Deref(got.Spec.Strategy, ""); s != strategy.PriorityName || holderOf(got) != "a" || preferredOf(got) != "" {
		t.Errorf("strategy %q holder %q preferredHolder %q, want %q, a, none", s, holderOf(got), preferredOf(got), strategy.PriorityName)
	}
	h.clearWrites()
	h.reconcile()
	h.expectNoWrites("strategy up to date")
}

// TestReElectingTheSameHolderIsNoLeaderChange pins cle_leader_changes_total:
// a holder whose Lease expired and who is elected again is not a change.
func TestReElectingTheSameHolderIsNoLeaderChange(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("a", "1.30.0", "1.30.0"), lease(heldBy("a")))
	h.step(16 * time.Second) // expired by local observation
	h.renew("a", h.clock.Now())
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); holderOf(got) != "a" {
		t.Fatalf("holder %q, want a", holderOf(got))
	}
	if n := h.metric("cle_leader_changes_total"); n != 0 {
		t.Errorf("leader changes = %v, want 0", n)
	}
}

// TestElectionLatencyExcludesANonCandidateTenure pins
// cle_election_duration_seconds: time a Lease spent held by a component
// outside coordinated election is not election latency.
func TestElectionLatencyExcludesANonCandidateTenure(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("a", "1.30.0", "1.30.0")) // unknown freshness: pinged
	h.reconcile()
	if got := h.pings(); len(got) != 1 {
		t.Fatalf("pings %v, want a", got)
	}
	// Meanwhile an ordinary leader election takes the Lease for an hour.
	h.step(time.Second)
	if _, err := h.client.CoordinationV1().Leases(testNS).Create(h.ctx, lease(heldBy("outsider")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	h.reconcile()
	h.step(time.Hour)
	l := h.serverLease()
	l.Spec.HolderIdentity = ptr.To("")
	h.serverUpdate(leasesGVR, l)
	h.renew("a", h.clock.Now())
	h.reconcile()
	if got := h.leaseWrites(); len(got) != 2 || holderOf(got[1].lease) != "a" {
		t.Fatalf("writes %v, want a elected", got)
	}
	if sum := h.histogramSum("cle_election_duration_seconds"); sum > 1 {
		t.Errorf("election latency %vs includes the outsider's tenure", sum)
	}
}

// TestCandidatesGaugeClearedWhenTheControllerStops pins cle_candidates after
// a replica loses leadership: the stopped controller reports nothing.
func TestCandidatesGaugeClearedWhenTheControllerStops(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"))
	if v := h.metric("cle_candidates", "state", "alive"); v != 1 {
		t.Fatalf("cle_candidates{state=alive} = %v, want 1", v)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	h.c.Run(ctx, 1)
	if v := h.metric("cle_candidates"); v != 0 {
		t.Errorf("cle_candidates = %v after the controller stopped, want no series", v)
	}
}

// TestEqualCandidateJoiningASettledElection pins that a candidate equal on
// merit to the holder changes nothing: it is not pinged, not preferred, and
// nothing is written, even when it wins the tie-break (older, or same second
// and a name that sorts first).
func TestEqualCandidateJoiningASettledElection(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("b", "1.36.0", "1.36.0", created(t0.Add(-time.Hour))), lease(heldBy("b")))
	h.reconcile()
	h.expectNoWrites("settled")
	// a: same versions, same second, name first: it wins only the tie-break.
	h.create(candidate("a", "1.36.0", "1.36.0", created(t0.Add(-time.Hour))))
	// c: same versions, created earlier: it too wins only the tie-break, and
	// the controller does not know it is alive (listed, not seen renewing).
	h.list(candidate("c", "1.36.0", "1.36.0", created(t0.Add(-2*time.Hour))))
	for i := range 4 {
		h.step(5 * time.Second)
		h.renewLease(t0.Add(time.Duration(i+1) * 5 * time.Second))
		h.reconcile()
	}
	h.expectNoWrites("an equal candidate joined")
	if n := h.metric("cle_preemptions_total"); n != 0 {
		t.Errorf("preemptions = %v, want 0", n)
	}

	// A better-versioned candidate still preempts.
	h.join(candidate("old", "1.36.0", "1.35.0"))
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); preferredOf(got) != "old" || holderOf(got) != "b" {
		t.Errorf("holder %q preferredHolder %q, want b and old", holderOf(got), preferredOf(got))
	}
}

// TestReleasedLeaseNotGivenToADepartedCandidate pins the stop of a leader:
// it deletes its LeaseCandidate, then releases the Lease. The two informers
// are separate watches, so the controller may see the release first, with
// the departed candidate still cached as the best. It must not name it:
// nobody would renew, and the Lease would stay leaderless for a whole lease
// duration. It checks the winner of a re-election with a live read, waits
// for the cache, and then elects the next best.
func TestReleasedLeaseNotGivenToADepartedCandidate(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.list(lease(heldBy("a"), transitions(3)))
	h.reconcile()
	h.expectNoWrites("a holds")

	if err := h.client.Tracker().Delete(candidatesGVR, testNS, "a"); err != nil {
		t.Fatal(err)
	}
	released := h.serverLease()
	released.Spec.HolderIdentity = ptr.To("")
	released.ResourceVersion = h.nextRV()
	if err := h.client.Tracker().Update(leasesGVR, released, testNS); err != nil {
		t.Fatal(err)
	}
	h.syncLeases() // the candidate cache still holds a
	h.reconcile()
	h.expectNoWrites("release seen before a's deletion")

	h.syncCandidates()
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); holderOf(got) != "b" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 4 {
		t.Errorf("elected %q at term %d, want b at term 4", holderOf(got), ptr.Deref(got.Spec.LeaseTransitions, 0))
	}
}

// TestFencingTokenExhausted pins what happens to a Lease whose leaseTransitions
// the API accepted at the int32 maximum: a new holder cannot be numbered above
// it, so the controller elects nobody, says why once, and does not retry a
// write the API would reject (found by FuzzReconcile: the token wrapped to a
// negative number). A live holder at that token is left as it is.
func TestFencingTokenExhausted(t *testing.T) {
	t.Run("expired Lease", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("gone"), durationSeconds(1), transitions(math.MaxInt32)))
		h.step(2 * time.Second)
		for i := range 3 {
			if _, err := h.reconcileOnly(); err != nil {
				t.Fatalf("reconcile %d: %v, want no error (nothing to retry)", i, err)
			}
		}
		h.expectNoWrites("token exhausted")
		evs := h.takeEvents()
		if got := eventsWithReason(evs, ReasonTermsExhausted); len(got) != 1 || !strings.Contains(got[0], "Cannot elect a") {
			t.Errorf("events %q, want one %s naming a", evs, ReasonTermsExhausted)
		}
		if n := h.metric("cle_elections_total"); n != 0 {
			t.Errorf("elections = %v, want none", n)
		}
	})
	t.Run("Lease deleted at the highest token", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("a"), transitions(math.MaxInt32)))
		h.reconcile()
		h.expectNoWrites("held by a at the highest token")
		h.deleteHeldLease()
		h.clearWrites()
		h.reconcile()
		h.expectNoWrites("re-creating would reuse a token")
		if got := eventsWithReason(h.takeEvents(), ReasonTermsExhausted); len(got) != 1 {
			t.Errorf("%s events %q, want one", ReasonTermsExhausted, got)
		}
	})
	t.Run("one below the highest token: elected at it", func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(durationSeconds(1), transitions(math.MaxInt32-1)))
		h.reconcile()
		if got := h.expectOneLeaseWrite("update"); holderOf(got) != "a" || ptr.Deref(got.Spec.LeaseTransitions, 0) != math.MaxInt32 {
			t.Errorf("holder %q term %v, want a in term %d", holderOf(got), got.Spec.LeaseTransitions, int32(math.MaxInt32))
		}
	})
}

// TestEventNotesFitTheAPI pins that every Event fits in the note kube-apiserver
// accepts (1024 bytes), however many candidates a Lease has and however long
// what they wrote: the server rejects a longer Event and the recorder drops
// it, so a Lease with a few dozen candidates got no LeaderElected Event.
func TestEventNotesFitTheAPI(t *testing.T) {
	noteOf := func(ev string) string { return strings.SplitN(ev, " ", 3)[2] }
	t.Run("many candidates", func(t *testing.T) {
		h := newHarness(t)
		for i := range 100 {
			h.create(candidate(fmt.Sprintf("candidate-with-a-long-name-%03d", i), "1.36.0", fmt.Sprintf("1.%d.0", 30+i%5)))
		}
		h.reconcile()
		evs := eventsWithReason(h.takeEvents(), ReasonLeaderElected)
		if len(evs) != 1 {
			t.Fatalf("LeaderElected events %q, want one", evs)
		}
		note := noteOf(evs[0])
		if len(note) > maxNote {
			t.Errorf("note is %d bytes, more than the API's %d", len(note), maxNote)
		}
		for _, want := range []string{"Elected candidate-with-a-long-name-000 ", "candidate-with-a-long-name-009(", ", and 90 more"} {
			if !strings.Contains(note, want) {
				t.Errorf("note %q does not contain %q", note, want)
			}
		}
		if strings.Contains(note, "candidate-with-a-long-name-010(") {
			t.Errorf("note %q names more than %d candidates", note, maxDescribed)
		}
	})
	t.Run("a conflict among many", func(t *testing.T) {
		h := newHarness(t)
		for i := range 50 {
			s := oev
			if i%2 == 1 {
				s = "example.com/custom"
			}
			h.create(candidate(fmt.Sprintf("c%02d", i), "1.36.0", "1.36.0", withStrategy(s)))
		}
		h.reconcile()
		evs := eventsWithReason(h.takeEvents(), ReasonStrategyConflict)
		if len(evs) != 1 || len(noteOf(evs[0])) > maxNote || !strings.HasSuffix(evs[0], noteCut) {
			t.Errorf("StrategyConflict events %q, want one cut to %d bytes", evs, maxNote)
		}
	})
	t.Run("a long multi-byte note is cut on a character", func(t *testing.T) {
		rec := events.NewFakeRecorder(1)
		d := newEventDeduper(rec)
		d.emit(leaseKey, nil, "Warning", "R", "A", "%s", strings.Repeat("é", maxNote))
		note := noteOf(<-rec.Events)
		if len(note) > maxNote || !utf8.ValidString(note) || !strings.HasSuffix(note, noteCut) {
			t.Errorf("note of %d bytes (valid UTF-8: %v) %q, want at most %d, valid, ending in %q", len(note), utf8.ValidString(note), note, maxNote, noteCut)
		}
	})
}

// relatedRecorder records the related object of each Event by reason.
type relatedRecorder struct {
	mu      sync.Mutex
	related map[string][]string // reason -> "Kind apiVersion ns/name" of each Event's related object ("" if none)
}

func (r *relatedRecorder) Eventf(_, related runtime.Object, _, reason, _, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ""
	if ref, ok := related.(*corev1.ObjectReference); ok {
		s = ref.Kind + " " + ref.APIVersion + " " + ref.Namespace + "/" + ref.Name
	}
	r.related[reason] = append(r.related[reason], s)
}

// TestEventsNameTheCandidateAsRelated pins that Events about one candidate name
// it as their related object. The Event recorder folds an Event into an
// earlier one with the same Lease, reason, action and related object, keeping
// the earlier note: without the candidate there, the second of two invalid
// candidates of a Lease that does not exist yet was never reported.
func TestEventsNameTheCandidateAsRelated(t *testing.T) {
	rec := &relatedRecorder{related: map[string][]string{}}
	h := newHarness(t, func(o *Options) { o.Recorder = rec })
	h.create(
		candidate("bad1", "1.36", "1.36.0"),
		candidate("bad2", "v1.36.0", "1.36.0"),
		candidate("good", "1.36.0", "1.36.0"),
	)
	h.reconcile()
	h.join(candidate("better", "1.36.0", "1.35.0"))
	h.reconcile()
	ref := func(name string) string { return "LeaseCandidate coordination.k8s.io/v1beta1 " + testNS + "/" + name }
	for reason, want := range map[string][]string{
		ReasonInvalidCandidate:   {ref("bad1"), ref("bad2")},
		ReasonLeaderElected:      {ref("good")},
		ReasonPreferredHolderSet: {ref("better")},
	} {
		got := slices.Sorted(slices.Values(rec.related[reason]))
		if !slices.Equal(got, want) {
			t.Errorf("%s Events relate to %q, want %q", reason, got, want)
		}
	}
}

// TestFencingTokenSurvivesScaleToZero pins the history of a Lease whose
// candidates all left and which was then deleted (a component scaled to zero
// and its Lease cleaned up): when the component comes back within the
// candidate TTL, the re-created Lease continues above the old tokens instead
// of starting again at 1; when it comes back after the history was dropped
// (its tombstone expired), the highest token of that history is a floor that
// every later term, of any Lease, is numbered above, bound or not.
func TestFencingTokenSurvivesScaleToZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  time.Duration
	}{
		{name: "within the candidate TTL", gap: time.Minute},
		{name: "past the tombstone", gap: DefaultCandidateTTL + time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.create(candidate("a", "1.30.0", "1.30.0"))
			h.list(lease(heldBy("a"), transitions(7)))
			h.reconcile()
			h.expectNoWrites("held")
			h.deleteCandidate("a")
			h.reconcile()
			h.deleteLease()
			h.reconcile()
			h.step(tc.gap)
			h.create(candidate("a", "1.30.0", "1.30.0"))
			h.runSteps(h.c.opts.LeaseDuration + time.Second)
			l := h.serverLease()
			if l == nil {
				t.Fatal("no Lease once the component came back")
			}
			if n := ptr.Deref(l.Spec.LeaseTransitions, 0); n != 8 {
				t.Errorf("leaseTransitions of the re-created Lease = %d, want 8, above the 7 it had before it was deleted", n)
			}
		})
	}
}
