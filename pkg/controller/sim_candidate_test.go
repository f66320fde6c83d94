package controller

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/strategy"
)

// simCandidate is one candidate identity; proc is its running process (nil
// while it is down). A process follows the library's protocol: it registers
// its LeaseCandidate and answers pings from a watch, renews the Lease that
// names it every retry period, leads from its first renewal and only while
// its last successful renewal was sent less than the renew deadline ago (on
// its own clock), hands over when preferredHolder names another, steps down
// when the Lease is gone, and on a graceful stop releases the Lease and
// deletes its candidate.
type simCandidate struct {
	w                 *simWorld
	name              string
	binary, emulation string
	proc              *simProcess
	incarnations      int
}

type simProcess struct {
	c      *simCandidate
	id     int
	offset time.Duration
	drift  float64
	born   time.Time // true time the process started, for its clock
	paused bool
	dead   bool
	held   []func() // what arrived while paused

	leaseWatch, candWatch *simWatcher
	lease                 *coordinationv1.Lease // as seen on its watch, or as it wrote it
	leaseSeen             bool
	self                  *coordinationv1beta1.LeaseCandidate

	leading   bool
	lastSent  time.Time // local time the last successful renewal was sent
	highest   int32     // the highest leaseTransitions seen
	highestBy string    // the version (simFingerprint) that first carried highest
	below     int32     // the highest leaseTransitions seen on any other version
	inFlight  bool      // a Lease write is in flight
	answering bool      // a ping answer is in flight
}

func (p *simProcess) localNow() time.Time {
	w := p.c.w
	return w.now.Add(p.offset + time.Duration(p.drift*float64(w.now.Sub(p.born))))
}

// untilLocal is the true duration until local time d from now passes.
func (p *simProcess) untilLocal(d time.Duration) time.Duration {
	return time.Duration(float64(d) / (1 + p.drift))
}

// isLeader is the library's IsLeader: leading, and the last successful
// renewal was sent less than the renew deadline ago on this clock.
func (p *simProcess) isLeader() bool {
	return p.leading && p.localNow().Sub(p.lastSent) < simRenewDeadline
}

func (w *simWorld) addCandidate(name, binary, emulation string) *simCandidate {
	c := &simCandidate{w: w, name: name, binary: binary, emulation: emulation}
	w.cands = append(w.cands, c)
	return c
}

func (c *simCandidate) start() {
	w := c.w
	c.incarnations++
	p := &simProcess{
		c: c, id: c.incarnations, born: w.now,
		offset: w.durationBetween(-10*time.Minute, 10*time.Minute),
		drift:  (w.rng.Float64()*2 - 1) * simMaxDrift,
	}
	p.leaseWatch = &simWatcher{w: w, deliver: func(obj runtime.Object, deleted bool) {
		if deleted {
			p.onLease(nil)
			return
		}
		p.onLease(obj.(*coordinationv1.Lease))
	}}
	p.candWatch = &simWatcher{w: w, deliver: func(obj runtime.Object, deleted bool) {
		if deleted {
			p.onSelf(nil)
			return
		}
		p.onSelf(obj.(*coordinationv1beta1.LeaseCandidate))
	}}
	c.proc = p
	w.tracef("%s/%d starts (binary %s, emulation %s)", c.name, p.id, c.binary, c.emulation)
	// Its watches list what there is, after a lag.
	var lease *coordinationv1.Lease
	if w.lease != nil {
		lease = w.lease.DeepCopy()
	}
	at := w.now.Add(w.lag())
	p.leaseWatch.last, p.candWatch.last = at, at
	w.at(at, func() { p.onLease(lease) })
	p.register()
	p.scheduleTick(w.durationBetween(0, simRetryPeriod))
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
	p.c.w.tracef("%s/%d resumes", p.c.name, p.id)
	held := p.held
	p.held = nil
	for _, fn := range held {
		p.act(fn)
	}
}

