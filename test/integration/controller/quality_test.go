package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
)

// TestEqualCandidateKeepsTheHolder: a candidate equal to the holder on merit
// (same versions) that would win the tie-break (same creation second, a name
// that sorts first) changes nothing: no Lease write, no leader change. A
// better-versioned candidate still preempts.
func TestEqualCandidateKeepsTheHolder(t *testing.T) {
	forEachMode(t, testEqualCandidateKeepsTheHolder)
}

func testEqualCandidateKeepsTheHolder(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	// The holder's and the joiner's candidates must share a creation second
	// for the joiner to win the tie-break: retry with fresh names if a
	// second boundary fell between the two creates.
	var lease, holder, joiner string
	for attempt := 0; ; attempt++ {
		lease = fmt.Sprintf("equal-%d", attempt)
		holder, joiner = fmt.Sprintf("b%d", attempt), fmt.Sprintf("a%d", attempt)
		// The Lease is held and renewed by holder before the controller
		// sees a candidate, as after an earlier term.
		e.createHeldLease(lease, holder)
		h := e.createCandidate(lease, cand{name: holder, binary: "1.36.0", emulation: "1.36.0"})
		j := e.createCandidate(lease, cand{name: joiner, binary: "1.36.0", emulation: "1.36.0"})
		if h.CreationTimestamp.Equal(&j.CreationTimestamp) {
			break
		}
		if attempt == 5 {
			t.Fatal("could not create two candidates within one second")
		}
	}
	e.keepLeaseRenewed(lease, holder, time.Second)
	w := e.watchControllerWrites(t)
	// Both candidates are fresh and answer pings: nothing stops a needless
	// preemption but the semantics.
	e.answerPings(joiner)
	if n := w.countFor(5 * time.Second); n != 0 {
		t.Errorf("controller wrote %d times after an equal candidate joined, want 0", n)
	}
	got := e.waitLease(lease, time.Second, "holder kept", holderIs(holder))
	if p := ptr.Deref(got.Spec.PreferredHolder, ""); p != "" {
		t.Errorf("preferredHolder %q, want none", p)
	}

	// A better-versioned candidate preempts.
	e.createCandidate(lease, cand{name: "older", binary: "1.36.0", emulation: "1.35.0"})
	e.answerPings("older")
	e.waitLease(lease, 10*time.Second, "preferredHolder older", func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.PreferredHolder, "") == "older"
	})
}

// createHeldLease creates a Lease held by holder, as its own renewal would
// leave it.
func (e *env) createHeldLease(name, holder string) {
	e.t.Helper()
	now := metav1.NewMicroTime(time.Now())
	_, err := e.acc.Leases(e.ns).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			Strategy:             ptr.To(coordinationv1.OldestEmulationVersion),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &now,
			RenewTime:            &now,
			LeaseTransitions:     ptr.To[int32](1),
		},
	})
	if err != nil {
		e.t.Fatalf("create Lease %s: %v", name, err)
	}
}

// keepLeaseRenewed renews the Lease every period as holder would, until the
// test ends, for as long as it names holder.
func (e *env) keepLeaseRenewed(name, holder string, period time.Duration) {
	leases := e.acc.Leases(e.ns)
	e.everyPeriod(period, false, func(ctx context.Context) {
		l, err := leases.Get(ctx, name)
		if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != holder {
			return
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, _ = leases.Update(ctx, l)
	})
}

// TestConcurrentStartElectsTheBestFirst: three library candidates started at
// the same instant (emulation 1.35, 1.36, 1.36), twenty times over: the 1.35
// one is the first and only one to lead, and the Lease's first write names
// it.
func TestConcurrentStartElectsTheBestFirst(t *testing.T) {
	forEachMode(t, testConcurrentStartElectsTheBestFirst)
}

func testConcurrentStartElectsTheBestFirst(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	for round := range 20 {
		lease := fmt.Sprintf("together-%d", round)
		first := e.firstLeaseWrite(lease)
		var (
			mu      sync.Mutex
			leaders []string
		)
		start := make(chan struct{})
		names := []string{fmt.Sprintf("new-a-%d", round), fmt.Sprintf("old-%d", round), fmt.Sprintf("new-b-%d", round)}
		emulations := []string{"1.36.0", "1.35.0", "1.36.0"}
		stops := make([]func(), len(names))
		for i, name := range names {
			stops[i] = e.runCandidate(lease, name, emulations[i], start, func() {
				mu.Lock()
				defer mu.Unlock()
				leaders = append(leaders, name)
			})
		}
		close(start)
		want := names[1]
		e.waitLease(lease, 15*time.Second, "holder "+want, holderIs(want))
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return len(leaders) > 0, nil
		})
		if err != nil {
			t.Fatalf("round %d: nobody started leading", round)
		}
		if got := <-first; got != want {
			t.Errorf("round %d: the Lease's first write names %q, want %q", round, got, want)
		}
		// The others stop first: the leader's release then leaves nobody
		// to elect, and only the leader ever led.
		for i, stop := range stops {
			if names[i] != want {
				stop()
			}
		}
		stops[slices.Index(names, want)]()
		mu.Lock()
		if len(leaders) != 1 || leaders[0] != want {
			t.Errorf("round %d: leaders in order %v, want only %s", round, leaders, want)
		}
		mu.Unlock()
	}
}

