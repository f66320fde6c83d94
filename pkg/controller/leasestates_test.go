package controller

import (
	"testing"
	"time"

	"github.com/cle-dev/cle/pkg/strategy"
)

// expectLeaseStates checks cle_leases: want counts by state, every other
// state 0.
func (h *harness) expectLeaseStates(context string, want map[leaseState]float64) {
	h.t.Helper()
	for _, state := range []leaseState{leaseOptimal, leasePreempting, leaseVacant, leaseExpired, leaseConflict, leaseUnmanaged} {
		if got := h.metric("cle_leases", "state", string(state)); got != want[state] {
			h.t.Errorf("%s: cle_leases{state=%q} = %v, want %v", context, state, got, want[state])
		}
	}
}

// TestLeaseStatesMetric follows one Lease through the states cle_leases
// reports, which the operations alerts read: vacant while its first
// election gathers, optimal once elected, preempting while a better
// candidate waits for the holder, expired when the holder stops renewing,
// and gone with its last candidate.
func TestLeaseStatesMetric(t *testing.T) {
	h := newHarness(t, withGather(time.Second))
	h.expectLeaseStates("no Lease, no candidate", nil)
	h.create(candidate("b", "1.36.0", "1.36.0"))
	h.reconcile()
	h.expectLeaseStates("gathering", map[leaseState]float64{leaseVacant: 1})
	h.step(time.Second)
	h.expectFirstHolder("b")
	h.expectLeaseStates("elected", map[leaseState]float64{leaseOptimal: 1})
	h.reconcile()
	h.expectLeaseStates("the election seen", map[leaseState]float64{leaseOptimal: 1})

	h.join(candidate("a", "1.36.0", "1.35.0"))
	h.reconcile()
	if got := preferredOf(h.serverLease()); got != "a" {
		t.Fatalf("preferredHolder %q, want a", got)
	}
	h.expectLeaseStates("a better candidate joined", map[leaseState]float64{leasePreempting: 1})

	h.step(DefaultLeaseDuration + time.Second) // b never hands over, nor renews
	h.deleteCandidate("a")
	h.sync()
	h.clearWrites()
	h.step(DefaultCandidateFreshness)
	h.reconcile()
	h.expectLeaseStates("the holder stopped renewing", map[leaseState]float64{leaseExpired: 1})

	h.deleteCandidate("b")
	h.sync()
	h.reconcile()
	h.expectLeaseStates("no candidates left", nil)
}

func TestLeaseStatesMetricConflictAndUnmanaged(t *testing.T) {
	h := newHarness(t)
	h.create(
		candidate("x", "1.31.0", "1.31.0"),
		candidate("y", "1.31.0", "1.30.0", withStrategy(strategy.PriorityName)),
	)
	h.reconcile()
	h.expectLeaseStates("strategy conflict", map[leaseState]float64{leaseConflict: 1})

	u := newHarness(t)
	u.list(lease(heldBy("someone-else")))
	u.renewLease(u.clock.Now())
	u.create(candidate("a", "1.36.0", "1.36.0"))
	u.reconcile()
	u.expectLeaseStates("held by a non-candidate", map[leaseState]float64{leaseUnmanaged: 1})
}