// request sends a write and delivers its result later: applied after one
// latency, answered after another. The write itself and its failure are
// drawn by the world.
func (p *simProcess) request(write func() (runtime.Object, error), done func(runtime.Object, error)) {
	w := p.c.w
	w.after(w.durationBetween(time.Millisecond, 20*time.Millisecond+w.lagBase), func() {
		err, applied := w.requestError(simLeasesGR, p.c.name)
		var obj runtime.Object
		if err == nil || applied {
			var werr error
			obj, werr = write()
			if werr != nil {
				err = werr
			}
		}
		w.after(w.durationBetween(time.Millisecond, 20*time.Millisecond), func() { p.act(func() { done(obj, err) }) })
	})
}

func (p *simProcess) register() {
	c, w := p.c, p.c.w
	now := metav1.NewMicroTime(p.localNow())
	p.request(func() (runtime.Object, error) {
		cur := w.candidates[c.name]
		lc := &coordinationv1beta1.LeaseCandidate{Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: simLease, BinaryVersion: c.binary, EmulationVersion: c.emulation,
			Strategy: coordinationv1.OldestEmulationVersion, RenewTime: &now,
		}}
		if cur == nil {
			return w.writeCandidate(c.name, lc, "", c.name)
		}
		if cur.Spec.RenewTime != nil && !now.After(cur.Spec.RenewTime.Time) {
			lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(cur.Spec.RenewTime.Add(time.Microsecond)))
		}
		return w.writeCandidate(c.name, lc, cur.ResourceVersion, c.name)
	}, func(obj runtime.Object, err error) {
		if err != nil {
			w.after(time.Second, func() { p.act(p.register) })
			return
		}
		p.self = obj.(*coordinationv1beta1.LeaseCandidate)
	})
	// Renew the candidate periodically.
	w.after(p.untilLocal(simCandRenew), func() { p.act(p.register) })
}

// onSelf answers a ping from the watch on its own candidate, and registers
// again when the candidate is deleted.
func (p *simProcess) onSelf(lc *coordinationv1beta1.LeaseCandidate) {
	p.act(func() {
		w := p.c.w
		if lc == nil {
			p.self = nil
			w.tracef("%s/%d sees its candidate deleted; registering again", p.c.name, p.id)
			p.register()
			return
		}
		p.self = lc
		ping, renew := lc.Spec.PingTime, lc.Spec.RenewTime
		if ping == nil || (renew != nil && !ping.After(renew.Time)) || p.answering {
			return
		}
		p.answering = true
		at := p.localNow()
		if ping.After(at) {
			at = ping.Time
		}
		rv := lc.ResourceVersion
		p.request(func() (runtime.Object, error) {
			cur := w.candidates[p.c.name]
			if cur == nil || cur.ResourceVersion != rv {
				return nil, apierrors.NewConflict(simCandidatesGR, p.c.name, errors.New("changed"))
			}
			next := cur.DeepCopy()
			next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(at))
			return w.writeCandidate(p.c.name, next, rv, p.c.name)
		}, func(obj runtime.Object, err error) {
			p.answering = false
			if err != nil {
				if p.self != nil {
					p.onSelf(p.self) // try again on what it sees now
				}
				return
			}
			p.self = obj.(*coordinationv1beta1.LeaseCandidate)
		})
	})
}

func (p *simProcess) onLease(l *coordinationv1.Lease) {
	p.act(func() {
		p.lease, p.leaseSeen = l, true
		if l != nil {
			p.see(l)
		}
		p.decide(false)
	})
}

func (p *simProcess) scheduleTick(d time.Duration) {
	w := p.c.w
	w.after(d, func() {
		p.act(func() {
			p.decide(true)
			p.scheduleTick(p.untilLocal(simRetryPeriod))
		})
	})
}

