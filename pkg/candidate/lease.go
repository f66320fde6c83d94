package candidate

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
)

// giveUpAttempts bounds the conflicts one hand-over or release resolves by
// reading again before it leaves the rest to the next step (or to expiry).
const giveUpAttempts = 3

// elector follows the Lease and leads while it may. All its fields but the
// Candidate's shared state and own belong to the goroutine running run (and,
// after run returns, to the shutdown steps).
type elector struct {
	c      *Candidate
	leases access.LeaseClient
	watched[*coordinationv1.Lease]
	// wake makes run step at once: a change of the Lease, or a term that
	// lapsed (it is the Candidate's stepDownNow).
	wake chan struct{}
	// termStarted wakes the registrar when a term raised the highest token
	// this process held.
	termStarted func()

	// own tells the Lease versions this process may take from those another
	// process with the same identity renewed.
	own *lead.Ownership
	// seen is what leaseTransitions this process has seen the Lease carry,
	// including before it was deleted: a term's token is above it (see
	// lead.TermToken). Written by the informer's handler too.
	seen lead.SeenTerms

	// lastAttempt is when the last renewal was sent; retryAt holds off a new
	// attempt after a failure. lastRenewal is when the last successful
	// renewal was sent, in this term or an earlier one.
	lastAttempt time.Time
	retryAt     time.Time
	lastRenewal time.Time

	// handOverAt holds off a hand-over after one failed.
	handOverAt time.Time
	// noHolderSince is when the Lease was first seen absent or without a
	// holder, in the current spell of that (zero: it has a holder), and
	// noHolderSaid whether that spell was logged.
	noHolderSince time.Time
	noHolderSaid  bool
	// goneVersion is the resourceVersion of a Lease a renewal found
	// deleted.
	goneVersion string

	// foreign identifies (renewTime and leaseTransitions) a Lease that names
	// this identity but that this process may not take yet, and
	// foreignSince is when it was first seen so, on the local clock.
	foreign      lead.Version
	foreignSince time.Time

	// stopWork cancels the running OnStartedLeading; workDone is closed when
	// it has returned.
	stopWork context.CancelFunc
	workDone chan struct{}

	observed      string // holder last reported to OnNewLeader
	notifications sync.WaitGroup

	// calls are Renew, Lease and Resign, run by the loop (ExternalRenewal).
	calls <-chan call
}

func newElector(c *Candidate, acc access.Interface) *elector {
	e := &elector{
		c:      c,
		leases: acc.Leases(c.cfg.Namespace),
		watched: watched[*coordinationv1.Lease]{
			informer: acc.NewLeaseInformer(c.cfg.Namespace, 0, oneObject(c.cfg.LeaseName)),
			key:      c.cfg.Namespace + "/" + c.cfg.LeaseName,
		},
		wake:  c.stepDownNow,
		own:   &lead.Ownership{Identity: c.cfg.Identity},
		calls: c.mode.calls(),
	}
	asLease := func(obj any) *coordinationv1.Lease {
		lease, _ := obj.(*coordinationv1.Lease)
		return lease
	}
	// The registration cannot fail on an informer that has not started.
	handle, _ := e.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			e.own.Observe(nil, asLease(obj), initial)
			e.seen.See(asLease(obj))
			e.wakeSoon()
		},
		UpdateFunc: func(old, obj any) {
			e.own.Observe(asLease(old), asLease(obj), false)
			e.seen.See(asLease(obj))
			e.wakeSoon()
		},
		DeleteFunc: func(any) {
			e.own.Observe(nil, nil, false)
			e.wakeSoon()
		},
	})
	e.synced = handle.HasSyncedChecker()
	return e
}

// remember records a Lease this process wrote or read by a request sent
// while the informer's store showed the version before (see storedRV): the
// answer is newer than that. It is not taken to be newer than what the store
// shows by the time the answer arrives: a watch event can overtake an
// answer, and a store taken for older than the answer would hide the newer
// Lease until the next write of it.
func (e *elector) remember(lease *coordinationv1.Lease, before string) {
	e.seen.See(lease)
	e.written.Remember(before, lease)
}

// storedRV is the resourceVersion of the Lease the informer's store shows
// ("" for none): what a request sent now is answered with is newer.
func (e *elector) storedRV() string {
	if stored, ok := e.stored(); ok {
		return stored.ResourceVersion
	}
	return ""
}

