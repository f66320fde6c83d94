package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/internal/lockrule"
	candidatepkg "github.com/cle-dev/cle/pkg/candidate"
)

// Adopters: processes that take part in the election through pkg/lock, the
// client-go resource lock backed by the library, beside those that use the
// library directly. Each runs three layers, every one on the process's own
// clock, paused, crashed and stopped with it:
//
//   - client-go's LeaderElector (tools/leaderelection/leaderelection.go)
//     with its timing exactly: the acquire loop (wait.JitterUntil, sliding,
//     JitterFactor 1.2), tryAcquireOrRenew (the fast-path Update when the
//     observed record names itself and is valid on the elector's clock,
//     then Get, then Update when the record names itself), the renew loop
//     (wait.Until with RetryPeriod, each poll a PollUntilContextTimeout on a
//     ticker of RetryPeriod under a deadline of RenewDeadline from the
//     poll's start), ReleaseOnCancel's tryRelease when the renew loop ends,
//     and OnStartedLeading in a goroutine whose context Run cancels once
//     renew has returned;
//   - pkg/lock's Lock, modelled: Get reports the Lease (External.Lease,
//     or LeaseWhen standing by) by lockrule.RecordOf; Update naming itself
//     checks the elector's timings (lockrule.TimingCheck) and is
//     External.RenewTerm, or Renew before the first term; Update naming
//     nobody is Lock.release, which moves the Lease as lockrule.ReleaseFor
//     says (External.Resign); Close waits for the hand-over and stops the
//     candidate; the library's step-down (OnStoppedLeading) ends the
//     context of Lock.ElectorContext. The External under it is
//     pkg/candidate's own, its calls served by its elector loop between
//     steps (sim_library_test.go);
//   - the application: a plain client-go program (leader work wrapped by
//     Lock.Callbacks, le.Run then lk.Close, then it exits once its leader
//     work has returned), or a
//     controller-runtime manager built by contrib/controller-runtime
//     (GracefulShutdownTimeout < 0 and ReleaseAfterLeaderWork; on shutdown
//     it stops leader runnables and waits for them while the elector renews,
//     then cancels the elector, which releases; on a lost term it cancels
//     runnables without waiting and exits; Start then closes the lock).
//     Half of them, drawn from a stream of their own, run the elector with
//     Lock.ElectorContext: the library's step-down ends the plain
//     program's Run context, or starts the manager's shutdown, at once.
//
// A process that exits on its own (a lost term) is restarted as a
// candidate, as its Deployment would.

// simAdopter is how a candidate process takes part in the election.
type simAdopter int

const (
	// simLibrary: pkg/candidate's Candidate, renewing itself.
	simLibrary simAdopter = iota
	// simClientGo: client-go's LeaderElector over the Lock, its callbacks
	// wrapped by Lock.Callbacks.
	simClientGo
	// simManager: a controller-runtime manager over the Lock.
	simManager
)

func (a simAdopter) String() string {
	return [...]string{"library", "client-go elector", "controller-runtime manager"}[a]
}

// simTiming is the candidate's timings as the library's rules take them.
var simTiming = lead.Timing{LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod}

// simWorkStop bounds how long leader work takes to return once cancelled:
// the third of LeaseDuration - RenewDeadline - RetryPeriod that the timings
// leave for it (lead.Timing.SlowRenewal's comment).
var simWorkStop = simTiming.SlowRenewal()

// simElectorState is where client-go's Run is.
type simElectorState int

const (
	simAcquiring simElectorState = iota
	simRenewing
	simReleasing // the renew loop ended; tryRelease, then Run returns
	simReturned  // Run has returned
)

