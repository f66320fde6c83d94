package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cle-dev/cle/internal/promtest"

	"github.com/prometheus/client_golang/prometheus"
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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// The tests drive the controller synchronously: the harness owns the
// informer stores (the informers are never started), plays the API server
// with the fake clientset, and after every step delivers what changed on the
// server to the stores and to the controller's event handlers, as the
// informers would. Time only moves when a test steps the fake clock.

const (
	testNS    = "ns"
	testLease = "lease"

	oev = coordinationv1.OldestEmulationVersion
)

var (
	// t0 is the fake clock's start; microsecond-aligned like API timestamps.
	t0       = time.Date(2030, time.January, 1, 12, 0, 0, 0, time.UTC)
	leaseKey = types.NamespacedName{Namespace: testNS, Name: testLease}

	leasesGVR     = coordinationv1.SchemeGroupVersion.WithResource("leases")
	candidatesGVR = coordinationv1beta1.SchemeGroupVersion.WithResource("leasecandidates")
)

// ---- object builders ----

type candOpt func(*coordinationv1beta1.LeaseCandidate)

// candidate builds a LeaseCandidate of the test Lease. By default it asks for
// OldestEmulationVersion, was created an hour before t0 and last renewed a
// minute before t0 (by its own clock).
func candidate(name, binary, emulation string, opts ...candOpt) *coordinationv1beta1.LeaseCandidate {
	lc := &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)),
		},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        testLease,
			BinaryVersion:    binary,
			EmulationVersion: emulation,
			Strategy:         oev,
			RenewTime:        ptr.To(metav1.NewMicroTime(t0.Add(-time.Minute))),
		},
	}
	for _, o := range opts {
		o(lc)
	}
	return lc
}

func created(t time.Time) candOpt {
	return func(lc *coordinationv1beta1.LeaseCandidate) { lc.CreationTimestamp = metav1.NewTime(t) }
}

func renewedAt(t time.Time) candOpt {
	return func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t)) }
}

func noRenewTime() candOpt {
	return func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.RenewTime = nil }
}

func withStrategy(s coordinationv1.CoordinatedLeaseStrategy) candOpt {
	return func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.Strategy = s }
}

func forLease(name string) candOpt {
	return func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.LeaseName = name }
}

func withAnnotation(k, v string) candOpt {
	return func(lc *coordinationv1beta1.LeaseCandidate) {
		if lc.Annotations == nil {
			lc.Annotations = map[string]string{}
		}
		lc.Annotations[k] = v
	}
}

type leaseOpt func(*coordinationv1.Lease)

// lease builds the test Lease with an entirely empty spec (every pointer
// nil) unless options fill it.
func lease(opts ...leaseOpt) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease, UID: "uid-lease", ResourceVersion: "1"},
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// heldBy makes the Lease a normal held Lease: holder, OldestEmulationVersion,
// 15s, renewed (by the holder's clock) just before t0, transitions 0.
func heldBy(holder string) leaseOpt {
	return func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = ptr.To(holder)
		l.Spec.Strategy = ptr.To(oev)
		l.Spec.LeaseDurationSeconds = ptr.To[int32](15)
		l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour)))
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Second)))
		l.Spec.LeaseTransitions = ptr.To[int32](0)
	}
}

func preferring(name string) leaseOpt {
	return func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = ptr.To(name) }
}

func transitions(n int32) leaseOpt {
	return func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(n) }
}

func durationSeconds(s int32) leaseOpt {
	return func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To(s) }
}

// ---- harness ----

type harness struct {
	t       *testing.T
	ctx     context.Context
	client  *fake.Clientset
	inf     Informers
	c       *Controller
	clock   *testingclock.FakeClock
	rec     *events.FakeRecorder
	metrics *Metrics
	reg     *prometheus.Registry
	rv      int

	// With holdHandlers set, sync updates the stores at once but queues the
	// handler calls in held until runHandlers: the window in which a real
	// informer has updated its store and not yet called the handlers.
	holdHandlers bool
	held         []func()
}

// handle calls a handler now, or holds it until runHandlers.
func (h *harness) handle(f func()) {
	if h.holdHandlers {
		h.held = append(h.held, f)
		return
	}
	f()
}

