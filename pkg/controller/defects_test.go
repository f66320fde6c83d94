package controller

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Timing defects found by review, each driven here through the controller's
// own event handlers and steps, as the workqueue would run them.

// runSteps plays the workqueue for the test Lease for d of fake time: each
// step runs at the time the last one asked for, or after a backoff when it
// failed, and what it wrote is delivered to the caches.
func (h *harness) runSteps(d time.Duration) {
	h.t.Helper()
	const backoff = 500 * time.Millisecond
	end := h.clock.Now().Add(d)
	for h.clock.Now().Before(end) {
		next, err := h.reconcileOnly()
		h.sync()
		if err != nil && (next == 0 || next > backoff) {
			next = backoff
		}
		if left := end.Sub(h.clock.Now()); next == 0 || next > left {
			next = left
		}
		h.step(next)
	}
}

// switchableFailure fails every write of resource with err while on.
func (h *harness) switchableFailure(resource string, err error) *atomic.Bool {
	var on atomic.Bool
	for _, verb := range []string{"create", "update"} {
		h.client.PrependReactor(verb, resource, func(clienttesting.Action) (bool, runtime.Object, error) {
			if on.Load() {
				return true, nil, err
			}
			return false, nil, nil
		})
	}
	return &on
}

// A short outage of the API during an election: the pings never reach the
// candidates, and at the ping timeout they must not be excluded as if they
// had been asked and stayed silent. Once the API answers again they are
// pinged again, and the best one is elected, without waiting minutes for
// their next periodic renewal.
func TestAPIBlipDoesNotExcludeCandidatesItNeverReached(t *testing.T) {
	h := newHarness(t)
	unavailable := apierrors.NewServiceUnavailable("the API is restarting")
	down := h.switchableFailure("leasecandidates", unavailable)
	h.switchableFailure("leases", unavailable).Store(false)
	// Listed at start-up: their freshness is unknown, so electing needs a ping.
	h.list(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	down.Store(true)
	h.runSteps(4 * h.c.opts.PingTimeout)
	if l := h.serverLease(); l != nil {
		t.Fatalf("a Lease was written while no ping could be: %v", holderOf(l))
	}
	down.Store(false)
	h.clearWrites()
	h.runSteps(3 * h.c.opts.PingTimeout)
	if p := h.pings(); !slices.Contains(p, "a") {
		t.Fatalf("after the API came back, pinged %v; want a pinged again (its ping never reached it)", p)
	}
	h.renew("a", t0.Add(time.Hour)) // a answers
	h.runSteps(time.Second)
	if l := h.serverLease(); l == nil || holderOf(l) != "a" {
		t.Fatalf("Lease %v after a answered; want it created naming a", l)
	}
}

// A long outage of the API: every ping of the best candidate fails for
// minutes, so it is passed over again and again and another candidate is
// elected meanwhile. The outage says nothing about the candidate: once the
// API answers again it is asked within a ping timeout or two, not after a
// backoff that grew with the outage (simulation seed 213358: the best led
// 40 s after the API came back). A refusal that is the candidate's own (an
// admission policy's 403) still backs off, so that a candidate nobody may
// write to costs few failed writes.
func TestLongOutageDoesNotDelayTheBestOnceTheAPIIsBack(t *testing.T) {
	// run fails every ping with err for three minutes while b holds, and
	// returns how many pings of a were tried meanwhile, and whether a was
	// pinged within two ping timeouts of the failures ending.
	run := func(err error) (tried int, askedAfter bool) {
		h := newHarness(t)
		h.create(candidate("b", "1.31.0", "1.31.0"))
		h.runSteps(2 * time.Second)
		if l := h.serverLease(); l == nil || holderOf(l) != "b" {
			t.Fatalf("Lease %v; want it created naming b", l)
		}
		// a, better than b, joins; once its freshness has lapsed only a
		// ping can show it alive, and every ping fails.
		failing := h.switchableFailure("leasecandidates", err)
		failing.Store(true)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.step(h.c.opts.CandidateFreshness)
		h.clearWrites()
		h.holdWhileRunning(3 * time.Minute)
		tried = len(h.pings())
		failing.Store(false)
		h.clearWrites()
		h.holdWhileRunning(2 * h.c.opts.PingTimeout)
		return tried, slices.Contains(h.pings(), "a")
	}
	outage, askedAfterOutage := run(apierrors.NewServiceUnavailable("the API is restarting"))
	if !askedAfterOutage {
		t.Errorf("a not pinged within %s of the API coming back", 2*DefaultPingTimeout)
	}
	refused, _ := run(apierrors.NewForbidden(candidatesGVR.GroupResource(), "a", errors.New("denied by policy")))
	if refused*2 > outage {
		t.Errorf("%d pings tried in 3 minutes of refusals, %d in 3 minutes of outage: want a refused candidate to back off", refused, outage)
	}
}

// holdWhileRunning runs the steps of the test Lease for d while its holder
// renews it every third of the lease duration.
func (h *harness) holdWhileRunning(d time.Duration) {
	h.t.Helper()
	every := h.c.opts.LeaseDuration / 3
	for end := h.clock.Now().Add(d); h.clock.Now().Before(end); {
		h.renewLease(h.clock.Now())
		h.runSteps(min(every, end.Sub(h.clock.Now())))
	}
}

// client-go's release writes leaseDurationSeconds 1. The holder the
// controller names next gets a whole lease duration, not one second: the
// controller must not judge its own new holder expired before that holder
// has had a chance to renew (client-go renews every 2s).
func TestElectionAfterClientGoReleaseGivesAFullLeaseDuration(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.create(lease(heldBy(""), transitions(4), durationSeconds(1)))
	h.reconcile()
	got := h.expectOneLeaseWrite("update")
	if holderOf(got) != "a" {
		t.Fatalf("elected %q, want a", holderOf(got))
	}
	if d := ptr.Deref(got.Spec.LeaseDurationSeconds, 0); d < int32(h.c.opts.LeaseDuration/time.Second) {
		t.Errorf("leaseDurationSeconds = %d after the election, want at least %v", d, h.c.opts.LeaseDuration)
	}
	h.clearWrites()
	h.step(2 * time.Second) // a has not renewed yet: client-go renews every 2s
	h.reconcile()
	h.expectNoWrites("the new holder has had 2s of a 15s term")
	if p := h.pings(); len(p) != 0 {
		t.Errorf("pinged %v 2s into the new holder's term", p)
	}
}

// A Lease deleted while its holder leads: the holder may act until its term
// runs out by the controller's observation, so the Lease is created again
// only then, not at once, or a new holder could renew before the old one
// notices the deletion.
func TestDeletedLeaseIsReelectedOnlyAfterTheHoldersTerm(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.create(lease(heldBy("b"), transitions(3)))
	h.reconcile()
	h.clearWrites()
	h.step(5 * time.Second)
	h.renew("a", h.clock.Now()) // fresh when b's term runs out
	h.clearWrites()
	h.deleteLease()
	h.runSteps(9 * time.Second) // b's term, last renewed at t0, ends at t0+15s
	if w := h.leaseWrites(); len(w) != 0 {
		t.Fatalf("wrote %v within the deleted Lease's holder's term", w)
	}
	h.runSteps(2 * time.Second)
	l := h.serverLease()
	if l == nil {
		t.Fatal("no Lease once the holder's term ran out")
	}
	if holderOf(l) != "a" || ptr.Deref(l.Spec.LeaseTransitions, 0) <= 3 {
		t.Errorf("Lease re-created naming %q at term %d; want a, above 3", holderOf(l), ptr.Deref(l.Spec.LeaseTransitions, 0))
	}
}

// The deduplication of Events keeps nothing of a candidate that left.
func TestEventMemoryOfDepartedCandidatesIsDropped(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("bad", "1.30", "1.30.0"))
	h.create(lease(heldBy("a")))
	h.reconcile()
	if len(eventsWithReason(h.takeEvents(), ReasonInvalidCandidate)) != 1 {
		t.Fatal("no InvalidCandidate Event for bad")
	}
	h.deleteCandidate("bad")
	h.reconcile()
	h.c.events.mu.Lock()
	defer h.c.events.mu.Unlock()
	for topic := range h.c.events.last[leaseKey] {
		if topic == "candidate/bad" || topic == "ping/bad" {
			t.Errorf("the Event memory keeps %q after bad left", topic)
		}
	}
}

