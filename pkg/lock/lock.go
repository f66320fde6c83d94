// Package lock is a client-go resource lock (resourcelock.Interface) backed
// by the candidate library, so that a component built on client-go's
// LeaderElector, or a controller-runtime manager, takes part in coordinated
// leader election by changing the lock it passes, and nothing else.
//
// The Lock registers the process as a LeaseCandidate and answers the
// election controller's pings (a candidate.External).
// The LeaderElector keeps its own loops, and the Lock decides what they see:
//
//   - Get reports the Lease as the election controller left it when it names
//     this process, and otherwise as held by someone else that never
//     expires: the elector never takes a Lease on its own. While the elector
//     stands by, once a gap between its tries has proved its RetryPeriod,
//     Get waits (for at most five minutes) until the holder it reports
//     changes, so that the elector takes the Lease the moment it is named
//     instead of at its next try. A Lease naming
//     this process with another preferred holder is reported as held by that
//     preferred holder, unless the elector leads in the Lease's term (see
//     the release below); a Lease that does not exist or has no holder as
//     held by NoHolder.
//   - Create always fails: the election controller creates the Lease.
//   - Update naming this process is the library's conditional renewal
//     (candidate.Renew): the first success makes the elector leader, and it
//     fails at once when the controller prefers another holder or the
//     library does not count this process leader, so that the elector's
//     renew loop cannot keep it leading past the library. Once the elector
//     leads, it fails too when the Lease is in another term than the one
//     the elector acquired (External.RenewTerm): the Lease went to another
//     holder and came back while this process was frozen or cut off, and
//     the elector's leader work, on the old term's token, must stop. It fails too when
//     its answer was slow (candidate.ErrSlowRenewal), and for good when the
//     elector's timings are longer than the candidate's (ErrTimingMismatch):
//     either would let the elector lead after the election controller has
//     judged the Lease expired.
//   - Update with an empty holder is the elector's release
//     (ReleaseOnCancel). client-go sends it when its renew loop ends, which
//     is not after leader work has returned: on shutdown it cancels leader
//     work at the same moment, and after a lost term only later. The Lock
//     answers at once, deletes its LeaseCandidate, and moves the Lease only
//     once leader work has returned, as far as it knows (Callbacks,
//     Config.ReleaseAfterLeaderWork); otherwise it leaves the Lease to
//     expire. The Lock is then done. client-go releases only a Lease it
//     observes naming itself, so while the elector leads, Get shows the
//     Lease of its term as naming it even when another holder is preferred.
//
// A preemption reaches the elector at once when it runs with the context
// of ElectorContext: the controller prefers a better candidate, the
// context is cancelled, the elector stops leader work and releases, and the
// Lock hands the Lease to the better candidate once leader work has
// returned. Without it, the elector notices only when its renewals have
// failed for RenewDeadline.
//
// The candidate behind the Lock (Candidate) gives the same IsLeader, Token,
// WrapConfig and HealthCheck as the library used directly. Its IsLeader turns
// false as soon as the controller prefers another holder, or RenewDeadline
// after the last successful renewal, while the elector notices only when its
// renewals have failed for RenewDeadline (or at once, through
// ElectorContext): leader work that must stop at once should check IsLeader
// or write through WrapConfig, and fence with Token.
//
// A Lock serves one LeaderElector and one Run of it.
package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/lockrule"
	"github.com/cle-dev/cle/pkg/candidate"
)

var (
	// ErrNeverCreates is the error of every Create: the election controller
	// creates the Lease and names its holder.
	ErrNeverCreates = errors.New("a coordinated candidate never creates its Lease; the election controller does and names the holder")
	// ErrClosed is returned once the Lock has released the Lease or was
	// closed.
	ErrClosed = errors.New("the lock is closed")
)

