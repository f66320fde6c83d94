package controller

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// drain takes every key that is ready in the election queue.
func drain(h *harness) []types.NamespacedName {
	var out []types.NamespacedName
	for h.c.queue.Len() > 0 {
		k, _ := h.c.queue.Get()
		h.c.queue.Done(k)
		h.c.queue.Forget(k)
		out = append(out, k)
	}
	return out
}

// eventually polls cond until it holds or a deadline passes: for what
// goroutines outside the test's control (informers, the delaying queue) do.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// settled waits, inside a synctest bubble, until every goroutine of the test
// is blocked: the delaying queue has armed its timers from the current time,
// so stepping the fake clock now fires exactly what is due.
func settled() { synctest.Wait() }

func TestLeaseEventsWithoutCandidatesAreDropped(t *testing.T) {
	h := newHarness(t)
	node := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "node-1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1")},
	}
	h.c.onLease(node)
	h.c.onLease(node.DeepCopy()) // an update (heartbeat)
	h.c.onLeaseDelete(node)
	h.c.onLeaseDelete(cache.DeletedFinalStateUnknown{Key: "kube-node-lease/node-1", Obj: node})
	if n := h.c.queue.Len(); n != 0 {
		t.Errorf("queue length = %d, want 0: Leases without candidates cost nothing", n)
	}
	if n := len(h.c.obs.leases); n != 0 {
		t.Errorf("%d Lease records, want none", n)
	}

	// A Lease that candidates reference is queued and observed.
	h.create(candidate("a", "1.30.0", "1.30.0"))
	if got := drain(h); len(got) != 1 || got[0] != leaseKey {
		t.Fatalf("queued %v, want %v", got, leaseKey)
	}
	h.c.onLease(lease(heldBy("a")))
	if got := drain(h); len(got) != 1 || got[0] != leaseKey {
		t.Errorf("queued %v, want %v", got, leaseKey)
	}
	if rec, ok := h.c.obs.leases[leaseKey]; !ok || rec.holder != "a" || !rec.observedAt.Equal(t0) {
		t.Errorf("Lease record %+v, want holder a observed at t0", rec)
	}
	h.c.onLeaseDelete(lease(heldBy("a")))
	if got := drain(h); len(got) != 1 {
		t.Errorf("queued %v after the Lease was deleted, want %v", got, leaseKey)
	}
	if rec, ok := h.c.obs.leases[leaseKey]; !ok || rec.observed || !rec.held {
		t.Errorf("the deleted Lease's record %+v, want its history kept while a candidate references it", rec)
	}
}

func TestDeleteHandlersAcceptTombstones(t *testing.T) {
	h := newHarness(t)
	lc := candidate("a", "1.30.0", "1.30.0")
	h.create(lc)
	h.c.onLease(lease(heldBy("a")))
	drain(h)

	h.c.onCandidateDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: lc})
	if got := drain(h); len(got) != 1 || got[0] != leaseKey {
		t.Errorf("queued %v, want %v", got, leaseKey)
	}
	if _, ok := h.c.obs.candidates[keyOf("a")]; ok {
		t.Error("the deleted candidate's record is kept")
	}

	h.c.onLeaseDelete(cache.DeletedFinalStateUnknown{Key: "ns/lease", Obj: lease(heldBy("a"))})
	if got := drain(h); len(got) != 1 || got[0] != leaseKey {
		t.Errorf("queued %v, want %v (the candidate is still in the store)", got, leaseKey)
	}
	if rec, ok := h.c.obs.leases[leaseKey]; !ok || rec.observed {
		t.Errorf("the deleted Lease's record %+v, want its history only", rec)
	}

	// Objects of the wrong type, in or out of tombstones, are ignored.
	h.c.onCandidateAdd("not a candidate", false)
	h.c.onCandidateUpdate(nil, 42)
	h.c.onCandidateDelete(cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: "garbage"})
	h.c.onCandidateDelete(nil)
	h.c.onLease(lc)
	h.c.onLeaseDelete(cache.DeletedFinalStateUnknown{Key: "ns/x"})
	if n := h.c.queue.Len(); n != 0 {
		t.Errorf("queue length = %d, want 0", n)
	}
	if keys, err := indexByLease("garbage"); err != nil || keys != nil {
		t.Errorf("indexByLease(garbage) = %v, %v", keys, err)
	}
}