// runHandlers makes the handler calls held so far, in order, and stops
// holding them.
func (h *harness) runHandlers() {
	held := h.held
	h.held, h.holdHandlers = nil, false
	for _, f := range held {
		f()
	}
}

// newHarness builds a controller on a fake clientset and a fake clock at t0.
// tweak adjusts the options before New.
func newHarness(t *testing.T, tweak ...func(*Options)) *harness {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	h := &harness{
		t:       t,
		ctx:     ctx,
		client:  fake.NewClientset(),
		clock:   testingclock.NewFakeClock(t0),
		rec:     events.NewFakeRecorder(1000),
		metrics: NewMetrics(),
		reg:     prometheus.NewPedanticRegistry(),
		rv:      100,
	}
	for _, verb := range []string{"create", "update", "delete"} {
		h.client.PrependReactor(verb, "leases", h.serve)
		h.client.PrependReactor(verb, "leasecandidates", h.serve)
	}
	acc := access.NewNative(h.client)
	h.inf = NewInformers(acc, nil, 0)
	// Elections are immediate unless a test turns the gathering window, or
	// the wait for a holder it could not see, on.
	opts := Options{Clock: h.clock, Recorder: h.rec, Metrics: h.metrics, ElectionGather: NoElectionGather, UnseenHolderWait: NoUnseenHolderWait}
	for _, f := range tweak {
		f(&opts)
	}
	c, err := New(acc, h.inf, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.c = c
	t.Cleanup(func() {
		c.queue.ShutDown()
		c.gcQueue.ShutDown()
	})
	if err := h.metrics.Register(h.reg); err != nil {
		t.Fatalf("register metrics: %v", err)
	}
	return h
}

func (h *harness) nextRV() string {
	h.rv++
	return strconv.Itoa(h.rv)
}

// serve plays the API server for writes: optimistic concurrency on
// resourceVersion (a stale update is a Conflict), a new resourceVersion on
// every write, and delete preconditions.
func (h *harness) serve(action clienttesting.Action) (bool, runtime.Object, error) {
	tracker := h.client.Tracker()
	gvr, ns := action.GetResource(), action.GetNamespace()
	// CreateAction and UpdateAction have the same method set: switch on the
	// verb.
	switch action.GetVerb() {
	case "create":
		obj := action.(clienttesting.CreateAction).GetObject().DeepCopyObject()
		m := mustMeta(obj)
		m.SetResourceVersion(h.nextRV())
		if m.GetUID() == "" {
			m.SetUID(types.UID("uid-" + m.GetName() + "-" + m.GetResourceVersion()))
		}
		if err := tracker.Create(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		return true, obj.DeepCopyObject(), nil
	case "update":
		obj := action.(clienttesting.UpdateAction).GetObject().DeepCopyObject()
		m := mustMeta(obj)
		cur, err := tracker.Get(gvr, ns, m.GetName())
		if err != nil {
			return true, nil, err
		}
		if rv := mustMeta(cur).GetResourceVersion(); m.GetResourceVersion() != rv {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(),
				fmt.Errorf("resourceVersion %q is stale: the object is at %q", m.GetResourceVersion(), rv))
		}
		m.SetResourceVersion(h.nextRV())
		if err := tracker.Update(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		return true, obj.DeepCopyObject(), nil
	case "delete":
		a := action.(clienttesting.DeleteAction)
		cur, err := tracker.Get(gvr, ns, a.GetName())
		if err != nil {
			return true, nil, err
		}
		m := mustMeta(cur)
		if pre := a.GetDeleteOptions().Preconditions; pre != nil {
			if (pre.UID != nil && *pre.UID != m.GetUID()) || (pre.ResourceVersion != nil && *pre.ResourceVersion != m.GetResourceVersion()) {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.GetName(), fmt.Errorf("precondition failed"))
			}
		}
		return true, nil, tracker.Delete(gvr, ns, a.GetName())
	}
	return false, nil, nil
}

func mustMeta(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	return m
}

// failOn makes the next n writes with verb on resource fail with err (n<0:
// all of them).
func (h *harness) failOn(verb, resource string, n int, err error) {
	h.client.PrependReactor(verb, resource, func(clienttesting.Action) (bool, runtime.Object, error) {
		if n == 0 {
			return false, nil, nil
		}
		n--
		return true, nil, err
	})
}

func conflictErr(resource, name string) error {
	return apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: resource}, name, fmt.Errorf("injected"))
}

