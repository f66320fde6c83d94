// Package simworld is the world of cle's deterministic simulation
// (pkg/controller's TestSimulation): simulated time and its schedule of
// events, the random draws, the trace and the verdict, and a model of the
// API server's behaviour (request latency and failures, watches that lag,
// stall and expire, resource versions). What runs in that world is cle's own
// code: the controller's workers, the candidate library's loops; the
// simulation in pkg/controller wires them to this world. README.md says what
// the world models and what it does not.
//
// Nothing here reads the wall clock or starts a goroutine: a run is a
// function of its seed.
package simworld

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// World is one run's time, chance and record. Events run one at a time, in
// the order of their instants; at one instant, in an order drawn from Ties
// (in the order they were scheduled when Ties is nil), except that an event
// scheduled with AtAfter runs after the one it follows.
type World struct {
	// Rng draws everything of the run that has no stream of its own.
	Rng *rand.Rand
	// Ties, when set, draws the order of the events due at one instant: a
	// stream of its own, so that the order moves none of the run's other
	// draws. Nothing in a real cluster orders two things that happen at
	// once by which was scheduled first.
	Ties *rand.Rand
	// Start is the run's first instant, Now the instant of the event that
	// runs.
	Start, Now time.Time
	// Tracing: Tracef records; Trace is the record.
	Tracing bool
	Trace   []string
	// Faults counts the faults drawn, by kind.
	Faults map[string]int
	// Violation is the first invariant found broken ("" if none).
	Violation string
	// LateUntil is when the last thing sent through the server (a watch
	// event, a request or its answer) arrives: see Late.
	LateUntil time.Time

	events events
	seq    int
	// steps counts the events run: a reading taken at one step holds
	// until the next (see Clock.Now).
	steps int
	// sinceStart is Now - Start, which clocks read at every step.
	sinceStart time.Duration
}

// New is a world whose time starts at start, drawing from rng.
func New(rng *rand.Rand, start time.Time, tracing bool) *World {
	return &World{Rng: rng, Start: start, Now: start, Tracing: tracing}
}

// Tracef records a line of the trace, stamped with the time since the start.
func (w *World) Tracef(format string, args ...any) {
	if w.Tracing {
		w.Trace = append(w.Trace, fmt.Sprintf("%9.3fs ", w.Now.Sub(w.Start).Seconds())+fmt.Sprintf(format, args...))
	}
}

// At schedules fn at t (now if t has passed).
func (w *World) At(t time.Time, fn func()) {
	w.AtAfter(t, fn)
}

// maxTie bounds the ties drawn, far from overflow however many events of
// one channel fall due at one instant.
const maxTie = 1 << 62

// Turn is the place of the last event of a channel whose events must run in
// the order they were sent (a watch): see AtAfter. The zero Turn follows
// nothing.
type Turn struct {
	at  time.Time
	tie uint64
}

// AtAfter schedules fn at t (now if t has passed), after the events last
// scheduled with each of turns that are due at the same instant, and makes
// fn the last event of each.
func (w *World) AtAfter(t time.Time, fn func(), turns ...*Turn) {
	w.schedule(t, nil, fn, turns...)
}

// schedule is AtAfter for an event that tm (nil: none) may stop.
func (w *World) schedule(t time.Time, tm *Timer, fn func(), turns ...*Turn) {
	if t.Before(w.Now) {
		t = w.Now
	}
	var tie uint64
	if w.Ties != nil {
		// Drawn below maxTie, above the ties of the channels' last
		// events when those are due at the same instant.
		lo := uint64(0)
		for _, turn := range turns {
			if !turn.at.IsZero() && t.Equal(turn.at) {
				lo = max(lo, turn.tie+1)
			}
		}
		tie = lo
		if lo < maxTie {
			tie += w.Ties.Uint64N(maxTie - lo)
		}
	}
	for _, turn := range turns {
		turn.at, turn.tie = t, tie
	}
	w.seq++
	w.events.push(event{at: t, ns: t.Sub(w.Start), tie: tie, seq: w.seq, fn: fn, timer: tm})
}

// Timer is an event that may be stopped before it runs: a stopped event is
// dropped from the schedule without running, and Step does not count it
// (nor does anything check the world at its instant). A process's loops
// set their timers anew at every step, so most of the timers they set
// never fire.
type Timer struct{ stopped bool }

// Stop drops the timer's event if it has not run; a nil Timer is none.
func (t *Timer) Stop() {
	if t != nil {
		t.stopped = true
	}
}

// Stopped reports whether Stop was called.
func (t *Timer) Stopped() bool { return t != nil && t.stopped }

// AfterTimer schedules fn d from now, as After, unless tm is stopped first.
func (w *World) AfterTimer(d time.Duration, tm *Timer, fn func()) {
	w.schedule(w.Now.Add(d), tm, fn)
}

// After schedules fn d from now.
func (w *World) After(d time.Duration, fn func()) { w.At(w.Now.Add(d), fn) }

// Step runs the next event, unless there is none or it comes after end.
func (w *World) Step(end time.Time) bool {
	for len(w.events) > 0 && w.events[0].timer.Stopped() {
		w.events.pop()
	}
	if len(w.events) == 0 || w.events[0].at.After(end) {
		return false
	}
	ev := w.events.pop()
	w.Now, w.sinceStart = ev.at, ev.ns
	w.steps++
	ev.fn()
	return true
}

// Late records when something sent through the model server (a watch event,
// a request or its answer) arrives: faults have stopped only once what they
// delayed has arrived.
func (w *World) Late(at time.Time) {
	if at.After(w.LateUntil) {
		w.LateUntil = at
	}
}

// Fault counts and traces a fault of kind.
func (w *World) Fault(kind string) {
	if w.Faults == nil {
		w.Faults = map[string]int{}
	}
	w.Faults[kind]++
	w.Tracef("FAULT %s", kind)
}

// Fail records a broken invariant; the first one is the run's verdict.
func (w *World) Fail(format string, args ...any) {
	if w.Violation == "" {
		w.Violation = fmt.Sprintf("at %s: ", w.Now.Sub(w.Start)) + fmt.Sprintf(format, args...)
		w.Tracef("VIOLATION %s", w.Violation)
	}
}

// DurationBetween draws a duration in [lo, hi) from Rng.
func (w *World) DurationBetween(lo, hi time.Duration) time.Duration {
	return DurationBetween(w.Rng, lo, hi)
}

// DurationBetween draws a duration in [lo, hi) from rng (lo if hi <= lo).
func DurationBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// event is one scheduled function. ns is its instant as the time since
// the run's start, which orders the schedule with one comparison of
// integers; tie, then seq, order the events due at one instant.
type event struct {
	at  time.Time
	ns  time.Duration
	tie uint64
	seq int
	fn  func()
	// timer, when set, drops the event once stopped (see Timer).
	timer *Timer
}

// events is the schedule: a binary heap of events by value, the earliest
// (then the lowest tie, then the first scheduled) at the top. A run
// schedules and runs millions of events: kept by value, none is allocated
// on its own.
type events []event

func (q events) less(i, j int) bool {
	if q[i].ns != q[j].ns {
		return q[i].ns < q[j].ns
	}
	if q[i].tie != q[j].tie {
		return q[i].tie < q[j].tie
	}
	return q[i].seq < q[j].seq
}

func (q *events) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *events) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{} // drop the reference to its function
	h = h[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, small) {
			small = l
		}
		if r < len(h) && h.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	*q = h
	return top
}