// run steps the election on every change of the Lease and on time, until ctx
// is done; it then stops leader work and returns. It does not release the
// Lease: Run does that after the LeaseCandidate is gone.
func (e *elector) run(ctx context.Context) {
	clk := e.c.cfg.Clock
	timer := clk.NewTimer(e.c.cfg.RetryPeriod)
	defer timer.Stop()
	for {
		if ctx.Err() == nil {
			timer.Reset(e.step(ctx))
		}
		select {
		case <-ctx.Done():
			e.stepDown(ctx, "shutting down")
			return
		case <-e.wake:
		case <-timer.C():
		case cl := <-e.calls:
			cl.run(ctx, e)
		}
	}
}

// maxActions bounds the actions of one step: each changes what the next
// decision sees, so a few always suffice; more would mean the rules disagree
// with the API, and the step then waits a retry period instead of spinning.
const maxActions = 4

// step acts on the Lease as it is now and returns when it wants to look
// again: it decides (lead.Next) and performs the decision until the decision is
// to wait. It is idempotent: waking it early does no harm.
func (e *elector) step(ctx context.Context) time.Duration {
	logger := klog.FromContext(ctx)
	e.observe(e.current())
	if n := e.own.TakeForeignRenewals(); n > 0 {
		logger.Error(nil, "Another process renews the Lease under this identity; Identity must be unique among the candidates of a Lease", "renewals", n)
	}
	steppedDown := false
	for range maxActions {
		v := e.snapshot()
		v.SteppedDown = steppedDown
		a := lead.Next(v)
		if a.Kind == lead.Wait {
			return min(a.After, e.noticeNoHolder(ctx, v))
		}
		e.apply(ctx, v, a)
		steppedDown = steppedDown || a.Kind == lead.StepDown
	}
	return e.c.cfg.RetryPeriod
}

// noHolderNotice is how long the Lease may be absent or without a holder
// before the library says so at level 0: a candidate only ever leads when an
// election controller names it, and without one it waits for ever.
const noHolderNotice = time.Minute

// noNoticeDue is noticeNoHolder's answer when nothing is to be said later.
const noNoticeDue = time.Duration(math.MaxInt64)

// noticeNoHolder logs once per spell when the Lease has been absent or
// without a holder for noHolderNotice, and returns when to look again for
// that (noNoticeDue: no need).
func (e *elector) noticeNoHolder(ctx context.Context, v lead.View) time.Duration {
	if v.Lease != nil && lead.HolderOf(v.Lease) != "" {
		e.noHolderSince, e.noHolderSaid = time.Time{}, false
		return noNoticeDue
	}
	if e.noHolderSince.IsZero() {
		e.noHolderSince = v.Now
	}
	if e.noHolderSaid {
		return noNoticeDue
	}
	waited := e.c.cfg.Clock.Since(e.noHolderSince)
	if waited < noHolderNotice {
		return noHolderNotice - waited
	}
	e.noHolderSaid = true
	state := "does not exist"
	if v.Lease != nil {
		state = "has no holder"
	}
	klog.FromContext(ctx).Info("No election controller has named a holder: this process leads only once one names it. Is cle-controller running (or kube-apiserver's CoordinatedLeaderElection gate on)? `kubectl cle describe` shows why a Lease has no holder",
		"lease", state, "for", waited.Round(time.Second))
	return noNoticeDue
}

// snapshot is the view lead.Next decides on.
func (e *elector) snapshot() lead.View {
	cfg := &e.c.cfg
	lease := e.current()
	t := e.c.leading()
	v := lead.View{
		Now:          cfg.Clock.Now(),
		Identity:     cfg.Identity,
		Timing:       lead.Timing{LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod},
		RenewsItself: e.c.mode.renewsItself(),
		Lease:        lease,
		Leading:      t != nil,
		Lapsed:       t != nil && !e.c.live(t),
		QuietIn:      e.quietIn(),
		LastAttempt:  e.lastAttempt,
		RetryAt:      e.retryAt,
		HandOverAt:   e.handOverAt,
		GoneVersion:  e.goneVersion,
		Foreign:      e.foreign,
		Nudge:        cfg.nudge,
	}
	if !e.foreign.IsZero() {
		v.ForeignFor = cfg.Clock.Since(e.foreignSince)
	}
	if t != nil {
		v.RenewedAt = t.renewedAt
	}
	if lease != nil {
		v.Mine, v.MayTake = e.own.Mine(lease), e.own.MayTake(lease)
	}
	return v
}

