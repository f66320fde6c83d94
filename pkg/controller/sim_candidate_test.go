package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/internal/simworld"
	candidatepkg "github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/strategy"
)

// simCandidate is one candidate identity; proc is its running process (nil
// while it is down). Every process runs pkg/candidate itself, its elector,
// registrar and shutdown, on the model server (sim_library_test.go): a
// library candidate's Candidate, or an adopter's External, renewed through
// pkg/lock by client-go's LeaderElector (both modelled, sim_adopter_test.go).
type simCandidate struct {
	w    *simWorld
	name string
	// k is the server's key of its LeaseCandidate (see key).
	k string
	// reg is registered's answer while the server's CandidateWrites is
	// regWrites-1.
	reg               *coordinationv1beta1.LeaseCandidate
	regWrites         int
	binary, emulation string
	proc              *simProcess
	incarnations      int
	// adopter is how the process takes part: the library itself, or
	// client-go's elector or a controller-runtime manager over pkg/lock.
	adopter simAdopter
	// e is the election of the Lease it is a candidate for.
	e *simElection
	// refusals counts its starts refused for a taken Identity.
	refusals int
	// strategy is the strategy its processes ask for.
	strategy coordinationv1.CoordinatedLeaseStrategy
	// pod is its Pod, in a run with the proof of death.
	pod *simPod
	// registeredRV is the resourceVersion of its first registration, in a
	// run with a fleet: the order in which the server applied it.
	registeredRV uint64
	// troubledAt is when a fault last struck its process (see faultOn; a
	// pause, until a renew deadline after it ended: see resume);
	// troubledTerms are when its terms that a fault struck ended (see
	// noteTermEnds): the world's truth of which of its terms may have
	// ended unreleased.
	troubledAt    time.Time
	troubledTerms []simTermEnd
}

// simTermEnd is when a term struck by a fault ended: in true time, and on
// the clock of the controller replica active then (ctrl 0: none).
type simTermEnd struct {
	at, ctrlAt time.Time
	ctrl       int
}

// key is the key of its LeaseCandidate: its Lease's namespace and its name.
func (c *simCandidate) key() string { return c.k }

// shown is how the trace names the candidate (see simShown).
func (c *simCandidate) shown() string { return simShown(c.e.ns, c.name) }

type simProcess struct {
	c *simCandidate
	// answerHeld is how much longer than its latency the answer to the
	// request being applied takes (see holdAnswer).
	answerHeld time.Duration
	// lib runs pkg/candidate itself: a library candidate's Candidate, or
	// an adopter's External (see sim_library_test.go).
	lib *simLib
	id  int
	// clk is the process's clock (see simworld.Clock).
	clk    *simworld.Clock
	paused bool
	dead   bool
	held   []func() // what arrived while paused
	// instance and messageFile are its proof of death's, in a run with it;
	// exited: the kubelet has seen it exit.
	instance, messageFile string
	exited                bool
	// partitionedUntil: until then the process cannot reach the API
	// server (its requests fail after a connection timeout, or hang until
	// their deadline), while its clock and timers run on.
	partitionedUntil time.Time

	leaseWatch, candWatch *simworld.Watcher

	// ext is an adopter's client-go elector, renewing through pkg/lock
	// (nil: the library renews itself).
	ext *simElector
}

// simWorkReturn bounds how long leader work takes to return once its
// context is cancelled; stepping down waits for it.
const simWorkReturn = time.Second

// isLeader is the library's IsLeader, as an adopter's code asks it.
func (p *simProcess) isLeader() bool {
	_, ok := p.lib.leaderToken()
	return ok
}

// mayAct is what the checks read, and reading it changes nothing: whether
// the process may act as leader now, and with which token (the library's
// Peek; an adopter's leader work's, see simElector.mayAct).
func (p *simProcess) mayAct() (int32, bool) {
	if p.ext != nil {
		return p.ext.workToken, p.ext.mayAct()
	}
	return p.lib.peek()
}

// stopping reports whether the candidate's Run is stopping or stopped.
func (p *simProcess) stopping() bool { return p.lib.stopped != nil }

func (w *simWorld) addCandidate(e *simElection, name, binary, emulation string, adopter simAdopter) *simCandidate {
	c := &simCandidate{w: w, e: e, name: name, k: simKey(e.ns, name), binary: binary, emulation: emulation, adopter: adopter, strategy: w.strategy}
	w.cands = append(w.cands, c)
	e.cands = append(e.cands, c)
	return c
}

func (c *simCandidate) start() {
	w := c.w
	c.incarnations++
	offset := w.DurationBetween(-10*time.Minute, 10*time.Minute)
	drift := (w.Rng.Float64()*2 - 1) * simMaxDrift
	if w.builtin != nil {
		// kube-apiserver's controller compares the candidates' clocks
		// with its own: within a second here (see simBuiltin).
		offset, drift = offset/600, drift/5
	}
	p := &simProcess{c: c, id: c.incarnations, clk: w.NewClock(offset, drift, w.Now)}
	p.clk.Monotonic = w.clockFaults
	p.clk.Alive = func() bool { return !p.dead }
	p.clk.Hold = func(fn func()) { p.held = append(p.held, fn) }
	c.proc = p
	w.Tracef("%s/%d starts (binary %s, emulation %s, %s)", c.shown(), p.id, c.binary, c.emulation, c.adopter)
	if c.adopter != simLibrary {
		p.ext = newSimElector(p, c.adopter)
	}
	p.startLibrary()
	if p.ext != nil {
		p.ext.start() // its calls wait for the candidate to have started
	}
}

// act runs fn as the process, unless it is dead or paused (a paused
// process runs it when it resumes, in order).
func (p *simProcess) act(fn func()) {
	if p.dead {
		return
	}
	if p.paused {
		p.held = append(p.held, fn)
		return
	}
	fn()
}

// resume ends a pause: what arrived meanwhile runs now, in order.
func (p *simProcess) resume() {
	if !p.paused {
		return
	}
	p.paused = false
	p.clk.Resume()
	p.c.w.Tracef("%s/%d resumes", p.c.shown(), p.id)
	// The pause strikes on after it ends: what was held runs now, and a
	// renewal sent before the pause may start a term that the process's
	// loops, finding their deadline passed, leave to run out (seed 3254: a
	// client-go elector gave up as the renewal it had waited on began a
	// term). A term that begins within a renew deadline of waking is one
	// the pause struck.
	if until := p.c.w.Now.Add(simRenewDeadline); until.After(p.c.troubledAt) {
		p.c.troubledAt = until
	}
	held := p.held
	p.held = nil
	for _, fn := range held {
		p.act(fn)
	}
}

// request sends a request and delivers its result later: made after one
// latency, answered after another; the failure, and whether a failed
// write was made nonetheless, are drawn by the world. A deadline (local,
// zero for none) ends the wait first with context.DeadlineExceeded, as the
// library's request context does, and so does cancel, with
// context.Canceled; the request may be made nonetheless.
func (p *simProcess) request(deadline time.Time, call func() (runtime.Object, error), done func(runtime.Object, error)) (cancel func()) {
	w := p.c.w
	answered := false
	finish := func(obj runtime.Object, err error) {
		if answered {
			return
		}
		answered = true
		p.act(func() { done(obj, err) })
	}
	var expires time.Time // the deadline in true time (zero: none)
	if !deadline.IsZero() {
		timeout := deadline.Sub(p.clk.Wall())
		if timeout <= 0 {
			finish(nil, context.DeadlineExceeded)
			return func() {}
		}
		expires = w.Now.Add(p.clk.Until(timeout))
		w.At(expires, func() { finish(nil, context.DeadlineExceeded) })
	}
	// Both ways take longer on a loaded server: the request is made after
	// one latency, and its answer arrives after another, so a write may be
	// seen by the watchers long before its writer learns it succeeded.
	sent := w.DurationBetween(time.Millisecond, 20*time.Millisecond+w.LagBase)
	back := w.DurationBetween(time.Millisecond, 20*time.Millisecond+w.LagBase)
	w.Late(w.Now.Add(sent + back))
	if w.Now.Before(p.partitionedUntil) {
		// The request never reaches the server: it hangs until its
		// deadline, or fails when the connection times out. Either is the
		// partition's doing, even when it ends after the faults stop.
		if deadline.IsZero() {
			failIn := w.DurationBetween(time.Second, 10*time.Second)
			w.Late(w.Now.Add(failIn))
			w.After(failIn, func() { finish(nil, errSimUnreachable) })
		} else {
			w.Late(expires)
		}
		return func() { finish(nil, context.Canceled) }
	}
	w.After(sent, func() {
		w.Apply(func() {
			err, applied := w.RequestError(simworld.LeasesGR, p.c.name)
			var obj runtime.Object
			if err == nil || applied {
				var cerr error
				obj, cerr = call()
				if err == nil {
					err = cerr
				}
			}
			// A reaction to what the request wrote may hold its answer up.
			if held := p.answerHeld; held > 0 {
				p.answerHeld = 0
				back += held
				w.Late(w.Now.Add(back))
			}
			w.After(back, func() { finish(obj, err) })
		})
	})
	return func() { finish(nil, context.Canceled) }
}

