package controller

import (
	"math/rand/v2"
	"time"
)

// Runs with faults one at a time: liveness judged per fault.
//
// In most runs faults overlap on a server that fails requests at a steady
// rate, and liveness is judged only once they have all stopped. One run in
// simSpacedEvery is spaced as the fault-injection suite (test/chaos) is: the
// server answers every request and keeps up, and one fault strikes at a
// time, each followed by its recovery before the next (an API outage fails
// every request while it lasts). Each fault is then
// judged on its own:
//
//   - while it lasts, when it struck one candidate's process (a pause, a
//     crash, a graceful stop, a partition from the API server): another
//     process leads within simFailoverBound of the fault (the struck
//     process's term runs out, and a ping that it cannot answer tells the
//     controller to elect the next), unless no other candidate runs;
//   - once it is over (its process runs again, its outage or partition
//     ends, a controller runs again): the bounds of the quiet phase, as if
//     faults had stopped then (a leader within simLeaderBound, the best
//     within simBestBound, and no controller write once settled).

// simSpacedEvery: one run in so many is spaced (not a fleet's run, whose
// server is loaded on purpose, nor one beside kube-apiserver's controller,
// which takes the lock at times of its own).
const simSpacedEvery = 6

// simFailoverBound is how soon another process leads after a fault struck
// the leader's: its term runs out (simLeaderBound: a lease duration after
// the last renewal the controller saw, and a ping of the struck holder that
// goes unanswered), later by as much as the controller's watch lagged of
// late (it counts the expiry from when it saw the renewal, allowing for that
// lag), and an adopter named next acquires at its elector's next poll (2.2
// RetryPeriods with jitter), as the fault-injection suite allows.
const simFailoverBound = simLeaderBound + 3*time.Second + 22*simRetryPeriod/10

// simStopBound is how long a graceful stop takes at most on a server that
// answers: a release and a delete, well within a renew deadline.
const simStopBound = simRenewDeadline

// spacedRun reports whether seed's run is spaced, drawn from a stream of
// its own so that it moves none of the run's other draws.
func spacedRun(seed uint64) bool {
	return !fleetRun(seed) && !builtinRun(seed) && rand.New(rand.NewPCG(seed, 0x3c6ef372fe94f82b)).IntN(simSpacedEvery) == 0
}

// fleetRun reports whether seed's run has a fleet (see addFleet).
func fleetRun(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x5be0cd19137e2179)).IntN(simFleetEvery) == 0
}

// scheduleRounds starts a spaced run's faults; each round schedules the
// next.
func (w *simWorld) scheduleRounds() {
	w.Tracef("a spaced run: one fault at a time on a server that answers, each judged on its own")
	w.res.spacedRuns = 1
	// The first fault comes once the first election is done (a controller
	// that finds the candidates there before it waits a lease duration to
	// elect).
	w.After(w.DurationBetween(30*time.Second, 45*time.Second), w.round)
}

// round strikes one fault, and once it is over judges the recovery from it
// for a while before the next.
func (w *simWorld) round() {
	if !w.Now.Before(w.Start.Add(simFaultPhase)) {
		return // the fault phase is over (stopFaults)
	}
	// The last fault's checks end: leadership may move again.
	w.quietAt = time.Time{}
	for _, e := range w.elections {
		e.quietLeader, e.quietBest, e.noneRan, e.steadyFrom = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		e.duringFrom, e.duringUntil, e.struck, e.struckProc = time.Time{}, time.Time{}, nil, nil
	}
	// The server fails nothing and keeps up, but for a fault that is the
	// server's own (an outage), or needs it (a Lease created again).
	w.Faulty = true
	e, struck, until, serverWide := w.strike()
	w.Faulty = serverWide
	if until.IsZero() {
		// Nothing to strike (no process running to pause, say): the
		// recovery from the last fault goes on, and another is drawn soon.
		w.quietAt = w.Now
		w.After(w.DurationBetween(time.Second, 5*time.Second), w.round)
		return
	}
	w.res.rounds++
	if struck != nil && until.After(w.Now) {
		e.duringFrom, e.duringUntil, e.struck, e.struckProc = w.Now, until, struck, struck.proc
	}
	w.At(until, func() {
		if !w.Now.Before(w.Start.Add(simFaultPhase)) {
			return // stopFaults ended it
		}
		w.faultsOver("the fault is over; what it delayed")
		w.At(w.quietAt.Add(w.bound(simBestBound)+45*time.Second), w.round)
	})
}

// checkDuring judges the fault that struck one of e's candidates' process
// while it lasts: some other process leads within the bound of the fault, or
// of when another candidate ran again (the struck candidate's next process,
// after a crash or a stop, counts as another).
func (w *simWorld) checkDuring(e *simElection, leaders []*simCandidate) {
	if e.duringFrom.IsZero() {
		return
	}
	if !w.Now.Before(e.duringUntil) {
		e.duringFrom = time.Time{} // over: the checks after it take it from here
		return
	}
	if e.termHolder == e.struck.name && e.struck.proc == e.struckProc && e.termFrom.After(e.duringFrom) {
		// The controller named the struck candidate after the fault (its
		// LeaseCandidate looked alive): that term runs out a lease
		// duration after it began, and the bound counts from there.
		e.duringFrom = e.termFrom
	}
	for _, c := range leaders {
		if c.proc != e.struckProc {
			w.res.toFailover = max(w.res.toFailover, w.Now.Sub(e.duringFrom))
			e.duringFrom = time.Time{}
			return
		}
	}
	others := false
	for _, c := range e.cands {
		if p := c.proc; p != e.struckProc && p != nil && !p.dead && !p.paused && c.registered() != nil {
			others = true
			break
		}
	}
	if !others {
		// No other candidate runs (an adopter that lost its term exits,
		// and its Deployment restarts it): the bound counts from when one
		// does.
		e.duringFrom = w.Now
		return
	}
	if bound := w.bound(simFailoverBound); w.Now.Sub(e.duringFrom) > bound && !e.exitedLately(w.Now) {
		w.Fail("no leader of %s %s after a fault struck %s, which has not recovered (bound %s)", e.shown(), w.Now.Sub(e.duringFrom), e.struck.shown(), bound)
	}
}
