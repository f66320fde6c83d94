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
// (no live holder) take from the whole budget; pings that check ahead (a
// better candidate than a live holder, a late holder) wait while less than
// half of the burst is left, so elections always go first. A ping over the
// budget is not sent, and the step runs again when one fits.
//
// A server whose writes take seconds to show is behind, and each ping is two
// more writes (the ping and its answer): while the controller's own writes
// take longer than paceDelay to show, the budget shrinks in proportion (see
// pace), so that a slow server is asked less of rather than more.
type pingBudget struct {
	mu  sync.Mutex
	lim *rate.Limiter
	// perSecond and burst are the whole budget.
	perSecond float64
	burst     int
	// latest is the latest instant asked about: workers ask with their
	// own readings of the clock, not in order, and a limiter asked about
	// an earlier instant than the last counts the time between twice.
	latest time.Time
}

const (
	// paceDelay is how long the controller's own writes may take to show
	// (WatchLag.Spread) with the budget whole.
	paceDelay = time.Second
	// minPace is the smallest share of the budget kept however slow the
	// server: elections that are due still need their pings.
	minPace = 0.1
)

// at is now, or the latest instant asked about if that is later; b.mu held.
func (b *pingBudget) at(now time.Time) time.Time {
	if now.Before(b.latest) {
		return b.latest
	}
	b.latest = now
	return now
}

func newPingBudget(perSecond float64, burst int) *pingBudget {
	return &pingBudget{lim: rate.NewLimiter(rate.Limit(perSecond), burst), perSecond: perSecond, burst: burst}
}

// pace sizes the budget for a server whose writes take delay to show: whole
// up to paceDelay, then paceDelay/delay of it (rate and burst), at least
// minPace. It returns the rate allowed now, and whether pace began or stopped
// holding pings back. Pings not sent while the budget was small are not owed:
// made whole again, it refills at the full rate.
func (b *pingBudget) pace(now time.Time, delay time.Duration) (perSecond float64, changed bool) {
	share := 1.0
	if delay > paceDelay {
		share = max(paceDelay.Seconds()/delay.Seconds(), minPace)
	}
	perSecond = b.perSecond * share
	burst := max(1, int(math.Round(float64(b.burst)*share)))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lim.Limit() == rate.Limit(perSecond) && b.lim.Burst() == burst {
		return perSecond, false
	}
	wasWhole := b.lim.Burst() == b.burst && b.lim.Limit() == rate.Limit(b.perSecond)
	now = b.at(now)
	b.lim.SetLimitAt(now, rate.Limit(perSecond))
	b.lim.SetBurstAt(now, burst)
	return perSecond, wasWhole != (share == 1)
}

// take reports whether a ping may be sent at now; early is set for a ping
// that checks ahead of an election (see pingIntent).
func (b *pingBudget) take(now time.Time, early bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now = b.at(now)
	if early && b.lim.TokensAt(now) < float64(b.lim.Burst())/2 {
		return false
	}
	return b.lim.AllowN(now, 1)
}

// wait is how long after now a ping fits again (early as for take).
func (b *pingBudget) wait(now time.Time, early bool) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now = b.at(now)
	need := 1.0
	if early {
		need = math.Max(need, float64(b.lim.Burst())/2)
	}
	missing := need - b.lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(b.lim.Limit()) * float64(time.Second))
}
