package candidate

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Errors of the calls that serve an external elector (Config.ExternalRenewal).
var (
	// ErrNotExternal is returned by Renew, Lease and Resign on a Candidate
	// that renews the Lease itself.
	ErrNotExternal = errors.New("the candidate renews its Lease itself (Config.ExternalRenewal is off)")
	// ErrNotRunning is returned by Renew, Lease and Resign once Run has
	// stopped following the Lease (its context is done, or it failed).
	ErrNotRunning = errors.New("the candidate is not running")
	// errForeignRenewal: another process renews the Lease under this
	// identity.
	errForeignRenewal = fmt.Errorf("%w: another process renewed the Lease under this identity", ErrNotLeader)
)

// call is one request of an external elector, run by the elector's loop.
type call struct {
	caller context.Context
	fn     func(ctx, caller context.Context, e *elector) error
	done   chan error
}

func (cl call) run(ctx context.Context, e *elector) {
	cl.done <- cl.fn(ctx, cl.caller, e)
}

// inLoop runs fn in the elector's loop, which owns the Lease state, once Run
// has synced; it waits for Run to start. fn gets the loop's context (logger,
// lifetime) and the caller's (the request's deadline).
func (c *Candidate) inLoop(ctx context.Context, fn func(ctx, caller context.Context, e *elector) error) error {
	if !c.cfg.ExternalRenewal {
		return ErrNotExternal
	}
	cl := call{caller: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case c.calls <- cl:
	case <-c.loopDone:
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-cl.done
}

// Renew is the external elector's renewal of the Lease (Config.ExternalRenewal):
// one conditional update, as the library's own renew loop makes. It succeeds
// only while the Lease names this process and the controller prefers nobody
// else; the first success after that makes this process leader (IsLeader,
// Token, WrapConfig) for RenewDeadline from when it was sent, and each later
// one extends that. It fails at once, wrapping ErrNotLeader, when the Lease
// does not exist, names another holder, has another preferred holder, or was
// renewed by another process under this identity; then IsLeader is false
// too, and the elector must stop leading when its own renewals stop
// succeeding.
func (c *Candidate) Renew(ctx context.Context) error {
	return c.inLoop(ctx, func(ctx, caller context.Context, e *elector) error {
		return e.renewOnCall(ctx, caller)
	})
}

// Lease returns a copy of the Lease as this process last saw it (read from
// its watch, or written by itself), nil when it does not exist. It waits for
// Run to have read the Lease once. Config.ExternalRenewal only.
func (c *Candidate) Lease(ctx context.Context) (*coordinationv1.Lease, error) {
	var lease *coordinationv1.Lease
	err := c.inLoop(ctx, func(_, _ context.Context, e *elector) error {
		if cur := e.current(); cur != nil {
			lease = cur.DeepCopy()
		}
		return nil
	})
	return lease, err
}

// Resign tells the library that the external elector has stopped leading
// and nothing it ran as leader acts any more (client-go's release): IsLeader
// turns false, and the Lease may now go to the preferred holder, or to
// nobody when Run's context is cancelled, without waiting for LeaseDuration.
// A later successful Renew starts a new term. Config.ExternalRenewal only.
//
// The resignation is recorded before anything else, so that Run's shutdown
// releases the Lease even if ctx ends while the loop is busy with a slow
// request.
func (c *Candidate) Resign(ctx context.Context) error {
	if !c.cfg.ExternalRenewal {
		return ErrNotExternal
	}
	c.resigned.Store(true)
	return c.inLoop(ctx, func(ctx, _ context.Context, e *elector) error {
		e.stepDown(ctx, "the elector resigned")
		e.wakeSoon()
		return nil
	})
}

// renewOnCall serves Renew: it brings the library's view up to date (a step
// steps down for every reason to), then renews if the Lease is this
// process's to renew.
func (e *elector) renewOnCall(ctx, caller context.Context) error {
	cfg := &e.c.cfg
	e.step(ctx)
	lease := e.current()
	holder, preferred := holderOf(lease), preferredOf(lease)
	leading, _ := e.c.leaderState()
	switch {
	case lease == nil:
		return fmt.Errorf("%w: the Lease does not exist; the election controller creates it", ErrNotLeader)
	case holder != cfg.Identity:
		return fmt.Errorf("%w: the Lease names %q", ErrNotLeader, holder)
	case preferred != "" && preferred != cfg.Identity:
		return fmt.Errorf("%w: the election controller prefers %q", ErrNotLeader, preferred)
	case !leading && e.untilTakeable(ctx, lease, cfg.Clock.Now()) > 0:
		return errForeignRenewal
	}
	if err := e.renew(ctx, caller, lease); err != nil {
		return err
	}
	if !e.c.IsLeader() {
		// Sent more than the renew deadline ago: not a term any more.
		return fmt.Errorf("%w: the renewal took longer than the renew deadline", ErrNotLeader)
	}
	return nil
}

// mayLetGo reports whether nothing of this process can still act on its
// past renewals, so that the Lease may go to someone else: always with the
// library's own leader work (stepped down and waited for before), and with
// an external elector once it resigned, or once LeaseDuration has passed
// since the last successful renewal was sent (the elector stops at most
// RetryPeriod + RenewDeadline after it).
func (e *elector) mayLetGo() bool {
	cfg := &e.c.cfg
	if !cfg.ExternalRenewal || e.c.resigned.Load() {
		return true
	}
	_, renewedAt := e.c.leaderState()
	return renewedAt.IsZero() || e.c.since(renewedAt) >= cfg.LeaseDuration
}

// quietAt is when mayLetGo turns true without a resignation.
func (e *elector) quietAt() time.Time {
	_, renewedAt := e.c.leaderState()
	return renewedAt.Add(e.c.cfg.LeaseDuration)
}
