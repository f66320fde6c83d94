package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/cle-dev/cle/internal/simworld"
	"github.com/cle-dev/cle/internal/stepped"
	candidatepkg "github.com/cle-dev/cle/pkg/candidate"
)

// Every candidate process runs pkg/candidate itself: its elector and
// registrar (lease.go, registration.go, term.go), its Start and its
// Shutdown, built by internal/stepped from a candidate.Config whose access
// layer is the model server (simAccess) and whose clock is the process's
// own: a library candidate's Candidate, or an adopter's External, whose
// calls (Renew, Lease, Resign) its elector loop serves between steps. What
// the simulation does in their place is what Run's goroutines do: it steps
// each loop when its timer is due or its informer (fed by the process's
// watches) wakes it, and serves the External's calls when the elector's
// loop is idle, stepping it after each, and each step or call runs on a
// goroutine of its own (a simThread) that takes turns with the simulation,
// one request at a time, so that a run stays deterministic. A library
// candidate's leader work returns as soon as its context is cancelled;
// OnStoppedLeading then takes up to simWorkReturn, so the library's
// hand-over and release wait for it.

// simLib is the library's side of a simProcess.
type simLib struct {
	p     *simProcess
	loops stepped.Loops
	// ext is an adopter's External (nil for a library candidate).
	ext   stepped.ExternalLoops
	clock *simClock
	// ctx is Run's context: cancelled by a graceful stop (and when the
	// process dies, so that no goroutine outlives it).
	ctx    context.Context
	cancel context.CancelFunc
	// leases and cands are the loops' informers, fed by the process's
	// watches.
	leases, cands *simInformer
	// elector and registrar run the loops' steps, and the shutdown on the
	// elector's; cur is the one running now, whose requests the model
	// clients take.
	elector, registrar *simLoop
	cur                *simThread
	started            bool
	stopped            func() // set once a graceful stop has begun
	shuttingDown       bool   // the shutdown has begun
	// token is the token of the last term that began, and leading whether
	// it was led when last looked at, for the term history.
	token   int32
	leading bool
	// works are the contexts OnStartedLeading was given, for workFor;
	// work is the context of the last term's leader work; guarded is
	// leader work's client of the witness, through the guard.
	worksMu   sync.Mutex
	worksCond *sync.Cond
	works     []context.Context
	work      context.Context
	guarded   *http.Client
	// An External's calls waiting for the elector's loop; inCall: one runs
	// on the elector's thread, its requests ending at callDeadline (local;
	// zero: none) too, as its caller's context ends them. stepFirst: a
	// call ended, and the loop steps before it serves the next.
	calls        []*simCall
	inCall       bool
	callDeadline time.Time
	stepFirst    bool
}

// simLoop is one of the library's loops: its thread, and its timer.
type simLoop struct {
	th   simThread
	step func(context.Context) time.Duration
	// timer is the pending timer: a newer one replaces it. due: a
	// wake-up came while a step ran; the loop steps again once it ends.
	timer *simworld.Timer
	due   bool
}

