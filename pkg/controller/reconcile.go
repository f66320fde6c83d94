package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/strategy"
)

// Event reasons, on the Lease.
const (
	ReasonLeaderElected      = "LeaderElected"
	ReasonPreferredHolderSet = "PreferredHolderSet"
	ReasonStrategyConflict   = "StrategyConflict"
	ReasonNoEligible         = "NoEligibleCandidate"
	ReasonInvalidCandidate   = "InvalidCandidate"
	ReasonPingFailed         = "PingFailed"
	ReasonTermsExhausted     = "FencingTokenExhausted"
	ReasonHolderExited       = "HolderExited"
	ReasonCandidateUnsteady  = "CandidateUnsteady"
)

// reconcile runs one election step for a Lease and returns when to look again
// (0: only when something changes): it reads a snapshot, decides (decide.go)
// and applies the decision. Every write is conditional on the
// resourceVersion read from the cache; a failed write returns an error and the
// step is retried with backoff (and at the returned time, if that is sooner).
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	after, err := c.electionStep(ctx, key)
	if (after == 0 || after > time.Millisecond) && c.opts.nudge.At(nudge.LookAgainSoon) {
		after = time.Millisecond
	}
	return after, err
}

// electionStep is reconcile's step, before a nudge.
func (c *Controller) electionStep(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	cands := c.candidatesOf(key)
	if name, group := groupStrategy(cands); group {
		return c.reconcileGroup(ctx, key, cands, name)
	}
	now := c.opts.Clock.Now()
	judgeAt := now
	if queued := c.takeQueuedAt(key); !queued.IsZero() && queued.Before(now) {
		judgeAt = queued
		if backlog := now.Sub(queued); backlog > c.opts.CandidateFreshness {
			klog.FromContext(ctx).V(2).Info("Judging candidates as of when this Lease was queued", "backlog", backlog)
		}
	}
	v := c.snapshot(key, cands, now)
	v.judgeAt = judgeAt
	var err error
	if v.tokenFloor, v.tokenBound, err = c.tokenBounds(ctx); err != nil {
		return 0, err
	}
	if err := c.coverSeen(ctx, v); err != nil {
		return 0, err
	}
	c.pacePings(ctx, v)
	d := decide(&c.opts, v)
	return c.apply(ctx, v, &d)
}

// coverSeen raises the token bound above the tokens the Lease shows: those
// its holders counted themselves (a handover, a first renewal above what
// the controller numbered) as well as the controller's. A replica whose own
// lock lapsed leaves that to the next.
func (c *Controller) coverSeen(ctx context.Context, v *view) error {
	if len(v.candidates) == 0 {
		return nil // not an election (the bound's own Lease among them)
	}
	seen := v.record.maxTransitions
	if v.lease != nil {
		seen = max(seen, ptr.Deref(v.lease.Spec.LeaseTransitions, 0))
	}
	if err := c.tokens.cover(ctx, seen); err != nil && !errors.Is(err, errNotHolding) {
		return err
	}
	return nil
}

// electsBuiltin: see Options.ElectsBuiltin.
func (c *Controller) electsBuiltin() bool {
	return c.opts.ElectsBuiltin == nil || c.opts.ElectsBuiltin()
}

// snapshot reads what decide needs about the Lease key, whose candidates in
// the cache are cands, from the caches and the records, as of now.
func (c *Controller) snapshot(key types.NamespacedName, cands []*coordinationv1beta1.LeaseCandidate, now time.Time) *view {
	v := &view{key: key, now: now, judgeAt: now, spread: c.opts.WatchLag.Spread(now)}
	v.lease = c.leaseOf(key)
	v.record = c.obs.lease(key, v.lease, now)
	v.builtinLeft = !c.electsBuiltin()
	v.probe = c.probeView(key.Namespace)
	if c.exits != nil { // the proof of death: see exits.go
		v.holderExitedAt = c.exits.exitedAt(proof.HolderProcess(v.lease))
		v.departedExited = !c.exits.exitedAt(v.record.departed.process).IsZero()
	}
	for _, lc := range cands {
		rec := c.obs.candidate(lc, now)
		if c.exits != nil {
			rec.exited = !c.exits.exitedAt(proof.CandidateProcess(lc.Annotations)).IsZero()
		}
		v.candidates = append(v.candidates, observedCandidate{lc: lc, rec: rec})
	}
	return v
}

