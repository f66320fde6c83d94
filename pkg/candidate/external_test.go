package candidate

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

func TestExternalRenewalLeadsOnlyThroughRenew(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.startExternal()
		ctx := context.Background()
		if err := c.Renew(ctx); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Renew with no Lease = %v, want ErrNotLeader", err)
		}
		h.elect("other")
		if err := c.Renew(ctx); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Renew of a Lease naming another = %v, want ErrNotLeader", err)
		}
		h.elect(me)
		// Named, but nothing renews by itself.
		for range 3 {
			h.step(DefaultRetryPeriod)
		}
		if n := h.countActions("update", leasesGVR); n != 0 || c.IsLeader() {
			t.Fatalf("the library wrote the Lease %d times and IsLeader=%v without Renew", n, c.IsLeader())
		}
		named := h.lease()
		if err := c.Renew(ctx); err != nil {
			t.Fatalf("Renew of a Lease naming this process: %v", err)
		}
		lease := h.lease()
		token, ok := c.Token()
		if !c.IsLeader() || !ok || token != ptr.Deref(lease.Spec.LeaseTransitions, -1) ||
			token != ptr.Deref(named.Spec.LeaseTransitions, 0) {
			t.Errorf("after Renew: IsLeader=%v Token=%d,%v, Lease transitions %d (named at %d)", c.IsLeader(), token, ok,
				ptr.Deref(lease.Spec.LeaseTransitions, -1), ptr.Deref(named.Spec.LeaseTransitions, 0))
		}
		synctest.Wait() // OnStartedLeading runs on a goroutine of its own
		if !slices.Contains(h.entries(), "started leading") {
			t.Error("OnStartedLeading did not run for the term")
		}
		got, err := c.Lease(ctx)
		if err != nil || got.ResourceVersion != lease.ResourceVersion {
			t.Errorf("Lease() = %v, %v; want the renewed Lease at resourceVersion %s", got, err, lease.ResourceVersion)
		}
		// Renewals keep it leading; without them it lapses at the deadline.
		for range 3 {
			h.step(DefaultRetryPeriod)
			if err := c.Renew(ctx); err != nil || !c.IsLeader() {
				t.Fatalf("Renew while leading = %v, IsLeader=%v", err, c.IsLeader())
			}
		}
		if token2, _ := c.Token(); token2 != token {
			t.Errorf("token changed within a term: %d then %d", token, token2)
		}
		h.step(DefaultRenewDeadline)
		if c.IsLeader() || !slices.Contains(h.entries(), "leader work returned") {
			t.Errorf("still leading a renew deadline after the last Renew: %v", h.entries())
		}
	})
}

func TestExternalRenewalPreferredHolderFailsRenewalsAndWaitsBeforeHandingOver(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.startExternal()
		ctx := context.Background()
		h.elect(me)
		if err := c.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		renewed := h.clock.Now()
		h.prefer("better")
		if c.IsLeader() {
			t.Error("IsLeader still true once another holder is preferred")
		}
		if err := c.Renew(ctx); !errors.Is(err, ErrNotLeader) {
			t.Errorf("Renew with another preferred holder = %v, want ErrNotLeader", err)
		}
		// The elector may act until it notices; the Lease stays until
		// LeaseDuration after the last renewal.
		h.step(DefaultLeaseDuration - h.clock.Since(renewed) - DefaultRetryPeriod)
		if got := holder(h.lease()); got != me {
			t.Fatalf("Lease handed to %s before LeaseDuration passed since the last renewal", got)
		}
		h.step(DefaultRetryPeriod)
		if got := holder(h.lease()); got != "better" {
			t.Errorf("Lease names %s LeaseDuration after the last renewal, want the preferred holder", got)
		}
	})
}

// TestExternalRenewalWaitBeforeHandingOverIsMonotonic: the lease duration
// an External waits after its last renewal before it lets the Lease go is
// counted on the monotonic clock. A suspend moves the wall clock past it
// while the elector that renews, suspended with the process, has had no
// time to notice that it may not lead: the Lease stays until a lease
// duration of running time has passed.
func TestExternalRenewalWaitBeforeHandingOverIsMonotonic(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		clk := &suspendClock{FakeClock: h.clock}
		c := h.startExternal(func(cfg *Config) { cfg.Clock = clk })
		h.elect(me)
		if err := c.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.suspended.Store(int64(2 * DefaultLeaseDuration))
		h.prefer("better")
		h.step(DefaultRetryPeriod)
		if got := holder(h.lease()); got != me {
			t.Fatalf("Lease handed to %s %s after the last renewal, a suspend of %s included: the wait counted the suspend",
				got, DefaultRetryPeriod, 2*DefaultLeaseDuration)
		}
		h.step(DefaultLeaseDuration)
		if got := holder(h.lease()); got != "better" {
			t.Errorf("Lease names %s a lease duration of running time after the last renewal, want the preferred holder", got)
		}
	})
}

