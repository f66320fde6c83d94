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