// apply carries out a decision: it logs it, says its Events, notes what the
// controller did in the records, sends the pings and makes the Lease write.
// Ping errors do not stop the write; all errors are returned once it is done.
func (c *Controller) apply(ctx context.Context, v *view, d *decision) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	for _, l := range d.logs {
		logger.V(l.level).Info(l.msg, l.kv...)
	}
	next := d.next
	if d.confirmAbsent {
		if _, err := c.access.Leases(v.key.Namespace).Get(ctx, v.key.Name); !apierrors.IsNotFound(err) {
			if err != nil {
				return untilDeadline(v.now, next), fmt.Errorf("read the Lease the cache does not show: %w", err)
			}
			return untilDeadline(v.now, next), nil // it exists: the cache lags
		}
		c.obs.noteLeaseAbsent(v.key, v.now, max(c.opts.LeaseDuration, c.opts.UnseenHolderWait))
		logger.V(2).Info("The Lease was deleted before the cache showed it; treating its holder as departed now")
		return time.Nanosecond, nil
	}
	if d.waiting == waitOwnWrite {
		return untilDeadline(v.now, next), nil
	}
	if d.forget {
		c.clearNeeded(v.key)
		c.events.forget(v.key)
		c.forgetOutcome(v.key)
		return untilDeadline(v.now, next), nil
	}
	for _, topic := range d.resolved {
		c.events.resolve(v.key, topic)
	}
	for _, ev := range d.events {
		c.say(ctx, v, ev)
	}
	for _, u := range d.unanswered {
		key := types.NamespacedName{Namespace: v.key.Namespace, Name: u.candidate}
		before, verdict, ok := c.obs.noteUnanswered(key, u.uid, u.pingedAt, v.now, c.opts.PingTimeout)
		if !ok {
			continue
		}
		ref := klog.KRef(key.Namespace, key.Name)
		switch verdict {
		case verdictUnresponsive:
			c.opts.Metrics.PingTimeouts.Inc()
			logger.V(2).Info("Candidate did not answer its ping; excluded until it writes again",
				"candidate", ref, "pingTimeout", c.opts.PingTimeout)
			c.gcQueue.AddAfter(key, before.lastRenewal().Add(c.opts.UnresponsiveCandidateTTL).Sub(v.now))
		case verdictUnreachable:
			logger.Info("No ping reached the candidate within the ping timeout; passing it over and pinging it again later",
				"candidate", ref, "pingTimeout", c.opts.PingTimeout)
		case verdictAskAgain:
			logger.Info("No ping reached the candidate, the last attempt long ago; pinging it again",
				"candidate", ref, "pingTimeout", c.opts.PingTimeout)
		}
	}
	switch {
	case d.clearNeeded:
		c.clearNeeded(v.key)
	case d.markNeeded:
		c.markNeeded(v.key, d.neededSince)
	}
	deferredFor, pingErr := c.sendPings(ctx, v, d.pings)
	if deferredFor > 0 {
		next = earliest(next, v.now.Add(deferredFor))
	}
	if pingErr != nil {
		// Retried within the ping timeout whatever the step's backoff has
		// grown to after earlier failures: an API that is back gets the
		// ping through at once, not after the candidate was passed over.
		next = earliest(next, v.now.Add(c.opts.PingTimeout/pingRetries))
	}
	if d.probe != "" {
		pingErr = errors.Join(pingErr, c.sendProbe(ctx, v, d.probe))
	}
	wrote, wait, err := c.write(ctx, v, d.write)
	next = earliest(next, wait)
	outcome := d.unwritten
	if wrote {
		outcome = d.outcome
	}
	switch {
	case outcome == "":
		c.forgetOutcome(v.key)
	case wrote && d.write != nil:
		c.noteOutcome(v, outcome, d.write.lease)
	default:
		c.noteOutcome(v, outcome, nil)
	}
	if err != nil {
		return untilDeadline(v.now, next), errors.Join(err, pingErr)
	}
	if d.settled {
		c.obs.noteSettled(v.key, v.lease)
	}
	return untilDeadline(v.now, next), pingErr
}