func TestExternalRenewalNamedButNeverRenewedHandsOverAtOnce(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.startExternal()
		h.elect(me)
		h.prefer("better")
		if got := holder(h.lease()); got != "better" {
			t.Errorf("a Lease this process never renewed names %s after another was preferred, want it handed over", got)
		}
	})
}

func TestExternalRenewalResignThenShutdownReleases(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.startExternal()
		ctx := context.Background()
		h.elect(me)
		if err := c.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if c.IsLeader() {
			t.Error("IsLeader after Resign")
		}
		h.stop()
		wantOrder(t, h.entries(), "leader work returned", "delete LeaseCandidate me", "update Lease lease")
		if got := holder(h.lease()); got != "" {
			t.Errorf("after Resign and shutdown the Lease names %s, want it released", got)
		}
		if err := c.Renew(ctx); !errors.Is(err, ErrNotRunning) {
			t.Errorf("Renew after Run returned = %v, want ErrNotRunning", err)
		}
	})
}

func TestExternalRenewalShutdownWithoutResignLeavesTheLease(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.startExternal()
		h.elect(me)
		if err := c.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.stop()
		if got := holder(h.lease()); got != me {
			t.Errorf("shutdown let the Lease go (holder %q) while the elector may still lead", got)
		}
		if h.candidate(me) != nil {
			t.Error("LeaseCandidate left behind")
		}
	})
}

func TestExternalRenewalConfig(t *testing.T) {
	h := &harness{}
	cfg := h.config()
	cfg.access = nil
	cfg.Clients.Kube = fakeKube()
	cfg.Callbacks.OnStartedLeading = nil
	if _, err := NewExternal(cfg); err != nil {
		t.Errorf("NewExternal without OnStartedLeading: %v", err)
	}
	if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New without OnStartedLeading: %v, want ErrInvalidConfig", err)
	}
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 10*time.Second, 8*time.Second, 2*time.Second
	if _, err := NewExternal(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewExternal with RenewDeadline + RetryPeriod = LeaseDuration: %v, want ErrInvalidConfig", err)
	}
}

// LeaseWhen waits for the Lease to satisfy its condition, waking on each
// change the loop sees, and gives up with the caller's context or when Run
// stops.
func TestExternalLeaseWhen(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.startExternal()
		names := func(holder string) func(*coordinationv1.Lease) bool {
			return func(l *coordinationv1.Lease) bool { return l != nil && ptr.Deref(l.Spec.HolderIdentity, "") == holder }
		}
		h.elect("other")
		type result struct {
			lease *coordinationv1.Lease
			err   error
		}
		got := make(chan result, 1)
		go func() {
			l, err := c.LeaseWhen(context.Background(), names(me))
			got <- result{l, err}
		}()
		h.step(DefaultRetryPeriod)
		h.prefer("someone")
		h.step(DefaultRetryPeriod)
		select {
		case r := <-got:
			t.Fatalf("LeaseWhen returned before the Lease named this process: %v, %v", r.lease, r.err)
		default:
		}
		h.elect(me)
		synctest.Wait()
		select {
		case r := <-got:
			if r.err != nil || !names(me)(r.lease) {
				t.Errorf("LeaseWhen = %v, %v; want the Lease naming %s", r.lease, r.err, me)
			}
		default:
			t.Fatal("LeaseWhen still waits once the Lease names this process")
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if l, err := c.LeaseWhen(ctx, names("nobody")); !errors.Is(err, context.DeadlineExceeded) || !names(me)(l) {
			t.Errorf("LeaseWhen past its deadline = %v, %v; want the Lease as it is and the context's error", l, err)
		}
		go func() {
			l, err := c.LeaseWhen(context.Background(), names("nobody"))
			got <- result{l, err}
		}()
		synctest.Wait()
		h.stop()
		if r := <-got; !errors.Is(r.err, ErrNotRunning) {
			t.Errorf("LeaseWhen once Run stopped = %v, want ErrNotRunning", r.err)
		}
	})
}
