package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/stepped"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
)

func TestIdentityFor(t *testing.T) {
	for _, id := range []string{"node-1", "a.b.c", "x"} {
		if got := IdentityFor(id); got != id {
			t.Errorf("IdentityFor(%q) = %q, want it kept", id, got)
		}
	}
	uuid := "6f1c2a3e-0b1d-4c5e-9f00-123456789abc"
	seen := map[string]string{}
	for _, id := range []string{
		"node-1_" + uuid, "Node-1_" + uuid, "node-1-" + uuid + "_", "_", "ÄÖÜ", strings.Repeat("a_", 200), "host.example.com_" + uuid,
	} {
		got := IdentityFor(id)
		if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 {
			t.Errorf("IdentityFor(%q) = %q, not a DNS-1123 subdomain: %v", id, got, msgs)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("IdentityFor maps %q and %q both to %q", other, id, got)
		}
		seen[got] = id
		if IdentityFor(id) != got {
			t.Errorf("IdentityFor(%q) is not stable", id)
		}
	}
	if got := IdentityFor("node-1_" + uuid); !strings.HasPrefix(got, "node-1-"+uuid+"-") {
		t.Errorf("IdentityFor(host_uuid) = %q, want host-uuid-<hash>", got)
	}
}

// The tests below run a real client-go LeaderElector on the Lock inside a
// synctest bubble: time is virtual (the elector's and the library's clocks
// are real clocks, which the bubble fakes), so advance moves it and waits
// until everything has reacted. A fake clientset plays the API server with
// resourceVersion preconditions; the test plays the election controller.

const (
	ns            = "ns"
	leaseName     = "lease"
	me            = "me"
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

type world struct {
	t      *testing.T
	client *fake.Clientset
	rv     atomic.Int64
	lock   *Lock
	// electorCtx is the context the elector runs with.
	electorCtx context.Context

	mu     sync.Mutex
	events []string // the elector's callbacks and the library's Lease writes, in order
	// leaseUpdate, when set, is asked about each Lease update of the
	// library: fail it with err, or make it and hold the answer for hold.
	leaseUpdate func(*coordinationv1.Lease) (hold time.Duration, err error)
	// candidateDelete, when set, is how long a LeaseCandidate deletion
	// takes.
	candidateDelete time.Duration
	// working is set while the elector's leader work runs; renewedAt is
	// when the server last made a renewal naming me.
	working   bool
	renewedAt time.Time
	// overlaps are the moments the Lease moved while leader work could
	// still run.
	overlaps []string
	// logs are the elector's and the library's logs.
	logs ktesting.Buffer
}

// errorsLogged returns the error entries logged so far.
func (w *world) errorsLogged() []string {
	var out []string
	for _, e := range w.logs.Data() {
		if e.Type == ktesting.LogError {
			out = append(out, e.Message)
		}
	}
	return out
}

// log records an event, and checks the one invariant of the adoption path:
// the Lease never moves to another holder while the elector's leader work
// may still run. It moves when the library names another holder (or nobody),
// or when the election controller judges it expired, a lease duration after
// it saw the last renewal.
func (w *world) log(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := fmt.Sprintf(format, args...)
	w.events = append(w.events, e)
	switch {
	case e == "started leading":
		w.working = true
	case e == "leader work returned":
		w.working = false
		if expiry := w.renewedAt.Add(leaseDuration); time.Now().After(expiry) {
			w.overlaps = append(w.overlaps, fmt.Sprintf("leader work returned %s after the Lease expired (last renewal made %s ago)",
				time.Since(expiry), time.Since(w.renewedAt)))
		}
	case e == "update Lease holder="+me:
		w.renewedAt = time.Now()
	case w.working && strings.HasPrefix(e, "update Lease holder="):
		w.overlaps = append(w.overlaps, "the library wrote "+e+" while leader work ran")
	}
}

// faults sets how the server treats the library's Lease updates and
// LeaseCandidate deletions from now on.
func (w *world) faults(leaseUpdate func(*coordinationv1.Lease) (time.Duration, error), candidateDelete time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leaseUpdate, w.candidateDelete = leaseUpdate, candidateDelete
}

// checkNoOverlap fails the test if the Lease moved while leader work could
// still run.
func (w *world) checkNoOverlap() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range w.overlaps {
		w.t.Errorf("overlap: %s; events %q", o, w.events)
	}
}

