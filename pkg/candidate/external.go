package candidate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/cle-dev/cle/internal/lead"
)

// renewalMode is who renews the Lease: the library's own loop (selfRenewal,
// a Candidate from New) or an elector outside it (externalRenewal, an
// External). The elector's rules (lead.Next) take what the mode says as input.
type renewalMode interface {
	// renewsItself is true when the library renews the Lease.
	renewsItself() bool
	// quietIn is how long until nothing of this process can act any more
	// on its renewals, the last successful one sent sinceRenewal ago
	// (renewed false: none yet); zero when nothing can now.
	quietIn(renewed bool, sinceRenewal time.Duration) time.Duration
	// termStarted is told of each new term.
	termStarted()
	// calls are the requests the elector's loop serves (nil: none).
	calls() <-chan call
	// stopped is told when the elector's loop takes no more calls.
	stopped()
	// observed is told of the Lease each step decides on (nil: none).
	observed(lease *coordinationv1.Lease)
}

// selfRenewal is the mode of a Candidate: the library renews, and stops and
// waits for leader work before it lets the Lease go, so nothing acts on past
// renewals once the elector has stepped down.
type selfRenewal struct{}

func (selfRenewal) renewsItself() bool                        { return true }
func (selfRenewal) quietIn(bool, time.Duration) time.Duration { return 0 }
func (selfRenewal) termStarted()                              {}
func (selfRenewal) calls() <-chan call                        { return nil }
func (selfRenewal) stopped()                                  {}
func (selfRenewal) observed(*coordinationv1.Lease)            {}

// externalRenewal is the mode of an External: the elector renews through
// Renew, and may act as leader until LeaseDuration after its last successful
// renewal, unless it resigned. "After" counts from when that renewal was
// sent and, as client-go's elector counts its renew deadline, from when the
// elector was told it succeeded, whichever is later.
type externalRenewal struct {
	leaseDuration time.Duration
	clock         clock.PassiveClock
	// resigned is set by Resign and cleared when a term starts.
	resigned atomic.Bool
	// counted is when Renew last returned success to the elector (zero:
	// never), on clock.
	counted atomic.Pointer[time.Time]
	// requests carries Renew, Lease and Resign to the elector's loop;
	// loopDone is closed once that loop takes no more.
	requests  chan call
	loopDone  chan struct{}
	closeLoop func()
	// changed is closed, and replaced, when the loop sees the Lease change
	// (another resourceVersion, or none): LeaseWhen waits on it. seenRV is
	// the version it last saw, owned by the loop.
	changed atomic.Pointer[chan struct{}]
	seenRV  string
}

func newExternalRenewal(leaseDuration time.Duration, clk clock.PassiveClock) *externalRenewal {
	x := &externalRenewal{leaseDuration: leaseDuration, clock: clk, requests: make(chan call), loopDone: make(chan struct{})}
	x.closeLoop = sync.OnceFunc(func() { close(x.loopDone) })
	changed := make(chan struct{})
	x.changed.Store(&changed)
	return x
}

func (x *externalRenewal) renewsItself() bool { return false }

func (x *externalRenewal) quietIn(renewed bool, sinceRenewal time.Duration) time.Duration {
	if x.resigned.Load() {
		return 0
	}
	var in time.Duration
	if renewed {
		in = x.leaseDuration - sinceRenewal
	}
	if at := x.counted.Load(); at != nil {
		in = max(in, x.leaseDuration-x.clock.Since(*at))
	}
	return max(0, in)
}

func (x *externalRenewal) termStarted()       { x.resigned.Store(false) }
func (x *externalRenewal) calls() <-chan call { return x.requests }
func (x *externalRenewal) stopped()           { x.closeLoop() }

func (x *externalRenewal) observed(lease *coordinationv1.Lease) {
	rv := "-" // none
	if lease != nil {
		rv = lease.ResourceVersion
	}
	if rv == x.seenRV {
		return
	}
	x.seenRV = rv
	next := make(chan struct{})
	close(*x.changed.Swap(&next))
}

// Errors of the calls of an External.
var (
	// ErrNotRunning is returned by Renew, Lease and Resign once Run has
	// stopped following the Lease (its context is done, or it failed).
	ErrNotRunning = errors.New("the candidate is not running")
)

// External is a candidate whose Lease is renewed by an elector that has its
// own renew loop, such as client-go's LeaderElector (package lock adapts
// it). Run registers the candidate, answers pings and follows the Lease, and
// IsLeader, Token and WrapConfig work as a Candidate's do, but the process
// leads only through successful calls of Renew, which the elector makes
// every RetryPeriod, and Run never lets the Lease go while what the elector
// runs as leader may still be acting: when the controller prefers another
// holder, Renew fails at once, IsLeader turns false, and the Lease goes to
// the preferred holder only after LeaseDuration without a successful
// renewal (when the elector, which stops at most RetryPeriod + RenewDeadline
// after its last successful renewal, has stopped), or at once after Resign.
// OnStartedLeading is optional; it runs for each term, with the term's
// context. LeaseDuration must be longer than RenewDeadline + RetryPeriod.
type External struct {
	c *Candidate
	x *externalRenewal
}