// Config configures a Lock.
type Config struct {
	// Candidate configures the candidate behind the Lock. Identity may be
	// any identity client-go accepts: it is mapped with candidate.NameFor. It
	// configures a candidate.External; ReleaseOnCancel is ignored (the elector's own
	// ReleaseOnCancel decides). Callbacks are optional. Give the
	// LeaderElector the timings of Lock.Timings: the candidate's
	// LeaseDuration and RenewDeadline, and a RetryPeriod that may be
	// shorter than the candidate's. Longer ones are refused
	// (ErrTimingMismatch).
	Candidate candidate.Config
	// EventRecorder, when set, records the elector's events ("became
	// leader", "stopped leading") on the Lease, as client-go's Lease lock
	// does.
	EventRecorder resourcelock.EventRecorder
	// ReleaseAfterLeaderWork promises that the elector sends its release
	// (ReleaseOnCancel) only once everything it ran as leader has returned,
	// as a controller-runtime manager does with a negative
	// GracefulShutdownTimeout. The Lock then hands the Lease over at once on
	// a release that ends a sound term. Without it, and without the
	// elector's callbacks wrapped by Callbacks, the Lock cannot tell when
	// leader work has returned, and a release leaves the Lease to expire.
	ReleaseAfterLeaderWork bool
}

// ErrTimingMismatch is the error of an Update from an elector whose
// LeaseDuration, RenewDeadline or RetryPeriod is longer than the
// candidate's: the election controller would hand the Lease over while
// that elector may still lead.
var ErrTimingMismatch = lockrule.ErrTimingMismatch

// Lock is a resourcelock.Interface backed by a candidate. Create it with New
// and pass it as the LeaderElectionConfig's Lock (or controller-runtime's
// LeaderElectionResourceLockInterface). The candidate starts with the
// elector's first call.
type Lock struct {
	c         *candidate.External
	identity  string
	namespace string
	name      string
	recorder  resourcelock.EventRecorder
	// log is Config.Candidate.Logger (zero: the logger of the call's context).
	log klog.Logger

	// releaseAfterWork is Config.ReleaseAfterLeaderWork.
	releaseAfterWork bool
	// work is the elector's leader work, when Callbacks wrapped it.
	work work

	mu sync.Mutex
	// cancel stops the candidate's Run, done is closed when it has
	// returned, and runErr is what it returned; nil before the start.
	cancel context.CancelFunc
	done   chan struct{}
	runErr error
	closed bool
	// handedOver is closed once a release has done all it will do before
	// the candidate stops (nil: no release yet).
	handedOver chan struct{}
	// meta is the Lease's metadata as last seen, the subject of events.
	meta metav1.ObjectMeta
	// timing checks the elector's renewals against the candidate's
	// timings.
	timing lockrule.TimingCheck
	// stopElector cancels the contexts ElectorContext returned, with
	// ErrTermEnded, once a term of this process ends.
	stopElector []context.CancelCauseFunc
	// ended: a term of this process ended.
	ended bool
	// reported is the holder the last Get reported.
	reported string
}

var _ resourcelock.Interface = (*Lock)(nil)

// New validates cfg and returns a Lock; every problem is reported at once,
// wrapping candidate.ErrInvalidConfig.
func New(cfg Config) (*Lock, error) {
	var l *Lock // set below, before the candidate can run
	cc := cfg.Candidate
	cc.Identity = candidate.NameFor(cc.Identity)
	release := true
	cc.ReleaseOnCancel = &release
	stopped := cc.Callbacks.OnStoppedLeading
	cc.Callbacks.OnStoppedLeading = func() {
		l.termEnded()
		if stopped != nil {
			stopped()
		}
	}
	c, err := candidate.NewExternal(cc)
	if err != nil {
		return nil, err
	}
	ld, rd, rp := c.Timings()
	l = &Lock{
		c:                c,
		identity:         cc.Identity,
		namespace:        cc.Namespace,
		name:             cc.LeaseName,
		recorder:         cfg.EventRecorder,
		log:              cc.Logger,
		releaseAfterWork: cfg.ReleaseAfterLeaderWork,
		meta:             metav1.ObjectMeta{Namespace: cc.Namespace, Name: cc.LeaseName},
		// The retry period may exceed the candidate's by the third of the
		// margin a renewal may take.
		timing: lockrule.TimingCheck{LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp, Margin: c.SlowRenewal()},
	}
	return l, nil
}