// apply performs one decision of lead.Next, taken on v.
func (e *elector) apply(ctx context.Context, v lead.View, a lead.Action) {
	switch a.Kind {
	case lead.Renew:
		_ = e.renew(ctx, nil, v.Lease) // a failure is logged and retried
	case lead.StepDown:
		e.stepDown(ctx, a.Reason, a.KV...)
	case lead.HandOver:
		e.giveUp(ctx, false)
	case lead.NoteForeign:
		e.foreign, e.foreignSince = a.Foreign, v.Now
		klog.FromContext(ctx).V(2).Info("The Lease names this identity but was renewed by another process; waiting for it to stay unchanged for a lease duration",
			"renewTime", v.Lease.Spec.RenewTime, "leaseDuration", e.c.cfg.LeaseDuration)
	}
}

// quietIn is how long until nothing of this process can act any more on its
// past renewals, measured on the clock's monotonic Since: a wait.
func (e *elector) quietIn() time.Duration {
	if e.lastRenewal.IsZero() {
		return e.c.mode.quietIn(false, 0)
	}
	return e.c.mode.quietIn(true, e.c.cfg.Clock.Since(e.lastRenewal))
}

// mayLetGo reports whether nothing of this process can still act on its
// past renewals, so that the Lease may go to someone else.
func (e *elector) mayLetGo() bool { return e.quietIn() == 0 }

// renew writes the Lease with a fresh renewTime, conditional on the version
// read; it makes this process leader when that succeeds while the Lease names
// it. A conflict is resolved by one read and one more attempt; other failures
// wait for the retry period, leadership lapsing at the renew deadline. The
// error says why the renewal did not happen.
//
// caller, when not nil, is the context of the Renew call the renewal serves:
// the request ends with it too, but leader work does not.
func (e *elector) renew(ctx, caller context.Context, lease *coordinationv1.Lease) error {
	cfg := &e.c.cfg
	logger := klog.FromContext(ctx)
	sent := cfg.Clock.Now()
	e.lastAttempt = sent
	timeout := cfg.RenewDeadline
	t := e.c.leading()
	leading := t != nil
	if leading {
		timeout = cfg.RenewDeadline - e.c.since(t.renewedAt)
	}
	reqCtx, cancel := e.c.withTimeout(ctx, timeout)
	defer cancel()
	if caller != nil {
		defer context.AfterFunc(caller, cancel)()
	}

	renewal, seenBefore, err := e.renewalOf(lease, sent, leading)
	if err != nil {
		// Retrying soon would not help: look again once a lease duration
		// has passed, saying so each time.
		e.retryAt = cfg.Clock.Now().Add(cfg.LeaseDuration)
		logger.Error(err, "Not taking the Lease it is named for")
		return err
	}
	before := e.storedRV()
	updated, err := e.update(reqCtx, renewal)
	if apierrors.IsConflict(err) && !cfg.nudge.At(nudge.RenewConflictWaits) {
		var fresh *coordinationv1.Lease
		getBefore := e.storedRV()
		fresh, err = e.leases.Get(reqCtx, cfg.LeaseName)
		if err == nil {
			e.remember(fresh, getBefore)
			if lead.HolderOf(fresh) != cfg.Identity || (lead.PreferredOf(fresh) != "" && lead.PreferredOf(fresh) != cfg.Identity) {
				e.wakeSoon()
				return fmt.Errorf("%w: the Lease changed under the renewal", ErrNotLeader) // the next step acts on it
			}
			if leading && !e.own.Mine(fresh) {
				logger.Error(nil, "Another process renewed the Lease under this identity; Identity must be unique among the candidates of a Lease",
					"renewTime", fresh.Spec.RenewTime)
				e.stepDown(ctx, "another process renewed the Lease under this identity")
				return lead.ErrForeignRenewal
			}
			if !leading && !e.own.MayTake(fresh) {
				e.wakeSoon()
				return lead.ErrForeignRenewal // the next step decides whether to wait
			}
			if renewal, seenBefore, err = e.renewalOf(fresh, sent, leading); err == nil {
				updated, err = e.update(reqCtx, renewal)
			}
		}
	}
	if apierrors.IsNotFound(err) {
		// The Lease is gone, whether or not the watch has shown it yet:
		// the controller may name another holder as soon as it sees the
		// deletion, so leadership ends now, not at the renew deadline.
		// The Lease's re-creation, when the watch shows it, is renewed at
		// once.
		if leading {
			e.stepDown(ctx, "the Lease was deleted")
		}
		e.goneVersion = lease.ResourceVersion
		return fmt.Errorf("%w: the Lease does not exist; the election controller creates it", ErrNotLeader)
	}
	if err != nil {
		e.retryAt = cfg.Clock.Now().Add(cfg.RetryPeriod)
		switch {
		case ctx.Err() != nil:
		case caller != nil:
			// An external elector gets the error and logs it itself.
			logger.V(2).Info("Renewing the Lease failed", "err", err, "leading", leading)
		default:
			logger.Error(err, "Renewing the Lease failed; retrying", "retryPeriod", cfg.RetryPeriod, "leading", leading)
		}
		return fmt.Errorf("renewing the Lease: %w", err)
	}
	e.remember(updated, before)
	e.retryAt = time.Time{}
	if sent.After(e.lastRenewal) {
		e.lastRenewal = sent
	}
	if t := e.c.recordRenewal(sent, ptr.Deref(updated.Spec.LeaseTransitions, 0), seenBefore); t != nil {
		e.c.mode.termStarted()
		if t.token > e.c.held.Load() {
			e.c.held.Store(t.token)
			if e.termStarted != nil {
				e.termStarted() // the registrar records the token
			}
		}
		e.startWork(ctx, t)
	}
	return nil
}