// say emits an Event the decision asked for, unless it repeats the last one
// of its topic; news bumps its counter and is logged.
func (c *Controller) say(ctx context.Context, v *view, ev eventIntent) {
	if !c.events.emitFor(v.key, ev.topic, v.lease, c.candidateReference(v.candidate(ev.related)), ev.eventType, ev.reason, ev.action, "%s", ev.note) {
		return
	}
	switch ev.counter {
	case countConflict:
		c.opts.Metrics.Conflicts.Inc()
	case countInvalid:
		c.opts.Metrics.InvalidCandidate.Inc()
	case countNoEligible:
		c.opts.Metrics.Elections.WithLabelValues(resultNoEligible).Inc()
	case countHolderExited:
		c.opts.Metrics.HolderExits.Inc()
	}
	if l := ev.log; l != nil {
		klog.FromContext(ctx).V(l.level).Info(l.msg, l.kv...)
	}
}

// pacePings sizes the ping budget for how long the controller's writes take
// to show now (see pingBudget.pace), and says when it starts or stops
// holding pings back.
func (c *Controller) pacePings(ctx context.Context, v *view) {
	perSecond, changed := c.pings.pace(v.now, v.spread)
	c.opts.Metrics.PingBudget.Set(perSecond)
	if !changed {
		return
	}
	if perSecond < c.opts.PingRate {
		klog.FromContext(ctx).Info("The API server is slow to apply writes; pinging less until it catches up", "writeDelay", v.spread, "pingsPerSecond", perSecond, "pingRate", c.opts.PingRate)
	} else {
		klog.FromContext(ctx).Info("The API server applies writes promptly again; pinging at the full rate", "writeDelay", v.spread, "pingRate", c.opts.PingRate)
	}
}

// sendPings writes the pings. A ping that fails is tried again
// (rate-limited) until the ping timeout, which runs from the first attempt;
// after it the candidate is passed over for a while and then pinged again
// (see candidateRecord.unreachable), so that neither a candidate nobody can
// write to (an admission policy, an object that no longer validates) blocks
// the election, nor a short outage of the API excludes the candidates it
// kept from being asked. Pings over the budget (see pingBudget) are not
// sent; deferredFor is then how long until one fits.
func (c *Controller) sendPings(ctx context.Context, v *view, pings []pingIntent) (deferredFor time.Duration, _ error) {
	logger := klog.FromContext(ctx)
	var errs []error
	deferred := 0
	for _, p := range pings {
		lc := v.candidate(p.candidate)
		if lc == nil {
			continue // decide names only candidates of the view
		}
		if now := c.opts.Clock.Now(); c.opts.nudge.At(nudge.PingDeferred) || !c.pings.take(now, p.early) {
			deferred++
			deferredFor = max(deferredFor, max(c.pings.wait(now, p.early), time.Millisecond))
			continue
		}
		clone := lc.DeepCopy()
		clone.Spec.PingTime = ptr.To(metav1.NewMicroTime(p.pingTime))
		_, err := c.access.LeaseCandidates(lc.Namespace).Update(ctx, clone)
		switch {
		case err == nil:
			c.obs.notePing(lc, v.now, true, false)
			c.opts.Metrics.Pings.Inc()
			c.events.resolve(v.key, "ping/"+lc.Name)
			logger.V(2).Info("Pinged candidate", "candidate", klog.KObj(lc), "reason", "ranked above every candidate known to be alive")
		case isConflictOrGone(err):
			// It changed (or went) meanwhile: the informer brings the new
			// version, and with it the next step.
			logger.V(4).Info("Candidate changed before its ping; waiting for the new version", "candidate", klog.KObj(lc), "err", err)
		default:
			c.obs.notePing(lc, v.now, false, refusedPing(err))
			if c.events.emitFor(v.key, "ping/"+lc.Name, v.lease, c.access.CandidateReference(lc), corev1.EventTypeWarning, ReasonPingFailed, "Ping",
				"Cannot ping candidate %s (%v); it is passed over if no ping reaches it within %s, and pinged again later", lc.Name, err, c.opts.PingTimeout) {
				logger.Info("Pinging a candidate failed; retrying until the ping timeout", "candidate", klog.KObj(lc), "err", err, "pingTimeout", c.opts.PingTimeout)
			}
			errs = append(errs, fmt.Errorf("ping candidate %s/%s: %w", lc.Namespace, lc.Name, err))
		}
	}
	if deferred > 0 {
		c.opts.Metrics.PingsDeferred.Add(float64(deferred))
		logger.V(2).Info("Ping budget spent; pinging later", "deferred", deferred, "in", deferredFor, "pingRate", c.opts.PingRate)
	}
	return deferredFor, errors.Join(errs...)
}