// A Lease whose candidates all leave while the controller writes it leaves
// no record behind.
func TestNoLeaseRecordOutlivesItsCandidates(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.client.PrependReactor("create", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		// The candidate leaves while the create is in flight.
		if err := h.client.Tracker().Delete(candidatesGVR, testNS, "a"); err != nil {
			t.Fatal(err)
		}
		h.syncCandidates()
		return false, nil, nil
	})
	h.reconcile()
	h.c.obs.mu.Lock()
	defer h.c.obs.mu.Unlock()
	if n := len(h.c.obs.leases); n != 0 {
		t.Errorf("%d Lease records after the last candidate left, want none", n)
	}
}

// An election that loses a race is not an error: to create the Lease
// (another writer created it first) or to name the holder of a vacant Lease
// (deleted meanwhile). The step returns the error for a retry, and the next
// step acts on what the informer brings.
func TestLosingARaceIsNotAnError(t *testing.T) {
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease // nil: none yet
		verb  string
		err   error
	}{
		{"create, the Lease created meanwhile", nil, "create", apierrors.NewAlreadyExists(leases, testLease)},
		{"update, the Lease deleted meanwhile", lease(heldBy(""), transitions(3)), "update", apierrors.NewNotFound(leases, testLease)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.lease != nil {
				h.create(tc.lease)
			}
			h.create(candidate("a", "1.30.0", "1.30.0"))
			h.failOn(tc.verb, "leases", 1, tc.err)
			_, err := h.reconcileOnly()
			if !errors.Is(err, tc.err) {
				t.Fatalf("reconcile error %v, want the %v returned for a retry", err, tc.err)
			}
			if n := h.metric("cle_elections_total", "result", "error"); n != 0 {
				t.Errorf("cle_elections_total{result=error} = %v after losing a race, want 0", n)
			}
		})
	}
}

