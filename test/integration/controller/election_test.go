package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/controller"
)

func TestSingleCandidate(t *testing.T) { forEachMode(t, testSingleCandidate) }

func testSingleCandidate(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	begin := time.Now()
	e.createCandidate("single", cand{name: "a", binary: "1.36.0", emulation: "1.36.0"})
	lease := e.waitLease("single", 10*time.Second, "holder a", holderIs("a"))
	t.Logf("cold election of a single fresh candidate took %s", time.Since(begin).Round(time.Millisecond))
	if ptr.Deref(lease.Spec.Strategy, "") != coordinationv1.OldestEmulationVersion {
		t.Errorf("strategy = %q, want %q", ptr.Deref(lease.Spec.Strategy, ""), coordinationv1.OldestEmulationVersion)
	}
	if ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) != 15 || lease.Spec.AcquireTime == nil || lease.Spec.RenewTime == nil {
		t.Errorf("created Lease spec incomplete: %+v", lease.Spec)
	}
}

func TestThreeCandidatesOldestEmulationWins(t *testing.T) {
	forEachMode(t, testThreeCandidatesOldestEmulationWins)
}

func testThreeCandidatesOldestEmulationWins(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	e.createCandidate("three", cand{name: "new", binary: "1.36.0", emulation: "1.36.0"})
	e.createCandidate("three", cand{name: "old", binary: "1.36.0", emulation: "1.34.0"})
	e.createCandidate("three", cand{name: "mid", binary: "1.36.0", emulation: "1.35.0"})
	// The first candidate may win the cold election before the others exist;
	// once they do, the controller must steer the Lease towards "old".
	e.waitLease("three", 10*time.Second, "old holds or is preferred", func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == "old" || ptr.Deref(l.Spec.PreferredHolder, "") == "old"
	})
}

// TestBetterCandidateJoins: preferredHolder is set once, and cleared after the
// holder hands over.
func TestBetterCandidateJoins(t *testing.T) { forEachMode(t, testBetterCandidateJoins) }

func testBetterCandidateJoins(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	ctx := context.Background()
	e.createCandidate("join", cand{name: "a", binary: "1.36.0", emulation: "1.36.0"})
	lease := e.waitLease("join", 10*time.Second, "holder a", holderIs("a"))

	// Lease writes only: the ping of b is a write of its candidate, which
	// managedFields (to the second) cannot always tell from b's own.
	w := e.watchControllerLeaseWrites(t)
	// The Lease as it was before the count began: a loaded server may list
	// the counting informer's initial state from a watch cache that has not
	// caught up with a's election yet, and then deliver that election as an
	// Add.
	w.ignore(lease.ResourceVersion)
	e.createCandidate("join", cand{name: "b", binary: "1.36.0", emulation: "1.35.0"})
	e.answerPings("b")
	lease = e.waitLease("join", 10*time.Second, "preferredHolder b", func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.PreferredHolder, "") == "b"
	})

	// The holder hands over, as the candidate library does.
	handed := lease.DeepCopy()
	handed.Spec.HolderIdentity = ptr.To("b")
	handed.Spec.PreferredHolder = nil
	handed.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	handed.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now()))
	handed.Spec.RenewTime = handed.Spec.AcquireTime
	written, err := e.acc.Leases(e.ns).Update(ctx, handed)
	if err != nil {
		t.Fatalf("hand over: %v", err)
	}
	w.ignore(written.ResourceVersion)
	e.expectEvent(t, "join", controller.ReasonPreferredHolderSet)
	// Settle: the controller has nothing more to do.
	if n := w.countFor(3 * time.Second); n != 1 {
		t.Errorf("controller wrote the Lease %d times after b joined, want exactly 1 (preferredHolder)", n)
	}
	final, err := e.acc.Leases(e.ns).Get(ctx, "join")
	if err != nil {
		t.Fatal(err)
	}
	if !holderIs("b")(final) || final.Spec.PreferredHolder != nil {
		t.Errorf("after handover: %s, want holder b and no preferredHolder", describe(final))
	}
}