func (w *world) logged() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.events...)
}

// advance moves virtual time by d and waits until every goroutine of the
// bubble is idle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func inWorld(t *testing.T, f func(t *testing.T, w *world)) {
	synctest.Test(t, func(t *testing.T) {
		w := &world{t: t, client: fake.NewClientset()}
		w.rv.Store(100)
		w.client.PrependReactor("*", "*", w.serve)
		f(t, w)
	})
}

// serve sets resourceVersions and enforces them on updates, as
// kube-apiserver does, and logs the Lease writes.
func (w *world) serve(a clienttesting.Action) (bool, runtime.Object, error) {
	var obj runtime.Object
	var hold time.Duration
	switch a.GetVerb() {
	case "delete":
		w.mu.Lock()
		slow := w.candidateDelete
		w.mu.Unlock()
		if a.GetResource().Resource == "leasecandidates" {
			time.Sleep(slow)
		}
		return false, nil, nil
	case "update":
		obj = a.(clienttesting.UpdateAction).GetObject()
		m, _ := meta.Accessor(obj)
		cur, err := w.client.Tracker().Get(a.GetResource(), a.GetNamespace(), m.GetName())
		if err != nil {
			return true, nil, err
		}
		if c, _ := meta.Accessor(cur); c.GetResourceVersion() != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), m.GetName(), errors.New("stale resourceVersion"))
		}
		w.mu.Lock()
		fault := w.leaseUpdate
		w.mu.Unlock()
		if l, ok := obj.(*coordinationv1.Lease); ok && fault != nil {
			var err error
			if hold, err = fault(l); err != nil {
				return true, nil, err
			}
		}
	case "create":
		obj = a.(clienttesting.CreateAction).GetObject()
	default:
		return false, nil, nil
	}
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatInt(w.rv.Add(1), 10))
	if a.GetResource() == leasesGVR {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			w.log("%s Lease holder=%s", a.GetVerb(), ptr.Deref(l.Spec.HolderIdentity, ""))
		}
	}
	if hold > 0 {
		// Made now, answered late.
		if err := w.client.Tracker().Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		time.Sleep(hold)
		return true, obj, nil
	}
	return false, nil, nil
}

func (w *world) lease() *coordinationv1.Lease {
	obj, err := w.client.Tracker().Get(leasesGVR, ns, leaseName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return obj.(*coordinationv1.Lease)
}

// put writes the Lease as the election controller does.
func (w *world) put(l *coordinationv1.Lease) {
	l.ResourceVersion = strconv.FormatInt(w.rv.Add(1), 10)
	var err error
	if w.lease() == nil {
		err = w.client.Tracker().Create(leasesGVR, l, ns)
	} else {
		err = w.client.Tracker().Update(leasesGVR, l, ns)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	synctest.Wait()
}

// elect names holder, as cle-controller does.
func (w *world) elect(holder string) {
	l := w.lease()
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseName}}
	} else {
		l = l.DeepCopy()
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.PreferredHolder = nil
	l.Spec.LeaseDurationSeconds = ptr.To(int32(leaseDuration / time.Second))
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	w.put(l)
}

func (w *world) prefer(holder string) {
	l := w.lease().DeepCopy()
	l.Spec.PreferredHolder = ptr.To(holder)
	w.put(l)
}

func (w *world) holder() string {
	return ptr.Deref(w.lease().Spec.HolderIdentity, "")
}

// elector is how a test runs client-go's LeaderElector on the Lock.
type elector struct {
	// release is the elector's ReleaseOnCancel.
	release bool
	// leaseDuration, renewDeadline and retryPeriod are the elector's
	// timings; zero: the Lock's (Lock.Timings).
	leaseDuration, renewDeadline, retryPeriod time.Duration
	// workStops is how long leader work takes to return once its context
	// is cancelled.
	workStops time.Duration
	// untracked leaves the callbacks unwrapped by Lock.Callbacks.
	untracked bool
	// releaseAfterWork is the Lock's Config.ReleaseAfterLeaderWork.
	releaseAfterWork bool
	// electorContext runs the elector with Lock.ElectorContext.
	electorContext bool
}

