package candidate

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

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

	// own tells the Lease versions this process may take from those another
	// process with the same identity renewed.
	own *ownership
	// seen is what leaseTransitions this process has seen the Lease carry,
	// including before it was deleted: a term's token is above it (see
	// termToken). Written by the informer's handler too.
	seen seenTerms

	// lastAttempt is when the last renewal was sent; retryAt holds off a new
	// attempt after a failure. lastRenewal is when the last successful
	// renewal was sent, in this term or an earlier one.
	lastAttempt time.Time
	retryAt     time.Time
	lastRenewal time.Time

	// handOverAt holds off a hand-over after one failed.
	handOverAt time.Time
	// goneVersion is the resourceVersion of a Lease a renewal found
	// deleted.
	goneVersion string

	// foreign identifies (renewTime and leaseTransitions) a Lease that names
	// this identity but that this process may not take yet, and
	// foreignSince is when it was first seen so, on the local clock.
	foreign      string
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
		own:   &ownership{identity: c.cfg.Identity},
		calls: c.mode.calls(),
	}
	asLease := func(obj any) *coordinationv1.Lease {
		lease, _ := obj.(*coordinationv1.Lease)
		return lease
	}
	// The registration cannot fail on an informer that has not started.
	handle, _ := e.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			e.own.observe(nil, asLease(obj), initial)
			e.seen.see(asLease(obj))
			e.wakeSoon()
		},
		UpdateFunc: func(old, obj any) {
			e.own.observe(asLease(old), asLease(obj), false)
			e.seen.see(asLease(obj))
			e.wakeSoon()
		},
		DeleteFunc: func(any) {
			e.own.observe(nil, nil, false)
			e.wakeSoon()
		},
	})
	e.synced = handle.HasSyncedChecker()
	return e
}

// remember records a Lease this process wrote or read, newer than the
// informer's store.
func (e *elector) remember(lease *coordinationv1.Lease) {
	e.seen.see(lease)
	storeRV := ""
	if stored, ok := e.stored(); ok {
		storeRV = stored.ResourceVersion
	}
	e.written.remember(storeRV, lease)
}

// seenTerms keeps the highest leaseTransitions seen on any version of the
// Lease, and the highest seen on the versions other than the one that
// carried it: the first renewal of a term compares a naming's count with
// what came before that naming (see termToken).
type seenTerms struct {
	mu sync.Mutex
	// highest was first seen on the version fingerprinted highestBy; below
	// is the highest on any other version.
	highest   int32
	highestBy string
	below     int32
}

func (s *seenTerms) see(lease *coordinationv1.Lease) {
	if lease == nil {
		return
	}
	n, fp := ptr.Deref(lease.Spec.LeaseTransitions, 0), fingerprint(lease)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case fp == s.highestBy:
	case n > s.highest:
		s.below, s.highest, s.highestBy = s.highest, n, fp
	default:
		s.below = max(s.below, n)
	}
}

// before is the highest leaseTransitions seen on a version other than
// lease's own.
func (s *seenTerms) before(lease *coordinationv1.Lease) int32 {
	fp := fingerprint(lease)
	s.mu.Lock()
	defer s.mu.Unlock()
	if fp == s.highestBy {
		return s.below
	}
	return s.highest
}

// max is the highest leaseTransitions seen on any version.
func (s *seenTerms) max() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest
}

// errTermsExhausted: a term would need a fencing token past the largest
// leaseTransitions there is.
var errTermsExhausted = fmt.Errorf("%w: leaseTransitions has reached %d, so a new term cannot have a fencing token above every earlier one", ErrNotLeader, int32(math.MaxInt32))

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
// again: it decides (next) and performs the decision until the decision is
// to wait. It is idempotent: waking it early does no harm.
func (e *elector) step(ctx context.Context) time.Duration {
	logger := klog.FromContext(ctx)
	e.observe(e.current())
	if n := e.own.takeForeignRenewals(); n > 0 {
		logger.Error(nil, "Another process renews the Lease under this identity; Identity must be unique among the candidates of a Lease", "renewals", n)
	}
	steppedDown := false
	for range maxActions {
		v := e.snapshot()
		v.steppedDown = steppedDown
		a := next(v)
		if a.kind == waitAction {
			return a.after
		}
		e.apply(ctx, v, a)
		steppedDown = steppedDown || a.kind == stepDown
	}
	return e.c.cfg.RetryPeriod
}

