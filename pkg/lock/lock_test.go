package lock

import (
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
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
)

func TestRecordOf(t *testing.T) {
	lease := func(holder, preferred string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To[int32](15),
			LeaseTransitions:     ptr.To[int32](3),
			RenewTime:            ptr.To(metav1.NewMicroTime(time.Unix(1000, 0))),
		}}
		if holder != "-" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		if preferred != "" {
			l.Spec.PreferredHolder = ptr.To(preferred)
		}
		return l
	}
	for _, tc := range []struct {
		name              string
		lease             *coordinationv1.Lease
		holder, preferred string
		seconds           int
	}{
		{"names me", lease("me", ""), "me", "", 15},
		{"names me, I am preferred", lease("me", "me"), "me", "", 15},
		{"names me, another preferred", lease("me", "better"), "better", "better", forever},
		{"names another", lease("other", ""), "other", "", forever},
		{"names another, I am preferred", lease("other", "me"), "other", "", forever},
		{"vacant", lease("", ""), "", "", forever},
		{"no holder", lease("-", ""), "", "", forever},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := recordOf(tc.lease, "me")
			if r.HolderIdentity != tc.holder || r.PreferredHolder != tc.preferred || r.LeaseDurationSeconds != tc.seconds {
				t.Errorf("recordOf = holder %q preferred %q leaseDurationSeconds %d; want %q, %q, %d",
					r.HolderIdentity, r.PreferredHolder, r.LeaseDurationSeconds, tc.holder, tc.preferred, tc.seconds)
			}
			if r.LeaderTransitions != 3 || !r.RenewTime.Equal(&metav1.Time{Time: time.Unix(1000, 0)}) {
				t.Errorf("recordOf lost transitions or renewTime: %+v", r)
			}
		})
	}
}

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

	mu     sync.Mutex
	events []string // the elector's callbacks and the library's Lease writes, in order
}

func (w *world) log(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, fmt.Sprintf(format, args...))
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
	switch a.GetVerb() {
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

// runElector runs a client-go LeaderElector on a new Lock until the returned
// function is called, which waits for the elector to return.
func (w *world) runElector(release bool) (le *leaderelection.LeaderElector, stop func()) {
	t := w.t
	lock, err := New(Config{Candidate: candidate.Config{
		Access:        access.NewNative(w.client),
		Namespace:     ns,
		LeaseName:     leaseName,
		Identity:      me,
		BinaryVersion: "1.36.0",
		LeaseDuration: leaseDuration,
		RenewDeadline: renewDeadline,
		RetryPeriod:   retryPeriod,
	}})
	if err != nil {
		t.Fatal(err)
	}
	w.lock = lock
	le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: release,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				w.log("started leading")
				<-ctx.Done()
				w.log("leader work returned")
			},
			OnStoppedLeading: func() { w.log("elector stopped") },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
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
	return le, stop
}

func (w *world) leads(le *leaderelection.LeaderElector) bool {
	return le.IsLeader() && w.lock.Candidate().IsLeader()
}

func TestElectorLeadsOnlyALeaseNamingIt(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, _ := w.runElector(true)
		advance(3 * leaseDuration)
		if n := len(w.logged()); n != 0 {
			t.Fatalf("with no Lease: %v; want no write and no leadership", w.logged())
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

func TestPreferredHolderStopsElector(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, _ := w.runElector(true)
		w.elect(me)
		advance(3 * retryPeriod)
		if !w.leads(le) {
			t.Fatal("not leading")
		}
		renewed := w.lease().Spec.RenewTime.Time
		writes := len(w.logged())
		w.prefer("better")
		if w.lock.Candidate().IsLeader() {
			t.Error("the candidate still counts itself leader once another is preferred")
		}
		// client-go gives up when its renewals have failed for
		// RenewDeadline; with ReleaseOnCancel it must not release then,
		// as its leader work has not been told to stop yet.
		advance(retryPeriod + renewDeadline + time.Second)
		if le.IsLeader() {
			t.Errorf("the elector still leads RetryPeriod + RenewDeadline after the preference: %v", w.logged())
		}
		if got := w.logged()[writes:]; !slices.Contains(got, "leader work returned") || slices.ContainsFunc(got, isLeaseWrite) {
			t.Errorf("after the preference: %v; want the elector to stop with no Lease write", got)
		}
		if w.holder() != me {
			t.Fatalf("the Lease went to %s before LeaseDuration passed since the last renewal", w.holder())
		}
		advance(time.Until(renewed.Add(leaseDuration)) + time.Second)
		if w.holder() != "better" {
			t.Errorf("the Lease names %s LeaseDuration after the last renewal, want the preferred holder", w.holder())
		}
	})
}

func TestReleaseOnCancelHandsOverAtOnce(t *testing.T) {
	inWorld(t, func(t *testing.T, w *world) {
		le, stop := w.runElector(true)
		w.elect(me)
		advance(3 * retryPeriod)
		if !w.leads(le) {
			t.Fatal("not leading")
		}
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