func (p *simProcess) startLibrary() {
	w, c := p.c.w, p.c
	l := &simLib{p: p, clock: &simClock{now: p.clk.Now(), p: p}}
	l.worksCond = sync.NewCond(&l.worksMu)
	p.lib = l
	w.libs = append(w.libs, l)
	l.leases = newSimInformer(func(obj any) (string, error) { return c.e.key(), nil })
	l.cands = newSimInformer(func(obj any) (string, error) { return c.key(), nil })
	logger := logr.Discard()
	if w.Tracing {
		logger = funcr.New(func(prefix, args string) { w.Tracef("%s/%d: %s", c.shown(), p.id, args) }, funcr.Options{Verbosity: 4})
	}
	l.ctx, l.cancel = context.WithCancel(klog.NewContext(context.Background(), logger))
	proof := candidatepkg.NoProofOfDeath
	if w.proof {
		proof = w.podProcessStarts(p)
	}
	cfg := candidatepkg.Config{
		Clock: l.clock, Logger: logger,
		Namespace: c.e.ns, LeaseName: c.e.name, Identity: c.name,
		BinaryVersion: c.binary, EmulationVersion: c.emulation, Strategy: c.strategy,
		LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod,
		CandidateRenewInterval: simCandRenew,
		ProofOfDeath:           proof,
		Callbacks: candidatepkg.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				l.workStarted(ctx)
				<-ctx.Done()
			},
			OnStoppedLeading: l.workReturns,
		},
	}
	cfg = stepped.WithAccess(cfg, &simAccess{leases: simLibLeases{l}, candidates: simLibCandidates{l}, leaseInf: l.leases, candInf: l.cands})
	cfg = stepped.WithNudge(cfg, w.nudges.hook(w, nil))
	var loops stepped.Loops
	var err error
	if p.ext == nil {
		loops, err = stepped.New(cfg)
	} else {
		// As pkg/lock's New configures it: the elector runs leader work,
		// and a step-down ends Lock.ElectorContext's context.
		release := true
		cfg.ReleaseOnCancel = &release
		cfg.Callbacks = candidatepkg.Callbacks{OnStoppedLeading: l.termEnded}
		l.ext, err = stepped.NewExternal(cfg)
		loops = l.ext
	}
	if err != nil {
		panic(err)
	}
	l.loops = loops
	l.elector = &simLoop{step: loops.StepElector}
	l.registrar = &simLoop{step: loops.StepRegistrar}
	for _, lp := range []*simLoop{l.elector, l.registrar} {
		lp.th.send = func(r *simRequest) { l.send(&lp.th, r) }
		lp.th.end = func(t simTurn) { l.stepEnded(lp, t) }
	}
	p.leaseWatch = w.Watch(func(obj runtime.Object, deleted bool) {
		p.act(func() { l.deliver(l.leases, obj, deleted) })
	})
	p.candWatch = w.Watch(func(obj runtime.Object, deleted bool) {
		p.act(func() { l.deliver(l.cands, obj, deleted) })
	})
	w.connect(p.leaseWatch, p.candWatch)
	// The informers list what there is, after a lag; the loops start once
	// both lists are in.
	var lease, self []runtime.Object
	if l := c.e.lease(); l != nil {
		lease = append(lease, l.DeepCopy())
	}
	if lc := w.Candidate(c.key()); lc != nil {
		self = append(self, lc.DeepCopy())
	}
	simworld.ListAt(w.World, w.Now.Add(w.LagVia(p.leaseWatch.Frontend)), func() {
		p.act(func() {
			l.sync()
			l.leases.list(lease...)
			l.cands.list(self...)
			if err := l.loops.Start(l.ctx); err != nil {
				if !errors.Is(err, candidatepkg.ErrIdentityInUse) || p.ext != nil {
					w.Fail("%s/%d cannot start: %v", c.shown(), p.id, err)
					return
				}
				// Run returns the error and the process exits; the kubelet
				// starts it again after a back-off that doubles from 10s
				// to 5m, as for a container that keeps crashing.
				w.Tracef("%s/%d exits: %v", c.shown(), p.id, err)
				w.res.identityInUse++
				l.kill()
				c.proc = nil
				backoff := min(10*time.Second<<min(c.refusals, 5), 5*time.Minute)
				c.refusals++
				w.After(backoff, func() {
					if c.proc == nil {
						c.start()
					}
				})
				return
			}
			l.started = true
			l.run(l.registrar)
			l.run(l.elector) // then the External's calls are served
		})
	}, p.leaseWatch, p.candWatch)
}

func (l *simLib) sync() { l.clock.now = l.p.clk.Now() }

// simClock is a process's clock as the stepped loops read it: set by the
// simulation before it lets the process's code run. The loops set no
// timers; the simulation keeps their timers. The write guard's timer (the
// end of a request's leadership) runs on the process's clock.
type simClock struct {
	clock.WithTicker // timers: not used
	now              time.Time
	p                *simProcess
}

func (c *simClock) Now() time.Time                  { return c.now }
func (c *simClock) Since(t time.Time) time.Duration { return c.now.Sub(t) }

// AfterFunc runs f after d of the process's clock, unless stopped first.
func (c *simClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &simTimer{}
	c.p.clk.After(d, func() {
		if !t.stopped {
			t.stopped = true
			f()
		}
	})
	return t
}

// simTimer is a timer of simClock.AfterFunc; it cannot be reset.
type simTimer struct{ stopped bool }

func (t *simTimer) C() <-chan time.Time { return nil }

func (t *simTimer) Stop() bool {
	was := !t.stopped
	t.stopped = true
	return was
}

func (t *simTimer) Reset(time.Duration) bool { panic("simTimer: Reset is not used") }