// list adds objects as the informers' initial list: the controller has not
// seen candidates created or renewed. Candidates first, then Leases, so that
// the Lease handler finds the candidates, as after a real sync.
func (h *harness) list(objs ...runtime.Object) {
	h.t.Helper()
	h.addObjects(true, objs...)
}

// create adds objects as created while the controller watches.
func (h *harness) create(objs ...runtime.Object) {
	h.t.Helper()
	h.addObjects(false, objs...)
}

// join adds candidates as created while the controller watches, each then
// renewing once at the harness's present: candidates that run and have
// written since registering, as a library candidate that answered its ping.
func (h *harness) join(lcs ...*coordinationv1beta1.LeaseCandidate) {
	h.t.Helper()
	for _, lc := range lcs {
		h.create(lc)
		h.renew(lc.Name, h.clock.Now())
	}
}

func (h *harness) addObjects(initial bool, objs ...runtime.Object) {
	h.t.Helper()
	var leases []*coordinationv1.Lease
	for _, obj := range objs {
		if err := h.client.Tracker().Add(obj.DeepCopyObject()); err != nil {
			h.t.Fatalf("add %T to the server: %v", obj, err)
		}
		switch o := obj.(type) {
		case *coordinationv1beta1.LeaseCandidate:
			o = o.DeepCopy()
			if err := h.inf.Candidates[0].GetIndexer().Add(o); err != nil {
				h.t.Fatal(err)
			}
			h.handle(func() { h.c.onCandidateAdd(o, initial) })
		case *coordinationv1.Lease:
			leases = append(leases, o.DeepCopy())
		default:
			h.t.Fatalf("unexpected object %T", obj)
		}
	}
	for _, l := range leases {
		if err := h.inf.Leases[0].GetIndexer().Add(l); err != nil {
			h.t.Fatal(err)
		}
		h.handle(func() { h.c.onLease(l) })
	}
}

// sync delivers every difference between the server and the stores to the
// stores and the handlers, as the informers would: candidates first.
func (h *harness) sync() {
	h.t.Helper()
	h.syncCandidates()
	h.syncLeases()
}

// syncCandidates delivers what changed in the server's LeaseCandidates, as
// the candidate informer would.
func (h *harness) syncCandidates() {
	h.t.Helper()
	store := h.inf.Candidates[0].GetIndexer()
	server := map[string]runtime.Object{}
	for _, obj := range h.serverObjects(candidatesGVR, "LeaseCandidate") {
		server[mustKey(obj)] = obj
	}
	for _, key := range sortedKeys(server) {
		lc := server[key].(*coordinationv1beta1.LeaseCandidate)
		old, exists, _ := store.GetByKey(key)
		switch {
		case !exists:
			_ = store.Add(lc)
			h.handle(func() { h.c.onCandidateAdd(lc, false) })
		case old.(*coordinationv1beta1.LeaseCandidate).ResourceVersion != lc.ResourceVersion:
			_ = store.Update(lc)
			h.handle(func() { h.c.onCandidateUpdate(old, lc) })
		}
	}
	for _, obj := range store.List() {
		if _, ok := server[mustKey(obj)]; !ok {
			_ = store.Delete(obj)
			h.handle(func() { h.c.onCandidateDelete(obj) })
		}
	}
}

// syncLeases delivers what changed in the server's Leases, as the Lease
// informer would.
func (h *harness) syncLeases() {
	h.t.Helper()
	lstore := h.inf.Leases[0].GetIndexer()
	server := map[string]runtime.Object{}
	for _, obj := range h.serverObjects(leasesGVR, "Lease") {
		server[mustKey(obj)] = obj
	}
	for _, key := range sortedKeys(server) {
		l := server[key].(*coordinationv1.Lease)
		old, exists, _ := lstore.GetByKey(key)
		switch {
		case !exists:
			_ = lstore.Add(l)
			h.handle(func() { h.c.onLease(l) })
		case old.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion:
			_ = lstore.Update(l)
			h.handle(func() { h.c.onLease(l) })
		}
	}
	for _, obj := range lstore.List() {
		if _, ok := server[mustKey(obj)]; !ok {
			_ = lstore.Delete(obj)
			h.handle(func() { h.c.onLeaseDelete(obj) })
		}
	}
}

