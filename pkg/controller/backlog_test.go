package controller

import (
	"testing"
	"time"
)

// TestBacklogDoesNotMakeCandidatesStale pins that the controller's own
// backlog is not held against candidates: a Lease whose candidates were seen
// fresh when its election was queued is elected from that evidence, however
// long the queue kept it waiting, instead of pinging every candidate again.
// A controller that falls behind by more than the freshness window would
// otherwise ping, wait for the answers, fall further behind and find the
// answers stale in turn: it never elects.
func TestBacklogDoesNotMakeCandidatesStale(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("b", "1.36.0", "1.36.0"), candidate("a", "1.36.0", "1.35.0"))
	// The worker reaches the Lease long after the candidates' events.
	h.step(3 * DefaultCandidateFreshness)
	h.reconcile()
	if got := h.pings(); len(got) != 0 {
		t.Errorf("pinged %v, want none: the candidates were fresh when their Lease was queued", got)
	}
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
		t.Errorf("holder %q, want a", holderOf(got))
	}
}

// TestAnsweredPingsSurviveTheBacklog pins the same for the answer to a ping:
// it counts when the worker takes the Lease up, however late.
func TestAnsweredPingsSurviveTheBacklog(t *testing.T) {
	h := newHarness(t)
	start := h.clock.Now()
	h.list(candidate("a", "1.36.0", "1.35.0", renewedAt(start.Add(-time.Hour))))
	h.reconcile()
	if got := h.pings(); len(got) != 1 {
		t.Fatalf("pinged %v, want a", got)
	}
	h.step(time.Second)
	h.renew("a", h.clock.Now())
	h.step(3 * DefaultCandidateFreshness)
	h.clearWrites()
	h.reconcile()
	if got := h.pings(); len(got) != 0 {
		t.Errorf("pinged %v again, want the answer to count", got)
	}
	if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
		t.Errorf("holder %q, want a", holderOf(got))
	}
}

// TestBacklogJudgesAsOfTheEvent pins the other side: candidates are judged
// as of the event that queued the Lease, not earlier, so a candidate already
// stale then is pinged.
func TestBacklogJudgesAsOfTheEvent(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.36.0", "1.35.0"))
	h.reconcile()
	h.expectOneLeaseWrite("create")
	h.clearWrites()
	h.reconcile() // the Lease's creation, seen
	h.step(2 * DefaultCandidateFreshness)
	h.deleteLease()
	h.step(DefaultCandidateFreshness)
	h.reconcile()
	if got := h.pings(); len(got) != 1 {
		t.Errorf("pinged %v, want a: its renewal was older than the freshness window when the Lease was queued", got)
	}
}