// decide is the library's step: step down when it must, renew or hand over
// when the Lease names it. A leader renews on its ticks (every retry
// period); a process not leading renews as soon as it is named.
func (p *simProcess) decide(tick bool) {
	if p.leading && !p.isLeader() {
		p.stepDown("renew deadline passed")
	}
	if !p.leaseSeen || p.inFlight {
		return
	}
	l := p.lease
	if l == nil {
		if p.leading {
			p.stepDown("the Lease is gone")
		}
		return
	}
	if holderIdentity(l) != p.c.name {
		if p.leading {
			p.stepDown("the Lease names " + holderIdentity(l))
		}
		return
	}
	if pref := ptr.Deref(l.Spec.PreferredHolder, ""); pref != "" && pref != p.c.name {
		if p.leading {
			p.stepDown("preferredHolder " + pref)
		}
		p.handOver(l, pref)
		return
	}
	// (One process per identity runs at a time here, so a Lease that names
	// it is its own to renew, whichever process of it renewed it last.)
	if tick || !p.leading {
		p.renew(l)
	}
}

func (p *simProcess) stepDown(why string) {
	p.leading = false
	p.c.w.tracef("%s/%d stops leading: %s", p.c.name, p.id, why)
}

func (p *simProcess) renew(l *coordinationv1.Lease) {
	w := p.c.w
	sent := p.localNow()
	next := l.DeepCopy()
	starting := !p.leading
	if starting {
		// The term's token: the naming's count when the naming counted
		// the term (acquireTime equal to renewTime) above all seen before
		// it, one above everything otherwise.
		n := ptr.Deref(l.Spec.LeaseTransitions, 0)
		if !(simCountedNaming(l) && n > p.highestBefore(l)) {
			n = max(p.highest, n) + 1
		}
		next.Spec.LeaseTransitions = ptr.To(n)
		if next.Spec.AcquireTime == nil {
			next.Spec.AcquireTime = next.Spec.RenewTime.DeepCopy()
		}
	}
	renew := sent
	if l.Spec.RenewTime != nil && !renew.After(l.Spec.RenewTime.Time) {
		renew = l.Spec.RenewTime.Add(time.Microsecond)
	}
	if a := next.Spec.AcquireTime; a != nil && a.Equal(&metav1.MicroTime{Time: renew}) {
		renew = renew.Add(time.Microsecond)
	}
	next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew))
	next.Spec.LeaseDurationSeconds = ptr.To(int32(simLeaseDuration / time.Second))
	rv := l.ResourceVersion
	// The request is cancelled at the renew deadline: of the term while
	// leading, of this renewal otherwise.
	deadline := sent.Add(simRenewDeadline)
	if p.leading {
		deadline = p.lastSent.Add(simRenewDeadline)
	}
	p.inFlight = true
	p.request(func() (runtime.Object, error) {
		return w.writeLease(next, rv, fmt.Sprintf("%s/%d", p.c.name, p.id))
	}, func(obj runtime.Object, err error) {
		p.inFlight = false
		if err == nil && !p.localNow().Before(deadline) {
			err = context.DeadlineExceeded
		}
		if err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// The library reads the Lease again and acts on it.
				var fresh *coordinationv1.Lease
				if w.lease != nil {
					fresh = w.lease.DeepCopy()
				}
				p.lease = fresh
				p.decide(false)
			}
			return
		}
		written := obj.(*coordinationv1.Lease)
		p.lease = written
		p.see(written)
		if sent.After(p.lastSent) {
			p.lastSent = sent
		}
		if !p.leading && p.localNow().Sub(sent) < simRenewDeadline {
			p.leading = true
			w.newTerm(p, ptr.Deref(written.Spec.LeaseTransitions, 0))
		}
	})
}

func (p *simProcess) handOver(l *coordinationv1.Lease, to string) {
	w := p.c.w
	next := l.DeepCopy()
	now := metav1.NewMicroTime(p.localNow())
	next.Spec.HolderIdentity = ptr.To(to)
	next.Spec.PreferredHolder = nil
	next.Spec.LeaseTransitions = ptr.To(max(p.highest, ptr.Deref(l.Spec.LeaseTransitions, 0)) + 1)
	next.Spec.AcquireTime, next.Spec.RenewTime = &now, &now
	rv := l.ResourceVersion
	p.inFlight = true
	p.request(func() (runtime.Object, error) {
		return w.writeLease(next, rv, fmt.Sprintf("%s/%d (hand over)", p.c.name, p.id))
	}, func(obj runtime.Object, err error) {
		p.inFlight = false
		if err == nil {
			w.res.handovers++
			p.lease = obj.(*coordinationv1.Lease)
		}
	})
}