// pingRetries is how many times, at least, a ping that fails is retried
// within the ping timeout (the ping budget bounds the attempts across
// Leases).
const pingRetries = 5

// refusedPing reports whether a failed ping write was refused for the
// candidate itself (forbidden by an admission policy, invalid as it is
// stored), rather than lost to an API that is unavailable or overloaded
// (5xx, 429, time-outs, a connection that failed), which says nothing about
// the candidate.
func refusedPing(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout
}

// write makes the decision's Lease write, if any. It reports whether the
// write was made, and when to look again should it not have been made for a
// reason that passes (zero: none).
func (c *Controller) write(ctx context.Context, v *view, w *leaseWrite) (bool, time.Time, error) {
	if w == nil {
		return false, time.Time{}, nil
	}
	logger := klog.FromContext(ctx)
	winner := v.candidate(w.winner)
	confirm := w.confirmWinner || ((w.kind == writeCreate || w.kind == writeElect) && c.opts.nudge.At(nudge.WinnerConfirmed))
	if confirm && winner != nil {
		if gone, err := c.winnerDeparted(ctx, winner); err != nil || gone {
			if gone {
				logger.V(2).Info("The best candidate is gone from the API; electing once the cache shows it", "candidate", w.winner)
				return false, v.now.Add(departedRecheck), nil
			}
			return false, time.Time{}, err
		}
	}
	// Whether this replica may write the Lease: asked again right before
	// the write, since raising the token bound takes a request's time (a
	// replica paused meanwhile finds its lock lapsed when it resumes).
	mayWrite := func() (bool, time.Time) {
		if hold := c.opts.Holding; hold != nil && !hold() {
			logger.V(2).Info("Not writing the Lease: this replica's own lock was not renewed within its renew deadline, so another replica may be active",
				"write", w.kind, "recheck", ownLockRecheck)
			return false, v.now.Add(ownLockRecheck)
		}
		if strategy.Builtin(w.strategy) && !c.electsBuiltin() {
			logger.V(2).Info("Not writing the Lease: kube-apiserver's election controller may elect it now, as this replica no longer holds the lock they share",
				"write", w.kind, "strategy", w.strategy)
			return false, time.Time{}
		}
		return true, time.Time{}
	}
	if ok, recheck := mayWrite(); !ok {
		return false, recheck, nil
	}
	if w.kind == writeCreate || w.kind == writeElect {
		// The bound goes above the token before anybody is handed it.
		if err := c.tokens.cover(ctx, ptr.Deref(w.lease.Spec.LeaseTransitions, 0)); err != nil {
			if errors.Is(err, errNotHolding) {
				return false, v.now.Add(ownLockRecheck), nil
			}
			return false, time.Time{}, fmt.Errorf("elect %s: %w", w.winner, err)
		}
		c.opts.nudge.At(nudge.BeforeNaming)
		if ok, recheck := mayWrite(); !ok {
			return false, recheck, nil
		}
	}
	leases := c.access.Leases(v.key.Namespace)
	var (
		written *coordinationv1.Lease
		err     error
	)
	if w.kind != writeSteer && w.kind != writeOpen {
		// An election writes a new renewTime: the watch's lag shows in
		// how late it delivers it.
		failed := c.opts.WatchLag.expect(v.key, leaseRenewTime(w.lease), v.now)
		defer func() {
			if err != nil {
				failed()
			}
		}()
	}
	if w.kind == writeCreate || w.kind == writeOpen {
		written, err = leases.Create(ctx, w.lease)
	} else {
		written, err = leases.Update(ctx, w.lease)
	}
	if err != nil {
		if (w.kind == writeCreate || w.kind == writeElect) && mayHaveApplied(err) {
			// The server may have applied it all the same (a timeout),
			// and its holder may lead under the token: the next try
			// numbers its term above.
			c.obs.noteNumbered(v.key, ptr.Deref(w.lease.Spec.LeaseTransitions, 0), v.now)
		}
		switch w.kind {
		case writeSteer:
			return false, time.Time{}, fmt.Errorf("set preferredHolder to %q and strategy to %q: %w", ptr.Deref(w.lease.Spec.PreferredHolder, ""), w.strategy, err)
		case writeOpen:
			if apierrors.IsAlreadyExists(err) {
				c.obs.noteCreateLost(v.key, v.now)
			}
			return false, time.Time{}, fmt.Errorf("create the Lease naming nobody: %w", err)
		}
		if !lostRace(err) {
			c.opts.Metrics.Elections.WithLabelValues(resultError).Inc()
		}
		if w.kind == writeCreate && apierrors.IsAlreadyExists(err) {
			c.obs.noteCreateLost(v.key, v.now)
		}
		return false, time.Time{}, fmt.Errorf("elect %s: %w", w.winner, err)
	}
	c.obs.noteWritten(v.key, v.lease, written, v.now)
	switch w.kind {
	case writeSteer:
		c.steered(ctx, v, w, winner)
		return true, time.Time{}, nil
	case writeOpen:
		logger.V(2).Info("Created the Lease naming nobody; naming its first holder once the candidate watch shows every registration made before it",
			"strategy", w.strategy, "candidates", w.candidates)
		return true, time.Time{}, nil
	}
	result := resultElected
	if w.kind == writeCreate || w.first {
		result = resultCreated
	}
	c.opts.Metrics.Elections.WithLabelValues(result).Inc()
	if w.lostBy != "" {
		c.obs.noteLoss(v.key, w.lostBy, v.now, c.opts.UnsteadyWindow)
	}
	if w.winner != w.previousHolder {
		c.opts.Metrics.LeaderChanges.Inc()
	}
	if since, ok := c.takeNeeded(v.key); ok {
		c.opts.Metrics.ElectionLatency.Observe(c.opts.Clock.Since(since).Seconds())
	}
	term := ptr.Deref(written.Spec.LeaseTransitions, 0)
	c.events.emitChange(written, c.candidateReference(winner), corev1.EventTypeNormal, ReasonLeaderElected, "Elect",
		"Elected %s under %s (term %d): %s", w.winner, w.strategy, term, w.candidates)
	logger.V(2).Info("Elected leader", "holder", w.winner, "previousHolder", w.previousHolder, "strategy", w.strategy,
		"term", term, "created", w.kind == writeCreate)
	return true, time.Time{}, nil
}