// snapshot is the view next decides on.
func (e *elector) snapshot() view {
	cfg := &e.c.cfg
	lease := e.current()
	t := e.c.leading()
	v := view{
		now:          cfg.Clock.Now(),
		identity:     cfg.Identity,
		timing:       timing{leaseDuration: cfg.LeaseDuration, renewDeadline: cfg.RenewDeadline, retryPeriod: cfg.RetryPeriod},
		renewsItself: e.c.mode.renewsItself(),
		lease:        lease,
		leading:      t != nil,
		lapsed:       t != nil && !e.c.live(t),
		quietIn:      e.quietIn(),
		lastAttempt:  e.lastAttempt,
		retryAt:      e.retryAt,
		handOverAt:   e.handOverAt,
		goneVersion:  e.goneVersion,
		foreign:      e.foreign,
	}
	if e.foreign != "" {
		v.foreignFor = cfg.Clock.Since(e.foreignSince)
	}
	if t != nil {
		v.renewedAt = t.renewedAt
	}
	if lease != nil {
		v.mine, v.mayTake = e.own.mine(lease), e.own.mayTake(lease)
	}
	return v
}

// apply performs one decision of next, taken on v.
func (e *elector) apply(ctx context.Context, v view, a action) {
	switch a.kind {
	case renew:
		_ = e.renew(ctx, nil, v.lease) // a failure is logged and retried
	case stepDown:
		e.stepDown(ctx, a.reason, a.kv...)
	case handOver:
		e.giveUp(ctx, false)
	case noteForeign:
		e.foreign, e.foreignSince = a.foreign, v.now
		klog.FromContext(ctx).V(2).Info("The Lease names this identity but was renewed by another process; waiting for it to stay unchanged for a lease duration",
			"renewTime", v.lease.Spec.RenewTime, "leaseDuration", e.c.cfg.LeaseDuration)
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
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if caller != nil {
		defer context.AfterFunc(caller, cancel)()
	}

	renewal, err := e.renewalOf(lease, sent, leading)
	if err != nil {
		// Retrying soon would not help: look again once a lease duration
		// has passed, saying so each time.
		e.retryAt = cfg.Clock.Now().Add(cfg.LeaseDuration)
		logger.Error(err, "Not taking the Lease it is named for")
		return err
	}
	updated, err := e.update(reqCtx, renewal)
	if apierrors.IsConflict(err) {
		var fresh *coordinationv1.Lease
		fresh, err = e.leases.Get(reqCtx, cfg.LeaseName)
		if err == nil {
			e.remember(fresh)
			if holderOf(fresh) != cfg.Identity || (preferredOf(fresh) != "" && preferredOf(fresh) != cfg.Identity) {
				e.wakeSoon()
				return fmt.Errorf("%w: the Lease changed under the renewal", ErrNotLeader) // the next step acts on it
			}
			if leading && !e.own.mine(fresh) {
				logger.Error(nil, "Another process renewed the Lease under this identity; Identity must be unique among the candidates of a Lease",
					"renewTime", fresh.Spec.RenewTime)
				e.stepDown(ctx, "another process renewed the Lease under this identity")
				return errForeignRenewal
			}
			if !leading && !e.own.mayTake(fresh) {
				e.wakeSoon()
				return errForeignRenewal // the next step decides whether to wait
			}
			if renewal, err = e.renewalOf(fresh, sent, leading); err == nil {
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
		if ctx.Err() == nil {
			logger.Error(err, "Renewing the Lease failed; retrying", "retryPeriod", cfg.RetryPeriod, "leading", leading)
		}
		return fmt.Errorf("renewing the Lease: %w", err)
	}
	e.remember(updated)
	e.retryAt = time.Time{}
	if sent.After(e.lastRenewal) {
		e.lastRenewal = sent
	}
	if t := e.c.recordRenewal(sent, ptr.Deref(updated.Spec.LeaseTransitions, 0)); t != nil {
		e.c.mode.termStarted()
		e.startWork(ctx, t)
	}
	return nil
}

// update sends one renewal, recording its renewTime as possibly written by
// this process unless the server certainly refused it.
func (e *elector) update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	renew := renewTimeOf(lease)
	e.own.wrote(renew)
	updated, err := e.leases.Update(ctx, lease)
	if apierrors.IsConflict(err) {
		e.own.refused(renew)
	}
	return updated, err
}

// renewalOf is lease as this process's renewal at now writes it, with a
// renewTime later than the stored one (see renewTimeFor). The first
// renewal of a term (leading false) starts a new term: its leaseTransitions
// is the term's fencing token (see termToken), written in the same
// conditional write.
func (e *elector) renewalOf(lease *coordinationv1.Lease, now time.Time, leading bool) (*coordinationv1.Lease, error) {
	cfg := &e.c.cfg
	clone := lease.DeepCopy()
	clone.Spec.HolderIdentity = ptr.To(cfg.Identity)
	if !leading {
		term, ok := termToken(lease, e.seen.before(lease))
		if !ok {
			return nil, errTermsExhausted
		}
		clone.Spec.LeaseTransitions = ptr.To(term)
		if clone.Spec.AcquireTime == nil && clone.Spec.RenewTime != nil {
			// The term was acquired when the controller named the holder.
			clone.Spec.AcquireTime = clone.Spec.RenewTime.DeepCopy()
		}
	}
	renew := renewTimeFor(now, renewTimeOf(lease))
	if a := clone.Spec.AcquireTime; a != nil && renew.Equal(atMicro(a.Time)) {
		// acquireTime equal to renewTime marks a Lease nobody has renewed
		// since it was named (see freshlyNamed); a renewal must not look so.
		renew = renew.Add(time.Microsecond)
	}
	clone.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew))
	clone.Spec.LeaseDurationSeconds = ptr.To(int32(cfg.LeaseDuration / time.Second))
	return clone, nil
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
// update. A hand-over names the next holder as the controller does: it
// counts the next term in leaseTransitions (handOverToken) and writes
// acquireTime equal to renewTime, so the next holder leads with that count
// as its token. A release names nobody and counts nothing, as client-go's
// does: the controller counts the next term when it names one. Every request has its
// own timeout of the renew deadline, so a hung API call cannot block the
// election loop or the shutdown.
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
		if holderOf(lease) != cfg.Identity {
			return
		}
		if !e.own.mayTake(lease) {
			logger.V(2).Info("The Lease names this identity but another process renewed it; leaving it to that process",
				"renewTime", lease.Spec.RenewTime, "release", release)
			return
		}
		to := preferredOf(lease)
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
		now := metav1.NewMicroTime(renewTimeFor(cfg.Clock.Now(), renewTimeOf(lease)))
		clone := lease.DeepCopy()
		// An empty holder rather than none: kube-apiserver's controller
		// dereferences holderIdentity.
		clone.Spec.HolderIdentity = ptr.To(to)
		clone.Spec.PreferredHolder = nil
		clone.Spec.RenewTime = &now
		if to != "" {
			clone.Spec.LeaseTransitions = ptr.To(handOverToken(lease, e.seen.max()))
			clone.Spec.AcquireTime = &now
		}
		updated, err := e.withTimeout(ctx, func(ctx context.Context) (*coordinationv1.Lease, error) {
			return e.leases.Update(ctx, clone)
		})
		if err == nil {
			e.remember(updated)
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
		if lease, err = e.withTimeout(ctx, func(ctx context.Context) (*coordinationv1.Lease, error) {
			return e.leases.Get(ctx, cfg.LeaseName)
		}); err != nil {
			if !apierrors.IsNotFound(err) {
				logger.Error(err, "Reading the Lease to let it go failed; "+otherwise)
			}
			return
		}
		e.remember(lease)
	}
}

// withTimeout runs one API call with the renew deadline as its timeout.
func (e *elector) withTimeout(ctx context.Context, call func(context.Context) (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, e.c.cfg.RenewDeadline)
	defer cancel()
	return call(ctx)
}

// release lets the Lease go on shutdown, if it still names this process.
func (e *elector) release(ctx context.Context) {
	e.giveUp(ctx, true)
}

// observe records the holder and tells OnNewLeader about a new one.
func (e *elector) observe(lease *coordinationv1.Lease) {
	holder := holderOf(lease)
	e.c.holder.Store(&holder)
	if holder == e.observed {
		return
	}
	e.observed = holder
	if cb := e.c.cfg.Callbacks.OnNewLeader; cb != nil && holder != "" {
		e.notifications.Go(func() { cb(holder) })
	}
}

func (e *elector) wakeSoon() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease == nil {
		return ""
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

func preferredOf(lease *coordinationv1.Lease) string {
	if lease == nil {
		return ""
	}
	return ptr.Deref(lease.Spec.PreferredHolder, "")
}
