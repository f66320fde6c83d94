package builtin

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/witness"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/strategy"
	"github.com/cle-dev/cle/test/integration/framework"
)

// TestBuiltinGarbageCollectsCleCandidates runs kube-apiserver's garbage
// collection of LeaseCandidates on an election cle-controller runs beside
// it: when its controller takes its lock (here, after kube-apiserver
// restarts), and every 30 minutes, kube-apiserver deletes every
// LeaseCandidate whose renewTime is over 30 minutes old. That takes the
// object a stopped candidate left behind, which cle-controller then no
// longer counts, and also the live one of a candidate whose clock is more
// than 30 minutes slow (renewTime is the candidate's clock). The library
// registers such a candidate again at once, and as the holder it keeps its
// Lease and term throughout.
func TestBuiltinGarbageCollectsCleCandidates(t *testing.T) {
	ctx := t.Context()
	client := server.Client()
	before := waitBuiltinHoldsItsLock(t, "")
	ns := server.CreateNamespace(t)
	candidates := client.CoordinationV1beta1().LeaseCandidates(ns)
	const lease = "collected"
	startCleController(t, ns)

	// A candidate stopped 31 minutes ago, its object left behind.
	if _, err := candidates.Create(ctx, &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: "left-behind"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: lease, BinaryVersion: "1.36.0", EmulationVersion: "1.34.0", Strategy: strategy.PriorityName,
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-31 * time.Minute))),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The best live candidate, on a clock 31 minutes slow, and another. Their
	// renew deadline outlasts kube-apiserver's restart (3 to 5 s on a busy
	// machine): a holder that cannot renew within it stops leading, and
	// leads again only in a new term.
	for identity, c := range map[string]struct {
		emulation string
		offset    time.Duration
	}{"slow-clock": {"1.35.0", -31 * time.Minute}, "on-time": {"1.36.0", 0}} {
		framework.RunCandidate(t, candidate.Config{
			RestConfig: server.Config(), APIMode: string(access.ModeNative), Namespace: ns, LeaseName: lease,
			Identity: identity, BinaryVersion: "1.36.0", EmulationVersion: c.emulation, Strategy: strategy.PriorityName,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
			Clock: witness.OffsetClock{Offset: c.offset},
		})
	}
	var term int32
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "slow-clock" || l.Spec.PreferredHolder != nil {
			return false, nil
		}
		term = ptr.Deref(l.Spec.LeaseTransitions, 0)
		return true, nil
	}); err != nil {
		t.Fatalf("cle-controller never elected slow-clock, the best live candidate: %v", err)
	}
	registered, err := candidates.Get(ctx, "slow-clock", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Everything that follows must leave the Lease to slow-clock, in its
	// term.
	watchCtx, stopWatching := context.WithCancel(ctx)
	moved := make(chan string, 1)
	go func() {
		_ = wait.PollUntilContextCancel(watchCtx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if h, n := ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0); h != "slow-clock" || n != term || l.Spec.PreferredHolder != nil {
				moved <- fmt.Sprintf("holder %q, term %d, preferred holder %q at %s", h, n, ptr.Deref(l.Spec.PreferredHolder, ""), time.Now().Format(time.StampMilli))
				return true, nil
			}
			return false, nil
		})
	}()

	// kube-apiserver restarts; its controller, once it holds its lock
	// again, collects at once.
	t.Logf("restarting kube-apiserver at %s", time.Now().Format(time.StampMilli))
	if err := server.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver ready again at %s", time.Now().Format(time.StampMilli))
	waitBuiltinHoldsItsLock(t, before)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := candidates.Get(ctx, "left-behind", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("kube-apiserver did not collect the LeaseCandidate renewed 31 minutes ago: %v", err)
	}
	// slow-clock's object went too (its renewTime, on its clock, is as
	// old), and the library registered it again.
	var again types.UID
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lc, err := candidates.Get(ctx, "slow-clock", metav1.GetOptions{})
		if err != nil || lc.UID == registered.UID {
			return false, nil
		}
		again = lc.UID
		return true, nil
	}); err != nil {
		t.Fatalf("slow-clock's LeaseCandidate (UID %s) was not collected and registered again: %v", registered.UID, err)
	}
	t.Logf("kube-apiserver collected left-behind and slow-clock's LeaseCandidate; the library registered it again (UID %s, was %s)", again, registered.UID)

	// Steady for 12 s after the collection, more than twice cle-controller's
	// ping timeout.
	select {
	case h := <-moved:
		t.Fatalf("the Lease moved from slow-clock's term %d: %s", term, h)
	case <-time.After(12 * time.Second):
	}
	stopWatching()
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, n := ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0); h != "slow-clock" || n != term {
		t.Errorf("Lease held by %q in term %d after the collection, want slow-clock in term %d", h, n, term)
	}
}