// TestHolderStopsRenewing: the Lease is reassigned once it expires by the
// controller's own observation.
func TestHolderStopsRenewing(t *testing.T) { forEachMode(t, testHolderStopsRenewing) }

func testHolderStopsRenewing(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{LeaseDuration: 2 * time.Second, CandidateFreshness: time.Minute})
	e.createCandidate("expire", cand{name: "a", binary: "1.36.0", emulation: "1.35.0"})
	lease := e.waitLease("expire", 10*time.Second, "holder a", holderIs("a"))
	e.createCandidate("expire", cand{name: "b", binary: "1.36.0", emulation: "1.36.0"})
	// a never renews: after 2s b must be named, with a new fencing token.
	begin := time.Now()
	// a's candidate still looks fresh, but its expired Lease makes it suspect:
	// it is pinged, does not answer, and b is named.
	got := e.waitLease("expire", 20*time.Second, "holder b", holderIs("b"))
	if elapsed := time.Since(begin); elapsed < time.Second {
		t.Errorf("b named after %s, before a's lease could have expired", elapsed)
	}
	if ptr.Deref(got.Spec.LeaseTransitions, 0) != ptr.Deref(lease.Spec.LeaseTransitions, 0)+1 {
		t.Errorf("leaseTransitions = %d, want %d", ptr.Deref(got.Spec.LeaseTransitions, 0), ptr.Deref(lease.Spec.LeaseTransitions, 0)+1)
	}
}

func TestLeaseDeletedIsRecreated(t *testing.T) { forEachMode(t, testLeaseDeletedIsRecreated) }

// A Lease deleted while held is created again only once its holder's term
// has run out on the controller's clock: the holder may act until then.
func testLeaseDeletedIsRecreated(t *testing.T, m apiMode) {
	const leaseDuration = 3 * time.Second
	e := startController(t, m, controller.Options{CandidateFreshness: time.Minute, LeaseDuration: leaseDuration})
	e.createCandidate("deleted", cand{name: "a", binary: "1.36.0", emulation: "1.36.0"})
	first := e.waitLease("deleted", 10*time.Second, "holder a", holderIs("a"))
	deleted := time.Now()
	if err := e.client.CoordinationV1().Leases(e.ns).Delete(context.Background(), "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := e.waitLease("deleted", 10*time.Second, "recreated", func(l *coordinationv1.Lease) bool {
		return l.UID != first.UID && holderIs("a")(l)
	})
	// The controller saw a's term begin when it named a, before the
	// deletion: it may end a little under a lease duration after it.
	if elapsed := again.CreationTimestamp.Sub(deleted.Truncate(time.Second)); elapsed < leaseDuration-time.Second {
		t.Errorf("re-created %s after the deletion, within the deleted holder's %s term", elapsed, leaseDuration)
	}
	if ptr.Deref(again.Spec.LeaseTransitions, 0) <= ptr.Deref(first.Spec.LeaseTransitions, 0) {
		t.Errorf("re-created at term %d, not above %d", ptr.Deref(again.Spec.LeaseTransitions, 0), ptr.Deref(first.Spec.LeaseTransitions, 0))
	}
}

func TestStrategyConflictWritesNothing(t *testing.T) {
	forEachMode(t, testStrategyConflictWritesNothing)
}

func testStrategyConflictWritesNothing(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	e.createCandidate("conflict", cand{name: "a", binary: "1.36.0", emulation: "1.36.0"})
	e.createCandidate("conflict", cand{name: "b", binary: "1.36.0", emulation: "1.36.0", strategy: "example.com/Other"})
	e.expectEvent(t, "conflict", controller.ReasonStrategyConflict)
	// a alone may have been elected before b appeared; from the conflict on,
	// nothing is written.
	w := e.watchControllerWrites(t)
	if n := w.countFor(3 * time.Second); n != 0 {
		t.Errorf("controller wrote %d times during a strategy conflict", n)
	}
}

