package candidate

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// The unit tests run the library for real, goroutines and informers included,
// inside a synctest bubble: synctest.Wait returns once every goroutine is
// blocked, so "the library has reacted" is a sync point, not a sleep. The
// library's own time is a fake clock that only the test steps. The fake
// clientset plays the API server, with resourceVersion preconditions enforced
// by a reactor.

const (
	testNS    = "ns"
	testLease = "lease"
	me        = "me"
)

var (
	t0            = time.Date(2030, time.January, 1, 12, 0, 0, 0, time.UTC)
	leasesGVR     = coordinationv1.SchemeGroupVersion.WithResource("leases")
	candidatesGVR = coordinationv1beta1.SchemeGroupVersion.WithResource("leasecandidates")
)

type harness struct {
	t      *testing.T
	client *fake.Clientset
	clock  *testingclock.FakeClock
	rv     atomic.Int64

	// failLeaseUpdates makes every Lease update by the library fail.
	failLeaseUpdates atomic.Bool
	// leaseGoneUnseen answers every Lease update and read by the library
	// with NotFound, as a server does whose deletion of the Lease the
	// library's watch has not delivered yet.
	leaseGoneUnseen atomic.Bool
	// conflictOnce makes the next Lease update by the library conflict.
	conflictOnce atomic.Bool
	// leaseConflicts makes that many next Lease updates by the library
	// conflict.
	leaseConflicts atomic.Int32
	// candidateConflictOnce makes the next LeaseCandidate update by the
	// library conflict.
	candidateConflictOnce atomic.Bool
	// candidateGoneUnseen answers the library's next LeaseCandidate create
	// as created but stores nothing: the object was created, its event lost
	// with an expired watch, and deleted before the informer relisted.
	candidateGoneUnseen atomic.Bool

	mu      sync.Mutex
	journal []string // what happened, in order: callbacks and library writes

	c      *Candidate
	cancel context.CancelFunc
	done   chan error
	// logs holds what the library logged.
	logs ktesting.Buffer
}

// bubble runs f in a synctest bubble with a fresh harness.
func bubble(t *testing.T, f func(t *testing.T, h *harness)) {
	synctest.Test(t, func(t *testing.T) {
		h := &harness{t: t, client: fake.NewClientset(), clock: testingclock.NewFakeClock(t0)}
		h.rv.Store(100)
		h.client.PrependReactor("*", "*", h.serve)
		defer h.stop()
		f(t, h)
	})
}

// serve enforces resourceVersions and UID preconditions as kube-apiserver
// does, records the library's writes, and injects failures. It runs under the
// fake's lock, so reading and writing the tracker here is atomic.
func (h *harness) serve(a clienttesting.Action) (bool, runtime.Object, error) {
	gvr := a.GetResource()
	if gvr != leasesGVR && gvr != candidatesGVR {
		return false, nil, nil
	}
	kind := map[schema.GroupVersionResource]string{leasesGVR: "Lease", candidatesGVR: "LeaseCandidate"}[gvr]
	switch a := a.(type) {
	case clienttesting.CreateAction:
		if a.GetVerb() != "create" {
			return h.update(a.(clienttesting.UpdateAction), gvr, kind)
		}
		m := mustMeta(a.GetObject())
		m.SetResourceVersion(h.nextRV())
		m.SetUID(types.UID("uid-" + m.GetName() + "-" + m.GetResourceVersion()))
		m.SetCreationTimestamp(metav1.NewTime(h.clock.Now()))
		h.log("create %s %s", kind, m.GetName())
		if gvr == candidatesGVR && h.candidateGoneUnseen.CompareAndSwap(true, false) {
			return true, a.GetObject(), nil
		}
	case clienttesting.DeleteAction:
		cur, err := h.client.Tracker().Get(gvr, a.GetNamespace(), a.GetName())
		if err != nil {
			return true, nil, err
		}
		if pre := a.GetDeleteOptions().Preconditions; pre != nil && pre.UID != nil && *pre.UID != mustMeta(cur).GetUID() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.GetName(), fmt.Errorf("UID precondition failed"))
		}
		h.log("delete %s %s", kind, a.GetName())
	}
	return false, nil, nil
}