// stopGracefully is the library's shutdown: stop leading, release the Lease
// (if it names this process), delete the candidate.
func (p *simProcess) stopGracefully(then func()) {
	w := p.c.w
	if p.leading {
		p.stepDown("shutting down")
	}
	p.dead = true
	name := p.c.name
	w.after(w.durationBetween(time.Millisecond, 20*time.Millisecond), func() {
		if l := w.lease; l != nil && holderIdentity(l) == name {
			next := l.DeepCopy()
			next.Spec.HolderIdentity = nil
			next.Spec.PreferredHolder = nil
			renew := p.localNow()
			if l.Spec.RenewTime != nil && !renew.After(l.Spec.RenewTime.Time) {
				renew = l.Spec.RenewTime.Add(time.Microsecond)
			}
			next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew))
			_, _ = w.writeLease(next, l.ResourceVersion, name+" (release)")
		}
		if lc := w.candidates[name]; lc != nil {
			_, _ = w.writeCandidate(name, nil, lc.ResourceVersion, name+" (shutdown)")
		}
		then()
	})
}

// newTerm records a term that just began and checks its token.
func (w *simWorld) newTerm(p *simProcess, token int32) {
	w.res.terms++
	w.tracef("%s/%d STARTS LEADING token=%d", p.c.name, p.id, token)
	if w.anyTerm && token <= w.maxToken {
		if !w.historyLost {
			w.fail("%s/%d leads with token %d, not above an earlier term's %d", p.c.name, p.id, token, w.maxToken)
		}
		w.maxToken = token
	}
	w.anyTerm, w.historyLost = true, false
	w.maxToken = max(w.maxToken, token)
}

// checkLeaders checks, at the present true instant, that at most one process
// may act as leader, and follows the liveness bounds after faults stopped.
func (w *simWorld) checkLeaders() {
	var leaders []string
	for _, c := range w.cands {
		if p := c.proc; p != nil && !p.dead && p.isLeader() {
			leaders = append(leaders, fmt.Sprintf("%s/%d", c.name, p.id))
		}
	}
	if len(leaders) > 1 {
		w.fail("two processes may act as leader: %v", leaders)
	}
	if w.quietAt.IsZero() || w.now.Before(w.quietAt) {
		return
	}
	if len(leaders) == 1 && w.quietLeader.IsZero() {
		w.quietLeader = w.now
	}
	if w.quietLeader.IsZero() && w.now.Sub(w.quietAt) > simLeaderBound {
		w.fail("no leader %s after faults stopped (bound %s)", w.now.Sub(w.quietAt), simLeaderBound)
	}
	best := w.bestCandidate()
	bestLeads := len(leaders) == 1 && best != nil && w.asGoodAs(leaders[0], best)
	if bestLeads {
		if w.quietBest.IsZero() {
			w.quietBest = w.now
		}
	} else if !w.quietBest.IsZero() && w.steadyFrom.IsZero() {
		w.quietBest = time.Time{} // not settled yet
	}
	if w.quietBest.IsZero() && w.now.Sub(w.quietAt) > simBestBound {
		w.fail("the best candidate %s does not lead %s after faults stopped (bound %s)", best.name, w.now.Sub(w.quietAt), simBestBound)
	}
	if !w.quietBest.IsZero() && w.steadyFrom.IsZero() && w.now.Sub(w.quietBest) > 30*time.Second {
		// Settled: from now on nothing but the holder's renewals and the
		// candidates' own renewals may be written.
		w.steadyFrom = w.now
		w.tracef("steady state from here")
	}
	if !w.steadyFrom.IsZero() && !bestLeads {
		w.fail("leadership changed in steady state: leaders %v", leaders)
	}
}