// deliver is one watch event reaching an informer, which wakes the loops
// it concerns.
func (l *simLib) deliver(inf *simInformer, obj runtime.Object, deleted bool) {
	if l.p.dead {
		return
	}
	l.sync()
	inf.deliver(obj, deleted)
	l.woken()
}

// woken steps the loops that were woken, now.
func (l *simLib) woken() {
	el, reg := l.loops.Woken()
	if !l.started {
		return // Start runs them both
	}
	if el {
		l.poke(l.elector)
	}
	if reg {
		l.poke(l.registrar)
	}
}

// poke is a wake-up of the loop, buffered in its channel: a loop in a step
// steps again once it ends, an idle one now. A timer would not do for the
// first: the step's end sets the loop's timer anew, and a process resuming
// from a pause runs what it held at once, the step's end after the
// wake-ups that came during it.
func (l *simLib) poke(lp *simLoop) {
	if lp.th.busy() {
		lp.due = true
		return
	}
	l.wake(lp, 0)
}

// wake sets the loop's timer to local duration d.
func (l *simLib) wake(lp *simLoop, d time.Duration) {
	p := l.p
	lp.timer.Stop()
	tm := &simworld.Timer{}
	lp.timer = tm
	p.clk.AfterTimer(d, tm, func() {
		p.act(func() {
			if !tm.Stopped() {
				l.run(lp)
			}
		})
	})
}

// run takes one step of the loop, unless one is running: then the loop
// steps again once it ends, as a wake-up buffered in its channel does.
func (l *simLib) run(lp *simLoop) {
	if l.p.dead || l.stopped != nil {
		return
	}
	if lp.th.busy() {
		lp.due = true
		return
	}
	lp.timer.Stop() // the step sets the timer anew
	if lp == l.elector {
		l.stepFirst = false
	}
	l.turn(&lp.th, func() { lp.th.run(func() simTurn { return simTurn{requeue: lp.step(l.ctx)} }) })
}

// turn lets th run (start or go on) until it yields, on the process's
// clock as it is now, then takes what its run changed.
func (l *simLib) turn(th *simThread, run func()) {
	l.sync()
	l.cur = th
	run()
	l.cur = nil
	l.noteTerm()
	l.woken()
	if l.p.ext != nil {
		l.p.ext.leaseSeen()
	}
}

// stepEnded is the end of a step of the loop, or of a call on the
// elector's: after a call the loop steps, after a step it serves the next
// call waiting, or waits for its timer or a wake-up.
func (l *simLib) stepEnded(lp *simLoop, t simTurn) {
	next := t.requeue
	if t.callEnded != nil {
		l.inCall, l.callDeadline = false, time.Time{}
		l.stepFirst = true
		next = 0
		l.noteTerm() // a term the call began, before the caller acts on it
		t.callEnded()
	}
	if l.stopped != nil {
		l.shutdownWhenIdle()
		return
	}
	if lp.due {
		lp.due = false
		next = 0
	}
	l.wake(lp, next)
	if lp == l.elector {
		l.nextCall()
	}
}

// termEnded is an External's OnStoppedLeading, pkg/lock's termEnded: it
// ends Lock.ElectorContext's context, which the elector notices after the
// step.
func (l *simLib) termEnded() {
	p := l.p
	p.c.w.After(0, func() { p.act(p.ext.termEnded) })
}

// noteTerm records a term that began, for the term history, and starts a
// library candidate's leader work on the context the library gave it (an
// adopter's elector runs its own).
func (l *simLib) noteTerm() {
	token, leading := l.loops.Peek()
	// A term that lapsed unseen and then got a renewal sent before it
	// lapsed is the same term, its work still running: no new one. An
	// adopter's work is its elector's, started in that term and not told
	// to stop (the step that ends the term tells it after this one); or
	// none ran in it at all (seed 14178 after 9256ff7: the elector's
	// acquisition was answered too slowly to count, its next renewals kept
	// the library's term, which lapsed unseen during a pause and went on
	// with the answer of a renewal sent before it).
	revived := token == l.token && ((l.work != nil && l.work.Err() == nil) ||
		(l.p.ext != nil && l.p.ext.work && !l.p.ext.workCancelled && l.p.ext.workToken == token) ||
		(l.p.ext != nil && l.p.ext.workToken != token))
	if leading && (!l.leading || token != l.token) && !revived {
		l.p.c.w.newTerm(l.p, token, l.loops.SeenBefore())
		l.token = token
		if l.p.ext == nil {
			if l.guarded == nil {
				client, err := rest.HTTPClientFor(l.loops.WrapConfig(&rest.Config{Host: "https://witness.sim", Transport: simWitnessTransport{l.p}}))
				if err != nil {
					panic(err)
				}
				l.guarded = client
			}
			l.work = l.workFor(token)
			l.p.libraryWork(l.work, l.guarded)
		}
	}
	l.leading = leading
}

