package controller

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cle-dev/cle/pkg/controller"
)

// TestCandidateGC: a candidate that stops renewing is deleted once the TTL
// has passed by the controller's observation; one that renews is kept and
// ends up holding the Lease.
func TestCandidateGC(t *testing.T) { forEachMode(t, testCandidateGC) }

func testCandidateGC(t *testing.T, m apiMode) {
	const ttl = 3 * time.Second
	e := startController(t, m, controller.Options{CandidateTTL: ttl, CandidateFreshness: time.Second, PingTimeout: 500 * time.Millisecond, LeaseDuration: time.Second})
	ctx := context.Background()
	created := time.Now()
	e.createCandidate("gc", cand{name: "stale", binary: "1.36.0", emulation: "1.35.0"})
	e.createCandidate("gc", cand{name: "renewer", binary: "1.36.0", emulation: "1.36.0"})
	e.keepRenewing("renewer", 250*time.Millisecond)

	candidates := e.acc.LeaseCandidates(e.ns)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := candidates.Get(ctx, "stale")
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("stale candidate not garbage-collected: %v", err)
	}
	if gone := time.Since(created); gone < ttl {
		t.Errorf("stale candidate deleted %s after its creation, before the %s TTL", gone, ttl)
	}
	if _, err := candidates.Get(ctx, "renewer"); err != nil {
		t.Errorf("renewing candidate: %v, want it kept", err)
	}
	// Nobody renews the Lease in this test, so it expires, and the only
	// candidate left gets it.
	e.waitLease("gc", 30*time.Second, "holder renewer", holderIs("renewer"))
}