// asGoodAs reports whether the leader (a process, name/incarnation) is the
// best candidate's equal on merit: among equals whoever holds keeps leading.
func (w *simWorld) asGoodAs(leader string, best *simCandidate) bool {
	name, _, _ := strings.Cut(leader, "/")
	lc, blc := w.candidates[name], w.candidates[best.name]
	return lc != nil && blc != nil && (strategy.OldestEmulationVersion{}).CompareMerit(lc, blc) == 0
}

// bestCandidate is the candidate that should lead: the best running one.
func (w *simWorld) bestCandidate() *simCandidate {
	var best *simCandidate
	for _, c := range w.cands {
		if c.proc == nil || c.proc.dead || w.candidates[c.name] == nil {
			continue
		}
		if best == nil || (strategy.OldestEmulationVersion{}).Compare(w.candidates[c.name], w.candidates[best.name]) < 0 {
			best = c
		}
	}
	return best
}

// ---- one run ----

func runSim(seed uint64, tracing bool) simResult {
	w := &simWorld{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		start:      time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		candidates: map[string]*coordinationv1beta1.LeaseCandidate{},
		tracing:    tracing,
	}
	w.now = w.start
	w.faulty = true
	w.errorRate = []float64{0, 0.02, 0.1, 0.3}[w.rng.IntN(4)]
	w.lagBase = []time.Duration{time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond}[w.rng.IntN(3)]
	w.tracef("seed %d: error rate %.2f, watch lag %s", seed, w.errorRate, w.lagBase)

	versions := []string{"1.34.0", "1.35.0", "1.36.0"}
	n := 2 + w.rng.IntN(4)
	for i := range n {
		emulation := versions[w.rng.IntN(len(versions))]
		binary := emulation
		if w.rng.IntN(2) == 0 && emulation != "1.36.0" {
			binary = "1.36.0"
		}
		c := w.addCandidate(fmt.Sprintf("c%d", i), binary, emulation)
		w.after(w.durationBetween(0, 3*time.Second), c.start)
	}
	w.startController()
	w.scheduleFaults()
	end := w.start.Add(simFaultPhase + simQuietPhase)
	w.at(w.start.Add(simFaultPhase), w.stopFaults)
	for w.events.Len() > 0 && w.violation == "" {
		ev := heap.Pop(&w.events).(*simEvent)
		if ev.at.After(end) {
			break
		}
		w.now = ev.at
		ev.fn()
		w.checkLeaders()
	}
	if w.violation == "" {
		w.checkRecords()
	}
	if w.ctrl != nil {
		w.ctrl.stop()
	}
	w.res.violation, w.res.trace = w.violation, w.trace
	return w.res
}

// scheduleFaults draws the faults of the fault phase.
func (w *simWorld) scheduleFaults() {
	for t := w.durationBetween(5*time.Second, 30*time.Second); t < simFaultPhase; t += w.durationBetween(5*time.Second, 40*time.Second) {
		w.at(w.start.Add(t), w.injectFault)
	}
}