func (h *harness) update(a clienttesting.UpdateAction, gvr schema.GroupVersionResource, kind string) (bool, runtime.Object, error) {
	m := mustMeta(a.GetObject())
	if gvr == leasesGVR && h.failLeaseUpdates.Load() {
		return true, nil, apierrors.NewInternalError(fmt.Errorf("injected failure"))
	}
	if gvr == leasesGVR && h.leaseGoneUnseen.Load() {
		return true, nil, apierrors.NewNotFound(gvr.GroupResource(), m.GetName())
	}
	if gvr == leasesGVR && (h.conflictOnce.CompareAndSwap(true, false) || h.leaseConflicts.Add(-1) >= 0) {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(), fmt.Errorf("injected conflict"))
	}
	if gvr == candidatesGVR && h.candidateConflictOnce.CompareAndSwap(true, false) {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(), fmt.Errorf("injected conflict"))
	}
	cur, err := h.client.Tracker().Get(gvr, a.GetNamespace(), m.GetName())
	if err != nil {
		return true, nil, err
	}
	if rv := mustMeta(cur).GetResourceVersion(); rv != m.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(), fmt.Errorf("resourceVersion %q is stale, object is at %q", m.GetResourceVersion(), rv))
	}
	m.SetResourceVersion(h.nextRV())
	h.log("update %s %s", kind, m.GetName())
	return false, nil, nil
}

func (h *harness) nextRV() string { return strconv.FormatInt(h.rv.Add(1), 10) }

func mustMeta(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	return m
}

func (h *harness) log(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.journal = append(h.journal, fmt.Sprintf(format, args...))
}

func (h *harness) entries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.journal...)
}

func (h *harness) config(tweaks ...func(*Config)) Config {
	cfg := Config{
		access:           access.NewNative(h.client),
		Namespace:        testNS,
		LeaseName:        testLease,
		Identity:         me,
		BinaryVersion:    "1.36.0",
		EmulationVersion: "1.35.0",
		Clock:            h.clock,
		ProofOfDeath:     NoProofOfDeath,
		Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				h.log("started leading")
				<-ctx.Done()
				h.log("leader work returned")
			},
			OnStoppedLeading: func() { h.log("stopped leading") },
		},
	}
	for _, f := range tweaks {
		f(&cfg)
	}
	return cfg
}

// start runs a Candidate and waits until it has settled.
func (h *harness) start(tweaks ...func(*Config)) *Candidate {
	h.t.Helper()
	c, err := New(h.config(tweaks...))
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	h.run(c)
	return c
}

// startExternal runs an External and waits until it has settled.
func (h *harness) startExternal(tweaks ...func(*Config)) *External {
	h.t.Helper()
	x, err := NewExternal(h.config(tweaks...))
	if err != nil {
		h.t.Fatalf("NewExternal: %v", err)
	}
	h.run(x.c)
	return x
}

// run runs c with a logger whose output the test can read, and waits until
// it has settled.
func (h *harness) run(c *Candidate) {
	logger := ktesting.NewLogger(h.t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	h.logs = logger.GetSink().(ktesting.Underlier).GetBuffer()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	h.c, h.cancel, h.done = c, cancel, make(chan error, 1)
	go func() { h.done <- c.Run(ctx) }()
	synctest.Wait()
}

// startAnother runs one more Candidate next to the one of start, and returns
// the function that stops it.
func (h *harness) startAnother(tweaks ...func(*Config)) (*Candidate, func()) {
	h.t.Helper()
	c, err := New(h.config(tweaks...))
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	_, ctx := ktesting.NewTestContext(h.t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	synctest.Wait()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}
	h.t.Cleanup(stop)
	return c, stop
}

// logged returns the library's log entries of the given type (ktesting.LogError
// or ktesting.LogInfo) whose message contains msg.
func (h *harness) logged(typ ktesting.LogType, msg string) []string {
	var out []string
	for _, e := range h.logs.Data() {
		if e.Type == typ && strings.Contains(e.Message, msg) {
			out = append(out, e.Message)
		}
	}
	return out
}

// stop cancels Run and waits for it to return.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	if err := <-h.done; err != nil {
		h.t.Errorf("Run: %v", err)
	}
}