// Renewals of Leases that nothing here will change cost no step: held by a
// component outside coordinated election, in strategy conflict, or under a
// strategy another controller handles.
func TestRenewalsOfLeasesLeftAloneCostNoStep(t *testing.T) {
	for name, setup := range map[string]func(h *harness){
		"held by a non-candidate": func(h *harness) {
			h.create(candidate("a", "1.30.0", "1.30.0"), lease(heldBy("outsider")))
		},
		"strategy conflict": func(h *harness) {
			h.join(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.30.0", "1.30.0", withStrategy("Other")))
			h.create(lease(heldBy("a")))
		},
		"unmanaged strategy": func(h *harness) {
			h.create(candidate("a", "1.30.0", "1.30.0", withStrategy("Other")), lease(heldBy("a")))
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			setup(h)
			h.reconcile()
			drain(h)
			h.step(2 * time.Second)
			h.renewLease(h.clock.Now())
			if n := h.c.queue.Len(); n != 0 {
				t.Errorf("a renewal queued %d steps, want none", n)
			}
		})
	}
}

// On a Lease with a history, a stale candidate that is only equal on merit
// to a live one (it wins the tie-break alone) is not worth a ping and a
// wait: the live one is elected at once.
func TestEqualOnMeritStaleCandidateIsNotWaitedFor(t *testing.T) {
	h := newHarness(t)
	// old was listed at start-up (freshness unknown) and is older, so it
	// wins the tie-break; young was seen created.
	h.list(candidate("old", "1.30.0", "1.30.0", created(t0.Add(-2*time.Hour))))
	h.create(candidate("young", "1.30.0", "1.30.0"))
	h.create(lease(heldBy(""), transitions(2)))
	h.reconcile()
	if p := h.pings(); len(p) != 0 {
		t.Errorf("pinged %v; want none: young is alive and as good on merit", p)
	}
	if got := h.expectOneLeaseWrite("update"); holderOf(got) != "young" {
		t.Errorf("elected %q, want young", holderOf(got))
	}
}

var _ = coordinationv1.OldestEmulationVersion