// errSimUnreachable is a request's error while its process is partitioned
// from the API server.
var errSimUnreachable = errors.New("dial tcp: i/o timeout")

// stopGracefully is a graceful stop (SIGTERM): the library's Run ends
// (stop leading, delete the LeaseCandidate, release); an adopter's own
// shutdown stops its candidate. then runs when that is over.
func (p *simProcess) stopGracefully(then func()) {
	if p.ext != nil {
		p.ext.terminate(then)
		return
	}
	p.lib.stop(then)
}

// newTerm records a term that just began and checks its token: above every
// earlier term's, unless kube-apiserver's controller, which numbers no term,
// created the Lease again (historyLost) and the new leader's process has not
// seen it either (seenBefore, the most it saw before the naming).
func (w *simWorld) newTerm(p *simProcess, token, seenBefore int32) {
	e := p.c.e
	if e.unhandled {
		w.Fail("%s/%d leads %s, whose candidates ask for %s, which nobody handles", p.c.shown(), p.id, e.shown(), simUnhandledStrategy)
	}
	w.res.terms++
	w.Tracef("%s/%d STARTS LEADING token=%d", p.c.shown(), p.id, token)
	if e.anyTerm && token <= e.maxToken {
		if !e.historyLost || seenBefore >= e.maxToken {
			w.Fail("%s/%d leads with token %d, not above an earlier term's %d", p.c.shown(), p.id, token, e.maxToken)
			return
		}
		e.maxToken = token
		// The documented case of kube-apiserver's controller: a Lease it
		// creates again starts over, and whoever lets it elect a Lease a
		// fenced resource depends on resets the fence (docs/library.md).
		w.Tracef("the witness's fence is reset: kube-apiserver's controller created the Lease again")
		e.witness, e.witnessBy = 0, nil
	}
	e.anyTerm, e.historyLost = true, false
	e.maxToken = max(e.maxToken, token)
}

// libraryWork is a library candidate's leader work, written as the
// library's documentation tells users to write it: it runs on the context
// OnStartedLeading gives it and returns when that ends, and every 0.5 to
// 3 s of its clock it writes to the witness, either to its fenced part with
// its context's token (TokenFrom) or to its unfenced part through a client
// of the Candidate's WrapConfig. A write the guard refuses ends it: its
// context has ended with its term (the guard ends a lapsed term), and
// leader work returns. Its draws come from a stream of their own, so that
// they change nothing else a seed draws.
func (p *simProcess) libraryWork(ctx context.Context, guarded *http.Client) {
	w := p.c.w
	p.clk.After(simworld.DurationBetween(w.witnessRng, 500*time.Millisecond, 3*time.Second), func() {
		p.act(func() {
			if ctx.Err() != nil {
				return
			}
			token, _ := candidatepkg.TokenFrom(ctx)
			if w.witnessRng.IntN(2) == 0 {
				w.witnessWrite(p, token)
			} else if !p.lib.guardedWrite(ctx, guarded) {
				return
			}
			p.libraryWork(ctx, guarded)
		})
	})
}

// leaderWrites is an adopter's leader work, from the start of a term: it
// writes to the fenced witness every 0.5 to 3 s of its clock, with the token
// of the term it started in, asking first whether it may act (a paused
// process asks when it resumes); it ends when the answer is no.
func (p *simProcess) leaderWrites(token int32) {
	w := p.c.w
	p.clk.After(simworld.DurationBetween(w.witnessRng, 500*time.Millisecond, 3*time.Second), func() {
		p.act(func() {
			if p.ext.workToken == token && p.ext.acts() {
				w.witnessWrite(p, token)
				p.leaderWrites(token)
			}
		})
	})
}

// witnessWrite sends one write of leader work to the witness's fenced part,
// a resource of its own that rejects tokens below the highest it accepted.
// It arrives after a latency, also from a process partitioned from the API
// server: a partition between a leader and the API server leaves it its
// resources. A token equal to the highest accepted is accepted from the
// process that wrote it: from any other, two terms share a token, and the
// fence cannot tell them apart. A rejection is the fence doing its work when
// the writer's term has ended (a write held by a pause, or slow), and a
// violation when the term may still act as leader: then a term with a higher
// token wrote while it led.
func (w *simWorld) witnessWrite(p *simProcess, token int32) {
	e := p.c.e
	w.After(simworld.DurationBetween(w.witnessRng, time.Millisecond, 20*time.Millisecond+w.LagBase), func() {
		w.res.witnessWrites++
		switch {
		case token > e.witness || e.witnessBy == nil:
			e.witness, e.witnessBy = token, p
		case token == e.witness:
			if e.witnessBy != p {
				w.Fail("the witness accepted token %d from %s/%d and from %s/%d: two terms share a fencing token", token, e.witnessBy.c.shown(), e.witnessBy.id, p.c.shown(), p.id)
			}
		default:
			w.res.fenced++
			if now, leads := p.mayAct(); leads && now == token && !p.dead && p.c.proc == p {
				w.Fail("the witness rejected token %d of %s/%d, whose term may still act as leader: a token %d was accepted", token, p.c.shown(), p.id, e.witness)
			}
		}
	})
}

// guardedWrite is one write of leader work through the write guard
// (WrapConfig) to the witness's unfenced part; it reports whether the guard
// let it through. A refusal waits for the work's context to end: the guard
// ended the term, and the library cancels the work of a term that ended
// (at once, on a goroutine of its own).
func (l *simLib) guardedWrite(ctx context.Context, client *http.Client) bool {
	e := l.p.c.e
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "https://witness.sim/apis/witness.cle.dev/v1/namespaces/"+e.ns+"/records/"+e.name, http.NoBody)
	if err != nil {
		panic(err)
	}
	l.sync()
	resp, err := client.Do(req)
	l.woken()
	if err != nil {
		if !errors.Is(err, candidatepkg.ErrNotLeader) {
			l.p.c.w.Fail("a write through the guard failed: %v", err)
		}
		<-ctx.Done()
		return false
	}
	_ = resp.Body.Close()
	return true
}

// simWitnessTransport is the witness's unfenced part as a process's guarded
// client reaches it: a write counts when it is sent, whatever becomes of it
// on the way. What the writes of two terms must not do is interleave: once
// a term wrote after another, the other never writes again, or two leaders
// acted at once.
type simWitnessTransport struct{ p *simProcess }