// errLock records the errors of the Lock's Update, and counts its Gets.
type errLock struct {
	*Lock
	mu   sync.Mutex
	errs []error
	gets atomic.Int64
}

func (l *errLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.gets.Add(1)
	return l.Lock.Get(ctx)
}

func (l *errLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Lock.Update(ctx, ler)
	if err != nil {
		l.mu.Lock()
		l.errs = append(l.errs, err)
		l.mu.Unlock()
	}
	return err
}

func (l *errLock) updateErrors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// runElector runs a client-go LeaderElector on a new Lock until the returned
// function is called, which waits for the elector to return and closes the
// Lock.
func (w *world) runElector(o elector) (le *leaderelection.LeaderElector, lk *errLock, stop func()) {
	t := w.t
	lock, err := New(Config{ReleaseAfterLeaderWork: o.releaseAfterWork, Candidate: stepped.WithAccess(candidate.Config{
		Namespace:     ns,
		LeaseName:     leaseName,
		Identity:      me,
		BinaryVersion: "1.36.0",
		LeaseDuration: leaseDuration,
		RenewDeadline: renewDeadline,
		RetryPeriod:   retryPeriod,
	}, access.NewNative(w.client))})
	if err != nil {
		t.Fatal(err)
	}
	w.lock = lock
	lk = &errLock{Lock: lock}
	callbacks := leaderelection.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			w.log("started leading")
			<-ctx.Done()
			time.Sleep(o.workStops)
			w.log("leader work returned")
		},
		OnStoppedLeading: func() { w.log("elector stopped") },
	}
	if !o.untracked {
		callbacks = lock.Callbacks(callbacks)
	}
	ld, rd, rp := lock.Timings()
	le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lk,
		LeaseDuration:   cmp.Or(o.leaseDuration, ld),
		RenewDeadline:   cmp.Or(o.renewDeadline, rd),
		RetryPeriod:     cmp.Or(o.retryPeriod, rp),
		ReleaseOnCancel: o.release,
		Callbacks:       callbacks,
	})
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	w.logs = logger.GetSink().(ktesting.Underlier).GetBuffer()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	if o.electorContext {
		ctx = lock.ElectorContext(ctx)
	}
	w.electorCtx = ctx
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(ctx)
	}()
	synctest.Wait()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if err := lock.Close(context.Background()); err != nil {
				t.Error(err)
			}
			synctest.Wait()
		})
	}
	t.Cleanup(stop)
	return le, lk, stop
}

func (w *world) leads(le *leaderelection.LeaderElector) bool {
	return le.IsLeader() && w.lock.Candidate().IsLeader()
}

func TestElectorLeadsOnlyALeaseNamingIt(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, _, _ := w.runElector(elector{release: true})
		advance(3 * leaseDuration)
		if n := len(w.logged()); n != 0 {
			t.Fatalf("with no Lease: %v; want no write and no leadership", w.logged())
		}
		w.elect("")
		advance(3 * leaseDuration)
		if got := w.errorsLogged(); len(got) != 0 || le.GetLeader() != NoHolder {
			t.Errorf("with no Lease, then a vacant one: errors logged %q, leader %q; want none, %q", got, le.GetLeader(), NoHolder)
		}
		w.elect("other")
		advance(3 * leaseDuration)
		if le.IsLeader() || w.holder() != "other" || len(w.logged()) != 0 {
			t.Fatalf("took a Lease held by another that nobody renews: %v", w.logged())
		}
		w.elect(me)
		advance(3 * retryPeriod) // the elector polls every RetryPeriod, with jitter
		if !w.leads(le) {
			t.Fatalf("not leading a Lease named to it: %v", w.logged())
		}
		if token, ok := w.lock.Candidate().Token(); !ok || token != ptr.Deref(w.lease().Spec.LeaseTransitions, -1) {
			t.Errorf("Token() = %d, %v; want the Lease's leaseTransitions %d", token, ok, ptr.Deref(w.lease().Spec.LeaseTransitions, -1))
		}
		// It keeps leading through the library's renewals.
		renewed := w.lease().Spec.RenewTime
		advance(3 * leaseDuration)
		if !w.leads(le) || !w.lease().Spec.RenewTime.After(renewed.Time) {
			t.Errorf("stopped leading or renewing: %v", w.logged())
		}
	})
}