// NewExternal validates cfg, fills in its defaults and returns an External.
// Every problem with cfg is reported at once, wrapped in ErrInvalidConfig.
func NewExternal(cfg Config) (*External, error) {
	if err := cfg.complete(forExternal); err != nil {
		return nil, err
	}
	x := newExternalRenewal(cfg.LeaseDuration, cfg.Clock)
	c, err := newCandidate(cfg, x)
	if err != nil {
		return nil, err
	}
	return &External{c: c, x: x}, nil
}

// Identity is the name of this candidate.
func (e *External) Identity() string { return e.c.Identity() }

// IsLeader is Candidate.IsLeader: a successful Renew within the renew
// deadline, and no step-down since.
func (e *External) IsLeader() bool { return e.c.IsLeader() }

// Leader is Candidate.Leader.
func (e *External) Leader() string { return e.c.Leader() }

// Token is Candidate.Token.
func (e *External) Token() (int32, bool) { return e.c.Token() }

// WrapConfig is Candidate.WrapConfig.
func (e *External) WrapConfig(cfg *rest.Config) *rest.Config { return e.c.WrapConfig(cfg) }

// HealthCheck is Candidate.HealthCheck.
func (e *External) HealthCheck(tolerance time.Duration) *HealthCheck {
	return e.c.HealthCheck(tolerance)
}

// Run is Candidate.Run. On shutdown it releases the Lease (ReleaseOnCancel)
// only after Resign, or once LeaseDuration has passed since the last
// successful Renew was sent.
func (e *External) Run(ctx context.Context) error { return e.c.Run(ctx) }

// call is one request of the external elector, run by the elector's loop.
type call struct {
	caller context.Context
	fn     func(ctx, caller context.Context, el *elector) error
	done   chan error
}

func (cl call) run(ctx context.Context, el *elector) {
	cl.done <- cl.fn(ctx, cl.caller, el)
}

