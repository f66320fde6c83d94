package controller

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/strategy"
)

// TestUnsteadyCandidate: a candidate of higher priority that keeps failing
// (it comes back, is handed the Lease, and lets it lapse) is preferred over
// the live holder the first two times, and not the third, within the
// unsteady window: the sound holder keeps the Lease, and an Event says why.
func TestUnsteadyCandidate(t *testing.T) { forEachMode(t, testUnsteadyCandidate) }

func testUnsteadyCandidate(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{LeaseDuration: 2 * time.Second, PingTimeout: time.Second, UnsteadyWindow: time.Minute})
	ctx := context.Background()
	leases := e.acc.Leases(e.ns)
	e.createCandidate("flaky", cand{name: "lo", binary: "1.36.0", emulation: "1.36.0", strategy: strategy.PriorityName})
	e.keepRenewing("lo", time.Second)
	e.waitLease("flaky", 10*time.Second, "holder lo", holderIs("lo"))
	// lo's process renews the Lease while it holds it.
	e.everyPeriod(300*time.Millisecond, true, func(ctx context.Context) {
		if l, err := leases.Get(ctx, "flaky"); err == nil && holderIs("lo")(l) {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			_, _ = leases.Update(ctx, l) // a conflict: the next period renews
		}
	})
	hi := e.createCandidate("flaky", cand{name: "hi", binary: "1.36.0", emulation: "1.36.0", strategy: strategy.PriorityName})
	hi.Annotations = map[string]string{strategy.PriorityAnnotation: "10"}
	if _, err := e.acc.LeaseCandidates(e.ns).Update(ctx, hi); err != nil {
		t.Fatalf("give hi priority 10: %v", err)
	}
	// comesBack is hi's process starting again: it renews its candidate.
	comesBack := func() {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			lc, err := e.acc.LeaseCandidates(e.ns).Get(ctx, "hi")
			if err != nil {
				return false, err
			}
			lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			_, err = e.acc.LeaseCandidates(e.ns).Update(ctx, lc)
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("renew hi: %v", err)
		}
	}
	preferred := func(l *coordinationv1.Lease) bool { return ptr.Deref(l.Spec.PreferredHolder, "") == "hi" }
	for i := range 2 {
		comesBack()
		e.waitLease("flaky", 10*time.Second, "preferredHolder hi", preferred)
		// lo hands over, as the candidate library does; hi then fails
		// before it renews once.
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := leases.Get(ctx, "flaky")
			if err != nil {
				return false, err
			}
			now := ptr.To(metav1.NewMicroTime(time.Now()))
			l.Spec.HolderIdentity, l.Spec.PreferredHolder = ptr.To("hi"), nil
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
			l.Spec.AcquireTime, l.Spec.RenewTime = now, now
			_, err = leases.Update(ctx, l)
			if apierrors.IsConflict(err) {
				return false, nil // lo renewed in between: read it again
			}
			return err == nil, err
		})
		if err != nil {
			t.Fatalf("hand over to hi (time %d): %v", i+1, err)
		}
		e.waitLease("flaky", 20*time.Second, "holder lo again after hi's term lapsed", holderIs("lo"))
	}
	comesBack()
	e.expectEvent(t, "flaky", controller.ReasonCandidateUnsteady)
	// For the next 3s (the window is a minute), lo keeps the Lease and hi is
	// not preferred.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, "flaky")
		if err != nil {
			return false, err
		}
		if preferred(l) || !holderIs("lo")(l) {
			t.Errorf("after two lapsed terms, hi is preferred over the live holder lo again: %s", describe(l))
			return true, nil
		}
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
}