func (h *harness) serverObjects(gvr schema.GroupVersionResource, kind string) []runtime.Object {
	h.t.Helper()
	list, err := h.client.Tracker().List(gvr, gvr.GroupVersion().WithKind(kind), "")
	if err != nil {
		h.t.Fatalf("list %s: %v", gvr.Resource, err)
	}
	objs, err := meta.ExtractList(list)
	if err != nil {
		h.t.Fatal(err)
	}
	return objs
}

func mustKey(obj any) string {
	k, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		panic(err)
	}
	return k
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// reconcileOnly runs one election step for the test Lease and returns its
// outcome, without delivering its writes: the cache is still behind them.
func (h *harness) reconcileOnly() (time.Duration, error) {
	return h.c.reconcile(h.ctx, leaseKey)
}

// reconcile runs one election step for the test Lease, fails the test on an
// error, and delivers the resulting writes to the stores.
func (h *harness) reconcile() time.Duration {
	h.t.Helper()
	d, err := h.c.reconcile(h.ctx, leaseKey)
	if err != nil {
		h.t.Fatalf("reconcile: unexpected error: %v", err)
	}
	h.sync()
	return d
}

func (h *harness) step(d time.Duration) { h.clock.Step(d) }

// ---- the candidates' and holders' side ----

// serverUpdate writes obj as another client would (no recorded action), then
// delivers it.
func (h *harness) serverUpdate(gvr schema.GroupVersionResource, obj runtime.Object) {
	h.t.Helper()
	h.serverWrite(gvr, obj)
	h.sync()
}

// serverWrite writes obj as another client would, without delivering it to
// the controller's caches (a watch that lags).
func (h *harness) serverWrite(gvr schema.GroupVersionResource, obj runtime.Object) {
	h.t.Helper()
	mustMeta(obj).SetResourceVersion(h.nextRV())
	if err := h.client.Tracker().Update(gvr, obj, testNS); err != nil {
		h.t.Fatalf("update on the server: %v", err)
	}
}

// renew makes candidate name write a new renewTime (by its own clock).
func (h *harness) renew(name string, renewTime time.Time) {
	h.t.Helper()
	lc := h.serverCandidate(name)
	lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renewTime))
	h.serverUpdate(candidatesGVR, lc)
}

// answerPings makes every candidate with a ping pending answer it (only
// those named, if any are), as live library candidates do; it returns how
// many did.
func (h *harness) answerPings(only ...string) int {
	h.t.Helper()
	n := 0
	for _, obj := range h.serverObjects(candidatesGVR, "LeaseCandidate") {
		lc := obj.(*coordinationv1beta1.LeaseCandidate)
		if len(only) > 0 && !slices.Contains(only, lc.Name) {
			continue
		}
		if p := lc.Spec.PingTime; p != nil && (lc.Spec.RenewTime == nil || lc.Spec.RenewTime.Before(p)) {
			h.renew(lc.Name, p.Time)
			n++
		}
	}
	return n
}

// renewLease makes the holder renew the Lease with renewTime.
func (h *harness) renewLease(renewTime time.Time) {
	h.t.Helper()
	l := h.serverLease()
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renewTime))
	h.serverUpdate(leasesGVR, l)
}

// slowLockRenewal has a renewal of the controller's own lock, sent now, show
// in its watch d later (the clock steps d): a write that took d to show.
func (h *harness) slowLockRenewal(d time.Duration) {
	sent := h.clock.Now()
	h.c.opts.WatchLag.ExpectRenewal("cle-system", "cle-controller", sent, sent)
	h.step(d)
	lock := lease(heldBy("cle"))
	lock.Namespace, lock.Name = "cle-system", "cle-controller"
	lock.Spec.RenewTime = ptr.To(metav1.NewMicroTime(sent))
	h.c.opts.WatchLag.observe(lock, h.clock.Now())
}

