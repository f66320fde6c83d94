package candidate

import (
	"context"
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

// elector follows the Lease and leads while it may. All its fields but the
// Candidate's shared state belong to the goroutine running run (and, after
// run returns, to the shutdown steps).
type elector struct {
	c        *Candidate
	leases   access.LeaseClient
	informer cache.SharedIndexInformer
	// synced is done once the informer has delivered its initial list.
	synced cache.DoneChecker
	key    string
	wake   chan struct{}

	// written is the result of our last write and writtenFrom the
	// resourceVersion it replaced: while the informer still shows that
	// version, written is the newer truth.
	written     *coordinationv1.Lease
	writtenFrom string

	// lastAttempt is when the last renewal was sent; retryAt holds off a new
	// attempt after a failure.
	lastAttempt time.Time
	retryAt     time.Time

	// stopWork cancels the running OnStartedLeading; workDone is closed when
	// it has returned.
	stopWork context.CancelFunc
	workDone chan struct{}

	observed      string // holder last reported to OnNewLeader
	notifications sync.WaitGroup
}

func newElector(c *Candidate, acc access.Interface) *elector {
	e := &elector{
		c:        c,
		leases:   acc.Leases(c.cfg.Namespace),
		informer: acc.NewLeaseInformer(c.cfg.Namespace, 0, oneObject(c.cfg.LeaseName)),
		key:      c.cfg.Namespace + "/" + c.cfg.LeaseName,
		wake:     make(chan struct{}, 1),
	}
	// The registration cannot fail on an informer that has not started.
	handle, _ := e.informer.AddEventHandler(wakeOnChange(e.wake))
	e.synced = handle.HasSyncedChecker()
	return e
}

// current is the newest Lease known, nil if there is none.
func (e *elector) current() *coordinationv1.Lease {
	obj, exists, err := e.informer.GetStore().GetByKey(e.key)
	if err != nil || !exists {
		return nil
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil
	}
	if e.written != nil && lease.ResourceVersion == e.writtenFrom {
		return e.written
	}
	return lease
}

func (e *elector) remember(from string, written *coordinationv1.Lease) {
	e.written, e.writtenFrom = written, from
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
		}
	}
}

// step acts on the Lease as it is now and returns when it wants to look
// again. It is idempotent: waking it early does no harm.
func (e *elector) step(ctx context.Context) time.Duration {
	cfg := &e.c.cfg
	clk := cfg.Clock
	lease := e.current()
	e.observe(lease)
	holder, preferred := holderOf(lease), preferredOf(lease)
	handOverTo := ""
	if preferred != "" && preferred != cfg.Identity {
		handOverTo = preferred
	}

	if leading, renewedAt := e.c.leaderState(); leading {
		deadline := renewedAt.Add(cfg.RenewDeadline)
		switch now := clk.Now(); {
		case !now.Before(deadline):
			// Also the path after a pause: the clock jumped past the deadline.
			e.stepDown(ctx, "no successful renewal within the renew deadline", "lastRenewal", renewedAt, "renewDeadline", cfg.RenewDeadline)
			return cfg.RetryPeriod
		case lease == nil:
			e.stepDown(ctx, "the Lease was deleted")
			return cfg.RetryPeriod
		case holder != cfg.Identity:
			e.stepDown(ctx, "the Lease names another holder", "holder", holder)
			return cfg.RetryPeriod
		case handOverTo != "":
			e.stepDown(ctx, "the controller prefers another holder", "preferredHolder", handOverTo)
			e.giveUp(ctx, false)
			return cfg.RetryPeriod
		case now.Before(e.lastAttempt.Add(cfg.RetryPeriod)):
			return untilNext(now, e.lastAttempt.Add(cfg.RetryPeriod), deadline)
		}
		e.renew(ctx, lease)
		_, renewedAt = e.c.leaderState()
		return untilNext(clk.Now(), e.lastAttempt.Add(cfg.RetryPeriod), renewedAt.Add(cfg.RenewDeadline))
	}

	// A candidate: it leads only a Lease that names it.
	if lease == nil || holder != cfg.Identity {
		return cfg.RetryPeriod
	}
	if handOverTo != "" {
		// Named holder but not leading (e.g. after a lapse): nothing runs,
		// so the Lease can go at once.
		e.giveUp(ctx, false)
		return cfg.RetryPeriod
	}
	if now := clk.Now(); now.Before(e.retryAt) {
		return untilNext(now, e.retryAt)
	}
	e.renew(ctx, lease)
	return cfg.RetryPeriod
}