// inLoop runs fn in the elector's loop, which owns the Lease state, once Run
// has synced; it waits for Run to start. fn gets the loop's context (logger,
// lifetime) and the caller's (the request's deadline).
func (e *External) inLoop(ctx context.Context, fn func(ctx, caller context.Context, el *elector) error) error {
	cl := call{caller: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case e.x.requests <- cl:
	case <-e.x.loopDone:
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-cl.done
}

// Renew is the external elector's renewal of the Lease: one conditional
// update, as a Candidate's own renew loop makes. It succeeds only while the
// Lease names this process and the controller prefers nobody else; the first
// success after that makes this process leader (IsLeader, Token, WrapConfig)
// for RenewDeadline from when it was sent, and each later one extends that.
// It fails at once, wrapping ErrNotLeader, when the Lease does not exist,
// names another holder, has another preferred holder, or was renewed by
// another process under this identity; then IsLeader is false too, and the
// elector must stop leading when its own renewals stop succeeding.
//
// A renewal whose answer took longer than SlowRenewal fails too, wrapping
// ErrSlowRenewal, although the Lease was renewed: the elector counts its
// renew deadline from when Renew returns, while the election controller
// counts the lease duration from when it saw the renewal, which may be
// that much earlier. Counting it would let the elector lead past the
// Lease's expiry as the controller judges it.
func (e *External) Renew(ctx context.Context) error { return e.renew(ctx, nil) }

// RenewTerm is Renew for an elector that already leads, in the term whose
// fencing token is token: it fails, wrapping ErrNotLeader, when the Lease is
// in another term, although it names this process. The Lease went to
// another holder meanwhile (this process was frozen or cut off) and came
// back in a new term: the elector's leader work belongs to the old one and
// must stop, and the elector acquire the new one, before it leads again.
func (e *External) RenewTerm(ctx context.Context, token int32) error { return e.renew(ctx, &token) }

func (e *External) renew(ctx context.Context, token *int32) error {
	var sent time.Time
	err := e.inLoop(ctx, func(ctx, caller context.Context, el *elector) error {
		var err error
		sent, err = e.renewInLoop(ctx, caller, el, token)
		return err
	})
	if err != nil {
		return err
	}
	return e.counted(sent)
}

// renewInLoop is Renew's part in the elector's loop: it steps (stepping down
// for every reason to), checks that the call may renew, and renews. sent is
// when the renewal was sent.
func (e *External) renewInLoop(ctx, caller context.Context, el *elector, token *int32) (sent time.Time, err error) {
	el.step(ctx) // steps down for every reason to
	if err := lead.RenewCall(el.snapshot()); err != nil {
		return sent, err
	}
	if token != nil {
		if err := lead.TermCall(el.current(), *token); err != nil {
			return sent, err
		}
	}
	if err := el.renew(ctx, caller, el.current()); err != nil {
		return sent, err
	}
	sent = el.lastAttempt
	if !e.c.IsLeader() {
		// Sent more than the renew deadline ago: not a term any more.
		return sent, fmt.Errorf("%w: the renewal took longer than the renew deadline", ErrNotLeader)
	}
	return sent, nil
}

// counted is Renew's answer once the loop renewed, the renewal sent at
// sent: it counts only if the answer came fast enough (lead.CountRenewal).
func (e *External) counted(sent time.Time) error {
	now := e.c.cfg.Clock.Now()
	if err := lead.CountRenewal(e.timing(), sent, now); err != nil {
		return err
	}
	e.x.counted.Store(&now)
	return nil
}

// ErrSlowRenewal is the error of a Renew that renewed the Lease but whose
// answer took longer than SlowRenewal.
var ErrSlowRenewal = lead.ErrSlowRenewal

// SlowRenewal is how long a Renew may take, from the moment the renewal is
// sent to the moment it returns, and still count: a third of the margin the
// timings leave, (LeaseDuration - RenewDeadline - RetryPeriod) / 3.
// client-go gives up at most RetryPeriod + RenewDeadline after the last
// successful renewal returned; package lock lets its RetryPeriod be another
// third longer, and the last third is left for leader work to return.
func (e *External) SlowRenewal() time.Duration { return e.timing().SlowRenewal() }

// timing is the candidate's timings as the library's rules take them.
func (e *External) timing() lead.Timing {
	cfg := &e.c.cfg
	return lead.Timing{LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod}
}

// Timings returns the LeaseDuration, RenewDeadline and RetryPeriod the
// candidate was configured with (its defaults filled in): the elector must
// use the same.
func (e *External) Timings() (leaseDuration, renewDeadline, retryPeriod time.Duration) {
	cfg := &e.c.cfg
	return cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod
}

// Lease returns a copy of the Lease as this process last saw it (read from
// its watch, or written by itself), nil when it does not exist. It waits for
// Run to have read the Lease once.
func (e *External) Lease(ctx context.Context) (*coordinationv1.Lease, error) {
	var lease *coordinationv1.Lease
	err := e.inLoop(ctx, func(_, _ context.Context, el *elector) error {
		lease = leaseOf(el)
		return nil
	})
	return lease, err
}

// leaseOf is Lease's part in the elector's loop.
func leaseOf(el *elector) *coordinationv1.Lease {
	if cur := el.current(); cur != nil {
		return cur.DeepCopy()
	}
	return nil
}

// LeaseWhen waits until the Lease as this process sees it satisfies cond,
// and returns it (nil when it does not exist); cond is called with each
// version the loop has seen, from the current one on. When ctx ends first it
// returns the Lease as last read (nil if none was) with ctx's error, and once
// Run has stopped with ErrNotRunning. An elector that polls the Lease can wait here instead,
// for the change it is waiting for, and act on it at once.
func (e *External) LeaseWhen(ctx context.Context, cond func(*coordinationv1.Lease) bool) (*coordinationv1.Lease, error) {
	var last *coordinationv1.Lease
	for {
		// Taken before the read, so that no change after it is missed.
		changed := *e.x.changed.Load()
		lease, err := e.Lease(ctx)
		if err != nil {
			return last, err
		}
		if last = lease; cond(lease) {
			return lease, nil
		}
		select {
		case <-changed:
		case <-e.x.loopDone:
			return lease, ErrNotRunning
		case <-ctx.Done():
			return lease, ctx.Err()
		}
	}
}

// Resign tells the library that the external elector has stopped leading
// and nothing it ran as leader acts any more (client-go's release): IsLeader
// turns false, and the Lease may now go to the preferred holder, or to
// nobody when Run's context is cancelled, without waiting for LeaseDuration.
// A later successful Renew starts a new term.
//
// The resignation is recorded before anything else, so that Run's shutdown
// releases the Lease even if ctx ends while the loop is busy with a slow
// request.
func (e *External) Resign(ctx context.Context) error {
	e.x.resigned.Store(true)
	return e.inLoop(ctx, func(ctx, _ context.Context, el *elector) error {
		resignInLoop(ctx, el)
		return nil
	})
}

// resignInLoop is Resign's part in the elector's loop, once the resignation
// is recorded.
func resignInLoop(ctx context.Context, el *elector) {
	el.stepDown(ctx, "the elector resigned")
	el.wakeSoon()
}