// deleteHeldLease deletes the test Lease on the server, then lets its
// holder's term run out on the controller's clock (a Lease deleted while
// held is elected again only then; see departedUntil), the candidates
// renewing meanwhile as live ones would.
func (h *harness) deleteHeldLease() {
	h.t.Helper()
	h.deleteLease()
	h.step(h.c.opts.LeaseDuration)
	for _, obj := range h.serverObjects(candidatesGVR, "LeaseCandidate") {
		h.renew(obj.(*coordinationv1beta1.LeaseCandidate).Name, h.clock.Now())
	}
}

// deleteLease deletes the test Lease on the server and delivers the deletion
// to the controller's caches.
func (h *harness) deleteLease() {
	h.t.Helper()
	if err := h.client.Tracker().Delete(leasesGVR, testNS, testLease); err != nil {
		h.t.Fatal(err)
	}
	h.sync()
}

func (h *harness) deleteCandidate(name string) {
	h.t.Helper()
	if err := h.client.Tracker().Delete(candidatesGVR, testNS, name); err != nil {
		h.t.Fatal(err)
	}
	h.sync()
}

func (h *harness) serverCandidate(name string) *coordinationv1beta1.LeaseCandidate {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(candidatesGVR, testNS, name)
	if err != nil {
		h.t.Fatalf("get candidate %s: %v", name, err)
	}
	return obj.(*coordinationv1beta1.LeaseCandidate)
}

// serverLease returns the test Lease as stored, or nil.
func (h *harness) serverLease() *coordinationv1.Lease {
	h.t.Helper()
	return h.serverLeaseNamed(testLease)
}

