// Package stepped lets a deterministic simulation run pkg/candidate's own
// election loops one step at a time. A Candidate's Run keeps two loops, each
// on a goroutine woken by its informer or its timer: the elector (the Lease)
// and the registrar (the LeaseCandidate). Through Loops, the simulation takes
// the place of those goroutines and timers: it calls a loop's step when the
// loop would run, and learns when the loop wants to run again. Everything a
// step does is the library's code, with the access layer and the clock the
// simulation injects in the candidate's Config.
//
// Only pkg/candidate implements it, and only tests use it; being internal,
// no program outside this module can.
package stepped

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/pkg/access"
)

// Loops are the loops of one candidate process, built but not running.
type Loops interface {
	// Start is what Run does once both informers have delivered their
	// initial list, before the loops start: it fails when the candidate's
	// Identity names another Lease's LeaseCandidate.
	Start(ctx context.Context) error
	// StepElector and StepRegistrar are one step of each loop: it acts on
	// what the informers hold now and returns how long until the loop
	// wants to step again.
	StepElector(ctx context.Context) time.Duration
	StepRegistrar(ctx context.Context) time.Duration
	// Woken reports, and clears, the wake-ups asked of each loop since the
	// last call: a change its informer delivered, or (elector) a reader
	// that found the term lapsed.
	Woken() (elector, registrar bool)
	// Shutdown is what Run does once its context is done: stop leading,
	// delete the LeaseCandidate and release the Lease, as configured.
	Shutdown(ctx context.Context)
	// IsLeader and Token are the Candidate's: like them, finding the
	// term lapsed ends it and wakes the elector.
	IsLeader() bool
	Token() (int32, bool)
	// Peek is Token without its effect: a term found lapsed is left as it
	// is. A simulation's checks read with it, so that looking does not
	// step a leader down in its elector's place.
	Peek() (int32, bool)
	// WrapConfig is the Candidate's: clients of the config it returns
	// refuse mutating requests with ErrNotLeader while the process is not
	// leader.
	WrapConfig(cfg *rest.Config) *rest.Config
	// Termed reports whether the elector has published a term (lapsed or
	// ended, perhaps). It reads no clock and has no effect: when it is
	// false, Token reports no leader and does nothing else either.
	Termed() bool
	// SeenBefore is, for the term published (Termed), the highest
	// leaseTransitions the process had seen on other versions of the Lease
	// when it wrote the term's first renewal: what its token was counted
	// above.
	SeenBefore() int32
}

// ExternalLoops are the loops of an External (candidate.NewExternal) and the
// parts of its calls that Run's elector loop serves between two steps. The
// simulation calls those only while neither loop is stepping, and steps the
// elector after each, as that loop does; what the calls do outside the loop
// (waiting for it, LeaseWhen's waiting for a change) is the simulation's.
type ExternalLoops interface {
	Loops
	// Renew is External.Renew (token nil) or RenewTerm: the loop's part,
	// then the count of the renewal on the process's clock. The caller's
	// deadline is the simulation's to apply to the requests.
	Renew(ctx context.Context, token *int32) error
	// Lease is External.Lease's part in the loop.
	Lease() *coordinationv1.Lease
	// Resign records the resignation, as External.Resign does at once, and
	// ResignInLoop is its part in the loop.
	Resign()
	ResignInLoop(ctx context.Context)
	// Changed is what LeaseWhen waits on: closed, and replaced, when the
	// loop sees another version of the Lease.
	Changed() <-chan struct{}
}

// New builds the loops of a candidate from its candidate.Config (passed as
// any: this package cannot name the type), whose access layer (WithAccess)
// and Clock are set. pkg/candidate sets it when it is linked in.
var New func(cfg any) (Loops, error)

// NewExternal builds the loops of an External as New does a Candidate's.
var NewExternal func(cfg any) (ExternalLoops, error)

// SetAccess replaces the access layer of a candidate.Config (passed and
// returned as any). pkg/candidate sets it when it is linked in.
var SetAccess func(cfg any, a access.Interface) any

// WithAccess returns cfg, which must be a pkg/candidate Config, with its
// access layer replaced by a: the candidate uses a instead of the one Run would detect from
// RestConfig or Clients and APIMode, which it then ignores. Tests and
// simulations inject their server this way; the field is not part of the
// library's API.
func WithAccess[C any](cfg C, a access.Interface) C {
	return SetAccess(cfg, a).(C)
}

// SetNudge replaces the Hook (package nudge) of a candidate.Config, as
// SetAccess its access layer.
var SetNudge func(cfg any, h nudge.Hook) any

// WithNudge returns cfg, which must be a pkg/candidate Config, with h
// steering its loops at the points package nudge names.
func WithNudge[C any](cfg C, h nudge.Hook) C {
	return SetNudge(cfg, h).(C)
}

// deadlineKey is the context key of a request's deadline.
type deadlineKey struct{}

// WithDeadline records on ctx the deadline the library gave its requests,
// an instant read from the candidate's clock (the context's own deadline is
// on the wall clock). A simulated server reads it with Deadline to end the
// requests once that instant has passed on the process's own clock, which is
// not the wall clock; requests made on one context share it, as they share
// the context's deadline.
func WithDeadline(ctx context.Context, deadline time.Time) context.Context {
	return context.WithValue(ctx, deadlineKey{}, deadline)
}

// Deadline is the deadline recorded on ctx by WithDeadline, if any; the
// innermost one counts.
func Deadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Value(deadlineKey{}).(time.Time)
	return d, ok
}