// A step that asked to run again later (here: at the end of the gathering
// window) judges candidates as of when it was due, not when a worker behind
// a backlog got to it: the backlog is the controller's own delay, and must
// not turn fresh candidates stale and cost them pings.
func TestRequeuedStepJudgesAsOfWhenItWasDue(t *testing.T) {
	h := newHarness(t, withGather(time.Second))
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	if !h.c.processNext(h.ctx) { // gathering: asks to run again within the window
		t.Fatal("queue shut down")
	}
	h.sync()
	h.step(20 * time.Second) // a backlog: the step runs 20s late
	// The delaying queue moves the step on its own goroutine.
	if err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.c.queue.Len() > 0, nil
	}); err != nil {
		t.Fatalf("the requeued step never became ready: %v", err)
	}
	h.c.processNext(h.ctx)
	h.sync()
	// The Lease is opened, its candidate watch probed (a ping of a, the
	// best), and a named: no ping asks whether a candidate is alive.
	for range 3 {
		if holderOf(h.serverLease()) != "" || h.c.queue.Len() == 0 {
			break
		}
		h.c.processNext(h.ctx)
		h.sync()
	}
	if got := h.metric("cle_pings_total"); got != 0 {
		t.Errorf("pinged %v candidates after a late step; want none: both were fresh when the step was due", got)
	}
	if l := h.serverLease(); l == nil || holderOf(l) != "a" {
		t.Errorf("Lease %v, want it naming a", l)
	}
}

// A watch that stalls on a loaded server: the holder keeps renewing, but the
// renewals, like those of the controller's own lock, are not delivered. The
// controller must not take the holder for expired (and ping candidates and
// write the Lease, loading the server further) while it can tell that its
// watch is behind.
func TestLaggingWatchDoesNotExpireALiveHolder(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.create(lease(heldBy("a"), transitions(3)))
	h.reconcile()
	h.clearWrites()
	for elapsed := time.Duration(0); elapsed < 2*h.c.opts.LeaseDuration; elapsed += time.Second {
		h.step(time.Second)
		if elapsed%(2*time.Second) == 0 {
			now := h.clock.Now()
			// The renewal reaches the server, not the controller's cache.
			l := h.serverLease()
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
			h.serverWrite(leasesGVR, l)
			h.c.opts.WatchLag.ExpectRenewal("cle-system", "cle-controller", now, now)
		}
		_, _ = h.reconcileOnly()
	}
	if w := h.leaseWrites(); len(w) != 0 {
		t.Errorf("wrote the Lease of a holder that kept renewing while the watch stalled: %v", w)
	}
	if p := h.pings(); len(p) != 0 {
		t.Errorf("pinged %v while the watch stalled and the holder kept renewing", p)
	}
	if lag := h.c.opts.WatchLag.At(h.clock.Now()); lag < 2*h.c.opts.LeaseDuration-2*time.Second {
		t.Errorf("watch lag estimated at %s after a stall of %s", lag, 2*h.c.opts.LeaseDuration)
	}
}

// A controller that starts (or takes over) while candidates wait for a Lease
// that does not exist cannot tell a Lease that never existed from one
// deleted just before it started, whose holder acts on until its renewals
// fail: it creates the Lease only a lease duration after it first saw the
// candidates. Candidates that come later are elected at once. (Without the
// wait, the simulation's seed 14027 has two leaders: a Lease deleted while
// the active replica was paused, and the standby that took over named a new
// holder 1.3 s later.)
func TestAbsentLeaseAtStartWaitsForAHolderItCouldNotSee(t *testing.T) {
	wait := func(o *Options) { o.UnseenHolderWait = 0 } // the default: the lease duration
	t.Run("candidates there at start", func(t *testing.T) {
		h := newHarness(t, wait)
		h.list(candidate("a", "1.30.0", "1.30.0"))
		h.reconcile() // pings a: the controller has not seen it renew
		h.renew("a", h.clock.Now())
		h.clearWrites()
		h.reconcile()
		h.expectNoWrites("within a lease duration of the controller's start")
		h.step(DefaultLeaseDuration)
		h.renew("a", h.clock.Now())
		h.reconcile()
		if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
			t.Errorf("created naming %q, want a", holderOf(got))
		}
	})
	t.Run("candidates that came later", func(t *testing.T) {
		h := newHarness(t, wait)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.reconcile()
		if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
			t.Errorf("created naming %q, want a", holderOf(got))
		}
	})
}

