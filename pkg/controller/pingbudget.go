package controller

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// pingBudget bounds the pings the controller sends, across all Leases, so
// that a slow server, or a burst of elections, never turns into a storm of
// pings that slows the server further and holds up the Lease writes queued
// behind them in the client's rate limit. Pings for an election that is due
// (no live holder) take from the whole budget; pings that only check whether
// a candidate better than a live holder is alive (preemption) wait while less
// than half of the burst is left, so elections always go first. A ping over
// the budget is not sent, and the step runs again when one fits.
type pingBudget struct {
	mu  sync.Mutex
	lim *rate.Limiter
	// latest is the latest instant asked about: workers ask with their
	// own readings of the clock, not in order, and a limiter asked about
	// an earlier instant than the last counts the time between twice.
	latest time.Time
}

// at is now, or the latest instant asked about if that is later; b.mu held.
func (b *pingBudget) at(now time.Time) time.Time {
	if now.Before(b.latest) {
		return b.latest
	}
	b.latest = now
	return now
}

func newPingBudget(perSecond float64, burst int) *pingBudget {
	return &pingBudget{lim: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// take reports whether a ping may be sent at now; preempt is set for a
// preemption check.
func (b *pingBudget) take(now time.Time, preempt bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now = b.at(now)
	if preempt && b.lim.TokensAt(now) < float64(b.lim.Burst())/2 {
		return false
	}
	return b.lim.AllowN(now, 1)
}

// wait is how long after now a ping fits again (preempt as for take).
func (b *pingBudget) wait(now time.Time, preempt bool) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now = b.at(now)
	need := 1.0
	if preempt {
		need = math.Max(need, float64(b.lim.Burst())/2)
	}
	missing := need - b.lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(b.lim.Limit()) * float64(time.Second))
}