func TestCandidateUpdateHandler(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("a", "1.30.0", "1.30.0"))
	drain(h)

	// Only pingTime changes (the controller's own ping): not a renewal.
	old := h.serverCandidate("a")
	pinged := old.DeepCopy()
	pinged.ResourceVersion = "2"
	pinged.Spec.PingTime = ptr.To(metav1.NewMicroTime(t0))
	h.step(time.Second)
	h.c.onCandidateUpdate(old, pinged)
	if got := h.state("a"); got != unknown {
		t.Errorf("a is %v after its ping was written, want still unknown", got)
	}
	if got := drain(h); len(got) != 1 || got[0] != leaseKey {
		t.Errorf("queued %v, want %v", got, leaseKey)
	}

	// A renewal makes it alive.
	renewed := pinged.DeepCopy()
	renewed.ResourceVersion = "3"
	renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour))) // its clock is way behind
	h.c.onCandidateUpdate(pinged, renewed)
	if rec := h.c.obs.candidates[keyOf("a")]; !rec.renewedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("renewal seen at %v, want %v", rec.renewedAt, t0.Add(time.Second))
	}

	// Moving to another Lease queues both.
	moved := renewed.DeepCopy()
	moved.ResourceVersion = "4"
	moved.Spec.LeaseName = "other"
	h.c.onCandidateUpdate(renewed, moved)
	got := map[types.NamespacedName]bool{}
	for _, k := range drain(h) {
		got[k] = true
	}
	if !got[leaseKey] || !got[types.NamespacedName{Namespace: testNS, Name: "other"}] || len(got) != 2 {
		t.Errorf("queued %v, want the old and the new Lease", got)
	}

	// A new object under the same name (another UID) starts a new record.
	recreated := moved.DeepCopy()
	recreated.UID = "uid-a-2"
	h.step(time.Second)
	h.c.onCandidateUpdate(moved, recreated)
	if rec := h.c.obs.candidates[keyOf("a")]; rec.uid != "uid-a-2" || !rec.firstSeen.Equal(t0.Add(2*time.Second)) {
		t.Errorf("record %+v, want a new one for uid-a-2", rec)
	}
}

func TestProcessNextAppliesTheOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.failOn("create", "leases", 1, apierrors.NewInternalError(errors.New("boom")))

		// Failure: retried with backoff, never dropped.
		if !h.c.processNext(h.ctx) {
			t.Fatal("processNext reported shutdown")
		}
		if n := h.c.queue.NumRequeues(leaseKey); n != 1 {
			t.Errorf("requeues = %d, want 1", n)
		}
		if h.serverLease() != nil {
			t.Fatal("Lease created despite the error")
		}
		settled()
		h.step(time.Second) // past the backoff, on the queue's (fake) clock
		settled()
		if n := h.c.queue.Len(); n != 1 {
			t.Fatalf("queue length = %d after the backoff, want the rate-limited retry", n)
		}

		// Success: forgotten, then looked at again at the next deadline.
		if !h.c.processNext(h.ctx) {
			t.Fatal("processNext reported shutdown")
		}
		if holderOf(h.serverLease()) != "a" {
			t.Fatalf("Lease %v, want held by a", h.serverLease())
		}
		if n := h.c.queue.NumRequeues(leaseKey); n != 0 {
			t.Errorf("requeues = %d after success, want 0", n)
		}
		// The next deadline is a's freshness, 15s after t0.
		settled()
		h.step(14*time.Second - time.Nanosecond)
		settled()
		if n := h.c.queue.Len(); n != 0 {
			t.Errorf("queue length = %d, want 0 before the deadline", n)
		}
		h.step(time.Nanosecond)
		settled()
		if n := h.c.queue.Len(); n != 1 {
			t.Fatalf("queue length = %d at the deadline, want the requeue", n)
		}

		h.c.queue.ShutDown()
		h.c.queue.Get() // the pending key: drained first
		if h.c.processNext(h.ctx) {
			t.Error("processNext on a shut down, empty queue reported more work")
		}
	})
}

func TestCandidatesMetricByState(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("z", "1.28.0", "1.28.0"))
	h.reconcile() // pings z
	h.step(5 * time.Second)
	h.list(candidate("p", "1.29.0", "1.29.0"), candidate("u", "1.31.0", "1.31.0"))
	h.create(candidate("f", "1.30.0", "1.30.0"))
	h.reconcile() // z times out; p is pinged; f is alive; u is below f

	want := map[string]float64{"alive": 1, "pinged": 1, "unresponsive": 1, "unknown": 1}
	for state, n := range want {
		if got := h.metric("cle_candidates", "state", state); got != n {
			t.Errorf("cle_candidates{state=%q} = %v, want %v", state, got, n)
		}
	}
	if got := h.metric("workqueue_adds_total", "name", "cle_election"); got < 1 {
		t.Errorf("workqueue_adds_total{name=cle_election} = %v, want > 0", got)
	}
}

func TestMetricsRegisterTwiceFails(t *testing.T) {
	h := newHarness(t)
	if err := h.metrics.Register(h.reg); err == nil {
		t.Error("registering the same metrics twice succeeded")
	}
}

func TestNewInformersPerNamespace(t *testing.T) {
	acc := access.NewNative(fake.NewClientset())
	if inf := NewInformers(acc, []string{"a", "b"}, 0); len(inf.Leases) != 2 || len(inf.Candidates) != 2 {
		t.Errorf("got %d/%d informers, want 2/2", len(inf.Leases), len(inf.Candidates))
	}
	if inf := NewInformers(acc, nil, 0); len(inf.Leases) != 1 || len(inf.Candidates) != 1 {
		t.Errorf("got %d/%d informers for all namespaces, want 1/1", len(inf.Leases), len(inf.Candidates))
	}
}