func (t simWitnessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.p
	w, e := p.c.w, p.c.e
	token, _ := candidatepkg.TokenFrom(req.Context())
	writer := simWriter{p: p, token: token}
	w.res.guardedWrites++
	if last := e.lastWriter; last != writer {
		if e.pastWriters[writer] {
			w.Fail("%s/%d wrote through its write guard with token %d after %s/%d wrote with token %d: two leaders acted at once", p.c.shown(), p.id, token, last.p.c.shown(), last.p.id, last.token)
		}
		if last.p != nil {
			if e.pastWriters == nil {
				e.pastWriters = map[simWriter]bool{}
			}
			e.pastWriters[last] = true
		}
		e.lastWriter = writer
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// simWriter is one term of one process, as the witness tells writers apart.
type simWriter struct {
	p     *simProcess
	token int32
}

// checkLeaders checks, at the present true instant, that at most one process
// may act as leader of each Lease, and follows the liveness bounds after
// faults stopped.
func (w *simWorld) checkLeaders() {
	steady := true
	for _, e := range w.elections {
		w.checkElection(e)
		steady = steady && (!e.steadyFrom.IsZero() || e.unhandled)
	}
	if steady && !w.steadyLag && !w.Now.Before(w.Start.Add(simFaultPhase)) {
		w.steadyLag = true
		w.After(w.DurationBetween(0, 30*time.Second), w.lagInSteadyState)
		if w.fleet {
			w.After(w.DurationBetween(90*time.Second, 120*time.Second), w.floodInSteadyState)
		}
	}
}

func (w *simWorld) checkElection(e *simElection) {
	if e.unhandled {
		return // nobody leads it (newTerm and the controller's writes check it)
	}
	w.noteTermEnds(e)
	// Most steps have at most one leader: the slice stays on the stack.
	var buf [2]*simCandidate
	leaders := buf[:0]
	for _, c := range e.cands {
		if p := c.proc; p != nil && !p.dead && simActs(p) {
			leaders = append(leaders, c)
		}
	}
	if len(leaders) > 1 {
		w.Fail("two processes may act as leader of %s: %v", e.shown(), leaderNames(leaders))
	}
	w.checkDuring(e, leaders)
	if w.quietAt.IsZero() || w.Now.Before(w.quietAt) {
		return
	}
	if len(leaders) == 1 && e.quietLeader.IsZero() {
		e.quietLeader = w.Now
	}
	// While no candidate process runs (adopters that lost their term exit,
	// and their Deployment restarts them 1 to 30 s later), nobody can lead:
	// the bound counts from when one runs again, a candidate joining, as
	// the best's bound below does.
	running := false
	for _, c := range e.cands {
		running = running || (c.proc != nil && !c.proc.dead)
	}
	if !running {
		e.noneRan = w.Now
	}
	best, bestLeads := w.bestLeads(e, leaders)
	// The best is measured from when it became the best: a candidate
	// started after faults stopped may be better than the leader.
	if best != e.best {
		e.best, e.bestFrom, e.heldBack = best, w.Now, time.Time{}
	}
	// Some candidate leads within the bound from when faults stopped, a
	// candidate ran again, or the best changed: a better candidate that
	// starts just after another was named, before that one led, is
	// rightly handed the Lease, and leads after its own first try.
	leaderFrom := w.quietAt
	for _, t := range []time.Time{e.noneRan, e.bestFrom} {
		if t.After(leaderFrom) {
			leaderFrom = t
		}
	}
	if bound := w.bound(simLeaderBound); e.quietLeader.IsZero() && w.Now.Sub(leaderFrom) > bound && !e.exitedLately(w.Now) {
		w.Fail("no leader %s after faults stopped and %s after a candidate ran again or the best changed (bound %s)", w.Now.Sub(w.quietAt), w.Now.Sub(leaderFrom), bound)
	}
	if e.sharedIdentity {
		// Which of the two processes named alike is registered, and so
		// ranked, changes as their LeaseCandidate is deleted and created
		// again; the one that is not may hold its Lease meanwhile, renewing
		// it, and the controller leaves a holder that is no candidate be.
		return
	}
	if bestLeads {
		if e.quietBest.IsZero() {
			e.quietBest = w.Now
		}
	} else if !e.quietBest.IsZero() && e.steadyFrom.IsZero() {
		e.quietBest = time.Time{} // not settled yet
	}
	if best == nil {
		// No candidate runs: an adopter that lost its term exits, and its
		// Deployment restarts it.
		return
	}
	from := w.quietAt
	if e.bestFrom.After(from) {
		from = e.bestFrom
	}
	// The best is held back as unsteady until then, or was until the
	// holder changed (seed 358197: a better-ranked candidate that emulates
	// a newer version took over while best was held back, and best may
	// preempt it at once).
	// (Once steady, the best has led for good: no need to ask.)
	var heldBack time.Time
	if e.steadyFrom.IsZero() {
		heldBack = w.unsteadyUntil(e, best)
	}
	if !heldBack.IsZero() {
		e.heldBack = maxTime(e.heldBack, earliest(heldBack, w.Now))
	}
	if bound := w.bound(simBestBound); e.quietBest.IsZero() && w.Now.Sub(from) > bound && !e.exitedLately(w.Now) && w.Now.Sub(maxTime(heldBack, e.heldBack)) > bound {
		w.Fail("the best candidate %s does not lead %s after faults stopped and it was the best (bound %s)", best.name, w.Now.Sub(from), bound)
	}
	// A candidate that is down (an adopter that lost its term exits, and is
	// restarted later) or not registered yet may be better than the leader
	// when it comes back: no steady state until every candidate has run,
	// registered, for as long.
	for _, c := range e.cands {
		if c.proc == nil || c.proc.dead || c.registered() == nil {
			e.lastDown = w.Now
			break
		}
	}
	if !e.quietBest.IsZero() && e.steadyFrom.IsZero() && w.Now.Sub(e.quietBest) > 30*time.Second && w.Now.Sub(e.lastDown) > 30*time.Second {
		// Settled: from now on nothing but the holder's renewals and the
		// candidates' own renewals may be written.
		e.steadyFrom = w.Now
		w.res.toLeader = max(w.res.toLeader, e.quietLeader.Sub(w.quietAt))
		w.res.toBest = max(w.res.toBest, e.quietBest.Sub(from))
		w.Tracef("steady state of %s from here", e.shown())
	}
	if !e.steadyFrom.IsZero() && !bestLeads {
		w.Fail("leadership changed in steady state: leaders %v", leaderNames(leaders))
	}
}

// unsteadyUntil is until when, in true time, the controller may hold best
// back from being preferred over a live holder because best's last terms
// ended unreleased (Options.UnsteadyWindow: a Priority run's crashes and
// pauses during the faults can make the best candidate unsteady for minutes
// after they stop), past or not; zero when no two of its terms that faults
// struck ended within the window. It asks the world, not the controller:
// a term that no fault struck (a holder asked to hand over that lets its
// Lease expire) is no excuse for holding its candidate back. The rule never
// holds back a candidate that emulates an older version than the holder (so
// never under OldestEmulationVersion).
func (w *simWorld) unsteadyUntil(e *simElection, best *simCandidate) time.Time {
	ends := best.troubledTerms
	if len(ends) < unsteadyLosses {
		return time.Time{}
	}
	if l, blc := e.lease(), best.registered(); l != nil && blc != nil {
		if hlc := w.Candidate(simKey(e.ns, holderIdentity(l))); hlc != nil && strategy.Preempts(strategy.OldestEmulationVersion{}, blc, hlc) {
			return time.Time{}
		}
	}
	// The older of the last two, as the active replica's clock measures
	// the window if it was active then (its clock may have been stepped),
	// else in true time.
	end := ends[len(ends)-unsteadyLosses]
	until := end.at.Add(DefaultUnsteadyWindow)
	if sc := w.ctrl; sc != nil && sc.id == end.ctrl {
		until = maxTime(until, w.Now.Add(end.ctrlAt.Add(DefaultUnsteadyWindow).Sub(sc.clk.Now())))
	}
	return until
}

// faultOn records fault kind striking candidate c's process.
func (w *simWorld) faultOn(c *simCandidate, kind string) {
	w.World.Fault(kind)
	c.troubledAt = w.Now
}

// Fault records fault kind striking the world at large (the API server, a
// controller, a Lease): every process's term may suffer from it.
func (w *simWorld) Fault(kind string) {
	w.World.Fault(kind)
	w.troubledAt = w.Now
}

// noteTermEnds follows who holds e's Lease, by the server's object: when
// the holder or the term's number changes (or the Lease goes), the last
// holder's term ended, and if a fault struck since it began, its
// candidate's troubledTerms say when.
func (w *simWorld) noteTermEnds(e *simElection) {
	holder, term := "", int32(0)
	if l := e.lease(); l != nil {
		holder, term = holderIdentity(l), ptr.Deref(l.Spec.LeaseTransitions, 0)
	}
	if holder == e.termHolder && term == e.termNumber {
		return
	}
	if e.termHolder != "" {
		for _, c := range e.cands {
			if c.name != e.termHolder || (!e.termStruck && c.troubledAt.Before(e.termFrom) && w.troubledAt.Before(e.termFrom)) {
				continue
			}
			end := simTermEnd{at: w.Now}
			if sc := w.ctrl; sc != nil {
				end.ctrl, end.ctrlAt = sc.id, sc.clk.Now()
			}
			c.troubledTerms = append(c.troubledTerms[max(0, len(c.troubledTerms)-unsteadyLosses+1):], end)
		}
	}
	e.termHolder, e.termNumber, e.termFrom = holder, term, w.Now
	// A term named to a candidate that has no process running, or only a
	// paused one, or an adopter's whose elector's Run has returned (it is
	// on its way out), is struck from its start by whatever stopped it
	// (seed 7059: a holder handed the Lease over to a candidate whose
	// process had crashed four seconds before, and its term ran out
	// untaken; seed 8345 after 9256ff7: handed over to an adopter whose
	// elector had lost its term and that exited a moment later).
	e.termStruck = false
	for _, c := range e.cands {
		if c.name == holder && (c.proc == nil || c.proc.dead || c.proc.paused || (c.proc.ext != nil && c.proc.ext.state == simReturned)) {
			e.termStruck = true
		}
	}
}

// exitedLately reports an adopter's process of e that exited on its own
// less than simExitedBound before now: its LeaseCandidate, renewed just
// before, looks alive to the controller for the candidate freshness
// window, which may name it; its term then runs out unrenewed before a
// ping tells the controller to elect another (seed 18500: it exited as
// faults stopped, was named 3 s later, and the next leader came 23 s
// after). The bounds hold again from then.
func (e *simElection) exitedLately(now time.Time) bool {
	return !e.exitedAt.IsZero() && e.exitedAt.Add(simExitedBound).After(now)
}

// simExitedBound is how long after such an exit the election may wait:
// the freshness window, the lease duration of the dead process's term, the
// ping timeout and a second.
const simExitedBound = DefaultCandidateFreshness + simLeaderBound

// bound is a liveness bound of this run: one ping timeout longer when a
// dead candidate asks for another strategy.
func (w *simWorld) bound(b time.Duration) time.Duration {
	if w.deadDecider {
		return b + simDeadDeciderDelay
	}
	return b
}

// leaderNames names leading processes as name/incarnation.
func leaderNames(leaders []*simCandidate) []string {
	names := make([]string, 0, len(leaders))
	for _, c := range leaders {
		names = append(names, fmt.Sprintf("%s/%d", c.shown(), c.proc.id))
	}
	return names
}

// asGoodAs reports whether the leader is the best candidate's equal on
// merit: among equals whoever holds keeps leading.
func (w *simWorld) asGoodAs(leader, best *simCandidate) bool {
	lc, blc := leader.registered(), best.registered()
	return lc != nil && blc != nil && w.ranking().CompareMerit(lc, blc) == 0
}

// registered is c's LeaseCandidate, nil when there is none for its Lease
// (another Lease's candidate may have its name: see addElections).
func (c *simCandidate) registered() *coordinationv1beta1.LeaseCandidate {
	// The checks ask at every step; the answer changes only with a write
	// of a LeaseCandidate.
	if c.regWrites != c.w.CandidateWrites+1 {
		c.reg, c.regWrites = nil, c.w.CandidateWrites+1
		if lc := c.w.Candidate(c.key()); lc != nil && lc.Spec.LeaseName == c.e.name {
			c.reg = lc
		}
	}
	return c.reg
}

// bestLeads is the best candidate, and whether the one leader is as good
// as it. Ranking parses versions, so the answer is kept while nothing it
// depends on changes: the stored candidates (candidateWrites), which
// processes run, the leader.
func (w *simWorld) bestLeads(e *simElection, leaders []*simCandidate) (*simCandidate, bool) {
	key := simRankKey{candidateWrites: w.CandidateWrites}
	for i, c := range e.cands {
		if c.proc != nil && !c.proc.dead {
			key.running |= 1 << i
		}
	}
	if len(leaders) == 1 {
		key.leader = leaders[0]
	}
	if e.rank.valid && e.rank.key == key {
		return e.rank.best, e.rank.bestLeads
	}
	best := w.bestCandidate(e)
	bestLeads := len(leaders) == 1 && best != nil && w.asGoodAs(leaders[0], best)
	e.rank.key, e.rank.valid, e.rank.best, e.rank.bestLeads = key, true, best, bestLeads
	return best, bestLeads
}

type simRankKey struct {
	candidateWrites int
	running         uint64
	leader          *simCandidate
}

// bestCandidate is the candidate that should lead: the best running one.
func (w *simWorld) bestCandidate(e *simElection) *simCandidate {
	var (
		best   *simCandidate
		bestLC *coordinationv1beta1.LeaseCandidate
	)
	for _, c := range e.cands {
		lc := c.registered()
		if c.proc == nil || c.proc.dead || lc == nil {
			continue
		}
		if best == nil || w.ranking().Compare(lc, bestLC) < 0 {
			best, bestLC = c, lc
		}
	}
	return best
}

// ---- one run ----

func runSim(seed uint64, tracing bool) simResult {
	world := simworld.New(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), tracing)
	// Events due at one instant run in an order of the seed's own.
	world.Ties = rand.New(rand.NewPCG(seed, 0xbb67ae8584caa73b))
	w := &simWorld{
		World:      world,
		Server:     simworld.NewServer(world, simNS),
		witnessRng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
		adoptRng:   rand.New(rand.NewPCG(seed, 0x510e527fade682d1)),
		podRng:     rand.New(rand.NewPCG(seed, 0x9b05688c2b3e6c1f)),
		metrics:    NewMetrics(),
		proof:      proofRun(seed),
	}
	if w.proof {
		// Named after the seed, not drawn, so that a seed's trace (which
		// shows the files' paths) is the same each time it runs in this
		// process; no two runs of one seed overlap.
		dir := filepath.Join(simTempDir(), fmt.Sprintf("cle-sim-%d-seed-%d", os.Getpid(), seed))
		_ = os.RemoveAll(dir)
		if err := os.Mkdir(dir, 0o700); err != nil {
			panic(err)
		}
		w.podDir = dir
		defer func() { _ = os.RemoveAll(dir) }()
		w.Tracef("the proof of death: controllers read Pods, library candidates run in Pods")
	}
	w.Faulty = true
	// Clock faults are drawn in some runs (see scheduleClockFaults); the
	// clocks give monotonic readings in those.
	w.clockFaults = !builtinRun(seed) && rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908)).IntN(simClockFaultsEvery) == 0
	// So are candidates' relists (see scheduleRelists).
	w.relists = rand.New(rand.NewPCG(seed, 0x9b05688c2b3e6c1f)).IntN(simRelistsEvery) == 0
	w.ErrorRate = []float64{0, 0.02, 0.1, 0.3}[w.Rng.IntN(4)]
	w.LagBase = []time.Duration{time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond}[w.Rng.IntN(3)]
	w.strategy = coordinationv1.OldestEmulationVersion
	if w.Rng.IntN(4) == 0 {
		// An operator ranks the candidates with cle.dev/priority
		// annotations, changing them during the faults (see annotate).
		w.strategy = strategy.PriorityName
	}
	if w.spaced = spacedRun(seed); w.spaced {
		// Drawn all the same, so that the rest of the schedule is a
		// run's that is not spaced.
		w.ErrorRate, w.LagBase, w.clockFaults, w.relists = 0, time.Millisecond, false, false
	}
	w.Tracef("seed %d: error rate %.2f, watch lag %s, strategy %s", seed, w.ErrorRate, w.LagBase, w.strategy)
	if w.swarm = swarmRun(seed, string(w.strategy)); w.swarm != nil {
		w.res.swarms = 1
		w.Tracef("a swarm run: faults %s", w.swarm)
	}
	if w.ha = haRun(seed); w.ha != nil {
		w.res.haRuns = 1
		w.Tracef("an HA run: %d kube-apiservers", len(w.ha.frontends))
	}
	if w.nudges = nudgeRun(seed); w.nudges != nil {
		w.res.nudges = 1
		w.Tracef("a nudged run: %s", w.nudges)
	}

	primary := w.newElection(simNS, simLease)
	versions := []string{"1.34.0", "1.35.0", "1.36.0"}
	n := 2 + w.Rng.IntN(4)
	for i := range n {
		emulation := versions[w.Rng.IntN(len(versions))]
		binary := emulation
		if w.Rng.IntN(2) == 0 && emulation != "1.36.0" {
			binary = "1.36.0"
		}
		c := w.addCandidate(primary, fmt.Sprintf("c%d", i), binary, emulation, simAdopter(w.Rng.IntN(3)))
		w.After(w.DurationBetween(0, 3*time.Second), c.start)
	}
	if w.Rng.IntN(4) == 0 {
		w.addDeadCandidate()
	}
	if w.Rng.IntN(4) == 0 {
		at := w.Start.Add(w.DurationBetween(30*time.Second, simFaultPhase-3*time.Minute))
		if !w.spaced {
			w.At(at, w.rollout)
		}
	}
	if w.Rng.IntN(4) == 0 {
		w.addMalformedCandidate()
	}
	if builtinRun(seed) {
		w.addBuiltin()
	}
	if rand.New(rand.NewPCG(seed, 0x7a3f15e1c2d4b689)).IntN(simManyLeasesEvery) == 0 {
		w.addElections()
	}
	if fleetRun(seed) {
		w.addFleet()
	}
	w.namespaces = 1
	if rand.New(rand.NewPCG(seed, 0x1f83d9abfb41bd6b)).IntN(simOtherNamespaceEvery) == 0 {
		w.addNamespace()
	}
	w.startController()
	if w.spaced {
		w.scheduleRounds()
	} else {
		w.scheduleFaults()
	}
	if w.clockFaults {
		w.scheduleClockFaults(seed)
	}
	if w.relists {
		w.scheduleRelists(seed)
	}
	if w.ha != nil {
		w.scheduleFallBehind(seed)
	}
	quiet := simQuietPhase
	if seed%simLongEvery == 0 {
		// Drawn from a stream of its own: the rest of the schedule is the
		// same as in a short run.
		quiet = simLongQuiet + time.Duration(rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d)).Int64N(int64(2*simLongQuiet)))
		w.Tracef("a long run: the quiet phase lasts %s", quiet)
	}
	end := w.Start.Add(simFaultPhase + quiet)
	w.At(w.Start.Add(simFaultPhase), w.stopFaults)
	for w.Violation == "" && w.Step(end) {
		w.checkLeaders()
	}
	if sc := w.ctrl; sc != nil {
		// What the active replica's watches still carry (the deletion of a
		// candidate it collected a moment ago) reaches it before its
		// records are counted.
		var settled time.Time
		for _, sw := range sc.watches() {
			if sw.Last.After(settled) {
				settled = sw.Last
			}
		}
		for w.Violation == "" && w.Step(settled) {
			w.checkLeaders()
		}
	}
	if w.Violation == "" {
		w.checkRecords()
	}
	w.res.simulated = w.Now.Sub(w.Start)
	w.res.holderExits = int(promtest.Counter(w.metrics.HolderExits))
	w.ending = true
	for _, sc := range slices.Clone(w.ctrls) {
		sc.stop() // ends a step in flight: no goroutine outlives the run
	}
	for _, l := range w.libs {
		l.kill() // no goroutine outlives the run
	}
	w.res.violation, w.res.trace, w.res.faults = w.Violation, w.Trace, w.Faults
	if w.swarm != nil && w.res.violation != "" {
		w.res.violation = fmt.Sprintf("(swarm %s) %s", w.swarm, w.res.violation)
	}
	if w.nudges != nil && w.res.violation != "" {
		w.res.violation = fmt.Sprintf("(nudges %s) %s", w.nudges, w.res.violation)
	}
	if w.fleet {
		w.res.fleets, w.res.maxQueued = 1, w.MaxQueued
	}
	return w.res
}

