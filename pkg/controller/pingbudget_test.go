package controller

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
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

// TestPingBudgetPace: while the controller's own writes take longer than a
// second to show, the budget shrinks in proportion (rate and burst), down to
// a tenth; once they show promptly again it is whole. pace reports when it
// starts or stops holding pings back.
func TestPingBudgetPace(t *testing.T) {
	for _, tc := range []struct {
		from, delay time.Duration // the delay paced at before, and now
		wantRate    float64
		wantBurst   int
		changed     bool
	}{
		{delay: 300 * time.Millisecond, wantRate: 100, wantBurst: 200},
		{delay: time.Second, wantRate: 100, wantBurst: 200},
		{delay: 4 * time.Second, wantRate: 25, wantBurst: 50, changed: true},
		{from: 2 * time.Second, delay: 5 * time.Second, wantRate: 20, wantBurst: 40},
		{delay: time.Minute, wantRate: 10, wantBurst: 20, changed: true},
		// Whole again, it refills at the full rate: no burst of 200 pings
		// at a server that has only just caught up.
		{from: 10 * time.Second, delay: 200 * time.Millisecond, wantRate: 100, wantBurst: 20, changed: true},
	} {
		b := newPingBudget(100, 200)
		b.pace(t0, tc.from)
		rate, changed := b.pace(t0, tc.delay)
		if rate != tc.wantRate || changed != tc.changed {
			t.Errorf("writes showing %s late (before: %s): %v pings/s (changed %v), want %v (changed %v)", tc.delay, tc.from, rate, changed, tc.wantRate, tc.changed)
		}
		sent := 0
		for b.take(t0, false) {
			sent++
		}
		if sent != tc.wantBurst {
			t.Errorf("writes showing %s late (before: %s): %d pings at once, want %d", tc.delay, tc.from, sent, tc.wantBurst)
		}
	}
}

// While the controller's own writes take 5s to show, it pings a fifth as
// much; once they have shown promptly for a while, at the full rate again.
func TestPingsPacedWhileWritesAreSlow(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PingRate, o.PingBurst = 10, 10 })
	h.slowLockRenewal(5 * time.Second)
	// Listed at start-up: their freshness is unknown, so electing needs pings.
	var cands []runtime.Object
	for i := range 6 {
		cands = append(cands, candidate(fmt.Sprintf("c%d", i), "1.30.0", "1.30.0"))
	}
	h.list(cands...)
	h.reconcile()
	if p := h.pings(); len(p) != 2 {
		t.Errorf("pinged %v while writes took 5s to show, with a budget of 10/s and 10 at once; want 2", p)
	}
	if got := h.metric("cle_ping_budget"); got != 2 {
		t.Errorf("cle_ping_budget %v while writes took 5s to show, want 2", got)
	}
	h.step(spreadSeconds * time.Second) // the slow write is forgotten
	h.clearWrites()
	h.reconcile()
	if got := h.metric("cle_ping_budget"); got != 10 {
		t.Errorf("cle_ping_budget %v once writes show promptly, want 10", got)
	}
	// What was not sent is not owed: the budget refills from what was
	// left, at the full rate.
	h.step(time.Second)
	h.reconcile()
	if p := h.pings(); len(p) != 4 {
		t.Errorf("pinged %v within a second of writes showing promptly again; want the 4 left", p)
	}
}