// Without ElectorContext the elector learns of a preemption only when its
// renewals have failed for RenewDeadline. Its release then hands the Lease
// to the preferred holder once leader work has returned, when the Lock
// follows leader work; otherwise the Lease goes when it expires.
func TestPreferredHolderStopsElector(t *testing.T) {
	for _, tc := range []struct {
		name      string
		untracked bool
	}{
		{"callbacks wrapped", false},
		{"callbacks not wrapped", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inWorld(t, func(t *testing.T, w *world) {
				le, _, _ := w.runElector(elector{release: true, untracked: tc.untracked, workStops: time.Second})
				w.leadNow(le)
				renewed := w.lease().Spec.RenewTime.Time
				writes := len(w.logged())
				w.prefer("better")
				if w.lock.Candidate().IsLeader() {
					t.Error("the candidate still counts itself leader once another is preferred")
				}
				advance(renewDeadline)
				if !le.IsLeader() || w.holder() != me {
					t.Fatalf("RenewDeadline after the preference: elector leading %v, holder %s; want client-go to go on until its renew deadline, and the Lease unmoved: %v",
						le.IsLeader(), w.holder(), w.logged())
				}
				// client-go gives up RetryPeriod + RenewDeadline after
				// its last successful renewal at most, then releases
				// and cancels leader work at the same moment.
				advance(retryPeriod + 2*time.Second)
				if le.IsLeader() || !slices.Contains(w.logged()[writes:], "leader work returned") {
					t.Errorf("the elector still leads, or its leader work runs, RetryPeriod + RenewDeadline after the preference: %v", w.logged())
				}
				w.checkNoOverlap()
				want := map[bool]string{false: "better", true: me}[tc.untracked]
				if w.holder() != want {
					t.Fatalf("after the elector gave up, the Lease names %s before it expired, want %s: %v", w.holder(), want, w.logged())
				}
				if tc.untracked && !w.lease().Spec.RenewTime.Time.Equal(renewed) {
					t.Errorf("the Lease was renewed after the preference: %v", w.logged())
				}
				// Left to expire, it goes to the next holder when the
				// election controller finds it expired.
			})
		})
	}
}

// With ElectorContext a preemption stops the elector at once: leader work
// is cancelled, the elector releases, and the Lease goes to the preferred
// holder as soon as leader work has returned, never before.
func TestElectorContextHandsOverOnPreemption(t *testing.T) {
	const workStops = 700 * time.Millisecond
	inWorld(t, func(t *testing.T, w *world) {
		le, _, _ := w.runElector(elector{release: true, workStops: workStops, electorContext: true})
		w.leadNow(le)
		writes := len(w.logged())
		w.prefer("better")
		if le.IsLeader() || !slices.Contains(w.logged()[writes:], "elector stopped") {
			t.Errorf("the elector leads on once another is preferred: %v", w.logged()[writes:])
		}
		if w.holder() != me {
			t.Fatalf("the Lease went to %s while leader work still ran: %v", w.holder(), w.logged()[writes:])
		}
		advance(workStops)
		w.checkNoOverlap()
		if got := w.logged()[writes:]; w.holder() != "better" || !slices.Contains(got, "leader work returned") {
			t.Fatalf("once leader work returned: holder %s, %v; want the preferred holder", w.holder(), got)
		}
		if err := context.Cause(w.electorCtx); !errors.Is(err, ErrTermEnded) {
			t.Errorf("the elector's context ended with %v, want ErrTermEnded", err)
		}
		if _, err := w.client.CoordinationV1beta1().LeaseCandidates(ns).Get(context.Background(), me, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("LeaseCandidate after the release: %v, want it deleted", err)
		}
	})
}