func (w *simWorld) injectFault() {
	if !w.faulty {
		return
	}
	pick := func() *simCandidate {
		// Mostly the holder: that is where faults hurt.
		if w.lease != nil && w.rng.IntN(2) == 0 {
			for _, c := range w.cands {
				if c.name == holderIdentity(w.lease) {
					return c
				}
			}
		}
		return w.cands[w.rng.IntN(len(w.cands))]
	}
	switch k := w.rng.IntN(9); k {
	case 0, 1: // SIGSTOP, then SIGCONT
		c := pick()
		if p := c.proc; p != nil && !p.dead && !p.paused {
			w.fault("pause")
			p.paused = true
			w.after(w.durationBetween(time.Second, 40*time.Second), p.resume)
		}
	case 2: // crash, restart later
		c := pick()
		if p := c.proc; p != nil && !p.dead {
			w.fault("crash")
			p.dead, p.leading = true, false
			c.proc = nil
			w.after(w.durationBetween(time.Second, 60*time.Second), func() {
				if c.proc == nil {
					c.start()
				}
			})
		}
	case 3: // graceful stop, restart later
		c := pick()
		if p := c.proc; p != nil && !p.dead && !p.paused {
			w.fault("stop")
			p.stopGracefully(func() {
				c.proc = nil
				w.after(w.durationBetween(time.Second, 30*time.Second), func() {
					if c.proc == nil {
						c.start()
					}
				})
			})
		}
	case 4: // the Lease is deleted
		if w.lease != nil {
			w.fault("delete-lease")
			_, _ = w.writeLease(nil, w.lease.ResourceVersion, "fault")
		}
	case 5: // a candidate is deleted
		c := pick()
		if lc := w.candidates[c.name]; lc != nil {
			w.fault("delete-candidate")
			_, _ = w.writeCandidate(c.name, nil, lc.ResourceVersion, "fault")
		}
	case 6: // the active controller fails over to a new replica
		if w.ctrl == nil {
			return
		}
		w.fault("controller-failover")
		old := w.ctrl
		old.stop()
		w.ctrl = nil
		w.tracef("controller %d is gone", old.id)
		w.after(w.durationBetween(0, simLeaseDuration), func() {
			if w.ctrl == nil {
				w.startController()
			}
		})
	case 7: // an API outage: every request fails for a while
		w.fault("api-outage")
		rate := w.errorRate
		w.errorRate = 1
		w.after(w.durationBetween(time.Second, 20*time.Second), func() {
			if w.faulty {
				w.errorRate = rate
			}
		})
	case 8: // the watches fall far behind for a while
		w.fault("watch-lag")
		base := w.lagBase
		w.lagBase = w.durationBetween(time.Second, 6*time.Second)
		w.after(w.durationBetween(5*time.Second, 30*time.Second), func() {
			if w.faulty {
				w.lagBase = base
			}
		})
	}
}

// stopFaults ends the fault phase: requests succeed, watches keep up,
// paused processes resume, stopped ones start, and a controller runs.
func (w *simWorld) stopFaults() {
	w.faulty = false
	w.errorRate = 0
	w.lagBase = time.Millisecond
	w.quietAt = w.now
	w.tracef("faults stop")
	for _, c := range w.cands {
		if c.proc != nil {
			c.proc.resume()
		} else {
			c.start()
		}
	}
	if w.ctrl == nil {
		w.startController()
	}
}

// checkRecords checks that the controller remembers no more than there is.
func (w *simWorld) checkRecords() {
	if w.ctrl == nil {
		return
	}
	obs := w.ctrl.c.obs
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if n := len(obs.candidates); n > len(w.candidates) {
		w.fail("the controller keeps %d candidate records for %d candidates", n, len(w.candidates))
	}
	if n := len(obs.leases); n > 1 {
		w.fail("the controller keeps %d Lease records for one Lease", n)
	}
}

// see records the leaseTransitions of a version of the Lease, as the
// library's seenTerms does.
func (p *simProcess) see(l *coordinationv1.Lease) {
	n, fp := ptr.Deref(l.Spec.LeaseTransitions, 0), simFingerprint(l)
	switch {
	case fp == p.highestBy:
	case n > p.highest:
		p.below, p.highest, p.highestBy = p.highest, n, fp
	default:
		p.below = max(p.below, n)
	}
}

// highestBefore is the highest leaseTransitions seen on a version other than
// l's.
func (p *simProcess) highestBefore(l *coordinationv1.Lease) int32 {
	if simFingerprint(l) == p.highestBy {
		return p.below
	}
	return p.highest
}

func simFingerprint(l *coordinationv1.Lease) string {
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	return fmt.Sprintf("%s/%d", renew.Format(time.RFC3339Nano), ptr.Deref(l.Spec.LeaseTransitions, 0))
}

// simCountedNaming: a naming that counted the term (acquireTime equal to
// renewTime).
func simCountedNaming(l *coordinationv1.Lease) bool {
	s := l.Spec
	return s.AcquireTime != nil && s.RenewTime != nil && s.AcquireTime.Time.Equal(s.RenewTime.Time)
}