// firstLeaseWrite watches for the Lease's creation and sends the holder its
// first version names.
func (e *env) firstLeaseWrite(name string) <-chan string {
	e.t.Helper()
	w, err := e.client.CoordinationV1().Leases(e.ns).Watch(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		e.t.Fatalf("watch Lease %s: %v", name, err)
	}
	out := make(chan string, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			// A first election creates the Lease naming nobody, then
			// names the holder: the first write that names one.
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Deleted && ptr.Deref(l.Spec.HolderIdentity, "") != "" {
				out <- ptr.Deref(l.Spec.HolderIdentity, "")
				return
			}
		}
		close(out)
	}()
	return out
}

// runCandidate runs a library candidate of the Lease, from when start is
// closed; onLead is called when it starts leading. The function returned
// stops it and waits for it.
func (e *env) runCandidate(lease, name, emulation string, start <-chan struct{}, onLead func()) func() {
	e.t.Helper()
	clients, err := access.NewClients(e.mode.server.Config())
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := candidate.New(candidate.Config{
		Clients: clients, APIMode: e.mode.name, Namespace: e.ns, LeaseName: lease, Identity: name,
		BinaryVersion: "1.36.0", EmulationVersion: emulation,
		Callbacks: candidate.Callbacks{OnStartedLeading: func(ctx context.Context) {
			onLead()
			<-ctx.Done()
		}},
	})
	if err != nil {
		e.t.Fatalf("candidate %s: %v", name, err)
	}
	_, ctx := ktesting.NewTestContext(e.t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-start
		if err := c.Run(ctx); err != nil {
			e.t.Errorf("candidate %s: %v", name, err)
		}
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	e.t.Cleanup(stop)
	return stop
}

// TestSteadyStateWithLibraryCandidates: a settled election of three library
// candidates with their default settings, watched for 60s: the controller
// writes nothing, and nobody writes a LeaseCandidate (they renew every few
// minutes and nobody needs to ping them).
func TestSteadyStateWithLibraryCandidates(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // the modes have a server each
			testSteadyStateWithLibraryCandidates(t, m)
		})
	}
}

func testSteadyStateWithLibraryCandidates(t *testing.T, m apiMode) {
	e := startController(t, m, controller.Options{})
	start := make(chan struct{})
	close(start)
	for i, emulation := range []string{"1.34.0", "1.35.0", "1.36.0"} {
		e.runCandidate("steady-lib", fmt.Sprintf("lib-%d", i), emulation, start, func() {})
	}
	e.waitLease("steady-lib", 15*time.Second, "holder lib-0", holderIs("lib-0"))
	// Let the election settle: registration writes, the first renewal of
	// the term and the holder's record of its token are done.
	held := e.waitLease("steady-lib", 15*time.Second, "renewed by lib-0", func(l *coordinationv1.Lease) bool {
		return holderIs("lib-0")(l) && ptr.Deref(l.Spec.LeaseTransitions, 0) > 0
	})
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		lc, err := e.acc.LeaseCandidates(e.ns).Get(ctx, "lib-0")
		return err == nil && access.HighestToken(lc.Annotations) >= ptr.Deref(held.Spec.LeaseTransitions, 0), nil
	}); err != nil {
		t.Fatalf("lib-0 did not record its token: %v", err)
	}

	w := e.watchControllerWrites(t)
	candidateWrites := e.countCandidateWrites(t)
	if n := w.countFor(60 * time.Second); n != 0 {
		t.Errorf("controller wrote %d times in 60s of steady state, want 0", n)
	}
	if n := candidateWrites(); n != 0 {
		t.Errorf("LeaseCandidates were written %d times in 60s of steady state, want 0 at the default renew interval", n)
	}
	e.waitLease("steady-lib", time.Second, "holder lib-0", holderIs("lib-0"))
}

// countCandidateWrites counts every write of the namespace's LeaseCandidates,
// by anyone, from now on; the function returned reads the count.
func (e *env) countCandidateWrites(t *testing.T) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu sync.Mutex
		n  int
	)
	inc := func() { mu.Lock(); n++; mu.Unlock() }
	inf := e.acc.NewCandidateInformer(e.ns, 0, nil)
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, initial bool) {
			if !initial {
				inc()
			}
		},
		UpdateFunc: func(any, any) { inc() },
		DeleteFunc: func(any) { inc() },
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("candidate-counting informer did not sync")
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}