// workStarted is called by OnStartedLeading, on the goroutine the library
// runs leader work on, with the context it gives it.
func (l *simLib) workStarted(ctx context.Context) {
	l.worksMu.Lock()
	defer l.worksMu.Unlock()
	l.works = append(l.works, ctx)
	l.worksCond.Broadcast()
}

// workFor is the context OnStartedLeading was given for the term with token,
// once the library's goroutine has called it (the step that began the term
// started that goroutine). Contexts of terms that ended unseen are dropped.
func (l *simLib) workFor(token int32) context.Context {
	l.worksMu.Lock()
	defer l.worksMu.Unlock()
	for {
		for i, ctx := range l.works {
			if t, _ := candidatepkg.TokenFrom(ctx); t == token && ctx.Err() == nil {
				l.works = slices.Delete(l.works, 0, i+1)
				return ctx
			}
		}
		l.worksCond.Wait()
	}
}

// peek is Peek on the process's clock now: the checks' view of its term,
// which ends nothing.
func (l *simLib) peek() (int32, bool) {
	if !l.loops.Termed() {
		return 0, false
	}
	l.sync()
	return l.loops.Peek()
}

// live is peek's answer to whether the process may act as leader.
func (l *simLib) live() bool {
	_, ok := l.peek()
	return ok
}

// leaderToken is Token on the process's clock now, what leader work asks
// before it writes; ok is IsLeader. A reader that finds the term lapsed
// wakes the elector, as in the library. Without a live term Token reads
// nothing and wakes nobody: most processes, at most steps.
func (l *simLib) leaderToken() (int32, bool) {
	if !l.loops.Termed() {
		return 0, false
	}
	l.sync()
	token, ok := l.loops.Token()
	l.woken()
	return token, ok
}

// workReturns is OnStoppedLeading: leader work takes up to simWorkReturn to
// wind down, and the loop that stopped it waits.
func (l *simLib) workReturns() {
	_, _ = l.cur.request(&simRequest{sleep: true})
}

// send makes a request of the thread: a sleep, or one to the model server,
// taking the time, failures and partitions the world draws; the answer
// reaches the thread when the process runs.
func (l *simLib) send(th *simThread, r *simRequest) {
	w, p := l.p.c.w, l.p
	answer := func(obj runtime.Object, err error) {
		th.cancel = nil
		l.turn(th, func() { th.answer(r, obj, err) })
	}
	if r.sleep {
		w.After(w.DurationBetween(0, simWorkReturn), func() { p.act(func() { answer(nil, nil) }) })
		return
	}
	var deadline time.Time
	if !r.deadline.IsZero() {
		// The library's deadline is an instant of the process's clock: what
		// is left of it is counted as Go's timers count, on the monotonic
		// clock when the instant has a reading of it.
		deadline = p.clk.Wall().Add(r.deadline.Sub(p.clk.Now()))
	}
	if th == &l.elector.th && l.inCall && !l.callDeadline.IsZero() && (deadline.IsZero() || l.callDeadline.Before(deadline)) {
		deadline = l.callDeadline // the call's caller gives up first
	}
	th.cancel = p.request(deadline, r.do, answer)
}

// stop is a graceful stop: Run's context ends, which cancels the loops'
// requests in flight; once both loops have returned, the shutdown runs
// (stop leading, delete the LeaseCandidate, release) on the elector's
// thread, and then is called.
func (l *simLib) stop(then func()) {
	if l.stopped != nil {
		return
	}
	l.stopped = then
	l.cancel()
	l.failCalls(candidatepkg.ErrNotRunning)
	for _, lp := range []*simLoop{l.elector, l.registrar} {
		if cancel := lp.th.cancel; cancel != nil {
			cancel()
		}
	}
	l.shutdownWhenIdle()
}