// serverLeaseNamed is the Lease name of the test namespace as the API has
// it (nil: none).
func (h *harness) serverLeaseNamed(name string) *coordinationv1.Lease {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(leasesGVR, testNS, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return obj.(*coordinationv1.Lease)
}

// ---- what the controller did ----

// written is one write the controller sent to the API.
type written struct {
	verb, resource, name string
	obj                  runtime.Object                      // create and update
	pre                  *metav1.Preconditions               // delete
	action               clienttesting.Action                // the raw action
	lease                *coordinationv1.Lease               // obj as a Lease, if it is one
	cand                 *coordinationv1beta1.LeaseCandidate // obj as a candidate, if it is one
}

func (w written) String() string { return w.verb + " " + w.resource + "/" + w.name }

// writes returns the controller's writes since the last clearWrites.
func (h *harness) writes() []written {
	var out []written
	for _, a := range h.client.Actions() {
		res := a.GetResource().Resource
		if res != "leases" && res != "leasecandidates" {
			continue
		}
		w := written{verb: a.GetVerb(), resource: res, action: a}
		switch a.GetVerb() {
		case "create":
			w.obj = a.(clienttesting.CreateAction).GetObject()
		case "update":
			w.obj = a.(clienttesting.UpdateAction).GetObject()
		case "delete":
			w.name = a.(clienttesting.DeleteAction).GetName()
			w.pre = a.(clienttesting.DeleteAction).GetDeleteOptions().Preconditions
		default:
			continue // reads
		}
		if w.obj != nil {
			w.name = mustMeta(w.obj).GetName()
			w.lease, _ = w.obj.(*coordinationv1.Lease)
			w.cand, _ = w.obj.(*coordinationv1beta1.LeaseCandidate)
		}
		out = append(out, w)
	}
	return out
}

func (h *harness) clearWrites() { h.client.ClearActions() }

// pings returns the names of the candidates pinged since the last
// clearWrites, in order.
func (h *harness) pings() []string {
	var out []string
	for _, w := range h.writes() {
		if w.resource == "leasecandidates" && w.verb == "update" {
			out = append(out, w.name)
		}
	}
	return out
}

// leaseWrites returns the Lease writes since the last clearWrites.
func (h *harness) leaseWrites() []written {
	var out []written
	for _, w := range h.writes() {
		if w.resource == "leases" {
			out = append(out, w)
		}
	}
	return out
}

// expectNoWrites fails if the controller wrote anything since the last
// clearWrites.
func (h *harness) expectNoWrites(context string) {
	h.t.Helper()
	if ws := h.writes(); len(ws) > 0 {
		h.t.Errorf("%s: want no writes, got %v", context, ws)
	}
}

// expectNobodyNamed fails if a Lease write since the last clearWrites named
// a holder: a first election may create the Lease naming nobody, and ping
// candidates, while it gathers them.
func (h *harness) expectNobodyNamed(context string) {
	h.t.Helper()
	for _, w := range h.leaseWrites() {
		if w.verb == "delete" || holderOf(w.lease) != "" {
			h.t.Errorf("%s: want no Lease write naming a holder, got %v naming %q", context, w, holderOf(w.lease))
		}
	}
}

// expectFirstHolder runs the steps of a first election whose gathering
// window has closed (opening the Lease, probing the candidate watch) until
// a Lease write names a holder, fails unless it names want, and clears the
// writes.
func (h *harness) expectFirstHolder(want string) *coordinationv1.Lease {
	h.t.Helper()
	h.clearWrites()
	for range 3 {
		h.reconcile()
		for _, w := range h.leaseWrites() {
			if w.lease != nil && holderOf(w.lease) != "" {
				if got := holderOf(w.lease); got != want {
					h.t.Fatalf("first holder %q, want %q", got, want)
				}
				h.clearWrites()
				return w.lease
			}
		}
	}
	h.t.Fatalf("no first holder named after 3 steps; writes %v", h.writes())
	return nil
}

// expectOneLeaseWrite returns the only write since the last clearWrites,
// which must be a Lease write with verb.
func (h *harness) expectOneLeaseWrite(verb string) *coordinationv1.Lease {
	h.t.Helper()
	ws := h.writes()
	if len(ws) != 1 || ws[0].resource != "leases" || ws[0].verb != verb {
		h.t.Fatalf("want exactly one %s of the Lease, got %v", verb, ws)
	}
	return ws[0].lease
}

// takeEvents returns the Events recorded since the last call.
func (h *harness) takeEvents() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// eventsWithReason filters events ("Type Reason note") by reason.
func eventsWithReason(evs []string, reason string) []string {
	var out []string
	for _, e := range evs {
		if f := strings.Fields(e); len(f) > 1 && f[1] == reason {
			out = append(out, e)
		}
	}
	return out
}

// metric returns the value of a counter or gauge (summed over the series
// whose labels include the given name/value pairs), or the sample count of
// a histogram. A metric with no series is 0.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	fams, err := h.reg.Gather()
	if err != nil {
		h.t.Fatalf("gather metrics: %v", err)
	}
	return promtest.Value(fams, name, labels...)
}

// histogramSum returns the sum of the observations of a histogram.
func (h *harness) histogramSum(name string) float64 {
	h.t.Helper()
	fams, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() == name {
			var s float64
			for _, m := range mf.GetMetric() {
				s += m.GetHistogram().GetSampleSum()
			}
			return s
		}
	}
	return 0
}

// state returns how the controller currently judges candidate name.
func (h *harness) state(name string) liveness {
	h.t.Helper()
	obj, exists, err := h.inf.Candidates[0].GetIndexer().GetByKey(testNS + "/" + name)
	if err != nil || !exists {
		h.t.Fatalf("candidate %s is not in the store", name)
	}
	rec := h.c.obs.candidate(obj.(*coordinationv1beta1.LeaseCandidate), h.clock.Now())
	s, _ := rec.state(h.clock.Now(), h.c.opts.CandidateFreshness, h.c.opts.PingTimeout)
	return s
}

// permutations returns every order of xs.
func permutations[T any](xs []T) [][]T {
	if len(xs) <= 1 {
		return [][]T{slices.Clone(xs)}
	}
	var out [][]T
	for i := range xs {
		rest := append(slices.Clone(xs[:i]), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]T{xs[i]}, p...))
		}
	}
	return out
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil {
		return "<no lease>"
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

func preferredOf(l *coordinationv1.Lease) string {
	if l == nil {
		return "<no lease>"
	}
	return ptr.Deref(l.Spec.PreferredHolder, "")
}

func keyOf(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: testNS, Name: name}
}