// simElector is one adopter process's elector, lock and application.
type simElector struct {
	p    *simProcess
	kind simAdopter
	// rp is the elector's RetryPeriod (Lock.Timings).
	rp time.Duration
	// timing is the Lock's check of the elector's timings.
	timing *lockrule.TimingCheck

	// client-go's LeaderElector: the observed record (holder, lease
	// duration, raw bytes) and when it was observed, on the local clock.
	obsHolder  string
	obsSeconds int
	obsRaw     string
	obsTime    time.Time
	state      simElectorState
	// ctxDone: Run's context is cancelled. trying: a tryAcquireOrRenew
	// runs. gen voids the loop's pending wait when it moves on.
	ctxDone bool
	trying  bool
	gen     int

	// The Lock: released once the elector's release came; handedOver once
	// that release has done all it will before the candidate stops
	// (Lock.handedOver closed), with waiters for it.
	released       bool
	handedOver     bool
	onHandedOver   []func()
	candidateEnded bool
	onCandidateEnd []func()

	// Leader work (OnStartedLeading, or the manager's leader runnables):
	// running from the elector's first successful renewal until it has
	// returned; cancelled once told to stop. stalled: the process was
	// stopped (SIGSTOP) during it.
	work, workCancelled, stalled bool
	onWorkReturned               []func()
	// workToken is the fencing token of the term leader work started in.
	workToken int32
	// onExit is the graceful stop's continuation (nil: the process exits
	// on its own after a lost term).
	onExit     func()
	terminated bool
	// renewedOK: the last renewal that returned before Run's context was
	// cancelled succeeded (and counted).
	renewedOK bool
	// electorContext: the application runs the elector with
	// Lock.ElectorContext, and termOver is set once that context ended.
	electorContext, termOver bool
	// reported is the holder the Lock's last Get reported; standBy is a
	// Get waiting for it to change.
	reported string
	standBy  *simStandBy
}

func newSimElector(p *simProcess, kind simAdopter) *simElector {
	e := &simElector{p: p, kind: kind, timing: &lockrule.TimingCheck{
		LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod,
		Margin: simTiming.SlowRenewal(),
	}}
	e.rp = e.timing.ElectorRetryPeriod() // Lock.Timings
	e.electorContext = p.c.w.adoptRng.IntN(2) == 0
	return e
}

func (e *simElector) w() *simWorld { return e.p.c.w }

// count adds one to an adopter figure of the run.
func (e *simElector) count(what string) {
	w := e.w()
	if w.res.adopters == nil {
		w.res.adopters = map[string]int{}
	}
	w.res.adopters[what]++
}

func (e *simElector) tracef(format string, args ...any) {
	e.w().Tracef("%s/%d %s", e.p.c.shown(), e.p.id, fmt.Sprintf(format, args...))
}

// start is le.Run: the acquire loop's first try at once.
func (e *simElector) start() { e.acquire() }

// wait waits local duration d on the loop's timer, then runs fn, unless
// the loop moved on (Run's context ended) meanwhile.
func (e *simElector) wait(d time.Duration, fn func()) {
	e.gen++
	gen := e.gen
	e.w().After(e.p.clk.Until(max(d, 0)), func() {
		e.p.act(func() {
			if gen == e.gen {
				fn()
			}
		})
	})
}

// ---- client-go's LeaderElector ----

// acquire is one round of the acquire loop: wait.JitterUntil runs
// tryAcquireOrRenew, then (sliding) waits RetryPeriod to 2.2 RetryPeriod
// from when it returned, until it succeeds or the context ends.
func (e *simElector) acquire() {
	if e.ctxDone {
		e.runReturns()
		return
	}
	e.try(time.Time{}, func(ok bool) {
		switch {
		case ok:
			e.tracef("elector acquired the Lease")
			e.count(map[simAdopter]string{simClientGo: "client-go-terms", simManager: "manager-terms"}[e.kind])
			e.acquired()
		case e.ctxDone:
			e.runReturns()
		default:
			jitter := time.Duration(e.w().Rng.Float64() * lockrule.AcquireJitter * float64(e.rp))
			e.wait(e.rp+jitter, e.acquire)
		}
	})
}

// acquired is Run after acquire returned true: OnStartedLeading in a
// goroutine, and the renew loop, whose first poll is at once.
func (e *simElector) acquired() {
	e.state = simRenewing
	e.startWork()
	e.poll()
}