// renew writes the Lease with a fresh renewTime, conditional on the version
// read; it makes this process leader when that succeeds while the Lease names
// it. A conflict is resolved by one read and one more attempt; other failures
// wait for the retry period, leadership lapsing at the renew deadline.
func (e *elector) renew(ctx context.Context, lease *coordinationv1.Lease) {
	cfg := &e.c.cfg
	logger := klog.FromContext(ctx)
	sent := cfg.Clock.Now()
	e.lastAttempt = sent
	timeout := cfg.RenewDeadline
	if leading, renewedAt := e.c.leaderState(); leading {
		timeout = renewedAt.Add(cfg.RenewDeadline).Sub(sent)
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	base := lease.ResourceVersion
	updated, err := e.leases.Update(reqCtx, e.renewed(lease, sent))
	if apierrors.IsConflict(err) {
		var fresh *coordinationv1.Lease
		fresh, err = e.leases.Get(reqCtx, cfg.LeaseName)
		if err == nil {
			e.remember(base, fresh)
			if holderOf(fresh) != cfg.Identity || (preferredOf(fresh) != "" && preferredOf(fresh) != cfg.Identity) {
				e.wakeSoon()
				return // the next step acts on what changed
			}
			updated, err = e.leases.Update(reqCtx, e.renewed(fresh, sent))
			base = fresh.ResourceVersion
		}
	}
	if err != nil {
		e.retryAt = cfg.Clock.Now().Add(cfg.RetryPeriod)
		logger.V(2).Info("Renewing the Lease failed", "err", err)
		return
	}
	e.remember(base, updated)
	e.retryAt = time.Time{}
	if e.c.renewed(sent, ptr.Deref(updated.Spec.LeaseTransitions, 0)) {
		e.startWork(ctx)
	}
}

// renewed is lease as this process's renewal at now writes it.
func (e *elector) renewed(lease *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	cfg := &e.c.cfg
	clone := lease.DeepCopy()
	clone.Spec.HolderIdentity = ptr.To(cfg.Identity)
	clone.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	clone.Spec.LeaseDurationSeconds = ptr.To(int32(cfg.LeaseDuration / time.Second))
	if clone.Spec.AcquireTime == nil {
		clone.Spec.AcquireTime = clone.Spec.RenewTime
	}
	return clone
}

// startWork runs OnStartedLeading for the term that just began.
func (e *elector) startWork(ctx context.Context) {
	token, _ := e.c.Token()
	klog.FromContext(ctx).Info("Started leading", "token", token)
	workCtx, cancel := context.WithCancel(ctx)
	e.stopWork, e.workDone = cancel, make(chan struct{})
	go func() {
		defer close(e.workDone)
		e.c.cfg.Callbacks.OnStartedLeading(workCtx)
	}()
}

// stepDown ends leadership: IsLeader turns false first, then leader work is
// cancelled and waited for, then OnStoppedLeading runs. Only then may the
// caller let the Lease go.
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

// giveUp lets the Lease go when it names this process and nothing of this
// process leads any more: to the preferred holder if there is one, otherwise
// (only when release is set) to nobody. Each is one conditional update that
// starts a new term (leaseTransitions + 1).
func (e *elector) giveUp(ctx context.Context, release bool) {
	cfg := &e.c.cfg
	logger := klog.FromContext(ctx)
	lease := e.current()
	for attempt := 0; attempt < 3 && lease != nil; attempt++ {
		if holderOf(lease) != cfg.Identity {
			return
		}
		to := preferredOf(lease)
		if to == cfg.Identity {
			to = ""
		}
		if to == "" && !release {
			return
		}
		now := metav1.NewMicroTime(cfg.Clock.Now())
		clone := lease.DeepCopy()
		// An empty holder rather than none: kube-apiserver's controller
		// dereferences holderIdentity.
		clone.Spec.HolderIdentity = ptr.To(to)
		clone.Spec.PreferredHolder = nil
		clone.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
		clone.Spec.AcquireTime = &now
		clone.Spec.RenewTime = &now
		updated, err := e.leases.Update(ctx, clone)
		if err == nil {
			e.remember(lease.ResourceVersion, updated)
			if to == "" {
				logger.Info("Released the Lease")
			} else {
				logger.Info("Handed the Lease over", "to", to)
			}
			return
		}
		if !isConflictOrGone(err) {
			logger.Error(err, "Letting the Lease go failed; it will expire instead", "to", to)
			e.retryAt = cfg.Clock.Now().Add(cfg.RetryPeriod)
			return
		}
		from := lease.ResourceVersion
		if lease, err = e.leases.Get(ctx, cfg.LeaseName); err != nil {
			if !apierrors.IsNotFound(err) {
				logger.Error(err, "Reading the Lease to let it go failed")
			}
			return
		}
		e.remember(from, lease)
	}
}

// release lets the Lease go on shutdown, if it still names this process.
func (e *elector) release(ctx context.Context) {
	e.giveUp(ctx, true)
}

// observe records the holder and tells OnNewLeader about a new one.
func (e *elector) observe(lease *coordinationv1.Lease) {
	holder := holderOf(lease)
	e.c.setHolder(holder)
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

// ---- the Candidate's shared leader state ----

func (c *Candidate) leaderState() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading, c.renewedAt
}

// renewed records a successful renewal sent at sent, and reports whether it
// starts a term: the process was not leading and the renewal is still within
// the renew deadline.
func (c *Candidate) renewed(sent time.Time, term int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sent.After(c.renewedAt) {
		c.renewedAt = sent
	}
	if c.leading || c.cfg.Clock.Since(sent) >= c.cfg.RenewDeadline {
		return false
	}
	c.leading, c.term = true, term
	return true
}

// stopLeading turns IsLeader false and reports whether the process was
// leading.
func (c *Candidate) stopLeading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leading {
		return false
	}
	c.leading, c.term = false, 0
	c.stoppingSince = c.cfg.Clock.Now()
	return true
}

func (c *Candidate) stoppedLeading() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stoppingSince = time.Time{}
}

func (c *Candidate) setHolder(holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holder = holder
}