// scheduleFaults draws the faults of the fault phase.
func (w *simWorld) scheduleFaults() {
	if w.swarm != nil {
		for t := w.swarm.gapBetween(w); t < simFaultPhase; t += w.swarm.gapBetween(w) {
			w.At(w.Start.Add(t), w.injectFault)
		}
		return
	}
	for t := w.DurationBetween(5*time.Second, 30*time.Second); t < simFaultPhase; t += w.DurationBetween(5*time.Second, 40*time.Second) {
		w.At(w.Start.Add(t), w.injectFault)
	}
}

func (w *simWorld) injectFault() {
	if !w.Faulty {
		return
	}
	w.strike()
}

// strike injects one fault, drawn, on one of the run's Leases. It returns
// the election and the one candidate it struck, if it struck a candidate's
// process (a pause, a crash, a graceful stop, a partition), and the instant
// by which what it did is over (its process runs again, its partition or
// outage ends, a controller runs again), as far as it is known now: a
// stopped process's restart is drawn once it has stopped, and is over by
// the latest it may be. A fault that did nothing (no process to strike)
// returns a zero instant. serverWide: the fault needs the server's fault
// phase (Faulty) to do what it does: an outage, or a Lease someone creates
// again.
func (w *simWorld) strike() (e *simElection, struck *simCandidate, until time.Time, serverWide bool) {
	e = w.pickElection()
	pick := func() *simCandidate {
		// Mostly the holder: that is where faults hurt.
		if l := e.lease(); l != nil && w.Rng.IntN(2) == 0 {
			for _, c := range e.cands {
				if c.name == holderIdentity(l) {
					return c
				}
			}
		}
		return e.cands[w.Rng.IntN(len(e.cands))]
	}
	k := w.Rng.IntN(len(simFaultKinds))
	if w.swarm != nil {
		k = w.swarm.kind(w.Rng)
	}
	switch k {
	case 0, 1: // SIGSTOP, then SIGCONT
		c := pick()
		if p := c.proc; p != nil && !p.dead && !p.paused {
			w.faultOn(c, "pause")
			p.paused = true
			if p.ext != nil {
				p.ext.stall()
			}
			d := w.DurationBetween(time.Second, 40*time.Second)
			w.After(d, p.resume)
			struck, until = c, w.Now.Add(d)
		}
	case 2: // crash, restart later
		c := pick()
		if p := c.proc; p != nil && !p.dead {
			w.faultOn(c, "crash")
			p.lib.kill()
			c.proc = nil
			d := w.DurationBetween(time.Second, 60*time.Second)
			w.After(d, func() {
				if c.proc == nil {
					c.start()
				}
			})
			struck, until = c, w.Now.Add(d)
		}
	case 3: // graceful stop, restart later
		c := pick()
		if p := c.proc; p != nil && !p.dead && !p.paused && !p.stopping() {
			w.faultOn(c, "stop")
			p.stopGracefully(func() {
				c.proc = nil
				w.After(w.DurationBetween(time.Second, 30*time.Second), func() {
					if c.proc == nil {
						c.start()
					}
				})
			})
			struck, until = c, w.Now.Add(simStopBound+30*time.Second)
		}
	case 4: // the Lease is deleted
		if l := e.lease(); l != nil && w.builtin == nil { // see simBuiltin
			w.Fault("delete-lease")
			_, _ = w.writeLease(e, nil, l.ResourceVersion, "fault")
			until = w.Now
		}
	case 5: // a candidate is deleted
		c := pick()
		if lc := w.Candidate(c.key()); lc != nil {
			w.faultOn(c, "delete-candidate")
			_, _ = w.writeCandidate(c.e.ns, c.name, nil, lc.ResourceVersion, "fault")
			until = w.Now
		}
	case 6: // the active controller fails over to a new replica
		if w.ctrl == nil {
			return e, nil, time.Time{}, false
		}
		w.Fault("controller-failover")
		old := w.ctrl
		old.stop()
		w.ctrl = nil
		w.Tracef("controller %d is gone", old.id)
		d := w.DurationBetween(0, simLeaseDuration)
		w.After(d, func() {
			if w.ctrl == nil {
				w.startController()
			}
		})
		until = w.Now.Add(d)
	case 9: // the active controller stops (SIGSTOP); a standby takes over
		// if the pause outlasts the controller lock, and the stopped one
		// runs again later, not knowing yet that it was replaced.
		if sc := w.ctrl; sc == nil || sc.paused {
			return e, nil, time.Time{}, false
		}
		d := w.DurationBetween(time.Second, 40*time.Second)
		w.pauseController(d)
		until = w.Now.Add(d)
	case 10: // someone deletes the Lease and creates it again, vacant
		// (kubectl, GitOps re-applying it): creates carry no precondition
		if l := e.lease(); l != nil && w.builtin == nil { // see simBuiltin
			w.Fault("recreate-lease")
			_, _ = w.writeLease(e, nil, l.ResourceVersion, "kubectl")
			d := w.DurationBetween(0, 3*time.Second)
			w.After(d, func() {
				if e.lease() == nil && w.Faulty {
					_, _ = w.writeLease(e, &coordinationv1.Lease{}, "", "kubectl")
				}
			})
			until, serverWide = w.Now.Add(d), true
		}
	case 11: // the active controller's watches expire, and it relists
		if sc := w.ctrl; sc != nil && !sc.leaseWatch.Expired {
			w.Fault("watch-expired")
			d := w.DurationBetween(time.Second, 14*time.Second)
			sc.expireWatches(d)
			until = w.Now.Add(d)
		}
	case 12: // one process is cut off from the API server, its clock
		// and timers running on: its requests fail, its watches deliver
		// nothing until the partition heals
		c := pick()
		if p := c.proc; p != nil && !p.dead {
			w.partition(c, w.DurationBetween(time.Second, 40*time.Second))
			struck, until = c, p.partitionedUntil
		}
	case 14: // an operator sets, changes or removes a candidate's priority
		if w.strategy == strategy.PriorityName {
			w.annotate(pick())
			until = w.Now
		}
	case 13: // one process's watches stall, its requests go through
		c := pick()
		if p := c.proc; p != nil && !p.dead {
			d := w.DurationBetween(time.Second, 30*time.Second)
			w.faultOn(c, "watch-stall")
			w.Tracef("%s/%d's watches stall for %s", c.shown(), p.id, d)
			p.leaseWatch.StalledUntil, p.candWatch.StalledUntil = w.Now.Add(d), w.Now.Add(d)
			until = w.Now.Add(d)
		}
	case 7: // an API outage: every request fails for a while
		w.Fault("api-outage")
		rate := w.ErrorRate
		w.ErrorRate = 1
		d := w.DurationBetween(time.Second, 20*time.Second)
		w.After(d, func() {
			if w.Faulty {
				w.ErrorRate = rate
			}
		})
		until, serverWide = w.Now.Add(d), true
	case 8: // the watches fall far behind for a while
		w.Fault("watch-lag")
		base := w.LagBase
		w.LagBase = w.DurationBetween(time.Second, 6*time.Second)
		d := w.DurationBetween(5*time.Second, 30*time.Second)
		w.After(d, func() {
			if w.Faulty {
				w.LagBase = base
			}
		})
		until = w.Now.Add(d)
	}
	return e, struck, until, serverWide
}