// noWatchList turns client-go's streaming lists off: the fake clientset
// cannot serve them, and pkg/access builds its informers on a plain
// cache.ListWatch that does not tell the reflector so.
func noWatchList(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
}

// TestElectWithRunningInformers drives reconcile directly on real (fake
// clientset) informers: objects that exist at start-up arrive in the initial
// list, so their liveness is unknown until they answer a ping.
func TestElectWithRunningInformers(t *testing.T) {
	noWatchList(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset(
		candidate("a", "1.30.0", "1.30.0"),
		candidate("b", "1.31.0", "1.31.0"),
		lease(),
	)
	acc := access.NewNative(client)
	inf := NewInformers(acc, []string{testNS}, 0)
	clock := testingclock.NewFakeClock(t0)
	c, err := New(acc, inf, Options{Clock: clock, ElectionGather: NoElectionGather, UnseenHolderWait: NoUnseenHolderWait})
	if err != nil {
		t.Fatal(err)
	}
	waitInformers := inf.Start(ctx)
	t.Cleanup(func() {
		cancel()
		waitInformers()
		c.queue.ShutDown()
		c.gcQueue.ShutDown()
	})
	eventually(t, "the caches to sync", c.HasSynced)

	if d, err := c.reconcile(ctx, leaseKey); err != nil || d != 5*time.Second {
		t.Fatalf("reconcile = %v, %v; want a 5s requeue", d, err)
	}
	var pinged []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" {
			pinged = append(pinged, a.GetResource().Resource+"/"+mustMeta(a.(clienttesting.UpdateAction).GetObject()).GetName())
		}
	}
	if len(pinged) != 2 || pinged[0] != "leasecandidates/a" || pinged[1] != "leasecandidates/b" {
		t.Fatalf("updates = %v, want pings of a then b", pinged)
	}

	// a answers through the API; the informer delivers it.
	lc, err := client.CoordinationV1beta1().LeaseCandidates(testNS).Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(time.Second)))
	if _, err := client.CoordinationV1beta1().LeaseCandidates(testNS).Update(ctx, lc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the answer to be observed", func() bool {
		cached := c.cachedCandidate(keyOf("a"))
		if cached == nil || cached.Spec.RenewTime == nil || !cached.Spec.RenewTime.Time.Equal(t0.Add(time.Second)) {
			return false
		}
		rec := c.obs.candidate(cached, clock.Now())
		s, _ := rec.state(clock.Now(), c.opts.CandidateFreshness, c.opts.PingTimeout)
		return s == alive
	})
	if _, err := c.reconcile(ctx, leaseKey); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoordinationV1().Leases(testNS).Get(ctx, testLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holderOf(got) != "a" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 1 {
		t.Errorf("holder %q transitions %v, want a and 1", holderOf(got), got.Spec.LeaseTransitions)
	}
}

// TestRunElectsAndStopsCleanly runs the whole controller: workers elect
// through the informers, and cancelling the context stops everything.
func TestRunElectsAndStopsCleanly(t *testing.T) {
	noWatchList(t)
	before := runtime.NumGoroutine()
	_, ctx := ktesting.NewTestContext(t)
	infCtx, stopInformers := context.WithCancel(ctx)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopInformers()
	defer stopRun()

	client := fake.NewClientset()
	acc := access.NewNative(client)
	inf := NewInformers(acc, nil, 0)
	rec := events.NewFakeRecorder(100)
	c, err := New(acc, inf, Options{Clock: testingclock.NewFakeClock(t0), Recorder: rec, ElectionGather: NoElectionGather})
	if err != nil {
		t.Fatal(err)
	}
	waitInformers := inf.Start(infCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(runCtx, 2)
	}()
	eventually(t, "the caches to sync", c.HasSynced)

	// Created while watched: alive at once, elected without a ping.
	if _, err := client.CoordinationV1beta1().LeaseCandidates(testNS).Create(ctx, candidate("a", "1.30.0", "1.30.0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Lease to be created", func() bool {
		l, err := client.CoordinationV1().Leases(testNS).Get(ctx, testLease, metav1.GetOptions{})
		return err == nil && holderOf(l) == "a"
	})

	stopRun()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if !c.queue.ShuttingDown() || !c.gcQueue.ShuttingDown() {
		t.Error("queues not shut down")
	}
	stopInformers()
	waitInformers()
	eventually(t, "every goroutine to end", func() bool { return runtime.NumGoroutine() <= before })
}

func TestRunReturnsWhenCancelledBeforeSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	acc := access.NewNative(fake.NewClientset())
	c, err := New(acc, NewInformers(acc, nil, 0), Options{}) // informers never started
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 1)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if c.HasSynced() {
		t.Error("HasSynced with informers never started")
	}
}