// ErrTermEnded is the cause of the cancellation of a context from
// ElectorContext: a term of this process ended, because the election
// controller prefers another holder, the Lease went to another holder or
// away, or the term lapsed.
var ErrTermEnded = errors.New("this process's term ended: the election controller prefers another holder, or the term was lost")

// ElectorContext returns the context to run the elector with (le.Run, or a
// controller-runtime manager's Start): ctx, cancelled as well, with cause
// ErrTermEnded, as soon as a term of this process ends. client-go's elector
// otherwise keeps leading until its renewals have failed for RenewDeadline,
// and a lost term is not a release: when the controller prefers a better
// candidate, the Lease would reach it only a lease duration after the last
// renewal. With this context the elector stops at once; with
// ReleaseOnCancel, its release hands the Lease to the preferred holder once
// leader work has returned (see Callbacks and
// Config.ReleaseAfterLeaderWork), and the better candidate's elector, waiting
// in Get, takes it at once. Run then returns, as after any lost term: the process
// exits or runs a new Lock and elector.
func (l *Lock) ElectorContext(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		cancel(ErrTermEnded)
	} else {
		l.stopElector = append(l.stopElector, cancel)
	}
	return ctx
}

// termEnded is told by the candidate that a term of this process ended.
func (l *Lock) termEnded() {
	l.mu.Lock()
	l.ended = true
	cancels := l.stopElector
	l.stopElector = nil
	l.mu.Unlock()
	for _, cancel := range cancels {
		cancel(ErrTermEnded)
	}
}

// Callbacks returns cb with its OnStartedLeading wrapped so that the Lock
// knows when leader work has returned: pass the result as the
// LeaderElectionConfig's Callbacks. A release by the elector (ReleaseOnCancel)
// then hands the Lease over once OnStartedLeading has returned (Close waits
// for that), and never while it still runs.
func (l *Lock) Callbacks(cb leaderelection.LeaderCallbacks) leaderelection.LeaderCallbacks {
	l.work.track()
	start := cb.OnStartedLeading
	cb.OnStartedLeading = func(ctx context.Context) {
		defer l.work.returned()
		if start != nil {
			start(ctx)
		}
	}
	return cb
}

// Candidate is the candidate behind the Lock: IsLeader, Token, WrapConfig
// and HealthCheck for the leader work the elector runs.
func (l *Lock) Candidate() *candidate.External { return l.c }

// Identity is the holder identity of this process (Config.Candidate.Identity
// mapped by candidate.NameFor).
func (l *Lock) Identity() string { return l.identity }

// logger is Config.Candidate.Logger, or the logger of ctx.
func (l *Lock) logger(ctx context.Context) klog.Logger {
	if l.log.GetSink() != nil {
		return l.log
	}
	return klog.FromContext(ctx)
}

// Describe names the Lease, as client-go's Lease lock does.
func (l *Lock) Describe() string { return l.namespace + "/" + l.name }

// RecordEvent records an event of the elector on the Lease.
func (l *Lock) RecordEvent(s string) {
	if l.recorder == nil {
		return
	}
	l.mu.Lock()
	subject := &coordinationv1.Lease{ObjectMeta: *l.meta.DeepCopy()}
	l.mu.Unlock()
	subject.Kind = "Lease"
	subject.APIVersion = coordinationv1.SchemeGroupVersion.String()
	l.recorder.Eventf(subject, corev1.EventTypeNormal, "LeaderElection", "%s %s", l.identity, s)
}