// pauseController stops the active controller replica (SIGSTOP) for d, if
// one runs; a standby takes over if the pause outlasts the controller lock,
// and the stopped one runs again later, not knowing yet that it was
// replaced.
func (w *simWorld) pauseController(d time.Duration) {
	sc := w.ctrl
	if sc == nil || sc.paused {
		return
	}
	w.Fault("controller-pause")
	w.Tracef("controller %d pauses", sc.id)
	sc.pause()
	w.After(d, sc.resume)
}

// partition cuts c's process, if it has a live one, off from the API
// server for d, its clock and timers running on: its requests fail, its
// watches deliver nothing until the partition heals.
func (w *simWorld) partition(c *simCandidate, d time.Duration) {
	p := c.proc
	if p == nil || p.dead {
		return
	}
	w.faultOn(c, "partition")
	w.Tracef("%s/%d is partitioned from the API server for %s", c.shown(), p.id, d)
	p.partitionedUntil = w.Now.Add(d)
	p.leaseWatch.StalledUntil, p.candWatch.StalledUntil = p.partitionedUntil, p.partitionedUntil
}

// rollout changes the strategy the candidates ask for, one candidate after
// another, as a rolling update of their Deployment does: each running
// process stops gracefully and starts again asking for the other strategy,
// and one that is down starts with it. Meanwhile the candidates at the
// highest binary version may disagree (a conflict), and the controller
// leaves the Lease as it is. It ends well before the faults stop.
func (w *simWorld) rollout() {
	to := coordinationv1.OldestEmulationVersion
	if w.strategy == to {
		to = strategy.PriorityName
	}
	w.Fault("strategy-rollout")
	w.Tracef("a rollout moves every candidate to %s", to)
	w.rollingOut = true
	// One candidate after another; with a fleet, one after another in
	// each Lease, the Leases' Deployments rolled out side by side.
	var at, last time.Duration
	perLease := map[*simElection]time.Duration{}
	for _, c := range w.cands {
		if c.e.unhandled {
			continue
		}
		step := w.DurationBetween(5*time.Second, 20*time.Second)
		if w.fleet {
			perLease[c.e] += step
			at = perLease[c.e]
		} else {
			at += step
		}
		last = max(last, at)
		w.After(at, func() {
			w.Tracef("the rollout restarts %s asking for %s", c.name, to)
			c.strategy = to
			p := c.proc
			if p == nil || p.dead || p.stopping() {
				return // it starts with the new strategy
			}
			p.resume()
			p.stopGracefully(func() {
				c.proc = nil
				w.After(w.DurationBetween(time.Second, 5*time.Second), func() {
					if c.proc == nil {
						c.start()
					}
				})
			})
		})
	}
	w.After(last, func() {
		w.strategy = to
		w.rollingOut = false
	})
}