// step moves the fake clock and lets the library react.
func (h *harness) step(d time.Duration) {
	// What the test's last call set off (the loop's next step after a Renew
	// returned, say) runs on the clock as it was, not after the step.
	synctest.Wait()
	h.clock.Step(d)
	synctest.Wait()
}

// ---- the API as the controller and the test see it ----

func (h *harness) lease() *coordinationv1.Lease {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(leasesGVR, testNS, testLease)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return obj.(*coordinationv1.Lease)
}

func (h *harness) candidate(name string) *coordinationv1beta1.LeaseCandidate {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(candidatesGVR, testNS, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return obj.(*coordinationv1beta1.LeaseCandidate)
}

// put writes an object as another party (the controller, an admin) would,
// bypassing the reactors, and lets the library react.
func (h *harness) put(obj runtime.Object) {
	h.t.Helper()
	m := mustMeta(obj)
	m.SetResourceVersion(h.nextRV())
	gvr := leasesGVR
	if _, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok {
		gvr = candidatesGVR
	}
	_, err := h.client.Tracker().Get(gvr, m.GetNamespace(), m.GetName())
	switch {
	case apierrors.IsNotFound(err):
		if m.GetUID() == "" {
			m.SetUID(types.UID("uid-" + m.GetName() + "-" + m.GetResourceVersion()))
		}
		err = h.client.Tracker().Create(gvr, obj, m.GetNamespace())
	case err == nil:
		err = h.client.Tracker().Update(gvr, obj, m.GetNamespace())
	}
	if err != nil {
		h.t.Fatal(err)
	}
	synctest.Wait()
}

func (h *harness) remove(gvr schema.GroupVersionResource, name string) {
	h.t.Helper()
	if err := h.client.Tracker().Delete(gvr, testNS, name); err != nil {
		h.t.Fatal(err)
	}
	synctest.Wait()
}

// elect names holder in the Lease, as a controller does.
func (h *harness) elect(holder string) {
	h.t.Helper()
	now := metav1.NewMicroTime(h.clock.Now())
	lease := h.lease()
	if lease == nil {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
			Spec: coordinationv1.LeaseSpec{
				Strategy:             ptr.To(coordinationv1.OldestEmulationVersion),
				LeaseDurationSeconds: ptr.To[int32](5),
				LeaseTransitions:     ptr.To[int32](1),
			},
		}
	} else {
		lease = lease.DeepCopy()
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.HolderIdentity = ptr.To(holder)
	lease.Spec.PreferredHolder = nil
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	h.put(lease)
}

// name makes holder the holder as kube-apiserver's built-in controller
// does: renewTime now, no acquireTime, and leaseTransitions left as it was
// (unset when it creates the Lease).
func (h *harness) name(holder string) {
	h.t.Helper()
	now := metav1.NewMicroTime(h.clock.Now())
	lease := h.lease()
	if lease == nil {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
			Spec: coordinationv1.LeaseSpec{
				Strategy:             ptr.To(coordinationv1.OldestEmulationVersion),
				LeaseDurationSeconds: ptr.To[int32](5),
			},
		}
	} else {
		lease = lease.DeepCopy()
	}
	lease.Spec.HolderIdentity = ptr.To(holder)
	lease.Spec.PreferredHolder = nil
	lease.Spec.AcquireTime, lease.Spec.RenewTime = nil, &now
	h.put(lease)
}

// prefer sets preferredHolder, as a controller does to preempt.
func (h *harness) prefer(holder string) {
	h.t.Helper()
	lease := h.lease().DeepCopy()
	lease.Spec.PreferredHolder = ptr.To(holder)
	h.put(lease)
}

func (h *harness) countActions(verb string, gvr schema.GroupVersionResource) int {
	n := 0
	for _, a := range h.client.Actions() {
		if a.GetVerb() == verb && a.GetResource() == gvr {
			n++
		}
	}
	return n
}

func holder(l *coordinationv1.Lease) string {
	if l == nil {
		return "<no Lease>"
	}
	return ptr.Deref(l.Spec.HolderIdentity, "<nil>")
}

func fakeKube() *fake.Clientset { return fake.NewClientset() }