// Get returns the Lease as the elector must see it (see the package
// documentation), and its JSON form, which changes whenever it does.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if err := l.start(ctx); err != nil {
		return nil, nil, err
	}
	l.timing.ObserveGet(time.Now())
	defer func() { l.timing.ReadReturned(time.Now()) }()
	term, leading := l.timing.Term()
	l.mu.Lock()
	reported := l.reported
	l.mu.Unlock()
	var lease *coordinationv1.Lease
	var err error
	if l.timing.StandsBy(reported, l.identity) {
		// Standing by: wait for the holder the elector sees to change,
		// so that it takes the Lease as soon as it is named, not at its
		// next poll. Renewals of the holder do not end the wait.
		wait, cancel := context.WithTimeout(ctx, lockrule.StandByWait)
		lease, err = l.c.LeaseWhen(wait, func(lease *coordinationv1.Lease) bool {
			return lockrule.WakesStandBy(lockrule.RecordOf(lease, l.identity, term, leading).HolderIdentity, reported)
		})
		cancel()
		if err != nil && wait.Err() != nil && !errors.Is(err, candidate.ErrNotRunning) {
			err = nil // the Lease as it still is
		}
	} else {
		lease, err = l.c.Lease(ctx)
	}
	if err != nil {
		return nil, nil, l.callError(err)
	}
	if lease != nil {
		l.mu.Lock()
		l.meta = *lease.ObjectMeta.DeepCopy()
		l.mu.Unlock()
	}
	record := lockrule.RecordOf(lease, l.identity, term, leading)
	l.mu.Lock()
	l.reported = record.HolderIdentity
	l.mu.Unlock()
	raw, err := json.Marshal(record)
	if err != nil {
		return nil, nil, err
	}
	return record, raw, nil
}

// Create fails: the election controller creates the Lease.
func (l *Lock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return fmt.Errorf("%s: %w", l.Describe(), ErrNeverCreates)
}

// Update is the elector's renewal (ler names this process) or release (ler
// names nobody). The record's own fields are not written: a renewal writes
// what the library writes, and a release hands over to the preferred holder.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.start(ctx); err != nil {
		return err
	}
	switch ler.HolderIdentity {
	case l.identity:
		if err := l.checkTimings(ctx, ler); err != nil {
			return err
		}
		var err error
		if token, leading := l.timing.Term(); leading {
			err = l.c.RenewTerm(ctx, token)
		} else {
			err = l.c.Renew(ctx)
		}
		err = l.callError(err)
		l.renewed(err == nil)
		return err
	case "":
		return l.release(ctx)
	default:
		return fmt.Errorf("%s: the elector may name only itself or nobody, not %q", l.Describe(), ler.HolderIdentity)
	}
}

// release serves the elector's release. client-go sends it once its renew
// loop has ended: after the elector's context was cancelled (a shutdown),
// but also after its renewals failed, before it cancels leader work. It
// returns at once, so that the elector goes on to stop leader work, and
// stops the candidate, which deletes the LeaseCandidate. The Lease goes to
// the preferred holder (or nobody) at once only when leader work is known
// to have returned:
//
//   - with ReleaseAfterLeaderWork, a release that ends a sound term (the
//     last renewal succeeded and the term has not lapsed);
//   - with Callbacks, once OnStartedLeading has returned, if it does within
//     the lease duration.
//
// Otherwise the Lease is left to expire, and the election controller names
// the next holder LeaseDuration after the last renewal.
func (l *Lock) release(ctx context.Context) error {
	logger := l.logger(ctx).WithValues("lease", klog.KRef(l.namespace, l.name), "identity", l.identity)
	sound := l.timing.SoundRelease(time.Now())
	done := make(chan struct{})
	l.mu.Lock()
	if l.handedOver != nil {
		l.mu.Unlock()
		return nil
	}
	l.handedOver = done
	l.mu.Unlock()
	switch lockrule.ReleaseFor(l.releaseAfterWork, sound, l.work.tracked()) {
	case lockrule.HandOverNow:
		// Leader work has returned: hand over before answering, so that
		// a process that exits right after its elector still does.
		l.resign(ctx, logger)
	case lockrule.HandOverOnceWorkReturned:
		logger.V(2).Info("The elector released the Lease; handing it over once leader work has returned")
		go func() {
			defer l.stop()
			defer close(done)
			// The library does not let the Lease go before LeaseDuration
			// after the last renewal anyway; past that, resigning
			// changes nothing.
			wait, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timing.LeaseDuration)
			defer cancel()
			if l.work.wait(wait) {
				l.resign(wait, logger)
			} else {
				logger.Info("Leader work did not return within the lease duration; the Lease is left to expire")
			}
		}()
		return nil
	case lockrule.LeaveToExpire:
		if !sound {
			logger.Info("The elector released the Lease after its term had ended, before it stops leader work; the Lease is left to expire and goes to the next holder LeaseDuration after the last renewal")
		} else {
			logger.Info("The elector released the Lease, but nothing tells that its leader work has returned; the Lease is left to expire and goes to the next holder LeaseDuration after the last renewal (wrap the elector's callbacks with Lock.Callbacks for a hand-over at once)")
		}
	}
	close(done)
	l.stop()
	return nil
}

