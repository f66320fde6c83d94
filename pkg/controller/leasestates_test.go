package controller

import (
	"testing"
	"time"

	"github.com/cle-dev/cle/pkg/strategy"
)

// expectLeaseStates checks cle_leases: want counts by state, every other
// state 0.
func (h *harness) expectLeaseStates(context string, want map[string]float64) {
	h.t.Helper()
	for _, state := range []string{leaseOptimal, leasePreempting, leaseVacant, leaseExpired, leaseConflict, leaseUnmanaged} {
		if got := h.metric("cle_leases", "state", state); got != want[state] {
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
	h.expectLeaseStates("gathering", map[string]float64{leaseVacant: 1})
	h.step(time.Second)
	h.reconcile()
	h.expectOneLeaseWrite("create")
	h.expectLeaseStates("elected", map[string]float64{leaseOptimal: 1})
	h.clearWrites()
	h.reconcile()
	h.expectLeaseStates("the election seen", map[string]float64{leaseOptimal: 1})

	h.join(candidate("a", "1.36.0", "1.35.0"))
	h.reconcile()
	if got := preferredOf(h.serverLease()); got != "a" {
		t.Fatalf("preferredHolder %q, want a", got)
	}
	h.expectLeaseStates("a better candidate joined", map[string]float64{leasePreempting: 1})

	h.step(DefaultLeaseDuration + time.Second) // b never hands over, nor renews
	h.deleteCandidate("a")
	h.sync()
	h.clearWrites()
	h.step(DefaultCandidateFreshness)
	h.reconcile()
	h.expectLeaseStates("the holder stopped renewing", map[string]float64{leaseExpired: 1})

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
	h.expectLeaseStates("strategy conflict", map[string]float64{leaseConflict: 1})

	u := newHarness(t)
	u.list(lease(heldBy("someone-else")))
	u.renewLease(u.clock.Now())
	u.create(candidate("a", "1.36.0", "1.36.0"))
	u.reconcile()
	u.expectLeaseStates("held by a non-candidate", map[string]float64{leaseUnmanaged: 1})
}