// simManyLeasesEvery: one run in so many has more Leases.
const simManyLeasesEvery = 5

// addElections adds one or two more Leases in the namespace, each with two
// or three candidates of its own, so that the controller elects several at
// once with one worker. In half of these runs one of them is misconfigured
// with the Identity of a library candidate of the first Lease (two
// components on one host, both named after it): one LeaseCandidate of that
// name exists, and whichever process finds it taken by the other Lease says
// so (ErrIdentityInUse) and exits, or keeps trying without touching it,
// while the other takes part.
func (w *simWorld) addElections() {
	versions := []string{"1.34.0", "1.35.0", "1.36.0"}
	shared := ""
	if w.Rng.IntN(2) == 0 {
		for _, c := range w.elections[0].cands {
			if c.adopter == simLibrary {
				shared = c.name
				break
			}
		}
	}
	for i, name := range []string{"lease-b", "lease-d"}[:1+w.Rng.IntN(2)] {
		e := w.newElection(simNS, name)
		// The second asks for a strategy cle does not handle: no
		// controller of cle's may name a holder.
		e.unhandled = i == 1
		for j := range 2 + w.Rng.IntN(2) {
			emulation := versions[w.Rng.IntN(len(versions))]
			id, adopter := fmt.Sprintf("%s%d", name[len(name)-1:], j), simAdopter(w.Rng.IntN(3))
			if i == 0 && j == 0 && shared != "" {
				id, adopter = shared, simLibrary
				e.sharedIdentity, w.elections[0].sharedIdentity = true, true
				w.Tracef("%s's candidate %s has the Identity of %s's", name, id, w.elections[0].name)
			}
			c := w.addCandidate(e, id, "1.36.0", emulation, adopter)
			if e.unhandled {
				c.strategy = simUnhandledStrategy
			}
			w.After(w.DurationBetween(0, 3*time.Second), c.start)
		}
	}
}