// TestSteadyStateNoWrites: with the best candidate holding and renewing, the
// controller writes nothing at all.
func TestSteadyStateNoWrites(t *testing.T) { forEachMode(t, testSteadyStateNoWrites) }

func testSteadyStateNoWrites(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	e.createCandidate("steady", cand{name: "best", binary: "1.36.0", emulation: "1.35.0"})
	e.createCandidate("steady", cand{name: "other", binary: "1.36.0", emulation: "1.36.0"})
	lease := e.waitLease("steady", 10*time.Second, "holder best", holderIs("best"))

	w := e.watchControllerWrites(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The holder renews every 2s, as a client-go elector does by default.
	_ = wait.PollUntilContextCancel(ctx, 2*time.Second, false, func(context.Context) (bool, error) {
		lease = e.renew(lease)
		return false, nil
	})
	if n := w.count(); n != 0 {
		t.Errorf("controller wrote %d times in 30s of steady state, want 0", n)
	}
}

func (e *env) expectEvent(t *testing.T, lease, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.EventsV1().Events(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Reason == reason && ev.Regarding.Name == lease && ev.Regarding.Kind == "Lease" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on Lease %s: %v", reason, lease, err)
	}
}

// writeWatch counts writes by the controller, from informers on the
// namespace's Leases and LeaseCandidates, told apart by managedFields.
type writeWatch struct {
	// writes carries the resourceVersion of each write counted.
	writes chan string
	n      int
	// ignored are the resourceVersions of the test's own writes: their
	// managedFields times are to the second, so a write of the test in
	// the second of the controller's last one can look like the
	// controller's.
	ignored map[string]bool
}

// ignore leaves out the write that made resourceVersion rv.
func (w *writeWatch) ignore(rv string) {
	if w.ignored == nil {
		w.ignored = map[string]bool{}
	}
	w.ignored[rv] = true
}

// The informers have synced when it returns: objects that exist already are
// not counted as writes.
func (e *env) watchControllerWrites(t *testing.T) *writeWatch {
	t.Helper()
	return e.watchWrites(t, e.acc.NewLeaseInformer(e.ns, 0, nil), e.acc.NewCandidateInformer(e.ns, 0, nil))
}

// watchControllerLeaseWrites is watchControllerWrites for the Leases alone.
func (e *env) watchControllerLeaseWrites(t *testing.T) *writeWatch {
	t.Helper()
	return e.watchWrites(t, e.acc.NewLeaseInformer(e.ns, 0, nil))
}

func (e *env) watchWrites(t *testing.T, informers ...cache.SharedIndexInformer) *writeWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ww := &writeWatch{writes: make(chan string, 1000)}
	count := func(obj any) {
		// The controller's fencing token bound is no election's write.
		if m, ok := obj.(metav1.Object); ok && lastManager(m) == controllerUserAgent && m.GetName() != controller.DefaultTokenBoundName {
			ww.writes <- m.GetResourceVersion()
		}
	}
	handler := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				count(obj)
			}
		},
		UpdateFunc: func(_, obj any) { count(obj) },
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	for _, inf := range informers {
		reg, err := inf.AddEventHandler(handler)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
		if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			t.Fatal("write-counting informers did not sync")
		}
	}
	return ww
}

// lastManager is the field manager of the most recent write.
func lastManager(obj metav1.Object) string {
	var last metav1.ManagedFieldsEntry
	for _, f := range obj.GetManagedFields() {
		if last.Time == nil || (f.Time != nil && !f.Time.Before(last.Time)) {
			last = f
		}
	}
	return last.Manager
}

// countFor waits d and returns the writes seen so far.
func (w *writeWatch) countFor(d time.Duration) int {
	deadline := time.After(d)
	for {
		select {
		case rv := <-w.writes:
			if !w.ignored[rv] {
				w.n++
			}
		case <-deadline:
			return w.n
		}
	}
}

func (w *writeWatch) count() int {
	for {
		select {
		case rv := <-w.writes:
			if !w.ignored[rv] {
				w.n++
			}
		default:
			return w.n
		}
	}
}
