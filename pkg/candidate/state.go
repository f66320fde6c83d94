package candidate

import (
	"context"
	"time"
)

// The Candidate's leader state (the fields under c.mu) is shared by the
// elector, which changes it, and by IsLeader, Token, the write guard and the
// health check, which read it at any time from any goroutine. These methods
// are the only ones that change it.

// isLeaderLocked is IsLeader with c.mu held.
func (c *Candidate) isLeaderLocked() bool {
	return c.leading && c.sinceLocked(c.renewedAt) < c.cfg.RenewDeadline
}

// since is the time elapsed since t, the longer of the monotonic and the
// wall-clock readings: the monotonic clock does not advance while the machine
// is suspended, but the rest of the world does, so a process that wakes from
// a suspend must see the whole gap.
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
// leaseTransitions as the renewal wrote it.
func (c *Candidate) recordRenewal(sent time.Time, term int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sent.After(c.renewedAt) {
		c.renewedAt = sent
	}
	if c.leading || c.sinceLocked(sent) >= c.cfg.RenewDeadline {
		return false
	}
	c.leading, c.term = true, term
	c.termCtx, c.endTerm = context.WithCancel(context.Background())
	return true
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
	c.leading, c.term = false, 0
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