// poll is one run of the renew loop's function: PollUntilContextTimeout
// with interval RetryPeriod and timeout RenewDeadline, immediate. Its ticker
// starts with the poll; a try that returns after a tick runs the next at
// once (the ticker keeps one tick), otherwise the next tick does. Success
// waits RetryPeriod (wait.Until, sliding) before the next poll; the deadline
// passing, or the context ending, ends the renew loop.
func (e *simElector) poll() {
	if e.ctxDone {
		e.renewEnds()
		return
	}
	start := e.p.clk.Wall()
	deadline := start.Add(simRenewDeadline)
	var tryAt func()
	tryAt = func() {
		began := e.p.clk.Wall()
		if e.ctxDone || !began.Before(deadline) {
			e.renewEnds()
			return
		}
		e.try(deadline, func(ok bool) {
			now := e.p.clk.Wall()
			switch {
			case ok:
				e.wait(e.rp, e.poll)
				return
			case e.ctxDone || !now.Before(deadline):
				e.tracef("elector failed to renew within its deadline")
				e.renewEnds()
				return
			}
			tick := start.Add((began.Sub(start)/e.rp + 1) * e.rp)
			if tick.After(deadline) {
				e.wait(deadline.Sub(now), e.renewEnds)
				return
			}
			e.wait(tick.Sub(now), tryAt)
		})
	}
	tryAt()
}

// try is tryAcquireOrRenew, its calls bounded by deadline (local, zero for
// none: the acquire loop's context has none).
func (e *simElector) try(deadline time.Time, done func(ok bool)) {
	e.trying = true
	id := e.p.c.name
	now := e.p.clk.Wall()
	finish := func(ok bool) {
		e.trying = false
		done(ok)
	}
	slow := func() {
		if e.ctxDone {
			finish(false) // a call with a cancelled context fails
			return
		}
		e.get(deadline, func(rec *resourcelock.LeaderElectionRecord, raw string, err error) {
			if err != nil {
				finish(false)
				return
			}
			if raw != e.obsRaw {
				e.obsHolder, e.obsSeconds, e.obsTime, e.obsRaw = rec.HolderIdentity, rec.LeaseDurationSeconds, e.p.clk.Wall(), raw
			}
			if rec.HolderIdentity != "" && e.leaseValid(now) && e.obsHolder != id {
				finish(false) // held and not expired
				return
			}
			if e.ctxDone {
				finish(false)
				return
			}
			e.update(deadline, func(err error) {
				if err != nil {
					finish(false)
					return
				}
				e.observeSelf()
				finish(true)
			})
		})
	}
	if e.obsHolder == id && e.leaseValid(now) {
		// The fast path: update optimistically on the record observed.
		e.update(deadline, func(err error) {
			if err == nil {
				e.observeSelf()
				finish(true)
				return
			}
			slow()
		})
		return
	}
	slow()
}

// leaseValid is isLeaseValid, on the elector's clock.
func (e *simElector) leaseValid(now time.Time) bool {
	return e.obsTime.Add(time.Duration(e.obsSeconds) * time.Second).After(now)
}

// observeSelf is setObservedRecord of the record the elector just wrote.
func (e *simElector) observeSelf() {
	e.obsHolder, e.obsSeconds, e.obsTime = e.p.c.name, int(simLeaseDuration/time.Second), e.p.clk.Wall()
}

// renewEnds is renew() once its loop has ended: the release
// (ReleaseOnCancel, which every adopter sets), then Run returns, cancelling
// leader work.
func (e *simElector) renewEnds() {
	if e.state != simRenewing {
		return
	}
	e.state = simReleasing
	e.gen++
	e.tryRelease(func() {
		if e.kind == simClientGo {
			e.cancelWork("Run returned")
		}
		e.runReturns()
	})
}

// tryRelease is client-go's: within RenewDeadline, a Get, and when the
// observed record still names this process an Update naming nobody.
func (e *simElector) tryRelease(done func()) {
	deadline := e.p.clk.Wall().Add(simRenewDeadline)
	e.get(deadline, func(_ *resourcelock.LeaderElectionRecord, _ string, err error) {
		if err != nil || e.obsHolder != e.p.c.name {
			done()
			return
		}
		e.tracef("elector releases")
		e.release(func() {
			e.obsHolder, e.obsSeconds, e.obsTime = "", 1, e.p.clk.Wall()
			done()
		})
	})
}

