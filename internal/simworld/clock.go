package simworld

import (
	"math"
	"time"

	"github.com/cle-dev/cle/internal/instant"
)

// Clock is one process's clock: off true time by Offset when the process
// started (born), running faster or slower by Drift (0.001: a millisecond a
// second fast). Its wall clock may be stepped, forward or back, and the
// process suspended with its machine: then its monotonic clock stands
// still, while the wall clock, and the world, run on.
type Clock struct {
	w      *World
	Offset time.Duration
	Drift  float64
	// born is when the process started, as time since the world's Start.
	born time.Duration
	// Monotonic: Now gives instants with a monotonic reading, as time.Now
	// does, so that the code reading it is shown steps and suspends; else
	// the wall reading alone (the two run at one rate then).
	Monotonic bool
	// Alive reports whether the process still runs (After runs nothing
	// once it does not); Hold keeps a function for the process to run
	// when it wakes from a suspend.
	Alive func() bool
	Hold  func(fn func())

	stepped     time.Duration // the wall clock's steps, in all
	suspendedAt time.Time     // zero while not suspended
	suspended   time.Duration // the suspends that ended, in all
	suspends    int

	// The last reading of Now, at the world's step readStep (0: none):
	// the code of every process, and every check, reads its clock many
	// times a step; it changes only from one step to the next, or when
	// the clock is stepped, suspended or resumed.
	read     time.Time
	readStep int
	readMono bool
}

// NewClock is a clock of w.
func (w *World) NewClock(offset time.Duration, drift float64, born time.Time) *Clock {
	return &Clock{w: w, Offset: offset, Drift: drift, born: born.Sub(w.Start)}
}

// Wall is the wall clock's reading now.
func (c *Clock) Wall() time.Time {
	w := c.w
	return w.Now.Add(c.Offset + c.stepped + time.Duration(c.Drift*float64(w.sinceStart-c.born)))
}

// Mono is the monotonic clock's reading now: local time since its birth,
// suspends not counted.
func (c *Clock) Mono() time.Duration {
	w := c.w
	up := w.sinceStart - c.born - c.suspended
	if !c.suspendedAt.IsZero() {
		up -= w.Now.Sub(c.suspendedAt)
	}
	return time.Duration(float64(up) * (1 + c.Drift))
}

// Now is what the process's code reads from its clock (see Monotonic).
func (c *Clock) Now() time.Time {
	step := c.w.steps + 1
	if c.readStep == step && c.readMono == c.Monotonic {
		return c.read
	}
	now := c.Wall()
	if c.Monotonic {
		now = instant.At(now, c.Mono())
	}
	c.read, c.readStep, c.readMono = now, step, c.Monotonic
	return now
}

// Until is the true duration until local duration d has passed, rounded
// up: a wait always lets time pass.
func (c *Clock) Until(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(float64(d) / (1 + c.Drift)))
}

// After runs fn once the monotonic clock has advanced by d, as a Go timer
// does: a suspend meanwhile puts it off by as long.
func (c *Clock) After(d time.Duration, fn func()) {
	c.AfterTimer(d, nil, fn)
}

// AfterTimer is After, unless tm (nil: none) is stopped first.
func (c *Clock) AfterTimer(d time.Duration, tm *Timer, fn func()) {
	w := c.w
	suspends, target := c.suspends, c.Mono()+d
	var check func()
	check = func() {
		switch {
		case !c.Alive(), tm.Stopped():
		case c.suspends == suspends:
			fn() // no suspend since it was set: the usual timer
		case c.Suspended():
			c.Hold(check) // looked at again on waking
		default:
			if left := target - c.Mono(); left > 0 {
				w.AfterTimer(c.Until(left), tm, check)
				return
			}
			fn()
		}
	}
	w.AfterTimer(c.Until(d), tm, check)
}

// Step sets the wall clock forward (or back, d < 0) by d.
func (c *Clock) Step(d time.Duration) {
	c.stepped += d
	c.readStep = 0
}

// Suspend stops the monotonic clock until Resume.
func (c *Clock) Suspend() {
	c.suspendedAt = c.w.Now
	c.suspends++
	c.readStep = 0
}

// Suspended reports whether the process is suspended.
func (c *Clock) Suspended() bool { return !c.suspendedAt.IsZero() }

// Resume ends a suspend, if there is one.
func (c *Clock) Resume() {
	if c.Suspended() {
		c.suspended += c.w.Now.Sub(c.suspendedAt)
		c.suspendedAt = time.Time{}
		c.readStep = 0
	}
}
