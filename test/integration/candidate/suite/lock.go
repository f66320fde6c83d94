package suite

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2/ktesting"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
)

// The cases below run client-go LeaderElectors (non-coordinated, as
// controller-runtime builds them) on the resource lock of package lock, and
// check what the lock promises: the elector leads only a Lease the election
// controller named it holder of, steps down when a better candidate is
// preferred, and its release hands over at once. No elector ever sends a
// Lease create: every request of every lock goes through a counter.

// electorMember is an in-process LeaderElector on a lock.
type electorMember struct {
	id   string
	lock *lock.Lock
	le   *leaderelection.LeaderElector
	// started is when the elector started; cancel stops it, and done is
	// closed once Run has returned and the lock is closed.
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{}
	// working: its leader work runs. client-go starts OnStartedLeading on
	// a goroutine of its own once the elector leads, so IsLeader can be
	// true a moment before leader work starts (and records its start).
	working atomic.Bool
}

// leaseCreates counts the Lease creates that locks' clients send, but for
// server-side dry runs (the access layer probes native mode with one).
type leaseCreates struct{ n atomic.Int32 }

func (c *leaseCreates) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/leases") && req.URL.Query().Get("dryRun") != "All" {
			c.n.Add(1)
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// runElector starts a LeaderElector with ReleaseOnCancel on a lock for lease,
// with a controller-runtime style identity (id_suffix, mapped by the lock),
// until the test ends or stop is called. Its leader work records start and
// stop in tl under id.
func (env *Env) runElector(t *testing.T, tl *timeline, creates *leaseCreates, ns, lease, id, emulation string) *electorMember {
	t.Helper()
	restCfg := rest.CopyConfig(env.Server.Config())
	restCfg.Wrap(creates.wrap)
	clients, err := access.NewClients(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(lock.Config{Candidate: candidate.Config{
		Clients:          clients,
		APIMode:          env.APIMode,
		Namespace:        ns,
		LeaseName:        lease,
		Identity:         id + "_" + strings.ReplaceAll(t.Name(), "/", "_"),
		BinaryVersion:    "1.36.0",
		EmulationVersion: emulation,
		LeaseDuration:    leaseDuration,
		RenewDeadline:    renewDeadline,
		RetryPeriod:      retryPeriod,
	}})
	if err != nil {
		t.Fatalf("lock.New(%s): %v", id, err)
	}
	m := &electorMember{id: id, done: make(chan struct{})}
	ld, rd, rp := l.Timings()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            l,
		LeaseDuration:   ld,
		RenewDeadline:   rd,
		RetryPeriod:     rp,
		ReleaseOnCancel: true,
		Name:            id,
		// Wrapped, so that the lock hands the Lease over as soon as leader
		// work has returned.
		Callbacks: l.Callbacks(leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				tl.add(id, "start")
				m.working.Store(true)
				<-ctx.Done()
				m.working.Store(false)
				tl.add(id, "stop")
			},
			OnStoppedLeading: func() {},
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	m.lock, m.le, m.started, m.cancel = l, le, time.Now(), cancel
	go func() {
		defer close(m.done)
		// The lock's context ends with the term, as adopters are told
		// to run their electors.
		le.Run(l.ElectorContext(ctx))
		closeCtx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		if err := l.Close(closeCtx); err != nil {
			t.Errorf("closing the lock of %s: %v", id, err)
		}
	}()
	t.Cleanup(m.stop)
	return m
}

func (m *electorMember) stop() {
	m.cancel()
	<-m.done
}

// leads reports whether the elector leads, the library agrees, the Lease
// names it, and its leader work runs.
func (env *Env) leads(t *testing.T, ns, lease string, m *electorMember) bool {
	return m.le.IsLeader() && m.lock.Candidate().IsLeader() && m.working.Load() && holderOf(env.lease(t, ns, lease)) == m.lock.Identity()
}

func (env *Env) waitElectorLeads(t *testing.T, ns, lease string, m *electorMember) {
	t.Helper()
	until(t, waitLong, m.id+" leads through the lock under "+env.Controller, func() (bool, error) {
		return env.leads(t, ns, lease, m), nil
	})
}

func (c *leaseCreates) check(t *testing.T) {
	t.Helper()
	if n := c.n.Load(); n != 0 {
		t.Errorf("locks sent %d Lease creates; a lock never creates a Lease", n)
	}
}

// LockElectsBest: three LeaderElectors on locks, at emulation versions
// 1.34, 1.35 and 1.36, started together: the 1.34 one leads, alone, and no
// lock creates the Lease (the controller does).
func LockElectsBest(t *testing.T, env *Env) {
	ns := env.Setup(t)
	tl, creates := &timeline{}, &leaseCreates{}
	members := []*electorMember{
		env.runElector(t, tl, creates, ns, "lock-best", "newest", "1.36.0"),
		env.runElector(t, tl, creates, ns, "lock-best", "oldest", "1.34.0"),
		env.runElector(t, tl, creates, ns, "lock-best", "middle", "1.35.0"),
	}
	env.waitElectorLeads(t, ns, "lock-best", members[1])
	// Let the others try for a few retry periods.
	deadline := time.Now().Add(3 * retryPeriod)
	until(t, waitLong, "three retry periods", func() (bool, error) {
		for _, m := range []*electorMember{members[0], members[2]} {
			if m.le.IsLeader() || m.lock.Candidate().IsLeader() {
				t.Fatalf("%s leads too", m.id)
			}
		}
		return time.Now().After(deadline), nil
	})
	if !env.leads(t, ns, "lock-best", members[1]) {
		t.Error("the best elector stopped leading")
	}
	tl.checkNoOverlap(t)
	creates.check(t)
}

// LockPreemption: a better candidate joining preempts an elector on a lock:
// the elector's context from Lock.ElectorContext ends, it stops leading and
// releases, and the better one leads once the old one's leader work has
// stopped, without waiting for the Lease to expire. It returns the time from the
// better elector's start to its leading.
func LockPreemption(t *testing.T, env *Env) time.Duration {
	ns := env.Setup(t)
	tl, creates := &timeline{}, &leaseCreates{}
	worse := env.runElector(t, tl, creates, ns, "lock-preempt", "worse", "1.36.0")
	env.waitElectorLeads(t, ns, "lock-preempt", worse)
	better := env.runElector(t, tl, creates, ns, "lock-preempt", "better", "1.35.0")
	env.waitElectorLeads(t, ns, "lock-preempt", better)
	if worse.le.IsLeader() || worse.lock.Candidate().IsLeader() {
		t.Error("the preempted elector still leads")
	}
	stop, ok1 := tl.first("worse", "stop")
	start, ok2 := tl.first("better", "start")
	if !ok1 || !ok2 || !stop.Before(start) {
		t.Errorf("old leader stopped at %v (recorded %v), new leader started at %v (recorded %v): want stop strictly before start",
			stop.Format(time.StampMicro), ok1, start.Format(time.StampMicro), ok2)
	}
	// The preempted elector stops at once (Lock.ElectorContext) and
	// hands the Lease over once its leader work has returned.
	if took := start.Sub(better.started); took >= leaseDuration+env.ElectionAllowance {
		t.Errorf("the better elector led %s after it started (%s allowed for the %s): the Lease was not handed over, it expired", took, env.ElectionAllowance, env.Controller)
	}
	tl.checkNoOverlap(t)
	creates.check(t)
	t.Logf("%s: lock preemption: better elector started -> old leader work stopped %s -> better leads %s",
		env.Controller, stop.Sub(better.started).Round(time.Millisecond), start.Sub(better.started).Round(time.Millisecond))
	return start.Sub(better.started)
}

// LockReleaseOnCancel: an elector with ReleaseOnCancel that shuts down hands
// the Lease over at once: the next elector leads within its retry period
// (it polls), not after the Lease expires, and the departed one's
// LeaseCandidate is gone. It returns the time from the cancellation to the
// next leader's start.
func LockReleaseOnCancel(t *testing.T, env *Env) time.Duration {
	ns := env.Setup(t)
	tl, creates := &timeline{}, &leaseCreates{}
	first := env.runElector(t, tl, creates, ns, "lock-release", "first", "1.34.0")
	env.waitElectorLeads(t, ns, "lock-release", first)
	next := env.runElector(t, tl, creates, ns, "lock-release", "next", "1.35.0")
	until(t, waitLong, "next registered", func() (bool, error) {
		_, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), next.lock.Identity())
		return err == nil, nil
	})
	begin := time.Now()
	first.stop()
	env.waitElectorLeads(t, ns, "lock-release", next)
	start, _ := tl.first("next", "start")
	if took := start.Sub(begin); took >= leaseDuration+env.ElectionAllowance {
		t.Errorf("the next elector led %s after the release (%s allowed for the %s): the Lease was not handed over, it expired", took, env.ElectionAllowance, env.Controller)
	}
	tl.checkNoOverlap(t)
	creates.check(t)
	if _, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), first.lock.Identity()); err == nil {
		t.Error("the released elector's LeaseCandidate is still there")
	}
	t.Logf("%s: lock release on cancel: cancelled -> next leads %s", env.Controller, start.Sub(begin).Round(time.Millisecond))
	return start.Sub(begin)
}
