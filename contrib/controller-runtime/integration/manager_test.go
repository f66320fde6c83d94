package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cle "github.com/cle-dev/cle/contrib/controller-runtime"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
	"github.com/cle-dev/cle/test/integration/framework"
)

// Short timings, loose enough for a loaded two-core machine. RenewDeadline +
// RetryPeriod (6s) is how long a preempted manager may keep running its
// leader runnables; LeaseDuration is when the next one may start.
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 5 * time.Second
	retryPeriod   = time.Second
	waitLong      = 90 * time.Second
)

// witness records when each manager's leader-only runnable starts and stops,
// on this process's monotonic clock.
type witness struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	who, kind string
	at        time.Time
}

func (w *witness) add(who, kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, event{who, kind, time.Now()})
}

func (w *witness) first(who, kind string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.who == who && e.kind == kind {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// checkNoOverlap fails if two managers' leader runnables ran at once.
func (w *witness) checkNoOverlap(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	events := slices.Clone(w.events)
	w.mu.Unlock()
	slices.SortStableFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	running := map[string]bool{}
	for _, e := range events {
		if e.kind == "start" {
			for other, on := range running {
				if on && other != e.who {
					t.Errorf("%s's leader runnable started at %s while %s's still ran", e.who, e.at.Format(time.StampMicro), other)
				}
			}
		}
		running[e.who] = e.kind == "start"
	}
}

// replica is one in-process manager.
type replica struct {
	id      string
	mgr     manager.Manager
	lock    *lock.Lock
	started time.Time
	cancel  context.CancelFunc
	// result receives what Start returned, once.
	result chan error
	once   sync.Once
	err    error
}

// startManager runs a manager made by cle.NewManager (default identity, as
// controller-runtime's: host_uuid) with one leader-only runnable that the
// witness watches, until the test ends or stop is called. tweak, when given,
// changes the options first.
func (e *env) startManager(t *testing.T, w *witness, ns, lease, id, emulation string, tweak ...func(*manager.Options, *cle.Options)) *replica {
	t.Helper()
	cfg := e.s.Config()
	opts := manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}}
	o := cle.Options{
		Namespace:        ns,
		LeaseName:        lease,
		BinaryVersion:    "1.36.0",
		EmulationVersion: emulation,
		APIMode:          e.apiMode,
		LeaseDuration:    leaseDuration,
		RenewDeadline:    renewDeadline,
		RetryPeriod:      retryPeriod,
	}
	for _, f := range tweak {
		f(&opts, &o)
	}
	mgr, lk, err := cle.NewManager(cfg, opts, o)
	if err != nil {
		t.Fatal(err)
	}
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		w.add(id, "start")
		<-ctx.Done()
		w.add(id, "stop")
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, mgr: mgr, lock: lk, started: time.Now(), cancel: cancel, result: make(chan error, 1)}
	go func() {
		// NewManager's Start closes the lock before it returns.
		r.result <- mgr.Start(ctx)
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels the manager and returns what its Start returned.
func (r *replica) stop() error {
	r.cancel()
	return r.wait()
}

func (r *replica) wait() error {
	r.once.Do(func() { r.err = <-r.result })
	return r.err
}

func (e *env) holder(t *testing.T, ns, lease string) string {
	l, err := e.s.Client().CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return holderOf(l)
}

func holderOf(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, waitLong, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s", what, waitLong)
	}
}

// waitLeads waits until r's leader runnable runs (its latest start after
// since) and the Lease names r.
func (e *env) waitLeads(t *testing.T, w *witness, ns, lease string, r *replica) time.Time {
	t.Helper()
	var at time.Time
	until(t, r.id+" leads", func() bool {
		var ok bool
		at, ok = w.first(r.id, "start")
		return ok && e.holder(t, ns, lease) == r.lock.Identity() && r.lock.Candidate().IsLeader()
	})
	return at
}