// simFleetEvery: one run in so many has a fleet (see addFleet).
const simFleetEvery = 100

// addFleet adds 12 to 24 Leases, each with three candidates that start
// within milliseconds of each other, and gives the server a Capacity: the
// fleet's steady requests (its holders' renewals, its standbys' polls, about
// two a second a Lease) keep it 40 to 90% busy, and the fleet's start, the
// faults and the elections push it past what it applies. Every client's
// requests then wait in its queue alike, the controller's lock renewals among
// them, and the watches deliver writes that much later: lag that grows with
// the write rate, as on a real server with many Leases. The first holder the
// controller names for each fleet Lease is checked (checkFirstHolder).
func (w *simWorld) addFleet() {
	versions := []string{"1.34.0", "1.35.0", "1.36.0"}
	n := 12 + w.Rng.IntN(13)
	busy := 0.4 + 0.5*w.Rng.Float64()
	w.Capacity = simFleetRequests * float64(n) / busy
	w.fleet = true
	// The fleet starts on a server that fails no request; the faults
	// begin once its first elections are made.
	w.Faulty = false
	w.At(w.Start.Add(simFleetHealthy), func() { w.Faulty = true })
	w.Tracef("a fleet of %d Leases; the server applies %.0f requests/s (%.0f%% busy in the steady state)", n, w.Capacity, 100*busy)
	if w.Rng.IntN(2) == 0 {
		// The controllers' candidate watch falls behind their Lease
		// watch while the fleet registers (watches are served apart):
		// what the Lease watch shows of the controller's own writes
		// says nothing of the registrations still on their way.
		from, d := w.DurationBetween(time.Second, 3*time.Second), w.DurationBetween(500*time.Millisecond, 3*time.Second)
		w.After(from, func() {
			w.Tracef("the controllers' candidate watches deliver nothing for %s", d)
			for _, sc := range w.ctrls {
				sc.candWatch.StalledUntil = w.Now.Add(d)
			}
		})
	}
	for i := range n {
		e := w.newElection(simNS, fmt.Sprintf("fleet-%02d", i))
		e.fleet = true
		at := w.DurationBetween(time.Second, 3*time.Second)
		for j := range 3 {
			c := w.addCandidate(e, fmt.Sprintf("f%02d-%d", i, j), "1.36.0", versions[w.Rng.IntN(len(versions))], simAdopter(w.Rng.IntN(3)))
			w.After(at+w.DurationBetween(0, 5*time.Millisecond), c.start)
		}
	}
}

// simFleetHealthy is how long a run with a fleet goes before its faults
// begin.
const simFleetHealthy = 5 * time.Second

// simFleetRequests is about how many requests a second one Lease of a fleet
// makes in the steady state: its holder's renewal (a read and a write) and
// its two standbys' reads, every retry period.
const simFleetRequests = 4.0 / float64(simRetryPeriod/time.Second)

// checkFirstHolder checks the first holder the controller names for a fleet
// Lease. While nothing has gone wrong yet (no fault, no failed request, each
// candidate's first process running), it is as good on merit as the best of
// the candidates whose registrations the server applied before it applied
// the Lease's creation, however late the loaded server's watches show them:
// the controller creates the Lease naming nobody, and names a holder only
// once its candidate watch has shown a write made after that creation (see
// registrationProbe). Not with the proof of death, whose candidates
// register only once their kubelet has reported their Pod.
func (w *simWorld) checkFirstHolder(e *simElection, holder string) {
	if len(w.Faults) > 0 || w.Faulty || w.proof || e.openedRV == 0 {
		return
	}
	for _, c := range e.cands {
		if c.proc == nil || c.proc.dead || c.incarnations != 1 {
			return
		}
	}
	var named, best *coordinationv1beta1.LeaseCandidate
	for _, c := range e.cands {
		lc := c.registered()
		if lc == nil {
			lc = &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Namespace: c.e.ns, Name: c.name}, Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: c.e.name, BinaryVersion: c.binary, EmulationVersion: c.emulation, Strategy: c.strategy,
			}}
		}
		if c.name == holder {
			named = lc
		}
		if c.registeredRV == 0 || c.registeredRV > e.openedRV {
			continue
		}
		if best == nil || w.ranking().CompareMerit(lc, best) < 0 {
			best = lc
		}
	}
	if named == nil || best == nil {
		return
	}
	w.res.firstHolders++
	if w.ranking().CompareMerit(named, best) > 0 {
		w.Fail("the first holder named for %s is %s, not %s, the best of the candidates registered before the Lease was created (requests queued up to %s so far)", e.shown(), holder, best.Name, w.MaxQueued)
	}
}

// noteRegistered notes the resourceVersion of the first registration of
// ns/name, and noteOpened that of the first creation of a fleet Lease, for
// checkFirstHolder.
func (w *simWorld) noteRegistered(ns, name string, lc *coordinationv1beta1.LeaseCandidate) {
	e := w.electionOf(ns, lc.Spec.LeaseName)
	if e == nil || !e.fleet {
		return
	}
	for _, c := range e.cands {
		if c.name == name && c.registeredRV == 0 {
			c.registeredRV = parseRV(lc.ResourceVersion)
		}
	}
}

func (w *simWorld) noteOpened(e *simElection, lease *coordinationv1.Lease) {
	if e.fleet && e.openedRV == 0 {
		e.openedRV = parseRV(lease.ResourceVersion)
	}
}

func parseRV(rv string) uint64 {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		panic("the simulated server wrote resourceVersion " + rv)
	}
	return n
}

// simOtherNamespace is the run's second namespace, in some runs (see
// addNamespace).
const (
	simOtherNamespace      = "sim-2"
	simOtherNamespaceEvery = 5
)

// addNamespace adds a Lease in another namespace with the first Lease's name,
// whose candidates have the first Lease's candidates' names: nothing but the
// namespace tells their objects apart, and the controller watches every
// namespace.
func (w *simWorld) addNamespace() {
	w.namespaces++
	e := w.newElection(simOtherNamespace, simLease)
	versions := []string{"1.34.0", "1.35.0", "1.36.0"}
	for j := range 2 + w.Rng.IntN(2) {
		emulation := versions[w.Rng.IntN(len(versions))]
		c := w.addCandidate(e, fmt.Sprintf("c%d", j), "1.36.0", emulation, simAdopter(w.Rng.IntN(3)))
		w.After(w.DurationBetween(0, 3*time.Second), c.start)
	}
	w.Tracef("%s has candidates of its own in namespace %s", simLease, simOtherNamespace)
}

// simUnhandledStrategy is a strategy no controller handles, asked for by
// every candidate of a Lease in some runs (see addElections).
const simUnhandledStrategy coordinationv1.CoordinatedLeaseStrategy = "example.com/Future"

// pickElection draws the Lease a fault hits (no draw when the run has one).
func (w *simWorld) pickElection() *simElection {
	if len(w.elections) == 1 {
		return w.elections[0]
	}
	return w.elections[w.Rng.IntN(len(w.elections))]
}

// simPriorities are the priorities an operator gives candidates ("": the
// annotation removed, priority 0).
var simPriorities = []string{"", "0", "1", "5", "10", "-3"}