// leaseSeries returns the series of the per-Lease metric name for the test
// Lease: its value by the rest of its labels ("" when it has none).
func (h *harness) leaseSeries(name string) map[string]float64 {
	h.t.Helper()
	fams, err := h.reg.Gather()
	if err != nil {
		h.t.Fatalf("gather metrics: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] != testNS || labels["lease"] != testLease {
				h.t.Errorf("%s has a series for %s/%s, want only %s/%s", name, labels["namespace"], labels["lease"], testNS, testLease)
			}
			out[labels["state"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestPerLeaseMetrics follows the per-Lease series through one Lease's
// life: one cle_lease_state series naming its state; the leaderless time
// and lease duration only while it has no live holder; the newer-holder
// series only while a newer holder keeps the Lease from a live older
// candidate; nothing once no candidate is left.
func TestPerLeaseMetrics(t *testing.T) {
	h := newHarness(t, withGather(time.Second))
	h.create(candidate("b", "1.36.0", "1.36.0"))
	h.reconcile()
	if got := h.leaseSeries("cle_lease_state"); len(got) != 1 || got[leaseVacant] != 1 {
		t.Errorf("gathering: cle_lease_state = %v, want only vacant 1", got)
	}
	h.step(time.Second)
	h.expectFirstHolder("b")
	if got := h.leaseSeries("cle_lease_state"); len(got) != 1 || got[string(leaseOptimal)] != 1 {
		t.Errorf("elected: cle_lease_state = %v, want only optimal 1", got)
	}
	// Named, b leads once it renews the Lease itself.
	if got := h.leaseSeries("cle_lease_leaderless_seconds"); got[""] != 1 {
		t.Errorf("elected, b not renewing yet: cle_lease_leaderless_seconds = %v, want 1 (since the gathering began)", got)
	}
	h.step(time.Second)
	h.renewLease(h.clock.Now())
	h.sync()
	if got := h.leaseSeries("cle_lease_leaderless_seconds"); len(got) != 0 {
		t.Errorf("b renewed: cle_lease_leaderless_seconds = %v, want no series", got)
	}
	h.clearWrites()

	h.join(candidate("a", "1.36.0", "1.35.0"))
	h.reconcile()
	if got := h.leaseSeries("cle_lease_holder_newer_than_candidate"); got[""] != 1 {
		t.Errorf("a 1.35 candidate joined a 1.36 holder: cle_lease_holder_newer_than_candidate = %v, want 1", got)
	}

	h.step(DefaultLeaseDuration + time.Second) // b never hands over, nor renews
	h.deleteCandidate("a")
	h.sync()
	h.clearWrites()
	h.step(DefaultCandidateFreshness)
	h.reconcile()
	if got := h.leaseSeries("cle_lease_holder_newer_than_candidate"); len(got) != 0 {
		t.Errorf("the older candidate left: cle_lease_holder_newer_than_candidate = %v, want no series", got)
	}
	if got := h.leaseSeries("cle_lease_state"); got[leaseExpired] != 1 {
		t.Fatalf("cle_lease_state = %v, want expired", got)
	}
	h.step(3 * time.Second)
	if got := h.leaseSeries("cle_lease_leaderless_seconds"); got[""] != 3 {
		t.Errorf("expired 3s ago by the controller's judgment: cle_lease_leaderless_seconds = %v, want 3", got)
	}
	if got := h.leaseSeries("cle_lease_duration_seconds"); got[""] != DefaultLeaseDuration.Seconds() {
		t.Errorf("cle_lease_duration_seconds = %v, want %v", got, DefaultLeaseDuration.Seconds())
	}
	h.reconcile()
	if got := h.leaseSeries("cle_lease_leaderless_seconds"); got[""] != 3 {
		t.Errorf("judged expired again: cle_lease_leaderless_seconds = %v, want 3 (counted from the first judgment)", got)
	}

	h.deleteCandidate("b")
	h.sync()
	h.reconcile()
	for _, name := range []string{"cle_lease_state", "cle_lease_leaderless_seconds", "cle_lease_duration_seconds"} {
		if got := h.leaseSeries(name); len(got) != 0 {
			t.Errorf("no candidates left: %s = %v, want no series", name, got)
		}
	}
}

// TestNamedHolderThatNeverRenewsStaysLeaderless: a holder the controller
// names but that never renews the Lease (its elector wedged, or not allowed
// to write the Lease) is no leader: the Lease stays leaderless, counted from
// its first vacancy, through the election, the expiry and the next
// election, so that the alert on it fires.
func TestNamedHolderThatNeverRenewsStaysLeaderless(t *testing.T) {
	h := newHarness(t)
	h.list(lease(heldBy("gone")))
	h.create(candidate("a", "1.36.0", "1.36.0"))
	h.step(DefaultLeaseDuration + time.Second) // gone stopped renewing
	h.renew("a", h.clock.Now())
	h.sync()
	h.reconcile()
	h.expectOneLeaseWrite("update")
	h.clearWrites()
	begin := 0.0
	if got := h.leaseSeries("cle_lease_leaderless_seconds"); len(got) != 1 {
		t.Fatalf("a named, not renewing: cle_lease_leaderless_seconds = %v, want a series", got)
	}
	h.step(DefaultLeaseDuration + time.Second) // a never renews the Lease
	h.renew("a", h.clock.Now())
	h.sync()
	h.reconcile()
	got := h.leaseSeries("cle_lease_leaderless_seconds")
	if len(got) != 1 || got[""] < begin+DefaultLeaseDuration.Seconds() {
		t.Errorf("a's term ran out unrenewed: cle_lease_leaderless_seconds = %v, want more than the lease duration", got)
	}
}

// TestExpiredCandidatesAreCountedUntilCollected: a candidate past its TTL
// that the collector has not deleted (it cannot, or has not yet) is counted
// as expired, the garbage an operator is alerted to.
func TestExpiredCandidatesAreCountedUntilCollected(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.36.0", "1.36.0"))
	h.reconcile()
	if v := h.metric("cle_candidates", "state", candidateExpired); v != 0 {
		t.Fatalf("a fresh candidate: cle_candidates{state=expired} = %v, want 0", v)
	}
	h.step(DefaultCandidateTTL)
	if v := h.metric("cle_candidates", "state", candidateExpired); v != 1 {
		t.Errorf("past the candidate TTL: cle_candidates{state=expired} = %v, want 1", v)
	}
}