// update sends one renewal, recording its renewTime as possibly written by
// this process unless the server certainly refused it.
func (e *elector) update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	renew := lead.RenewTimeOf(lease)
	e.own.Wrote(renew)
	sent := e.c.cfg.Clock.Now()
	updated, err := e.leases.Update(ctx, lease)
	e.c.metrics.observeRenewal(e.c.cfg.Clock.Since(sent).Seconds(), err)
	if apierrors.IsConflict(err) {
		e.own.Refused(renew)
	}
	return updated, err
}

// renewalOf is lease as this process's renewal at now writes it (see
// lead.Renewal), and the highest leaseTransitions the process saw on other
// versions of the Lease, which a new term's token is above.
func (e *elector) renewalOf(lease *coordinationv1.Lease, now time.Time, leading bool) (*coordinationv1.Lease, int32, error) {
	cfg := &e.c.cfg
	seenBefore := e.seen.Before(lease)
	renewal, err := lead.Renewal(lease, cfg.Identity, now, leading, seenBefore, cfg.LeaseDuration)
	if err == nil {
		proof.Stamp(renewal, e.c.process)
	}
	return renewal, seenBefore, err
}

// startWork runs OnStartedLeading for the term that just began, with the
// term's fencing token in its context. That context is cancelled by
// stepDown, or as soon as the term's is, when a reader finds the term
// lapsed.
func (e *elector) startWork(ctx context.Context, t *term) {
	token := t.token
	klog.FromContext(ctx).Info("Started leading", "token", token)
	work := e.c.cfg.Callbacks.OnStartedLeading
	if work == nil {
		return // ExternalRenewal: the elector runs the leader work
	}
	workCtx, cancel := context.WithCancel(withToken(ctx, token))
	unlink := context.AfterFunc(t.ctx, cancel)
	done := make(chan struct{})
	e.stopWork = func() {
		unlink()
		cancel()
	}
	e.workDone = done
	go func() {
		defer close(done)
		work(workCtx)
	}()
}

// stepDown ends leadership: IsLeader turns false and guarded requests in
// flight are cancelled first, then leader work is cancelled and waited for,
// then OnStoppedLeading runs. Only then may the caller let the Lease go.
func (e *elector) stepDown(ctx context.Context, reason string, kv ...any) {
	if !e.c.stopLeading() {
		return
	}
	logger := klog.FromContext(ctx)
	logger.Info("Stopping leading: "+reason, kv...)
	if e.stopWork != nil {
		e.stopWork()
		<-e.workDone
		e.stopWork, e.workDone = nil, nil
	}
	if cb := e.c.cfg.Callbacks.OnStoppedLeading; cb != nil {
		cb()
	}
	e.c.stoppedLeading()
	logger.V(2).Info("Stopped leading")
}