// runReturns is the end of Run (OnStoppedLeading), and what the program
// does then.
func (e *simElector) runReturns() {
	if e.state == simReturned {
		return
	}
	e.state = simReturned
	e.tracef("elector's Run returns")
	if e.kind == simManager && !e.terminated {
		// A lost term: controller-runtime cancels leader runnables
		// without waiting, and Start returns "leader election lost".
		e.cancelWork("leader election lost")
	}
	// Then the lock is closed (Lock.Close; the manager's Start gives it a
	// lease duration) and the process exits: the plain program once its
	// leader work has returned too (it waits for its goroutines), the
	// manager at once (leader runnables are cancelled, and waited for only
	// on a shutdown).
	e.close(func() {
		if e.kind == simClientGo {
			e.whenWorkReturned(e.exit)
			return
		}
		e.exit()
	})
}

// exit ends the process: whatever leader work still runs ends with it.
func (e *simElector) exit() {
	p, c, w := e.p, e.p.c, e.w()
	if p.dead {
		return
	}
	e.tracef("exits")
	p.lib.kill()
	e.work = false
	c.proc = nil
	c.e.exitedAt = w.Now
	if e.onExit != nil {
		e.onExit()
		return
	}
	// Its Deployment restarts it.
	w.After(w.DurationBetween(time.Second, 30*time.Second), func() {
		if c.proc == nil {
			c.start()
		}
	})
}

// terminate is a graceful stop (SIGTERM). The plain program cancels Run's
// context, which cancels leader work at the same moment. The manager stops
// leader runnables, waits for them without a limit while the elector goes
// on renewing, and only then cancels the elector's context.
func (e *simElector) terminate(then func()) {
	if e.terminated {
		return
	}
	e.terminated, e.onExit = true, then
	e.tracef("shuts down")
	if e.termOver {
		return // stopping already: the term ended
	}
	if e.kind == simClientGo {
		e.cancelWork("shutdown")
		e.cancel()
		return
	}
	e.cancelWork("shutdown")
	e.whenWorkReturned(e.cancel)
}

// termEnded is Lock.ElectorContext's context ending, told by the library's
// step-down (OnStoppedLeading) while the elector leads. The plain program's
// Run context ends, which cancels leader work at the same moment; the
// manager's Start context ends, and the manager stops its leader runnables,
// waits for them and only then cancels its elector. Either elector then
// releases, and the process exits as after a lost term.
func (e *simElector) termEnded() {
	if !e.electorContext || e.termOver || e.terminated || e.state != simRenewing {
		return
	}
	e.termOver = true
	e.count("elector-context-ends")
	e.tracef("elector's context ends: the term ended")
	e.cancelWork("the term ended")
	if e.kind == simClientGo {
		e.cancel()
		return
	}
	e.whenWorkReturned(e.cancel)
}

// cancel cancels Run's context: a wait of the loop ends at once, a call in
// flight fails.
func (e *simElector) cancel() {
	if e.ctxDone {
		return
	}
	e.ctxDone = true
	e.gen++
	e.endStandBy(context.Canceled)
	e.p.lib.cancelCalls()
	if e.trying {
		return // the try fails, and the loop then ends
	}
	switch e.state {
	case simAcquiring:
		e.runReturns()
	case simRenewing:
		e.renewEnds()
	}
}

// ---- leader work ----

func (e *simElector) startWork() {
	e.work, e.workCancelled, e.stalled = true, false, e.p.paused
	e.workToken = e.p.lib.token
	e.tracef("LEADER WORK STARTS")
	e.p.leaderWrites(e.workToken)
}

// cancelWork cancels leader work; it returns within simWorkStop.
func (e *simElector) cancelWork(why string) {
	if !e.work || e.workCancelled {
		return
	}
	e.workCancelled = true
	e.tracef("leader work cancelled: %s", why)
	e.w().After(e.w().DurationBetween(0, simWorkStop), func() {
		e.p.act(e.workReturned)
	})
}

func (e *simElector) workReturned() {
	if !e.work {
		return
	}
	e.work = false
	e.tracef("leader work returned")
	fns := e.onWorkReturned
	e.onWorkReturned = nil
	for _, fn := range fns {
		fn()
	}
}

func (e *simElector) whenWorkReturned(fn func()) {
	if !e.work {
		fn()
		return
	}
	e.onWorkReturned = append(e.onWorkReturned, fn)
}

// stall is told that the process is stopped (SIGSTOP). Nothing in client-go
// stops leader work that runs on after a pause before its renew loop has
// noticed the deadline passed: leader work that must not overlap checks
// IsLeader or writes through WrapConfig (pkg/lock's documentation). So a
// term that was paused acts only while the library counts it leader.
func (e *simElector) stall() {
	if e.work {
		e.stalled = true
	}
}