// A context asked for after a term ended is done at once; before any term,
// it is not.
func TestElectorContextAfterATerm(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, _, stop := w.runElector(elector{release: true})
		if ctx := w.lock.ElectorContext(context.Background()); ctx.Err() != nil {
			t.Errorf("before any term: %v", ctx.Err())
		}
		w.leadNow(le)
		stop()
		if ctx := w.lock.ElectorContext(context.Background()); !errors.Is(context.Cause(ctx), ErrTermEnded) {
			t.Errorf("after a term ended: %v, want ErrTermEnded", context.Cause(ctx))
		}
	})
}

func TestReleaseOnCancelHandsOverAtOnce(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, _, stop := w.runElector(elector{release: true})
		w.leadNow(le)
		before := ptr.Deref(w.lease().Spec.LeaseTransitions, 0)
		stop()
		lease := w.lease()
		if w.holder() != "" || ptr.Deref(lease.Spec.LeaseTransitions, 0) != before {
			t.Errorf("after the elector's release: holder %q transitions %d; want released, transitions %d (a release counts no term)",
				w.holder(), ptr.Deref(lease.Spec.LeaseTransitions, 0), before)
		}
		if _, err := w.client.CoordinationV1beta1().LeaseCandidates(ns).Get(context.Background(), me, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("LeaseCandidate after release: %v, want it deleted", err)
		}
		if _, _, err := w.lock.Get(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("Get after release = %v, want ErrClosed", err)
		}
	})
}

func isLeaseWrite(event string) bool {
	return strings.HasSuffix(strings.Fields(event)[0], "Lease") || strings.Contains(event, " Lease ")
}

func TestCreateFails(t *testing.T) {
	l := &Lock{namespace: ns, name: leaseName}
	if err := l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: me}); !errors.Is(err, ErrNeverCreates) {
		t.Errorf("Create = %v, want ErrNeverCreates", err)
	}
}

type eventRecorder struct{ got []string }

func (r *eventRecorder) Eventf(obj runtime.Object, eventType, reason, message string, args ...any) {
	m, _ := meta.Accessor(obj)
	kind := obj.GetObjectKind().GroupVersionKind()
	r.got = append(r.got, fmt.Sprintf("%s %s/%s %s %s %s", kind.Kind, m.GetNamespace(), m.GetName(), eventType, reason, fmt.Sprintf(message, args...)))
}

func TestRecordEventLikeClientGo(t *testing.T) {
	rec := &eventRecorder{}
	l, err := New(Config{EventRecorder: rec, Candidate: candidate.Config{
		Clients: access.Clients{Kube: fake.NewClientset()}, Namespace: ns, LeaseName: leaseName, Identity: "Host_1", BinaryVersion: "1.36.0",
	}})
	if err != nil {
		t.Fatal(err)
	}
	l.RecordEvent("became leader")
	want := "Lease ns/lease Normal LeaderElection " + IdentityFor("Host_1") + " became leader"
	if len(rec.got) != 1 || rec.got[0] != want {
		t.Errorf("events %q, want %q", rec.got, want)
	}
	if l.Describe() != "ns/lease" || l.Identity() != IdentityFor("Host_1") {
		t.Errorf("Describe() = %q, Identity() = %q", l.Describe(), l.Identity())
	}
}

// leadNow elects me and waits until the elector leads: it tries every
// RetryPeriod, with jitter, and the Lock lets it lead once the gap between
// two of its tries has shown that its RetryPeriod is not longer than the
// candidate's.
func (w *world) leadNow(le *leaderelection.LeaderElector) {
	w.t.Helper()
	w.elect(me)
	for range 50 {
		if w.leads(le) {
			return
		}
		advance(retryPeriod)
	}
	w.t.Fatalf("not leading after 50 retry periods: %v", w.logged())
}

