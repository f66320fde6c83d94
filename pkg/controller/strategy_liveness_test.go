package controller

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/cle-dev/cle/pkg/strategy"
)

// A candidate not known to be alive decides nothing until it answers a
// ping. A replica that died carrying a newer binary and another strategy
// (a rollout that changes the strategy, a newer binary asking for a
// strategy nobody handles yet, crashed and rolled back) leaves its
// LeaseCandidate behind for the candidate TTL; it must not keep the Lease
// leaderless meanwhile: it is pinged, and once its ping times out the live
// candidates' strategy elects.
func TestDeadCandidateDoesNotDecideTheStrategy(t *testing.T) {
	for _, asks := range []coordinationv1.CoordinatedLeaseStrategy{strategy.PriorityName, "example.com/Future"} {
		t.Run(string(asks), func(t *testing.T) {
			h := newHarness(t)
			h.list(candidate("dead", "1.32.0", "1.32.0", withStrategy(asks)))
			h.join(candidate("a", "1.31.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
			h.runSteps(10 * time.Second)
			if !slices.Contains(h.pings(), "dead") {
				t.Errorf("pings = %v, want dead, whose strategy would decide, asked", h.pings())
			}
			if l := h.serverLease(); holderOf(l) != "a" {
				t.Fatalf("after 10s: Lease holder %q, want a, elected under the live candidates' strategy once dead's ping timed out", holderOf(l))
			}
		})
	}
}

// The same dead candidate, while the Lease is held: it does not make the
// Lease unmanaged or in conflict, and a live holder keeps leading.
func TestDeadCandidateDoesNotUnsettleAHeldLease(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("dead", "1.32.0", "1.32.0", withStrategy("example.com/Future")))
	h.join(candidate("a", "1.31.0", "1.30.0"))
	h.create(lease(heldBy("a"), transitions(2)))
	h.runSteps(8 * time.Second)
	if ws := h.leaseWrites(); len(ws) != 0 {
		t.Errorf("Lease writes %v; want none: a leads, and dead decides nothing", ws)
	}
	if n := h.metric("cle_strategy_conflicts_total"); n != 0 {
		t.Errorf("conflicts = %v, want 0", n)
	}
	if got := h.state("dead"); got != unresponsive {
		t.Errorf("dead is %v, want unresponsive once its ping timed out", got)
	}
}

// Found by the simulation (seed 34529 of 40,000): the holder left (its
// LeaseCandidate deleted) while a dead candidate's strategy ping was in
// flight and the only other candidate had not written since it registered;
// the step that saw the Lease held by a non-candidate left it as another
// controller's, settled, and asked to look again only at the candidate TTL.
// Now the ping's timeout is noted whatever is decided, the step looks again
// then, and the Lease is elected under the live candidates' strategy once
// it expires. The steps here run only when the controller asks (as its
// workqueue does, with no event to wake it).
func TestDeadCandidateDoesNotDecideOnceTheHolderLeft(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("dead", "1.32.0", "1.32.0", withStrategy("example.com/Future")))
	h.join(candidate("holder", "1.31.0", "1.31.0"))
	h.create(candidate("next", "1.30.0", "1.30.0"))
	h.create(lease(heldBy("holder"), transitions(2)))
	h.reconcile()
	if !slices.Contains(h.pings(), "dead") {
		t.Fatalf("pings = %v, want dead asked", h.pings())
	}
	h.step(time.Second)
	h.deleteCandidate("holder")
	end := h.clock.Now().Add(30 * time.Second)
	for h.clock.Now().Before(end) {
		next, _ := h.reconcileOnly()
		h.sync()
		h.answerPings("next") // dead never answers
		if next == 0 || next > time.Minute {
			t.Fatalf("at +%v: the step asks to look again in %v; want by dead's ping timeout or the Lease's expiry",
				h.clock.Now().Sub(t0), next)
		}
		if l := h.serverLease(); holderOf(l) == "next" {
			return
		}
		h.step(next)
	}
	t.Fatalf("after 30s: Lease held by %q, want next, elected once the Lease expired", holderOf(h.serverLease()))
}
