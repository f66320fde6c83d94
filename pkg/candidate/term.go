package candidate

import (
	"context"
	"time"

	"github.com/cle-dev/cle/internal/lead"
)

// term is one term of leadership as the elector publishes it. A published
// term is never changed: a renewal publishes a copy with a later renewedAt,
// the end of the term publishes none. Readers (IsLeader, Token, the write
// guard, the health check) load it from any goroutine without a lock.
type term struct {
	// token is the term's fencing token: the Lease's leaseTransitions as
	// the term's first renewal wrote it. seenBefore is the highest
	// leaseTransitions the process had seen on other versions of the Lease
	// when it wrote that renewal (see lead.TermToken).
	token, seenBefore int32
	// renewedAt is when the term's last successful renewal was sent.
	renewedAt time.Time
	// ctx is cancelled when the term ends: by the elector when it steps
	// down, or by the first reader that finds the renew deadline passed.
	ctx context.Context
	end context.CancelFunc
}

// leadership is what the elector publishes about leadership, swapped whole.
type leadership struct {
	// term is the term being led, nil when not leading. It may have lapsed
	// (see live) before the elector has stepped down.
	term *term
	// stoppingSince is when the elector told leader work to stop, zero when
	// no leader work is stopping.
	stoppingSince time.Time
}

// live reports whether t may act as leader now: its context has not ended
// and its last renewal is within the renew deadline, on the wall clock as well
// as the monotonic one (see lead.Elapsed). Finding the deadline passed is the one
// thing a reader does besides reading: it ends t's context, so that leader
// work and guarded requests stop at the first look after a pause or a
// suspend, during which the elector's timer (monotonic) stood still; and it
// wakes the elector, which then steps down and publishes the change.
func (c *Candidate) live(t *term) bool {
	if t == nil || t.ctx.Err() != nil {
		return false
	}
	if c.mayAct(t) {
		return true
	}
	t.end()
	signal(c.stepDownNow)
	return false
}

// mayAct reports what live reports, and does nothing else: a term found
// lapsed is left to whoever looks next (a simulation's checks read with it).
func (c *Candidate) mayAct(t *term) bool {
	return t != nil && t.ctx.Err() == nil && c.since(t.renewedAt) < c.cfg.RenewDeadline
}

// leading is the published term, nil when not leading; it may have lapsed.
func (c *Candidate) leading() *term { return c.state.Load().term }

// liveTerm is the published term if it may act as leader now.
func (c *Candidate) liveTerm() (*term, bool) {
	t := c.leading()
	return t, c.live(t)
}

// since is the time elapsed since t for a deadline (see lead.Elapsed).
func (c *Candidate) since(t time.Time) time.Duration {
	return lead.Elapsed(c.cfg.Clock.Now(), t)
}

// The elector's loop is the only writer of the published state; the methods
// below are its.

// recordRenewal publishes a successful renewal of the Lease sent at sent,
// and reports whether it starts a term: the process was not leading and the
// renewal is still within the renew deadline. token is the Lease's
// leaseTransitions as the renewal wrote it, counted above seenBefore. A
// renewal that succeeds after the term lapsed does not revive it: the term's
// context has ended, and the elector steps down.
func (c *Candidate) recordRenewal(sent time.Time, token, seenBefore int32) (started *term) {
	s := c.state.Load()
	if t := s.term; t != nil {
		if sent.After(t.renewedAt) {
			renewed := *t
			renewed.renewedAt = sent
			c.state.Store(&leadership{term: &renewed, stoppingSince: s.stoppingSince})
		}
		return nil
	}
	if c.since(sent) >= c.cfg.RenewDeadline {
		return nil
	}
	ctx, end := context.WithCancel(context.Background())
	t := &term{token: token, seenBefore: seenBefore, renewedAt: sent, ctx: ctx, end: end}
	c.state.Store(&leadership{term: t, stoppingSince: s.stoppingSince})
	return t
}

// stopLeading ends the term (IsLeader false, guarded requests in flight
// cancelled) and reports whether there was one.
func (c *Candidate) stopLeading() bool {
	t := c.leading()
	if t == nil {
		return false
	}
	t.end()
	c.state.Store(&leadership{stoppingSince: c.cfg.Clock.Now()})
	return true
}

// stoppedLeading records that leader work has returned after stopLeading.
func (c *Candidate) stoppedLeading() {
	c.state.Store(&leadership{})
}