func (l *simLib) shutdownWhenIdle() {
	if l.elector.th.busy() || l.registrar.th.busy() || l.shuttingDown {
		return
	}
	l.shuttingDown = true
	l.elector.th.end = func(simTurn) {
		// Run has returned: its goroutines end, and a library candidate's
		// process with them.
		if l.p.ext == nil {
			l.kill()
		} else {
			l.end()
		}
		l.stopped()
	}
	l.turn(&l.elector.th, func() {
		l.elector.th.run(func() simTurn {
			l.loops.Shutdown(context.WithoutCancel(l.ctx))
			return simTurn{}
		})
	})
}

// kill ends the process at once (a crash, or the end of the run): its
// threads' requests fail and nothing more reaches the server; leader work
// returns.
func (l *simLib) kill() {
	if w := l.p.c.w; !l.p.exited && !w.ending && w.proof {
		l.p.exited = true
		w.podProcessExits(l.p)
	}
	l.p.dead = true
	l.end()
}

// end ends Run's goroutines at once: their requests fail, and nothing more
// reaches the server.
func (l *simLib) end() {
	l.cancel()
	for _, lp := range []*simLoop{l.elector, l.registrar} {
		l.cur = &lp.th // its requests, failing at once, until it ends
		lp.th.abandon()
	}
	l.cur = nil
}

// call makes one request of the running thread; do is what the server does
// when it arrives. A request whose context was cancelled fails at once, as
// client-go's does. The context's deadline on the wall clock is not looked
// at: the request ends at the deadline the library recorded on the process's
// clock (stepped.Deadline), which the simulation keeps.
func (l *simLib) call(ctx context.Context, do func() (runtime.Object, error)) (runtime.Object, error) {
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	deadline, _ := stepped.Deadline(ctx)
	return l.cur.request(&simRequest{do: do, deadline: deadline})
}

func (l *simLib) who() string { return fmt.Sprintf("%s/%d", l.p.c.shown(), l.p.id) }

// ns is the namespace of the process's Lease, where its clients act.
func (l *simLib) ns() string { return l.p.c.e.ns }

// simLibLeases and simLibCandidates are a library candidate's clients,
// bound to the namespace of its Lease.
type simLibLeases struct{ l *simLib }

func (c simLibLeases) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	w := c.l.p.c.w
	obj, err := c.l.call(ctx, func() (runtime.Object, error) {
		l := w.Lease(simKey(c.l.ns(), name))
		if l == nil {
			return nil, apierrors.NewNotFound(simworld.LeasesGR, name)
		}
		return l.DeepCopy(), nil
	})
	lease, _ := obj.(*coordinationv1.Lease)
	return lease, err
}

func (c simLibLeases) Create(context.Context, *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	panic("the library does not create Leases")
}

func (c simLibLeases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	w := c.l.p.c.w
	lease = lease.DeepCopy()
	before := ""
	obj, err := c.l.call(ctx, func() (runtime.Object, error) {
		e := w.electionOf(c.l.ns(), lease.Name)
		if e == nil {
			return nil, apierrors.NewNotFound(simworld.LeasesGR, lease.Name)
		}
		if l := e.lease(); l != nil {
			before = holderIdentity(l)
		}
		written, err := w.writeLease(e, lease, lease.ResourceVersion, c.l.who())
		if written == nil {
			return nil, err
		}
		return written, err
	})
	written, _ := obj.(*coordinationv1.Lease)
	if err == nil && before == c.l.p.c.name && holderIdentity(written) != before && holderIdentity(written) != "" {
		w.res.handovers++
	}
	return written, err
}

func (c simLibLeases) Delete(context.Context, string, *metav1.Preconditions) error {
	panic("the library does not delete Leases")
}

type simLibCandidates struct{ l *simLib }

func (c simLibCandidates) Get(ctx context.Context, name string) (*coordinationv1beta1.LeaseCandidate, error) {
	w := c.l.p.c.w
	obj, err := c.l.call(ctx, func() (runtime.Object, error) {
		lc := w.Candidate(simKey(c.l.ns(), name))
		if lc == nil {
			return nil, apierrors.NewNotFound(simworld.CandidatesGR, name)
		}
		return lc.DeepCopy(), nil
	})
	lc, _ := obj.(*coordinationv1beta1.LeaseCandidate)
	return lc, err
}

func (c simLibCandidates) Create(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	return c.write(ctx, lc, "")
}

func (c simLibCandidates) Update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	return c.write(ctx, lc, lc.ResourceVersion)
}