// giveUp lets the Lease go when this process holds it and nothing of this
// process leads any more: to the preferred holder if there is one, otherwise
// (only when release is set, on shutdown) to nobody. Each is one conditional
// update, written as lead.LetGo says: a hand-over counts the next holder's
// term, a release counts nothing. Every request has its own timeout of the
// renew deadline, so a hung API call cannot block the election loop or the
// shutdown.
//
// The holder's name alone does not make the Lease this process's to let go:
// another process started with the same Identity may hold it and still run
// its leader work. Only a Lease whose renewTime this process wrote, or one
// named to this identity that nobody has renewed since, is let go.
func (e *elector) giveUp(ctx context.Context, release bool) {
	cfg := &e.c.cfg
	logger := klog.FromContext(ctx)
	// What happens to the Lease if this attempt fails.
	otherwise := "retrying"
	if release {
		otherwise = "the Lease will expire instead"
	}
	// Whatever happens, the next attempt waits a retry period; a success
	// clears that.
	e.handOverAt = cfg.Clock.Now().Add(cfg.RetryPeriod)
	lease := e.current()
	for attempt := 0; lease != nil; attempt++ {
		if lead.HolderOf(lease) != cfg.Identity {
			return
		}
		if !e.own.MayTake(lease) {
			logger.V(2).Info("The Lease names this identity but another process renewed it; leaving it to that process",
				"renewTime", lease.Spec.RenewTime, "release", release)
			return
		}
		to := lead.PreferredOf(lease)
		if to == cfg.Identity {
			to = ""
		}
		if to == "" && !release {
			return
		}
		if attempt == giveUpAttempts {
			logger.Error(nil, "Letting the Lease go conflicted with other writes every time; giving up for now: "+otherwise, "to", to, "attempts", attempt)
			return
		}
		clone := lead.LetGo(lease, to, cfg.Clock.Now(), e.seen.Max())
		proof.Unstamp(clone)
		before := e.storedRV()
		updated, err := e.withTimeout(ctx, func(ctx context.Context) (*coordinationv1.Lease, error) {
			return e.leases.Update(ctx, clone)
		})
		if err == nil {
			e.remember(updated, before)
			e.handOverAt = time.Time{}
			if to == "" {
				logger.Info("Released the Lease")
			} else {
				logger.Info("Handed the Lease over", "to", to)
			}
			return
		}
		if !isConflictOrGone(err) {
			logger.Error(err, "Letting the Lease go failed; "+otherwise, "to", to)
			return
		}
		before = e.storedRV()
		if lease, err = e.withTimeout(ctx, func(ctx context.Context) (*coordinationv1.Lease, error) {
			return e.leases.Get(ctx, cfg.LeaseName)
		}); err != nil {
			if !apierrors.IsNotFound(err) {
				logger.Error(err, "Reading the Lease to let it go failed; "+otherwise)
			}
			return
		}
		e.remember(lease, before)
	}
}

// withTimeout runs one API call with the renew deadline as its timeout.
func (e *elector) withTimeout(ctx context.Context, call func(context.Context) (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	ctx, cancel := e.c.withTimeout(ctx, e.c.cfg.RenewDeadline)
	defer cancel()
	return call(ctx)
}

// release lets the Lease go on shutdown, if it still names this process.
func (e *elector) release(ctx context.Context) {
	e.giveUp(ctx, true)
}

// observe records the holder and tells OnNewLeader about a new one.
func (e *elector) observe(lease *coordinationv1.Lease) {
	e.c.mode.observed(lease)
	holder := lead.HolderOf(lease)
	e.c.holder.Store(&holder)
	if holder == e.observed {
		return
	}
	e.observed = holder
	if cb := e.c.cfg.Callbacks.OnNewLeader; cb != nil && holder != "" {
		e.notifications.Go(func() { cb(holder) })
	}
}

func (e *elector) wakeSoon() { signal(e.wake) }