// steered reports a steer of a live Lease that was written; winner is the
// candidate it prefers, as cached (nil: none).
func (c *Controller) steered(ctx context.Context, v *view, w *leaseWrite, winner *coordinationv1beta1.LeaseCandidate) {
	logger := klog.FromContext(ctx)
	want := ptr.Deref(w.lease.Spec.PreferredHolder, "")
	if w.previousStrategy != w.strategy {
		logger.V(2).Info("Updated the Lease's strategy to the candidates'", "strategy", w.strategy, "was", w.previousStrategy)
	}
	switch {
	case w.previousPreferred == want:
	case want == "":
		logger.V(2).Info("Cleared preferredHolder", "holder", w.previousHolder, "was", w.previousPreferred)
	default:
		c.opts.Metrics.Preemptions.Inc()
		c.events.emitChange(v.lease, c.candidateReference(winner), corev1.EventTypeNormal, ReasonPreferredHolderSet, "Preempt",
			"%s is better than holder %s under %s; asked the holder to hand over", want, w.previousHolder, w.strategy)
		logger.V(2).Info("Set preferredHolder", "preferredHolder", want, "holder", w.previousHolder, "was", w.previousPreferred)
	}
}

// candidateReference is the reference of an Event to lc (nil: none).
func (c *Controller) candidateReference(lc *coordinationv1beta1.LeaseCandidate) *corev1.ObjectReference {
	if lc == nil {
		return nil
	}
	return c.access.CandidateReference(lc)
}