// An elector standing by waits in Get for the holder to change instead of
// polling: another holder's renewals do not wake it, nor does the Lease
// going vacant, and once the Lease names it, it leads at once rather than at
// its next try.
func TestStandingByElectorLeadsAsSoonAsNamed(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, lk, _ := w.runElector(elector{release: true})
		w.elect("other")
		advance(3 * retryPeriod) // a gap proves the elector's RetryPeriod
		before := lk.gets.Load()
		for range 20 {
			l := w.lease().DeepCopy()
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			w.put(l)
			advance(retryPeriod)
		}
		if n := lk.gets.Load() - before; n > 2 {
			t.Errorf("the elector read the Lease %d times while another holder renewed it 20 times; want it to wait for a new holder", n)
		}
		if le.IsLeader() || le.GetLeader() != "other" {
			t.Fatalf("leading %v, leader %q; want standing by behind other", le.IsLeader(), le.GetLeader())
		}
		// The holder releases, and the controller names this process a
		// moment later: the vacant Lease, which the elector cannot take,
		// does not end its wait.
		w.elect("")
		advance(100 * time.Millisecond)
		w.elect(me)
		advance(time.Millisecond)
		if !w.leads(le) {
			t.Errorf("not leading a millisecond after the Lease named it: %v", w.logged())
		}
	})
}

// client-go waits RetryPeriod to 2.2 times it between two tries to acquire,
// at random, and the Lock lets the elector lead only once a gap has shown
// that its RetryPeriod is not longer than the candidate's and a third of the
// margin (3s here). With Lock.Timings' RetryPeriod every gap does: the
// elector leads at its first try once the Lease names it, whether it stood
// by or starts with the Lease naming it (its very first try has no gap
// before it, and the second leads). With the candidate's RetryPeriod only
// some gaps do, and it leads some tries later.
func TestElectorLeadsAtItsFirstTry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		standBy   bool
		candidate bool // the elector has the candidate's RetryPeriod
	}{
		{"standing by", true, false},
		{"named before its start", false, false},
		{"named before its start, candidate's RetryPeriod", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var late int
			const runs = 50
			for range runs {
				inWorld(t, func(t *testing.T, w *world) {
					if tc.standBy {
						w.elect("other")
					} else {
						w.elect(me)
					}
					e := elector{release: true}
					if tc.candidate {
						e.retryPeriod = retryPeriod
					}
					le, _, _ := w.runElector(e)
					_, _, rp := w.lock.Timings()
					if tc.candidate {
						rp = retryPeriod
					}
					if tc.standBy {
						advance(3 * rp)
						w.elect(me)
					}
					advance(time.Duration(2.2*float64(rp)) + time.Millisecond)
					if !w.leads(le) {
						late++
						if !tc.candidate {
							t.Fatalf("not leading 2.2 retry periods (%s) after the Lease named it: %v", rp, w.logged())
						}
						w.leadNow(le)
					}
					w.checkNoOverlap()
				})
			}
			t.Logf("%d of %d electors did not lead at their first try after a gap", late, runs)
			if tc.candidate && late == 0 {
				t.Errorf("every elector with the candidate's RetryPeriod led at its first try after a gap; want some gaps too long to show its RetryPeriod")
			}
		})
	}
}

func TestElectorRetryPeriod(t *testing.T) {
	for _, tc := range []struct{ lease, renew, retry, want time.Duration }{
		{15 * time.Second, 10 * time.Second, 2 * time.Second, 1295 * time.Millisecond},
		{8 * time.Second, 5 * time.Second, time.Second, 719 * time.Millisecond},
		{60 * time.Second, 40 * time.Second, 10 * time.Second, 5757 * time.Millisecond},
		// Never longer than the candidate's.
		{15 * time.Second, 10 * time.Second, time.Second, time.Second},
	} {
		l, err := New(Config{Candidate: candidate.Config{
			Clients: access.Clients{Kube: fake.NewClientset()}, Namespace: ns, LeaseName: leaseName, Identity: me, BinaryVersion: "1.36.0",
			LeaseDuration: tc.lease, RenewDeadline: tc.renew, RetryPeriod: tc.retry,
		}})
		if err != nil {
			t.Fatal(err)
		}
		ld, rd, rp := l.Timings()
		if ld != tc.lease || rd != tc.renew || rp != tc.want {
			t.Errorf("%s/%s/%s: Timings() = %s/%s/%s, want %s/%s/%s", tc.lease, tc.renew, tc.retry, ld, rd, rp, tc.lease, tc.renew, tc.want)
		}
		// Its longest gap, 2.2 times it, is within the limit.
		if limit := tc.retry + (tc.lease-tc.renew-tc.retry)/3; time.Duration(2.2*float64(rp)) > limit {
			t.Errorf("%s/%s/%s: 2.2 * %s is longer than the limit %s", tc.lease, tc.renew, tc.retry, rp, limit)
		}
	}
}

