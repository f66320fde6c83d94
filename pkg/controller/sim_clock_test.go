package controller

import (
	"math/rand/v2"
	"time"

	"github.com/cle-dev/cle/internal/simworld"
)

// Clock faults: a library process's wall clock stepped (an NTP step, an
// operator's date command) or the process suspended with its machine (the
// monotonic clock stands still while the wall clock, and the world, run on).
// The library tells a wait from a deadline by reading both clocks (see
// lead.Elapsed), so its clock gives instants with both readings,
// as time.Now does (internal/instant).

// simClockFaultsEvery: one run in so many (of those without kube-apiserver's
// controller, which compares the candidates' clocks with its own) has clock
// faults.
const simClockFaultsEvery = 3

// suspend stops the process and its monotonic clock for d (or until the
// faults stop); it wakes as from a pause, finding its wall clock d later.
func (p *simProcess) suspend(d time.Duration) {
	w := p.c.w
	w.Tracef("%s/%d is suspended for %s", p.c.shown(), p.id, d)
	p.paused = true
	p.clk.Suspend()
	w.After(d, p.resume)
}

// scheduleClockFaults draws, from a stream of their own, clock faults over
// the fault phase: the rest of the run's schedule is drawn as in a run
// without them.
func (w *simWorld) scheduleClockFaults(seed uint64) {
	w.scheduleOwn(seed, 0x3c6ef372fe94f82b, 10*time.Second, 60*time.Second, w.clockFault)
}

// scheduleOwn draws instants over the fault phase from a stream of their
// own (the seed's, keyed by stream): the first 5 to 30 s in, each next one
// lo to hi after the last; at each it runs fault with that stream, whose
// draws move none of the run's others.
func (w *simWorld) scheduleOwn(seed, stream uint64, lo, hi time.Duration, fault func(*rand.Rand)) {
	rng := rand.New(rand.NewPCG(seed, stream))
	for t := simworld.DurationBetween(rng, 5*time.Second, 30*time.Second); t < simFaultPhase; t += simworld.DurationBetween(rng, lo, hi) {
		w.At(w.Start.Add(t), func() { fault(rng) })
	}
}

// pickProcess draws one of the candidate processes that may suffer a fault
// (may), the holder's half the time; nil when there is none.
func (w *simWorld) pickProcess(rng *rand.Rand, may func(*simProcess) bool) *simProcess {
	var procs []*simProcess
	var holder *simProcess
	for _, c := range w.cands {
		if p := c.proc; p != nil && may(p) {
			procs = append(procs, p)
			if l := c.e.lease(); l != nil && holderIdentity(l) == c.name {
				holder = p
			}
		}
	}
	if len(procs) == 0 {
		return nil
	}
	p := procs[rng.IntN(len(procs))]
	if holder != nil && rng.IntN(2) == 0 {
		p = holder
	}
	return p
}

// clockFault suspends a library process or steps its wall clock, mostly the
// holder's, or does either to the active controller replica.
func (w *simWorld) clockFault(rng *rand.Rand) {
	if !w.Faulty {
		return
	}
	if sc := w.ctrl; sc != nil && !sc.paused && rng.IntN(4) == 0 {
		if rng.IntN(3) == 0 {
			d := simworld.DurationBetween(rng, time.Second, 40*time.Second)
			w.Fault("controller-suspend")
			w.Tracef("controller %d is suspended for %s", sc.id, d)
			sc.clk.Suspend()
			sc.pause()
			w.After(d, sc.resume)
			return
		}
		d := simClockStep(rng)
		w.Fault("controller-clock-step")
		w.Tracef("controller %d's wall clock steps %s", sc.id, d)
		sc.clk.Step(d)
		return
	}
	p := w.pickProcess(rng, func(p *simProcess) bool { return p.ext == nil && !p.dead && !p.paused && !p.stopping() })
	if p == nil {
		return
	}
	switch rng.IntN(3) {
	case 0:
		w.faultOn(p.c, "suspend")
		p.suspend(simworld.DurationBetween(rng, time.Second, 40*time.Second))
	default:
		d := simClockStep(rng)
		w.faultOn(p.c, "clock-step")
		w.Tracef("%s/%d's wall clock steps %s", p.c.shown(), p.id, d)
		p.clk.Step(d)
	}
}

// simClockStep draws a step of a fraction of a second (NTP steps what it
// cannot slew) or of minutes (a clock set by hand, a VM restored), either
// way.
func simClockStep(rng *rand.Rand) time.Duration {
	d := simworld.DurationBetween(rng, 200*time.Millisecond, 2*time.Second)
	if rng.IntN(2) == 0 {
		d = simworld.DurationBetween(rng, time.Minute, 5*time.Minute)
	}
	if rng.IntN(2) == 0 {
		d = -d
	}
	return d
}