// acts reports whether leader work may act now, as the work asks it.
func (e *simElector) acts() bool {
	return e.work && (!e.stalled || e.p.isLeader())
}

// mayAct is acts for the checks: it reads the library's term without
// ending a lapsed one.
func (e *simElector) mayAct() bool {
	return e.work && (!e.stalled || e.p.lib.live())
}

// ---- pkg/lock's Lock ----

// get is Lock.Get: the Lease as the candidate last saw it (External.Lease,
// a call of its loop), reported by lockrule.RecordOf, with the reads timed
// for the timing check. Standing by (not leading, its RetryPeriod proven),
// it waits for the holder it reports to change instead (External.LeaseWhen:
// woken whenever the loop sees another version of the Lease, read again
// through the loop), for at most standByWait, or until Run's context ends,
// when it reports the Lease as last read.
func (e *simElector) get(deadline time.Time, reply func(*resourcelock.LeaderElectionRecord, string, error)) {
	p := e.p
	e.timing.ObserveGet(p.clk.Wall())
	term, leading := e.timing.Term()
	reported := e.reported
	standBy := e.timing.StandsBy(reported, p.c.name)
	answer := func(lease *coordinationv1.Lease) {
		e.timing.ReadReturned(p.clk.Wall())
		rec := lockrule.RecordOf(lease, p.c.name, term, leading)
		e.reported = rec.HolderIdentity
		raw, err := json.Marshal(rec)
		if err != nil {
			panic(err)
		}
		reply(rec, string(raw), nil)
	}
	fail := func(err error) {
		e.timing.ReadReturned(p.clk.Wall())
		reply(nil, "", err)
	}
	sb := &simStandBy{answer: answer, fail: fail}
	var read func()
	read = func() {
		p.queueCall(&simCall{deadline: deadline, inline: true, run: func(context.Context) func() {
			// Taken before the read, so that no change after it is
			// missed (LeaseWhen).
			changed := p.lib.ext.Changed()
			lease := p.lib.ext.Lease()
			return func() {
				if !standBy || sb.over || lockrule.WakesStandBy(lockrule.RecordOf(lease, p.c.name, term, leading).HolderIdentity, reported) {
					sb.over = true
					answer(lease)
					return
				}
				sb.last, sb.read, sb.changed = lease, read, changed
				e.standBy = sb
			}
		}, fail: func(err error) {
			if standBy {
				sb.end(err)
				return
			}
			fail(err)
		}})
	}
	if standBy {
		e.count("stand-by-waits")
		e.wait2(lockrule.StandByWait, func() {
			if e.standBy == sb {
				e.standBy = nil
			}
			sb.end(context.DeadlineExceeded)
		})
	}
	read()
}

// simStandBy is a Get that waits for the holder to change.
type simStandBy struct {
	// last is the Lease as last read, read reads it again; changed is
	// closed when the loop has seen another version since.
	last    *coordinationv1.Lease
	read    func()
	changed <-chan struct{}
	answer  func(*coordinationv1.Lease)
	fail    func(error)
	over    bool
}

// leaseSeen is told after each turn of the library's code: a Get standing
// by reads the Lease again once the loop has seen another version of it.
func (e *simElector) leaseSeen() {
	sb := e.standBy
	if sb == nil || sb.over {
		e.standBy = nil
		return
	}
	select {
	case <-sb.changed:
	default:
		return
	}
	e.standBy = nil
	sb.read()
}

// end ends the wait with the error of LeaseWhen: the candidate stopped
// (ErrNotRunning, which Get returns), or its context ended (Run's, or the
// wait's bound), when Get reports the Lease as last read.
func (sb *simStandBy) end(err error) {
	if sb.over {
		return
	}
	sb.over = true
	if errors.Is(err, candidatepkg.ErrNotRunning) {
		sb.fail(err)
		return
	}
	sb.answer(sb.last)
}

// endStandBy ends a Get standing by (see simStandBy.end).
func (e *simElector) endStandBy(err error) {
	sb := e.standBy
	e.standBy = nil
	if sb != nil {
		sb.end(err)
	}
}