// TestManagers: three managers at emulation versions 1.34, 1.35 and 1.36;
// the 1.34 one leads. Its graceful shutdown hands over to the 1.35 one at
// once; a 1.34 manager joining then preempts it, and the 1.35 one stops and
// hands over at once too. Never do two managers' leader runnables run at
// once.
func TestManagers(t *testing.T) {
	for _, e := range envs {
		t.Run(e.name, func(t *testing.T) {
			ns := e.setup(t)
			const lease = "managers"
			w := &witness{}
			m36 := e.startManager(t, w, ns, lease, "m36", "1.36.0")
			m35 := e.startManager(t, w, ns, lease, "m35", "1.35.0")
			m34 := e.startManager(t, w, ns, lease, "m34", "1.34.0")
			e.waitLeads(t, w, ns, lease, m34)
			if e.cleController {
				// cle-controller gathers candidates starting together, so
				// nobody worse leads first.
				for _, r := range []*replica{m35, m36} {
					if _, ok := w.first(r.id, "start"); ok {
						t.Errorf("%s's leader runnable ran", r.id)
					}
				}
			}

			begin := time.Now()
			if err := m34.stop(); err != nil {
				t.Errorf("the leader's graceful stop: %v", err)
			}
			// Start closed the lock before returning: the LeaseCandidate
			// is gone without a Close by the caller.
			e.checkWithdrawn(t, ns, m34)
			handover := e.waitLeads(t, w, ns, lease, m35).Sub(begin)
			if handover >= leaseDuration {
				t.Errorf("handover on shutdown took %s: the Lease expired instead of being released", handover)
			}

			better := e.startManager(t, w, ns, lease, "m34b", "1.34.0")
			took := e.waitLeads(t, w, ns, lease, better).Sub(better.started)
			if err := m35.wait(); !errors.Is(err, lock.ErrTermEnded) {
				t.Errorf("the preempted manager's Start returned %v, want it to stop with lock.ErrTermEnded", err)
			}
			// The preempted manager hands over once its runnables have
			// stopped, not when the Lease expires (kube-apiserver's
			// controller takes seconds to prefer the better one).
			if e.cleController && took >= leaseDuration {
				t.Errorf("preemption took %s: the Lease expired instead of being handed over", took)
			}
			stopped, _ := w.first("m35", "stop")
			w.checkNoOverlap(t)
			// The elector's Events went to the Lease through the
			// manager's recorder.
			e.waitEvent(t, ns, lease, m34.lock.Identity()+" became leader")
			t.Logf("%s: controller-runtime handover on graceful shutdown %s; preemption: better manager started -> preempted runnables stopped %s -> better leads %s",
				e.name, handover.Round(time.Millisecond), stopped.Sub(better.started).Round(time.Millisecond), took.Round(time.Millisecond))
		})
	}
}

// checkWithdrawn fails unless r's LeaseCandidate is gone.
func (e *env) checkWithdrawn(t *testing.T, ns string, r *replica) {
	t.Helper()
	if err := e.getCandidate(t, ns, r); !apierrors.IsNotFound(err) {
		t.Errorf("%s's LeaseCandidate after its manager's Start returned: %v, want it deleted", r.id, err)
	}
}

// getCandidate reads r's LeaseCandidate and returns the error.
func (e *env) getCandidate(t *testing.T, ns string, r *replica) error {
	t.Helper()
	acc, err := e.s.Access(context.Background(), e.apiMode)
	if err != nil {
		t.Fatal(err)
	}
	_, err = acc.LeaseCandidates(ns).Get(context.Background(), r.lock.Identity())
	return err
}

// waitEvent waits for an Event on the Lease whose message is msg.
func (e *env) waitEvent(t *testing.T, ns, lease, msg string) {
	t.Helper()
	until(t, "Event "+msg, func() bool {
		list, err := e.s.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Lease,involvedObject.name=" + lease,
		})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list.Items, func(ev corev1.Event) bool { return ev.Message == msg })
	})
}

// TestManagerClientAndHealth: with GuardClient, the manager's own client
// writes only while its replica leads; the lock's health check is served
// among the manager's healthz checks.
func TestManagerClientAndHealth(t *testing.T) {
	e := envs[0]
	ns := e.setup(t)
	const lease = "guarded"
	w := &witness{}
	addr := framework.FreeAddress(t)
	guard := func(_ *manager.Options, o *cle.Options) { o.GuardClient = true }
	leader := e.startManager(t, w, ns, lease, "m34", "1.34.0", guard, func(opts *manager.Options, _ *cle.Options) {
		opts.HealthProbeBindAddress = addr
	})
	e.waitLeads(t, w, ns, lease, leader)
	follower := e.startManager(t, w, ns, lease, "m36", "1.36.0", guard)
	until(t, "the follower's candidate registered", func() bool {
		_, ok := follower.lock.Candidate().Token()
		return !ok && e.getCandidate(t, ns, follower) == nil
	})

	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	ctx := context.Background()
	if err := leader.mgr.GetClient().Create(ctx, cm("by-leader")); err != nil {
		t.Errorf("the leader's manager client: %v", err)
	}
	if err := follower.mgr.GetClient().Create(ctx, cm("by-follower")); !errors.Is(err, candidate.ErrNotLeader) {
		t.Errorf("the follower's manager client wrote: %v, want ErrNotLeader", err)
	}
	if _, err := e.s.Client().CoreV1().ConfigMaps(ns).Get(ctx, "by-follower", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the follower's write reached the server: %v", err)
	}
	var got corev1.ConfigMap
	if err := follower.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: "by-leader"}, &got); err != nil {
		t.Errorf("reads are not guarded: %v", err)
	}

	resp, err := http.Get("http://" + addr + "/healthz/" + cle.HealthCheckName)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz/%s: %d %s", cle.HealthCheckName, resp.StatusCode, body)
	}
}