// A candidate that registers and dies at once (a crash loop, a process
// killed while starting) must not take a live holder's Lease: the holder
// would stop its work and hand over to nobody, and the Lease would stay
// leaderless until it expired. Found by `make bench` (scenario 6, a dead
// candidate that ranks best): every such registration cost a leader change
// and about 20 s without a leader.
func TestRegisteredButDeadCandidateDoesNotPreemptALiveHolder(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("h", "1.36.0", "1.36.0"), lease(heldBy("h"), transitions(3)))
	h.reconcile()
	h.clearWrites()

	h.create(candidate("dead", "1.36.0", "1.35.0")) // never writes again
	h.reconcile()
	if lw := h.leaseWrites(); len(lw) != 0 {
		t.Fatalf("a candidate that only registered was preferred at once: %v", lw)
	}
	if p := h.pings(); !slices.Equal(p, []string{"dead"}) {
		t.Fatalf("pings = %v, want [dead]: it is asked before the holder is", p)
	}
	for i := range 5 { // the holder renews; the ping goes unanswered
		h.step(2 * time.Second)
		h.renewLease(t0.Add(time.Duration(i+1) * 2 * time.Second))
		h.reconcile()
	}
	if lw := h.leaseWrites(); len(lw) != 0 {
		t.Errorf("Lease writes after the ping went unanswered: %v", lw)
	}
	if st := h.state("dead"); st != unresponsive {
		t.Errorf("dead is %v, want unresponsive", st)
	}
	if got := h.serverLease(); holderOf(got) != "h" || got.Spec.PreferredHolder != nil {
		t.Errorf("Lease held by %q preferring %q, want h preferring nobody", holderOf(got), preferredOf(got))
	}

	// A better candidate that answers is preferred as soon as it does.
	h.clearWrites()
	h.create(candidate("live", "1.36.0", "1.35.0"))
	h.reconcile()
	if p := h.pings(); !slices.Equal(p, []string{"live"}) {
		t.Fatalf("pings = %v, want [live]", p)
	}
	h.clearWrites()
	h.renew("live", h.serverCandidate("live").Spec.PingTime.Time)
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); preferredOf(got) != "live" || holderOf(got) != "h" {
		t.Errorf("Lease held by %q preferring %q, want h preferring live", holderOf(got), preferredOf(got))
	}
}

// holderRenewingEvery2s returns a harness where a holds the Lease in term 4
// and has renewed it at 2s and 4s, so that the controller knows its cadence
// (until then it looks again only at the expiry); b is a worse candidate.
func holderRenewingEvery2s(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	h.list(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"), lease(heldBy("a"), transitions(4)))
	if d := h.reconcile(); d != 15*time.Second {
		t.Fatalf("requeue = %v, want the expiry while a's cadence is unknown", d)
	}
	for range 2 {
		h.step(2 * time.Second)
		h.renewLease(h.clock.Now())
	}
	if d := h.reconcile(); d != 10*time.Second {
		t.Fatalf("requeue = %v, want when a would be late", d)
	}
	return h
}

// A holder that crashes is pinged once it has missed its renewals and its
// Lease is about to expire, so that its successor is elected at the expiry,
// not a ping timeout after it. Found by `make bench` (scenarios 4, 8c, 9):
// every crash failover waited the ping timeout (5 s) past the expiry for
// the dead holder, the best candidate, to answer.
func TestLateHolderIsPingedBeforeItsLeaseExpires(t *testing.T) {
	h := holderRenewingEvery2s(t)
	// a crashed just after its renewal at 4s; b runs.
	h.step(10 * time.Second)
	h.renew("b", h.clock.Now())
	if d := h.reconcile(); d != 5*time.Second {
		t.Errorf("requeue = %v, want the Lease's expiry", d)
	}
	if p, lw := h.pings(), h.leaseWrites(); !slices.Equal(p, []string{"a"}) || len(lw) != 0 {
		t.Fatalf("writes = %v, want only a ping of the late holder a", h.writes())
	}
	h.clearWrites()
	h.step(5 * time.Second)
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); holderOf(got) != "b" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 5 {
		t.Errorf("at the expiry: holder %q term %v, want b in term 5", holderOf(got), got.Spec.LeaseTransitions)
	}
}