// update is Lock.Update naming this process: the timing check, then
// External.Renew, counted only if lead.CountRenewal says so.
func (e *simElector) update(deadline time.Time, reply func(error)) {
	p := e.p
	if err, refusedNow := e.timing.Check(int(simLeaseDuration/time.Second), deadline, !deadline.IsZero(), p.clk.Wall()); err != nil {
		if refusedNow {
			e.tracef("lock refuses the elector for good: %v", err)
		}
		reply(err)
		return
	}
	// Once the elector has acquired a term, Lock renews with
	// External.RenewTerm: only that term.
	var term *int32
	if token, leading := e.timing.Term(); leading {
		term = &token
	}
	renewed := func(err error) {
		if errors.Is(err, lead.ErrSlowRenewal) {
			e.count("slow-renewals")
			p.c.troubledAt = e.w().Now
			e.tracef("renewal not counted: %v", err)
		}
		if !e.ctxDone {
			e.renewedOK = err == nil
		}
		if first := e.timing.Renewed(err == nil, p.clk.Wall()); first {
			token, _ := p.lib.leaderToken() // Lock.renewed: Token
			e.timing.SetTerm(token)
		}
		reply(err)
	}
	p.call(deadline, func(ctx context.Context) func() {
		sent := p.clk.Now()
		err := p.lib.ext.Renew(ctx, term)
		took := p.clk.Now().Sub(sent)
		return func() {
			e.w().reactToSlowRenewal(p, took)
			renewed(err)
		}
	}, renewed)
}

// release is Lock.release: it answers at once and moves the Lease as
// lockrule.ReleaseFor says; the candidate then stops.
func (e *simElector) release(then func()) {
	p := e.p
	sound := e.timing.SoundRelease(p.clk.Wall())
	if e.released {
		then()
		return
	}
	e.released = true
	r := lockrule.ReleaseFor(e.kind == simManager, sound, e.kind == simClientGo)
	if e.kind == simManager && e.terminated && e.renewedOK && p.isLeader() && r != lockrule.HandOverNow {
		// A manager releases after its leader runnables have stopped: a
		// graceful shutdown in a term it still holds hands over at once,
		// whatever became of a renewal the shutdown cut short.
		e.w().Fail("%s/%d: a graceful shutdown of the leader in a sound term left the Lease to expire", p.c.shown(), p.id)
	}
	switch r {
	case lockrule.HandOverNow:
		e.count("release-now")
		e.tracef("lock hands the Lease over now")
		e.resign(func() {
			e.endRelease()
			then()
		})
	case lockrule.HandOverOnceWorkReturned:
		e.count("release-after-work")
		e.tracef("lock hands the Lease over once leader work has returned")
		waited := false
		e.whenWorkReturned(func() {
			if waited {
				return
			}
			waited = true
			e.resign(e.endRelease)
		})
		e.wait2(simLeaseDuration, func() {
			if !waited {
				waited = true
				e.tracef("leader work did not return within the lease duration; the Lease is left to expire")
				e.endRelease()
			}
		})
		then()
	default:
		e.count("release-to-expire")
		e.tracef("lock leaves the Lease to expire (sound %v)", sound)
		e.endRelease()
		then()
	}
}

// wait2 waits local duration d apart from the loop's timer.
func (e *simElector) wait2(d time.Duration, fn func()) {
	e.w().After(e.p.clk.Until(d), func() { e.p.act(fn) })
}

// endRelease closes the release's hand-over and stops the candidate.
func (e *simElector) endRelease() {
	e.handedOver = true
	fns := e.onHandedOver
	e.onHandedOver = nil
	for _, fn := range fns {
		fn()
	}
	e.stopCandidate()
}

// resign is External.Resign: recorded at once, then the loop steps down.
func (e *simElector) resign(then func()) {
	p := e.p
	p.lib.ext.Resign()
	p.call(time.Time{}, func(ctx context.Context) func() {
		p.lib.ext.ResignInLoop(ctx)
		return then
	}, func(error) { then() })
}

// stopCandidate is Lock.stop: the candidate's Run ends (it deletes the
// LeaseCandidate, and releases the Lease if its elector can no longer act
// on its renewals).
func (e *simElector) stopCandidate() {
	e.p.lib.stop(func() {
		e.candidateEnded = true
		fns := e.onCandidateEnd
		e.onCandidateEnd = nil
		for _, fn := range fns {
			fn()
		}
	})
}

