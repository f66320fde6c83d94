package controller

import (
	"slices"
	"testing"
	"time"
)

// TestPingBudget: elections take the whole budget; preemption checks only
// the upper half of the burst, so they never starve an election.
func TestPingBudget(t *testing.T) {
	b := newPingBudget(1, 4)
	var got []bool
	for range 4 {
		got = append(got, b.take(t0, true))
	}
	if want := []bool{true, true, true, false}; !slices.Equal(got, want) {
		t.Errorf("preemption pings from a full burst of 4: %v, want %v", got, want)
	}
	if !b.take(t0, false) {
		t.Error("an election ping was refused while the budget held a token")
	}
	if b.take(t0, false) {
		t.Error("an election ping was let through an empty budget")
	}
	if w := b.wait(t0, false); w != time.Second {
		t.Errorf("an election ping fits again in %s, want 1s", w)
	}
	if w := b.wait(t0, true); w != 2*time.Second {
		t.Errorf("a preemption ping fits again in %s, want 2s (half the burst)", w)
	}
	if !b.take(t0.Add(time.Second), false) {
		t.Error("an election ping was refused a second later")
	}
}

// A burst of pings over the budget: what fits is sent, the rest waits for
// the budget, and the step asks to run again when it allows.
func TestPingsOverTheBudgetWait(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PingRate, o.PingBurst = 1, 1 })
	// Listed at start-up: their freshness is unknown, so electing needs pings.
	h.list(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.30.0", "1.30.0"), candidate("c", "1.31.0", "1.31.0"))
	next := h.reconcile()
	if p := h.pings(); len(p) != 1 {
		t.Fatalf("pinged %v with a budget of one ping; want one", p)
	}
	if next <= 0 || next > time.Second {
		t.Errorf("the step asks to run again in %s; want within the second the budget needs", next)
	}
	if got := h.metric("cle_pings_deferred_total"); got == 0 {
		t.Error("cle_pings_deferred_total did not count the deferred pings")
	}
	h.step(next)
	h.reconcile()
	if p := h.pings(); len(p) != 2 {
		t.Errorf("pinged %v once the budget allowed; want a second candidate pinged", p)
	}
}

// Workers ask with their own readings of the clock, out of order: an earlier
// instant must not count the time since it twice.
func TestPingBudgetOutOfOrder(t *testing.T) {
	b := newPingBudget(1, 10)
	sent := 0
	for i := range 40 {
		at := t0 // alternately at the start and 5s on
		if i%2 == 1 {
			at = t0.Add(5 * time.Second)
		}
		if b.take(at, false) {
			sent++
		}
	}
	if sent > 15 {
		t.Errorf("%d pings within 5s with a budget of 1/s and a burst of 10", sent)
	}
}