// A late holder that is alive answers, and is elected again at the expiry
// if its Lease still expires (its renewals failed, its pings did not).
func TestLateHolderThatAnswersIsElectedAgain(t *testing.T) {
	h := holderRenewingEvery2s(t)
	h.step(10 * time.Second)
	h.reconcile()
	ping := h.serverCandidate("a").Spec.PingTime
	if ping == nil {
		t.Fatal("the late holder a was not pinged")
	}
	h.renew("a", ping.Time)
	h.clearWrites()
	h.step(5 * time.Second)
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); holderOf(got) != "a" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 5 {
		t.Errorf("at the expiry: holder %q term %v, want a again in term 5", holderOf(got), got.Spec.LeaseTransitions)
	}
}

// A holder that renews on time is never pinged, whatever its cadence: one
// renewing every 10s on a 15s Lease is not late 10s after its renewal.
func TestSlowCadenceHolderIsNotPinged(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"), lease(heldBy("a")))
	h.reconcile()
	h.clearWrites()
	for range 8 {
		h.runSteps(10*time.Second + 300*time.Millisecond) // each renewal arrives a little late
		h.renewLease(h.clock.Now())
	}
	h.expectNoWrites("a holder renewing every 10s")
}

// A server that takes seconds to apply writes, its watch caught up: the
// controller's own lock renewal took 4s to show, and so may the holder's.
// A holder unseen for its lease duration is not taken for expired (nor its
// candidates pinged) before that much longer; its renewal, once applied,
// keeps it.
func TestSlowWritesDoNotExpireALiveHolder(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.create(lease(heldBy("a"), transitions(3)))
	h.reconcile()
	h.clearWrites()
	renewed := h.clock.Now()
	h.step(10 * time.Second)
	h.slowLockRenewal(4 * time.Second)
	h.step(2 * time.Second) // 16s since the renewal: past the Lease's 15s
	_, _ = h.reconcileOnly()
	if w := h.leaseWrites(); len(w) != 0 {
		t.Errorf("wrote the Lease %s after the holder's renewal while the server's writes took 4s: %v", h.clock.Now().Sub(renewed), w)
	}
	if p := h.pings(); len(p) != 0 {
		t.Errorf("pinged %v %s after the holder's renewal while the server's writes took 4s", p, h.clock.Now().Sub(renewed))
	}
	h.step(2 * time.Second)
	h.renewLease(h.clock.Now().Add(-3 * time.Second)) // applied 3s after it was sent
	_, _ = h.reconcileOnly()
	if w := h.leaseWrites(); len(w) != 0 {
		t.Errorf("wrote the Lease of a holder whose renewal came late with the server's writes: %v", w)
	}
}

// A server that was down (kube-apiserver restarted or paused, etcd
// restarted) and serves again: the controller's lock renewal sent during the
// outage showed 3s late, the next one at once. The server keeps up again,
// so a holder that renewed after the outage and then stopped (killed,
// frozen) is late, and pinged, a lease duration after its renewal, as on a
// server that was never down: the outage does not delay the election that
// follows it.
func TestAnOutageOverDoesNotDelayTheNextElection(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.create(lease(heldBy("a"), transitions(3), durationSeconds(4)))
	h.reconcile()
	h.clearWrites()
	h.slowLockRenewal(3 * time.Second)
	h.slowLockRenewal(50 * time.Millisecond)
	h.renewLease(h.clock.Now())
	_, _ = h.reconcileOnly()
	renewed := h.clock.Now()
	h.step(4100 * time.Millisecond) // the holder's Lease has run out by now
	_, _ = h.reconcileOnly()
	if p := h.pings(); len(p) == 0 {
		t.Errorf("nothing pinged %s after the holder's last renewal on a 4s Lease, once the server kept up again (writes %v)", h.clock.Now().Sub(renewed), h.writes())
	}
}
