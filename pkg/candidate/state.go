package candidate

import (
	"context"
	"time"
)

// The Candidate's leader state (the fields under c.mu) is shared by the
// elector, which changes it, and by IsLeader, Token, the write guard and the
// health check, which read it at any time from any goroutine. These methods
// are the only ones that change it.

// isLeaderLocked is IsLeader with c.mu held. When it finds the renew
// deadline passed while leading, it ends the term there and then: the
// elector's timer runs on the monotonic clock, which does not advance while
// the machine is suspended, so after a suspend this check, on the wall clock
// too, is the first to know. The term's context is cancelled (guarded
// requests and leader work with it), and the elector is woken to step down.
func (c *Candidate) isLeaderLocked() bool {
	if !c.leading || c.lapsed {
		return false
	}
	if c.sinceLocked(c.renewedAt) < c.cfg.RenewDeadline {
		return true
	}
	c.lapsed = true
	if c.endTerm != nil {
		c.endTerm()
		c.termCtx, c.endTerm = nil, nil
	}
	select {
	case c.stepDownNow <- struct{}{}:
	default:
	}
	return false
}

// since is the time elapsed since t for a deadline, the longer of the
// monotonic and the wall-clock readings: the monotonic clock does not advance
// while the machine is suspended, but the rest of the world does, so a
// process that wakes from a suspend must see the whole gap. A wait (how long
// to hold off before acting) uses the clock's monotonic Since alone, so that
// a suspend or a wall-clock step does not cut it short.
func (c *Candidate) since(t time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sinceLocked(t)
}

func (c *Candidate) sinceLocked(t time.Time) time.Duration {
	clk := c.cfg.Clock
	return max(clk.Since(t), clk.Now().Round(0).Sub(t.Round(0)))
}

// leaderState reports whether this process counts itself leader, and when
// the last successful renewal of the Lease was sent.
func (c *Candidate) leaderState() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading, c.renewedAt
}

// recordRenewal records a successful renewal of the Lease sent at sent, and
// reports whether it starts a term: the process was not leading and the
// renewal is still within the renew deadline. term is the Lease's
// leaseTransitions as the renewal wrote it; termCtx, when a term starts, is
// cancelled when that term ends. A renewal that succeeds after the term
// lapsed does not revive it: the elector steps down first.
func (c *Candidate) recordRenewal(sent time.Time, term int32) (termCtx context.Context, started bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sent.After(c.renewedAt) {
		c.renewedAt = sent
	}
	if c.leading || c.sinceLocked(sent) >= c.cfg.RenewDeadline {
		return nil, false
	}
	c.leading, c.term = true, term
	c.termCtx, c.endTerm = context.WithCancel(context.Background())
	return c.termCtx, true
}

// termToken is the token of the term being led (or just ended).
func (c *Candidate) termToken() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

// stopLeading turns IsLeader false, cancels the guarded requests in flight,
// and reports whether the process was leading.
func (c *Candidate) stopLeading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leading {
		return false
	}
	c.leading, c.term, c.lapsed = false, 0, false
	if c.endTerm != nil {
		c.endTerm()
		c.termCtx, c.endTerm = nil, nil
	}
	c.stoppingSince = c.cfg.Clock.Now()
	return true
}

// stoppedLeading records that leader work has returned after stopLeading.
func (c *Candidate) stoppedLeading() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stoppingSince = time.Time{}
}

// setHolder records the Lease's holder as last observed, for Leader.
func (c *Candidate) setHolder(holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holder = holder
}