// The Lease goes to another holder and comes back in a new term between two
// renewals of the elector (this process was frozen or cut off meanwhile):
// the elector's leader work belongs to the old term, and acts on its token,
// so it must stop; the renewal that would carry it into the new term fails.
func TestNewTermStopsTheOldTermsWork(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, lk, _ := w.runElector(elector{release: true})
		w.leadNow(le)
		w.elect("other")
		w.elect(me)
		_, _, rp := w.lock.Timings()
		advance(rp + renewDeadline + time.Second)
		if !slices.Contains(w.logged(), "leader work returned") {
			t.Errorf("the old term's leader work still runs in the new term: %v", w.logged())
		}
		if !slices.ContainsFunc(lk.updateErrors(), func(err error) bool { return errors.Is(err, candidate.ErrNotLeader) }) {
			t.Errorf("Update errors %v, want a renewal refused for the new term", lk.updateErrors())
		}
	})
}

var errServer = apierrors.NewInternalError(errors.New("etcd is unhappy"))

// A renewal answered 4s late: client-go counts its renew deadline from the
// answer, the election controller its lease duration from the renewal it
// saw, 4s earlier. Counted, it would let the elector lead past the expiry.
func TestSlowRenewalIsNotCounted(t *testing.T) {
	for _, then := range []string{"renewals fail", "another is preferred"} {
		t.Run(then, func(t *testing.T) {
			inWorld(t, func(t *testing.T, w *world) {
				le, lk, _ := w.runElector(elector{release: true, workStops: 500 * time.Millisecond})
				w.leadNow(le)
				var held atomic.Bool
				w.faults(func(l *coordinationv1.Lease) (time.Duration, error) {
					if ptr.Deref(l.Spec.HolderIdentity, "") != me {
						return 0, nil // a hand-over
					}
					if held.CompareAndSwap(false, true) {
						return 4 * time.Second, nil
					}
					if then == "renewals fail" {
						return 0, errServer
					}
					return 0, nil
				}, 0)
				for !held.Load() {
					advance(100 * time.Millisecond)
				}
				if then == "another is preferred" {
					w.prefer("better")
				}
				advance(leaseDuration + renewDeadline + retryPeriod)
				w.checkNoOverlap()
				if le.IsLeader() {
					t.Errorf("the elector still leads: %v", w.logged())
				}
				if !slices.ContainsFunc(lk.updateErrors(), func(err error) bool { return errors.Is(err, candidate.ErrSlowRenewal) }) {
					t.Errorf("Update errors %v, want one for the slow renewal", lk.updateErrors())
				}
				if then == "another is preferred" && w.holder() != "better" {
					t.Errorf("the Lease names %q, want it handed over to the preferred holder once leader work returned", w.holder())
				}
			})
		})
	}
}

// Renewals fail and deleting the LeaseCandidate is slow: the elector's
// release comes before client-go cancels leader work, and must not hold it
// up (client-go releases inside its renew loop, and only then stops leader
// work).
func TestLostTermStopsLeaderWorkWithoutWaitingForCleanup(t *testing.T) {
	for _, release := range []bool{true, false} {
		t.Run(fmt.Sprintf("ReleaseOnCancel=%v", release), func(t *testing.T) {
			inWorld(t, func(t *testing.T, w *world) {
				le, _, _ := w.runElector(elector{release: release, workStops: 500 * time.Millisecond})
				w.leadNow(le)
				w.faults(func(*coordinationv1.Lease) (time.Duration, error) { return 0, errServer }, 20*time.Second)
				advance(2 * leaseDuration)
				w.checkNoOverlap()
				if !slices.Contains(w.logged(), "leader work returned") {
					t.Errorf("leader work still runs 2 lease durations after renewals began to fail: %v", w.logged())
				}
			})
		})
	}
}