// close is Lock.Close: it waits for the release's hand-over, then stops the
// candidate and waits for it. The manager's Start bounds it by a lease
// duration; the plain program (lk.Close(context.Background())) does not.
func (e *simElector) close(then func()) {
	done := false
	finish := func() {
		if !done {
			done = true
			then()
		}
	}
	if e.kind == simManager {
		e.wait2(simLeaseDuration, finish)
	}
	stop := func() {
		if e.candidateEnded {
			finish()
			return
		}
		e.onCandidateEnd = append(e.onCandidateEnd, finish)
		e.stopCandidate()
	}
	if e.released && !e.handedOver {
		e.onHandedOver = append(e.onHandedOver, stop)
		return
	}
	stop()
}

// ---- the External's calls, served by the library's elector loop ----

// simCall is one call of the External (Renew, Lease, Resign) from the
// elector: it waits for the loop while the loop is busy, and gives up with
// its caller's context (deadline, local; zero for none) until it runs. run
// is the loop's part, run on the elector's thread, or (inline: it makes no
// request) on the simulation's own goroutine; it returns what the caller
// then does with the result.
type simCall struct {
	deadline time.Time
	run      func(ctx context.Context) func()
	fail     func(error)
	inline   bool
	over     bool
}

// call queues a call for the loop (External.inLoop), which serves it once
// Run has started.
func (p *simProcess) call(deadline time.Time, run func(ctx context.Context) func(), fail func(error)) {
	p.queueCall(&simCall{deadline: deadline, run: run, fail: fail})
}

func (p *simProcess) queueCall(cl *simCall) {
	l, deadline, fail := p.lib, cl.deadline, cl.fail
	if p.stopping() {
		cl.over = true
		fail(candidatepkg.ErrNotRunning)
		return
	}
	if !deadline.IsZero() {
		left := deadline.Sub(p.clk.Wall())
		if left <= 0 {
			cl.over = true
			fail(context.DeadlineExceeded)
			return
		}
		p.c.w.After(p.clk.Until(left), func() {
			p.act(func() {
				if !cl.over {
					cl.over = true
					fail(context.DeadlineExceeded)
				}
			})
		})
	}
	l.calls = append(l.calls, cl)
	l.nextCall()
}

// nextCall serves the next waiting call when the elector's loop is idle
// (in its select): it has started, no step or call runs, and it stepped
// since the last call.
func (l *simLib) nextCall() {
	if !l.started || l.stopped != nil || l.p.dead || l.stepFirst || l.elector.th.busy() {
		return
	}
	for len(l.calls) > 0 {
		cl := l.calls[0]
		l.calls = l.calls[1:]
		if cl.over {
			continue
		}
		cl.over = true // it runs to its end now
		if cl.inline {
			l.stepEnded(l.elector, simTurn{callEnded: cl.run(l.ctx)})
			return
		}
		l.inCall, l.callDeadline = true, cl.deadline
		th := &l.elector.th
		l.turn(th, func() { th.run(func() simTurn { return simTurn{callEnded: cl.run(l.ctx)} }) })
		return
	}
}

// failCalls ends the calls waiting with err.
func (l *simLib) failCalls(err error) {
	calls := l.calls
	l.calls = nil
	for _, cl := range calls {
		if !cl.over {
			cl.over = true
			cl.fail(err)
		}
	}
	if err == candidatepkg.ErrNotRunning && l.p.ext != nil {
		l.p.ext.endStandBy(err)
	}
}

// cancelCalls ends the elector's calls with its context: those waiting fail
// and the requests of the one running end (its caller's context).
func (l *simLib) cancelCalls() {
	l.failCalls(context.Canceled)
	if !l.inCall {
		return
	}
	l.callDeadline = l.p.clk.Wall() // its next requests fail at once
	if cancel := l.elector.th.cancel; cancel != nil {
		cancel()
	}
}

// simActs reports whether the process may act as leader now: for the
// library, whether its term is live; for an adopter, whether its leader work
// may act. Asking changes nothing.
func simActs(p *simProcess) bool {
	_, ok := p.mayAct()
	return ok
}