// resign hands the Lease over (to the preferred holder, or nobody) now that
// leader work has returned.
func (l *Lock) resign(ctx context.Context, logger klog.Logger) {
	// Recorded even when ctx ends first: stopping then releases.
	if err := l.c.Resign(ctx); err != nil {
		logger.Error(err, "Resigning took too long; the candidate releases the Lease as it stops")
	}
}

// Close ends the Lock. After the elector's release it waits for the
// hand-over that release started (see release); without one, e.g. when the
// elector never led or did not release, it deletes the LeaseCandidate and
// lets the Lease go only if no renewal through the Lock was sent for
// LeaseDuration (otherwise the election controller elects the next holder
// when the Lease expires). It waits for the candidate to stop, or for ctx.
func (l *Lock) Close(ctx context.Context) error {
	l.mu.Lock()
	handedOver := l.handedOver
	l.mu.Unlock()
	if handedOver != nil {
		select {
		case <-handedOver:
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for the hand-over: %w", l.Describe(), ctx.Err())
		}
	}
	done := l.stop()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: stopping the candidate: %w", l.Describe(), ctx.Err())
	}
}

// start runs the candidate from the elector's first call on, with the
// caller's logger.
func (l *Lock) start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("%s: %w", l.Describe(), ErrClosed)
	}
	if l.cancel != nil {
		return nil
	}
	// The candidate outlives the call that starts it.
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), l.logger(ctx)))
	l.cancel, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		err := l.c.Run(runCtx)
		l.mu.Lock()
		l.runErr = err
		l.mu.Unlock()
	}()
	return nil
}

// stop ends the candidate's Run and returns a channel closed when it has
// returned (nil when it never ran).
func (l *Lock) stop() <-chan struct{} {
	l.mu.Lock()
	l.closed = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	return done
}

// callError names the Lease in an error of the candidate, and tells why a
// candidate that stopped running did.
func (l *Lock) callError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, candidate.ErrNotRunning) {
		l.mu.Lock()
		runErr, closed := l.runErr, l.closed
		l.mu.Unlock()
		switch {
		case runErr != nil:
			return fmt.Errorf("%s: the candidate failed: %w", l.Describe(), runErr)
		case closed:
			return fmt.Errorf("%s: %w", l.Describe(), ErrClosed)
		}
	}
	return fmt.Errorf("%s: %w", l.Describe(), err)
}

// NoHolder is the holder the elector sees (GetLeader, OnNewLeader) while the
// Lease does not exist or has no holder: the election controller has not
// named one yet.
const NoHolder = lockrule.NoHolder

// IdentityFor maps an elector identity to a valid candidate name (a DNS-1123
// subdomain, as LeaseCandidate names must be): candidate.NameFor.
//
// Deprecated: use candidate.NameFor.
func IdentityFor(id string) string { return candidate.NameFor(id) }