// An elector whose timings are longer than the candidate's could lead after
// the election controller, which counts the candidate's, has named another
// holder: the Lock refuses its renewals.
func TestMismatchedTimingsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		lease, renew, period time.Duration
	}{
		{"longer LeaseDuration", 60 * time.Second, 40 * time.Second, 10 * time.Second},
		{"longer RenewDeadline", leaseDuration, 12 * time.Second, retryPeriod},
		{"longer RetryPeriod", leaseDuration, renewDeadline, 4500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inWorld(t, func(t *testing.T, w *world) {
				le, lk, _ := w.runElector(elector{release: true, workStops: time.Second,
					leaseDuration: tc.lease, renewDeadline: tc.renew, retryPeriod: tc.period})
				w.elect(me)
				advance(20 * tc.period)
				w.prefer("better")
				advance(tc.lease + tc.renew + tc.period)
				w.checkNoOverlap()
				if le.IsLeader() {
					t.Errorf("the elector with mismatched timings leads: %v", w.logged())
				}
				if !slices.ContainsFunc(lk.updateErrors(), func(err error) bool { return errors.Is(err, ErrTimingMismatch) }) {
					t.Errorf("Update errors %v, want ErrTimingMismatch", lk.updateErrors())
				}
			})
		})
	}
}

// On shutdown client-go cancels leader work and releases at the same
// moment: the Lease may move only once leader work has returned.
func TestReleaseWaitsForLeaderWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    elector
		// handedOver: the Lease is released once leader work returned;
		// otherwise it is left to expire.
		handedOver bool
	}{
		{"callbacks wrapped", elector{release: true, workStops: 3 * time.Second}, true},
		{"callbacks not wrapped", elector{release: true, workStops: 3 * time.Second, untracked: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inWorld(t, func(t *testing.T, w *world) {
				le, _, stop := w.runElector(tc.e)
				w.leadNow(le)
				stop()
				advance(tc.e.workStops + time.Second) // client-go does not wait for leader work
				w.checkNoOverlap()
				if !slices.Contains(w.logged(), "leader work returned") {
					t.Fatalf("leader work has not returned: %v", w.logged())
				}
				if got, want := w.holder(), map[bool]string{true: "", false: me}[tc.handedOver]; got != want {
					t.Errorf("after the elector's release the Lease names %q, want %q", got, want)
				}
				if _, err := w.client.CoordinationV1beta1().LeaseCandidates(ns).Get(context.Background(), me, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("LeaseCandidate after release: %v, want it deleted", err)
				}
			})
		})
	}
}

// A shutdown that cancels the elector's context while a renewal is under
// way (client-go renews right after it acquires, and every RetryPeriod)
// ends a sound term: with ReleaseAfterLeaderWork the Lease moves at once.
// A release after the elector gave up on its own (its renewals failed for
// RenewDeadline) is sent before leader work stops, and the Lease is left to
// expire.
func TestReleaseAfterAnAbandonedRenewal(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, lk, stop := w.runElector(elector{release: true, untracked: true, releaseAfterWork: true})
		w.leadNow(le)
		// client-go's tryAcquireOrRenew renews with the context the
		// shutdown cancels; its request fails with the context's error.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w.faults(func(*coordinationv1.Lease) (time.Duration, error) {
			return 0, fmt.Errorf("Put leases/%s: %w", leaseName, ctx.Err())
		}, 0)
		err := lk.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: me, LeaseDurationSeconds: int(leaseDuration / time.Second)})
		if err == nil {
			t.Fatal("a renewal whose request failed succeeded")
		}
		w.faults(nil, 0)
		stop()
		if got := w.holder(); got != "" {
			t.Errorf("after the renewal (%v) and the elector's release the Lease names %q, want nobody", err, got)
		}
	})
	inWorld(t, func(t *testing.T, w *world) {
		le, _, _ := w.runElector(elector{release: true, untracked: true, releaseAfterWork: true})
		w.leadNow(le)
		w.faults(func(*coordinationv1.Lease) (time.Duration, error) {
			return 0, apierrors.NewServiceUnavailable("etcd is down")
		}, 0)
		advance(retryPeriod + renewDeadline + time.Second)
		if le.IsLeader() {
			t.Fatalf("the elector leads after its renewals failed for RenewDeadline: %v", w.logged())
		}
		if got := w.holder(); got != me {
			t.Errorf("the elector gave up on its own and released: the Lease names %q, want it left to expire", got)
		}
	})
}