// annotate is an operator (kubectl annotate) setting a candidate's
// cle.dev/priority, or removing it: an update conditional on the version it
// read, as kubectl's; the candidate's process keeps annotations it does not
// own, and a LeaseCandidate it creates again has none.
func (w *simWorld) annotate(c *simCandidate) {
	cur := w.Candidate(c.key())
	if cur == nil {
		return
	}
	// An operator's change: no fault strikes a process.
	w.World.Fault("annotate-priority")
	w.rerank(c.e.ns, c.name)
	next := cur.DeepCopy()
	if value := simPriorities[w.Rng.IntN(len(simPriorities))]; value == "" {
		delete(next.Annotations, strategy.PriorityAnnotation)
	} else {
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[strategy.PriorityAnnotation] = value
	}
	_, _ = w.writeCandidate(c.e.ns, c.name, next, cur.ResourceVersion, "kubectl annotate ("+next.Annotations[strategy.PriorityAnnotation]+")")
}

// rerank records that the candidate's priority changed now: an operator
// changed it, or its LeaseCandidate, annotated, was deleted (created again,
// it carries none).
func (w *simWorld) rerank(ns, name string) {
	if w.annotated == nil {
		w.annotated = map[string]time.Time{}
	}
	w.annotated[simKey(ns, name)] = w.Now
}

// reranked reports a change of the candidate's priority recent enough
// (30 s) that a controller may not have seen it yet.
func (w *simWorld) reranked(ns, name string) bool {
	at, ok := w.annotated[simKey(ns, name)]
	return ok && w.Now.Sub(at) < 30*time.Second
}

// ranking is the strategy the running candidates ask for, which ranks them.
func (w *simWorld) ranking() strategy.Strategy {
	if w.strategy == strategy.PriorityName {
		return strategy.Priority{}
	}
	return strategy.OldestEmulationVersion{}
}

// addDeadCandidate leaves behind the LeaseCandidate of a replica that died
// right after it registered, on a newer binary than any other and asking
// for another strategy (a rollout that changes the strategy, or a newer
// binary asking for one nobody handles yet, rolled back): it never renews
// nor answers, and stays until the candidate TTL, past the run's end. It
// must decide nothing: the running candidates' strategy elects.
func (w *simWorld) addDeadCandidate() {
	asks := []coordinationv1.CoordinatedLeaseStrategy{strategy.PriorityName, "example.com/Future"}[w.Rng.IntN(2)]
	lc := &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: "dead"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: simLease, BinaryVersion: "1.37.0", EmulationVersion: "1.37.0", Strategy: asks,
			RenewTime: ptr.To(metav1.NewMicroTime(w.Now)),
		},
	}
	w.Tracef("a dead replica's candidate asks for %s", asks)
	w.deadDecider = true
	if _, err := w.writeCandidate(simNS, "dead", lc, "", "dead replica"); err != nil {
		panic(err)
	}
}

// malformedVersions are versions a LeaseCandidate written by another
// implementation (or by hand) may carry that no strategy can rank: a binary
// or emulation version that is not a strict semantic version, or an
// emulation version above the binary's.
var malformedVersions = [][2]string{{"1.36", "1.34.0"}, {"1.36.0", "1.34"}, {"1.36.0", "latest"}, {"1.36.0-", "1.34.0"}, {"1.34.0", "1.36.0"}, {"", ""}}

// addMalformedCandidate adds a LeaseCandidate with versions no strategy can
// rank, renewed every 10s by a process outside the election (it never
// leads, nor answers a ping): ranked below nobody, it must neither be named
// nor keep the valid candidates from leading.
func (w *simWorld) addMalformedCandidate() {
	v := malformedVersions[w.Rng.IntN(len(malformedVersions))]
	w.Tracef("a candidate outside the election has binary %q, emulation %q", v[0], v[1])
	var renew func()
	renew = func() {
		lc := &coordinationv1beta1.LeaseCandidate{
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: simLease, BinaryVersion: v[0], EmulationVersion: v[1], Strategy: w.strategy,
				RenewTime: ptr.To(metav1.NewMicroTime(w.Now)),
			},
		}
		rv := ""
		if cur := w.Candidate(simKey(simNS, "malformed")); cur != nil {
			rv = cur.ResourceVersion
		}
		_, _ = w.writeCandidate(simNS, "malformed", lc, rv, "malformed")
		w.After(10*time.Second, renew)
	}
	renew()
}

// stopFaults ends the fault phase: requests succeed, watches keep up,
// paused processes resume, stopped ones start, and a controller runs.
func (w *simWorld) stopFaults() {
	w.faultsOver("faults stop; what they delayed")
}

// faultsOver ends what faults are doing (see heal) on a server that fails
// nothing and keeps up, and starts the liveness checks from when what they
// delayed has arrived (quietAt). what says so in the trace.
func (w *simWorld) faultsOver(what string) {
	w.Faulty, w.ErrorRate, w.LagBase = false, 0, time.Millisecond
	w.quietAt = maxTime(w.Now, w.LateUntil)
	w.Tracef("%s has arrived %s later", what, w.quietAt.Sub(w.Now))
	w.heal()
}

// heal ends what faults did: partitions heal, stalled watches deliver what
// they held (by LateUntil), paused processes resume, stopped ones start,
// paused controller replicas resume, kube-apiserver's controller gives its
// lock back, and a controller runs. A fault judged while it lasts is over
// (see checkDuring).
func (w *simWorld) heal() {
	w.catchUp()
	for _, e := range w.elections {
		e.duringFrom = time.Time{}
	}
	for _, c := range w.cands {
		if p := c.proc; p != nil {
			// Partitions heal; deliveries a stalled watch held are due by
			// quietAt (counted in lateUntil).
			p.partitionedUntil = time.Time{}
			p.leaseWatch.StalledUntil, p.candWatch.StalledUntil = time.Time{}, time.Time{}
		}
		if c.proc != nil {
			c.proc.resume()
		} else {
			c.start()
		}
	}
	for _, sc := range slices.Clone(w.ctrls) {
		sc.resume()
	}
	if b := w.builtin; b != nil {
		if b.acting {
			b.stop()
		}
		b.returnLock()
	}
	if w.ctrl == nil {
		w.startController()
	}
}

// lagInSteadyState makes every watch lag far behind for a minute while the
// election is settled, and nothing else goes wrong (requests are as quick as
// ever): the controller must not
// take late renewals for missing ones (no write, no change of leader).
func (w *simWorld) lagInSteadyState() {
	w.Fault("steady-watch-lag")
	w.WatchLag = w.DurationBetween(5*time.Second, 25*time.Second)
	w.Tracef("every watch lags up to %s", w.WatchLag)
	w.After(time.Minute, func() {
		w.WatchLag = 0
		w.Tracef("the watches keep up again")
	})
}

// floodInSteadyState is, in a run with a fleet, other clients flooding the
// server while the elections are settled: every request that comes next
// waits 1.5 to 3 s longer, the holders' renewals and the controller's lock
// renewals alike, until the queue drains (in seconds, or tens of seconds
// for a server that was 90% busy). Every holder is late at once and none is
// gone: the controller must not ping or elect (the steady state's checks).
func (w *simWorld) floodInSteadyState() {
	w.Fault("server-flooded")
	d := w.DurationBetween(1500*time.Millisecond, 3*time.Second)
	w.Flood(d)
	w.Tracef("other clients' requests take the server %s", d)
}

// checkRecords checks that the controller remembers no more than there is:
// a candidate record for each candidate the server has or the controller's
// cache still shows (a deletion on its way: one the controller's own
// garbage collection made while the run was settling).
func (w *simWorld) checkRecords() {
	if w.ctrl == nil {
		return
	}
	known := map[types.NamespacedName]bool{}
	for _, key := range w.CandidateKeys() {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		known[types.NamespacedName{Namespace: ns, Name: name}] = true
	}
	for _, key := range w.ctrl.cinf.GetStore().ListKeys() {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		known[types.NamespacedName{Namespace: ns, Name: name}] = true
	}
	obs := w.ctrl.c.obs
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for key := range obs.candidates {
		if !known[key] {
			w.Fail("the controller keeps a record of candidate %s, which neither the server nor its cache has", key)
			return
		}
	}
	if n := len(obs.leases); n > len(w.elections) {
		w.Fail("the controller keeps %d Lease records for %d Leases", n, len(w.elections))
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