// winnerDeparted reads the winner of a re-election from the API server. A
// leader that stops deletes its candidate and then releases the Lease; the
// two arrive on separate watches, and when the release comes first the
// cache still offers the departed candidate as the best. Naming it would
// leave the Lease leaderless for a lease duration, so the election waits
// for the deletion to reach the cache (its event wakes the Lease again). A
// first election needs no such read: no holder is leaving.
func (c *Controller) winnerDeparted(ctx context.Context, best *coordinationv1beta1.LeaseCandidate) (bool, error) {
	live, err := c.access.LeaseCandidates(best.Namespace).Get(ctx, best.Name)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read candidate %s before electing it: %w", best.Name, err)
	}
	return live.UID != best.UID, nil
}

// mayHaveApplied reports whether a write that failed with err may have been
// applied all the same: any error but a refusal (a failed precondition, an
// object that exists or does not, a request refused or invalid).
func mayHaveApplied(err error) bool {
	return !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) &&
		!apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err)
}

// ownLockRecheck is how soon a step that did not write because the
// replica's own lock lapsed (see Options.Holding) looks again: by then its
// elector has renewed, or stopped the controller.
const ownLockRecheck = time.Second

// departedRecheck bounds the wait for the cache to show a departed
// candidate's deletion, should its event be lost to a relist.
const departedRecheck = time.Second

func (c *Controller) markNeeded(key types.NamespacedName, at time.Time) {
	c.neededMu.Lock()
	defer c.neededMu.Unlock()
	if _, ok := c.neededSince[key]; !ok {
		c.neededSince[key] = at
	}
}

func (c *Controller) takeNeeded(key types.NamespacedName) (time.Time, bool) {
	c.neededMu.Lock()
	defer c.neededMu.Unlock()
	t, ok := c.neededSince[key]
	delete(c.neededSince, key)
	return t, ok
}

func (c *Controller) clearNeeded(key types.NamespacedName) { _, _ = c.takeNeeded(key) }

// lostRace tells the writes that failed because another writer got there
// first: the object changed, went, or was created meanwhile. The informer
// brings what changed, and the retry judges it; none of them is an error.
func lostRace(err error) bool {
	return isConflictOrGone(err) || apierrors.IsAlreadyExists(err)
}

// isConflictOrGone tells the writes that failed because the object changed
// (or went) under them: the informer brings what changed.
func isConflictOrGone(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err)
}
