package controller

import (
	"testing"
	"time"
)

// withGather turns the gathering window on (the harness elects at once by
// default).
func withGather(d time.Duration) func(*Options) {
	return func(o *Options) { o.ElectionGather = d }
}

// TestGatheringElectsTheBestOfAGroupFirst pins the first election of a Lease
// whose candidates start together: the worse candidate that registers first
// is never named, not even for a moment; the Lease is created naming nobody,
// and its first holder is the best of the group.
func TestGatheringElectsTheBestOfAGroupFirst(t *testing.T) {
	for _, order := range permutations([]string{"v134", "v135", "v136"}) {
		h := newHarness(t, withGather(time.Second))
		versions := map[string]string{"v134": "1.34.0", "v135": "1.35.0", "v136": "1.36.0"}
		for i, name := range order {
			if i > 0 {
				h.step(20 * time.Millisecond)
			}
			h.create(candidate(name, "1.36.0", versions[name]))
			d := h.reconcile()
			h.expectNobodyNamed("while candidates are still joining")
			// The window closes a fifth of it after the last join.
			if want := 200 * time.Millisecond; d != want {
				t.Fatalf("order %v, after %d joins: requeue = %v, want %v", order, i+1, d, want)
			}
		}
		if l := h.serverLease(); l == nil || holderOf(l) != "" {
			t.Fatalf("order %v: Lease %v while gathering, want it created naming nobody", order, l)
		}
		h.step(199 * time.Millisecond)
		h.reconcile()
		h.expectNobodyNamed("just before the window closes")
		h.clearWrites()
		h.step(time.Millisecond)
		h.reconcile()
		if got := h.expectOneLeaseWrite("update"); holderOf(got) != "v134" {
			t.Fatalf("order %v: first holder %q, want v134", order, holderOf(got))
		}
	}
}

// TestGatheringWindowIsBounded pins the upper bound: candidates that keep
// joining do not hold the first election off beyond the window.
func TestGatheringWindowIsBounded(t *testing.T) {
	h := newHarness(t, withGather(time.Second))
	h.create(candidate("c00", "1.36.0", "1.36.0"))
	for i := 1; i <= 9; i++ {
		h.step(100 * time.Millisecond)
		h.create(candidate("c0"+string(rune('0'+i)), "1.36.0", "1.36.0"))
		if d := h.reconcile(); i == 9 && d != 100*time.Millisecond {
			t.Errorf("requeue = %v, want the rest of the 1s window, 100ms", d)
		}
		h.expectNobodyNamed("within the window")
	}
	h.clearWrites()
	h.step(100 * time.Millisecond)
	h.reconcile()
	if got := h.expectOneLeaseWrite("update"); holderOf(got) != "c00" {
		t.Errorf("holder %q, want c00", holderOf(got))
	}
}

// TestNoGatheringForALeaseWithAHistory pins that only a Lease that never had
// a holder waits: a released, expired or deleted Lease is elected at once.
func TestNoGatheringForALeaseWithAHistory(t *testing.T) {
	t.Run("released", func(t *testing.T) {
		h := newHarness(t, withGather(time.Second))
		h.list(lease(heldBy(""), transitions(3)))
		h.create(candidate("a", "1.36.0", "1.36.0"))
		h.reconcile()
		if got := h.expectOneLeaseWrite("update"); holderOf(got) != "a" {
			t.Errorf("holder %q, want a at once", holderOf(got))
		}
	})
	t.Run("deleted after an election", func(t *testing.T) {
		h := newHarness(t, withGather(time.Second))
		h.create(candidate("a", "1.36.0", "1.36.0"))
		h.step(time.Second)
		h.expectFirstHolder("a")
		h.deleteHeldLease()
		h.clearWrites()
		h.reconcile()
		if got := h.expectOneLeaseWrite("create"); holderOf(got) != "a" {
			t.Errorf("holder %q, want a at once", holderOf(got))
		}
	})
	t.Run("never held, created empty by someone else", func(t *testing.T) {
		h := newHarness(t, withGather(time.Second))
		h.list(lease())
		h.create(candidate("a", "1.36.0", "1.36.0"))
		h.reconcile()
		h.expectNobodyNamed("a Lease that never had a holder")
		h.clearWrites()
		h.step(200 * time.Millisecond)
		h.reconcile()
		if got := h.expectOneLeaseWrite("update"); holderOf(got) != "a" {
			t.Errorf("holder %q, want a", holderOf(got))
		}
	})
}