func (c simLibCandidates) write(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate, rv string) (*coordinationv1beta1.LeaseCandidate, error) {
	w := c.l.p.c.w
	lc = lc.DeepCopy()
	obj, err := c.l.call(ctx, func() (runtime.Object, error) {
		written, err := w.writeCandidate(c.l.ns(), lc.Name, lc, rv, c.l.who())
		if written == nil {
			return nil, err
		}
		return written, err
	})
	written, _ := obj.(*coordinationv1beta1.LeaseCandidate)
	return written, err
}

func (c simLibCandidates) Delete(ctx context.Context, name string, pre *metav1.Preconditions) error {
	w := c.l.p.c.w
	_, err := c.l.call(ctx, func() (runtime.Object, error) {
		cur := w.Candidate(simKey(c.l.ns(), name))
		switch {
		case cur == nil:
			return nil, apierrors.NewNotFound(simworld.CandidatesGR, name)
		case pre != nil && pre.UID != nil && *pre.UID != cur.UID:
			return nil, apierrors.NewConflict(simworld.CandidatesGR, name, fmt.Errorf("UID precondition failed"))
		}
		_, err := w.writeCandidate(c.l.ns(), name, nil, cur.ResourceVersion, c.l.who()+" (shutdown)")
		return nil, err
	})
	return err
}

// simInformer is an informer the simulation feeds: its store, and the
// handlers registered on it called as a shared informer calls them. Only
// what the library uses is implemented.
type simInformer struct {
	cache.SharedIndexInformer
	store    cache.Indexer
	handlers []cache.ResourceEventHandler
	synced   chan struct{}
}

func newSimInformer(key cache.KeyFunc) *simInformer {
	return &simInformer{store: cache.NewIndexer(key, cache.Indexers{}), synced: make(chan struct{})}
}

func (i *simInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	i.handlers = append(i.handlers, h)
	return simRegistration{i}, nil
}

func (i *simInformer) GetStore() cache.Store     { return i.store }
func (i *simInformer) GetIndexer() cache.Indexer { return i.store }

// AddIndexers adds indexers to the store, as before the informer runs.
func (i *simInformer) AddIndexers(indexers cache.Indexers) error {
	return i.store.AddIndexers(indexers)
}

// list is the initial list: each object added as in the initial list.
func (i *simInformer) list(objs ...runtime.Object) {
	for _, obj := range objs {
		_ = i.store.Add(obj)
		for _, h := range i.handlers {
			h.OnAdd(obj, true)
		}
	}
	close(i.synced)
}

// relist replaces the store's content with a new list, as an informer does
// after its watch expired: what changed is delivered as an update or an
// add, and what is gone as a DeletedFinalStateUnknown carrying the last copy
// the store had, however old; what did not change is not delivered.
func (i *simInformer) relist(objs []runtime.Object) {
	listed := map[string]bool{}
	for _, obj := range objs {
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		listed[key] = true
		old, exists, _ := i.store.Get(obj)
		if exists && old.(metav1.Object).GetResourceVersion() == obj.(metav1.Object).GetResourceVersion() {
			continue
		}
		i.deliver(obj, false)
	}
	for _, key := range slices.Sorted(slices.Values(i.store.ListKeys())) {
		if listed[key] {
			continue
		}
		old, _, _ := i.store.GetByKey(key)
		_ = i.store.Delete(old)
		for _, h := range i.handlers {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
		}
	}
}

// deliver is one watch event.
func (i *simInformer) deliver(obj runtime.Object, deleted bool) {
	old, exists, _ := i.store.Get(obj)
	switch {
	case deleted:
		if !exists {
			return
		}
		_ = i.store.Delete(old)
		for _, h := range i.handlers {
			h.OnDelete(old)
		}
	case exists:
		_ = i.store.Update(obj)
		for _, h := range i.handlers {
			h.OnUpdate(old, obj)
		}
	default:
		_ = i.store.Add(obj)
		for _, h := range i.handlers {
			h.OnAdd(obj, false)
		}
	}
}

type simRegistration struct{ i *simInformer }

func (r simRegistration) HasSynced() bool {
	select {
	case <-r.i.synced:
		return true
	default:
		return false
	}
}

func (r simRegistration) HasSyncedChecker() cache.DoneChecker { return r }
func (r simRegistration) Name() string                        { return "simulated informer" }
func (r simRegistration) Done() <-chan struct{}               { return r.i.synced }
