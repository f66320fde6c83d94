package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

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
)

// liveness is what the controller knows of a candidate at one instant.
type liveness int

const (
	unknown      liveness = iota // not renewed recently, not pinged: ping it if it matters
	alive                        // renewed recently (or holds a Lease that is not expired)
	pinged                       // pinged, waiting for an answer until the deadline
	unresponsive                 // did not answer a ping; excluded until it writes again
)

func (l liveness) String() string {
	return [...]string{"unknown", "alive", "pinged", "unresponsive"}[l]
}

// reconcile runs one election step for a Lease and returns when to look again
// (0: only when something changes). Every write is conditional on the
// resourceVersion read from the cache; a failed write returns an error and the
// step is retried with backoff (and at the returned time, if that is sooner).
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := c.opts.Clock.Now()
	judgeAt := now
	if queued := c.takeQueuedAt(key); !queued.IsZero() && queued.Before(now) {
		judgeAt = queued
		if backlog := now.Sub(queued); backlog > c.opts.CandidateFreshness {
			logger.V(2).Info("Judging candidates as of when this Lease was queued", "backlog", backlog)
		}
	}
	lease := c.leaseOf(key)
	rec := c.obs.lease(key, lease, now)
	if rec.writing && (lease == nil) == (rec.replaced == "") && (lease == nil || lease.ResourceVersion == rec.replaced) {
		// The cache still shows what this controller's last write replaced:
		// judging it would repeat a write that can only conflict. The
		// write's arrival wakes this Lease again.
		if wait := rec.writtenAt.Add(ownWriteWait).Sub(now); wait > 0 {
			logger.V(4).Info("Waiting for the cache to show the last write", "replaced", rec.replaced)
			return wait, nil
		}
	}

	cands, nextExpiry := c.liveCandidates(key, now)
	if len(cands) == 0 {
		c.clearNeeded(key)
		c.events.forget(key)
		c.noteOutcome(key, "")
		return untilDeadline(now, nextExpiry), nil
	}

	res := strategy.ResolveStrategy(cands)
	if res.Conflict {
		if c.events.emit(key, lease, corev1.EventTypeWarning, ReasonStrategyConflict, "Elect",
			"Candidates at binary version %s ask for different strategies (%s); not electing until they agree", res.BinaryVersion, strategy.DescribeConflict(res.Conflicting)) {
			c.opts.Metrics.Conflicts.Inc()
			logger.V(2).Info("Strategy conflict; not electing", "binaryVersion", res.BinaryVersion, "candidates", strategy.DescribeConflict(res.Conflicting))
		}
		c.noteOutcome(key, leaseConflict)
		return untilDeadline(now, nextExpiry), nil
	}
	c.events.resolve(key, ReasonStrategyConflict)
	if res.BinaryVersion == "" {
		// No candidate says which binary it runs, so none can say which
		// strategy the Lease follows: report each one, elect nobody.
		for _, lc := range slices.SortedFunc(slices.Values(cands), byName) {
			c.reportInvalid(ctx, key, lease, lc, "any strategy", fmt.Errorf("binaryVersion %q is not a strict semantic version", lc.Spec.BinaryVersion))
		}
		logger.V(2).Info("No candidate has a valid binaryVersion; not electing", "candidates", len(cands))
		c.noteOutcome(key, leaseConflict)
		return untilDeadline(now, nextExpiry), nil
	}
	strat, ok := c.opts.Strategies.Get(res.Strategy)
	if !ok {
		// Another controller owns this strategy: no pings, no writes.
		logger.V(4).Info("Strategy not handled here; leaving the Lease alone", "strategy", res.Strategy)
		c.noteOutcome(key, leaseUnmanaged)
		return untilDeadline(now, nextExpiry), nil
	}
	ranked, invalid := strat.Rank(cands)
	for _, inv := range invalid {
		c.reportInvalid(ctx, key, lease, inv.Candidate, "strategy "+string(strat.Name()), inv.Reason)
	}
	for _, lc := range ranked {
		c.events.resolve(key, "candidate/"+lc.Name) // valid (again)
	}

	e := election{c: c, logger: logger, key: key, now: now, judgeAt: judgeAt, lease: lease, rec: rec, strat: strat, ranked: ranked, all: cands}
	e.deadline = nextExpiry
	e.judgeLease()
	if e.leaseLive && !e.holderIsCandidate() {
		// A holder outside coordinated election cannot hand over: nothing to
		// ping or steer until it releases the Lease or the Lease expires.
		// Its tenure is not part of any election's latency.
		c.clearNeeded(key)
		logger.V(4).Info("Lease held by a non-candidate; waiting for release or expiry", "holder", e.holder)
		c.noteOutcome(key, leaseUnmanaged)
		return untilDeadline(now, e.deadline), nil
	}
	e.judge()
	pingErr := e.ping(ctx)
	err := e.write(ctx)
	c.noteOutcome(key, e.outcome())
	if err != nil {
		return untilDeadline(now, e.deadline), errors.Join(err, pingErr)
	}
	if e.leaseLive && !e.wrote {
		c.obs.noteSettled(key, lease)
	}
	return untilDeadline(now, e.deadline), pingErr
}

// ownWriteWait bounds how long reconcile waits for the cache to show the
// controller's own write of a Lease; the informer delivers it in
// milliseconds, unless a relist skipped it.
const ownWriteWait = 5 * time.Second

// reportInvalid tells, once per change, that a candidate cannot take part.
func (c *Controller) reportInvalid(ctx context.Context, key types.NamespacedName, lease *coordinationv1.Lease, lc *coordinationv1beta1.LeaseCandidate, under string, reason error) {
	if c.events.emitFor(key, "candidate/"+lc.Name, lease, c.access.CandidateReference(lc), corev1.EventTypeWarning, ReasonInvalidCandidate, "Elect",
		"Candidate %s cannot take part under %s: %v", lc.Name, under, reason) {
		c.opts.Metrics.InvalidCandidate.Inc()
		klog.FromContext(ctx).V(2).Info("Invalid candidate", "candidate", klog.KObj(lc), "reason", reason)
	}
}

// liveCandidates returns the candidates of a Lease that have renewed within
// the candidate TTL, and the earliest time one of them will expire.
func (c *Controller) liveCandidates(key types.NamespacedName, now time.Time) ([]*coordinationv1beta1.LeaseCandidate, time.Time) {
	var live []*coordinationv1beta1.LeaseCandidate
	var next time.Time
	for _, lc := range c.candidatesOf(key) {
		rec := c.obs.candidate(lc, now)
		expiry := rec.lastRenewal().Add(c.opts.CandidateTTL)
		if !now.Before(expiry) {
			continue // expired: ignored, and garbage-collected
		}
		live = append(live, lc)
		next = earliest(next, expiry)
	}
	return live, next
}

// election is one election step over a consistent snapshot.
type election struct {
	c      *Controller
	logger klog.Logger
	key    types.NamespacedName
	now    time.Time
	// judgeAt is the instant candidates' freshness is judged at: when an
	// event queued this step, or now. The time the step waited in the
	// queue is the controller's own delay, not the candidates' silence.
	judgeAt time.Time
	lease   *coordinationv1.Lease
	rec     leaseRecord // what was observed of the Lease
	strat   strategy.Strategy
	ranked  []*coordinationv1beta1.LeaseCandidate // valid candidates, best first
	all     []*coordinationv1beta1.LeaseCandidate // every unexpired candidate

	holder    string // current holder ("" if none)
	leaseLive bool   // the Lease exists, names a holder and has not expired by local observation
	// leaseExpiredAt is when the holder's Lease expired by local observation
	// (zero unless it has).
	leaseExpiredAt time.Time
	best           *coordinationv1beta1.LeaseCandidate
	toPing         []*coordinationv1beta1.LeaseCandidate
	waiting        bool      // a candidate above best may still answer
	deadline       time.Time // the next instant the outcome can change
	// contenders are the candidates that may still turn out best: those
	// above best that were pinged or are awaited, and best.
	contenders []string
	wrote      bool // the Lease was written
}

// judgeLease judges the Lease on the local clock: it is live while it names
// a holder whose record changed within the lease duration.
func (e *election) judgeLease() {
	if e.lease == nil {
		return
	}
	e.holder = holderIdentity(e.lease)
	if e.holder == "" {
		return
	}
	expiry := e.rec.observedAt.Add(e.leaseDuration())
	if e.now.Before(expiry) {
		e.leaseLive = true
		e.deadline = earliest(e.deadline, expiry)
		return
	}
	e.leaseExpiredAt = expiry
}

// outcome is the state of the election once this step is done, for
// cle_leases.
func (e *election) outcome() string {
	switch {
	case e.leaseLive && e.best != nil && e.best.Name != e.holder:
		return leasePreempting
	case e.leaseLive || e.wrote: // live, or just given to the winner
		return leaseOptimal
	case !e.leaseExpiredAt.IsZero():
		return leaseExpired
	default:
		return leaseVacant
	}
}

// holderIsCandidate reports whether the holder takes part in coordinated
// election (and so can hand the Lease over).
func (e *election) holderIsCandidate() bool {
	for _, lc := range e.all {
		if lc.Name == e.holder {
			return true
		}
	}
	return false
}

// judge decides, on the local clock, which candidates are alive, walking the
// ranking from the top: the first alive candidate is the best; those above it
// that may still be alive are pinged (or awaited); unresponsive ones are
// skipped. Under a live holder only the candidates better than it on merit
// matter: one that merely wins the tie-break does not take over, so it is not
// even pinged.
func (e *election) judge() {
	c := e.c
	holder := e.liveHolder()
	for _, lc := range e.ranked {
		if holder != nil && !strategy.Preempts(e.strat, lc, holder) {
			e.best = holder
			e.contenders = append(e.contenders, holder.Name)
			return
		}
		state, deadline, rec := e.liveness(lc)
		switch state {
		case alive:
			e.best = lc
			e.contenders = append(e.contenders, lc.Name)
			if lc.Name != e.holder {
				// It counts as alive only within the freshness window.
				e.deadline = earliest(e.deadline, deadline)
			}
			return
		case unknown:
			e.toPing = append(e.toPing, lc)
			e.contenders = append(e.contenders, lc.Name)
			e.waiting = true
			e.deadline = earliest(e.deadline, e.now.Add(c.opts.PingTimeout))
		case pinged:
			if !rec.pingSent {
				e.toPing = append(e.toPing, lc) // the last attempt failed
			}
			e.contenders = append(e.contenders, lc.Name)
			e.waiting = true
			e.deadline = earliest(e.deadline, deadline)
		case unresponsive:
		}
	}
}

// liveHolder returns the holder's candidate while the Lease is live and the
// holder is a valid candidate, or nil.
func (e *election) liveHolder() *coordinationv1beta1.LeaseCandidate {
	if !e.leaseLive {
		return nil
	}
	for _, lc := range e.ranked {
		if lc.Name == e.holder {
			return lc
		}
	}
	return nil
}

// liveness judges one candidate; the deadline is when that judgement lapses.
func (e *election) liveness(lc *coordinationv1beta1.LeaseCandidate) (liveness, time.Time, candidateRecord) {
	c := e.c
	rec := c.obs.candidate(lc, e.now)
	if e.leaseLive && lc.Name == e.holder {
		return alive, time.Time{}, rec // its Lease renewals prove it alive
	}
	if lc.Name == e.holder && !e.leaseExpiredAt.IsZero() && rec.renewedAt.Before(e.leaseExpiredAt) && !rec.unresponsive {
		// A holder that let its Lease expire is suspect whatever its
		// candidate's freshness says: only a renewal after the expiry (or
		// an answered ping) shows it is alive.
		rec.renewedAt = time.Time{}
	}
	state, deadline := rec.state(e.judgeAt, c.opts.CandidateFreshness, c.opts.PingTimeout)
	if state != pinged || e.now.Before(deadline) {
		return state, deadline, rec
	}
	if c.obs.noteUnanswered(lc, rec.pingedAt) {
		c.opts.Metrics.PingTimeouts.Inc()
		e.logger.V(2).Info("Candidate did not answer its ping; excluded until it writes again",
			"candidate", klog.KObj(lc), "pingTimeout", c.opts.PingTimeout, "pingDelivered", rec.pingSent)
	}
	return unresponsive, time.Time{}, rec
}

func (e *election) leaseDuration() time.Duration {
	if s := ptr.Deref(e.lease.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return e.c.opts.LeaseDuration
}

// ping asks the candidates whose liveness matters to renew. The ping time is
// just after the candidate's own renewTime: client-go's candidates answer a
// ping later than their last renewal, on their own clock, so a ping at this
// controller's time would make one whose clock runs behind rewrite its
// candidate again and again until its clock caught up. Liveness never reads
// the ping time: only a new renewTime counts as the answer.
//
// A ping that fails is tried again (rate-limited) until the ping timeout,
// which runs from the first attempt; after it the candidate is treated as
// unresponsive, so that a candidate nobody can write to (an admission policy,
// an object that no longer validates) cannot block the election. The errors
// are returned once the election step is done.
func (e *election) ping(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var errs []error
	for _, lc := range e.toPing {
		ping := e.now.Truncate(time.Microsecond)
		if lc.Spec.RenewTime != nil {
			// The API keeps microseconds: one after the renewal is after it.
			ping = lc.Spec.RenewTime.Truncate(time.Microsecond).Add(time.Microsecond)
		}
		clone := lc.DeepCopy()
		clone.Spec.PingTime = ptr.To(metav1.NewMicroTime(ping))
		_, err := e.c.access.LeaseCandidates(lc.Namespace).Update(ctx, clone)
		switch {
		case err == nil:
			e.c.obs.notePing(lc, e.now, true)
			e.c.opts.Metrics.Pings.Inc()
			e.c.events.resolve(e.key, "ping/"+lc.Name)
			logger.V(2).Info("Pinged candidate", "candidate", klog.KObj(lc), "reason", "ranked above every candidate known to be alive")
		case isConflictOrGone(err):
			// It changed (or went) meanwhile: the informer brings the new
			// version, and with it the next step.
			logger.V(4).Info("Candidate changed before its ping; waiting for the new version", "candidate", klog.KObj(lc), "err", err)
		default:
			e.c.obs.notePing(lc, e.now, false)
			if e.c.events.emitFor(e.key, "ping/"+lc.Name, e.lease, e.c.access.CandidateReference(lc), corev1.EventTypeWarning, ReasonPingFailed, "Ping",
				"Cannot ping candidate %s (%v); it is treated as unresponsive if it does not renew within %s", lc.Name, err, e.c.opts.PingTimeout) {
				logger.Info("Pinging a candidate failed; retrying until the ping timeout", "candidate", klog.KObj(lc), "err", err, "pingTimeout", e.c.opts.PingTimeout)
			}
			errs = append(errs, fmt.Errorf("ping candidate %s/%s: %w", lc.Namespace, lc.Name, err))
		}
	}
	return errors.Join(errs...)
}

// write applies the outcome to the Lease.
func (e *election) write(ctx context.Context) error {
	c := e.c
	if e.best != nil {
		c.events.resolve(e.key, ReasonNoEligible)
	}
	if e.leaseLive {
		c.clearNeeded(e.key)
		return e.steer(ctx)
	}
	c.markNeeded(e.key, e.neededAt())
	if e.waiting {
		return nil // a better candidate may still answer
	}
	if e.best == nil {
		if c.events.emit(e.key, e.lease, corev1.EventTypeWarning, ReasonNoEligible, "Elect",
			"None of the %d candidates can lead: %s", len(e.all), e.describeCandidates()) {
			c.opts.Metrics.Elections.WithLabelValues(resultNoEligible).Inc()
		}
		return nil
	}
	if until := e.gatheringUntil(); !until.IsZero() {
		e.deadline = earliest(e.deadline, until)
		e.logger.V(2).Info("Gathering candidates before the first election", "candidates", len(e.all),
			"until", until, "best", e.best.Name)
		return nil
	}
	return e.elect(ctx)
}

// gatheringUntil returns when the gathering window before the first election
// of a Lease closes, or zero when it is closed. Candidates that start
// together register milliseconds apart; electing the first one to register
// would make a worse candidate lead until the better one is steered to. So a
// Lease that has never had a holder waits for the window, measured from the
// first candidate seen, and closed early once no candidate has joined for a
// fraction of it. A Lease with a history of holders is elected at once.
func (e *election) gatheringUntil() time.Time {
	gather := e.c.opts.ElectionGather
	if gather <= 0 || e.rec.held {
		return time.Time{}
	}
	until := e.rec.firstJoin.Add(gather)
	if quiet := e.rec.lastJoin.Add(gather / gatherQuietFraction); quiet.Before(until) {
		until = quiet
	}
	if !e.now.Before(until) {
		return time.Time{}
	}
	return until
}

// gatherQuietFraction: the gathering window closes once no candidate has
// joined for 1/gatherQuietFraction of it.
const gatherQuietFraction = 5

// neededAt is when the election became needed: when the Lease expired by
// local observation, or now.
func (e *election) neededAt() time.Time {
	if !e.leaseExpiredAt.IsZero() {
		return e.leaseExpiredAt
	}
	return e.now
}

// elect creates the Lease naming the best candidate, or names it the holder of
// the vacant or expired Lease. Either way leaseTransitions, the fencing token,
// goes above every value this Lease has had, even across its deletion.
func (e *election) elect(ctx context.Context) error {
	c := e.c
	logger := klog.FromContext(ctx)
	if e.rec.held {
		if gone, err := e.bestDeparted(ctx); err != nil || gone {
			return err
		}
	}
	now := metav1.NewMicroTime(e.now)
	name := e.strat.Name()
	leases := c.access.Leases(e.key.Namespace)
	term, ok := e.nextTerm()
	if !ok {
		// The fencing token cannot go up any more, and a holder named under
		// a token already used could act alongside the one that used it.
		// No write (the API rejects the overflow anyway) and no retry
		// (nothing the candidates do can help): only an operator can reset
		// the token, by lowering or deleting the Lease and restarting the
		// controller, which otherwise remembers the highest token seen.
		if c.events.emit(e.key, e.lease, corev1.EventTypeWarning, ReasonTermsExhausted, "Elect",
			"Cannot elect %s: leaseTransitions has reached %d, the highest fencing token there is", e.best.Name, int32(math.MaxInt32)) {
			logger.Info("Not electing: the Lease's fencing token cannot go higher", "best", e.best.Name, "leaseTransitions", int32(math.MaxInt32))
		}
		return nil
	}
	c.events.resolve(e.key, ReasonTermsExhausted)
	var (
		written *coordinationv1.Lease
		err     error
		result  string
	)
	if e.lease == nil {
		result = resultCreated
		written, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.key.Namespace, Name: e.key.Name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(e.best.Name),
				Strategy:             ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(c.opts.LeaseDuration / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
				LeaseTransitions:     ptr.To(term),
			},
		})
	} else {
		result = resultElected
		clone := e.lease.DeepCopy()
		clone.Spec.HolderIdentity = ptr.To(e.best.Name)
		clone.Spec.PreferredHolder = nil
		clone.Spec.Strategy = ptr.To(name)
		clone.Spec.AcquireTime = &now
		clone.Spec.RenewTime = &now
		if ptr.Deref(clone.Spec.LeaseDurationSeconds, 0) <= 0 {
			clone.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
		}
		clone.Spec.LeaseTransitions = ptr.To(term)
		written, err = leases.Update(ctx, clone)
	}
	if err != nil {
		if !apierrors.IsConflict(err) {
			c.opts.Metrics.Elections.WithLabelValues(resultError).Inc()
		}
		return fmt.Errorf("elect %s: %w", e.best.Name, err)
	}
	e.wrote = true
	c.obs.noteWritten(e.key, e.lease, written, e.now)
	c.opts.Metrics.Elections.WithLabelValues(result).Inc()
	if e.best.Name != e.holder {
		c.opts.Metrics.LeaderChanges.Inc()
	}
	if since, ok := c.takeNeeded(e.key); ok {
		c.opts.Metrics.ElectionLatency.Observe(c.opts.Clock.Since(since).Seconds())
	}
	c.events.emitChange(written, c.access.CandidateReference(e.best), corev1.EventTypeNormal, ReasonLeaderElected, "Elect",
		"Elected %s under %s (term %d): %s", e.best.Name, name, ptr.Deref(written.Spec.LeaseTransitions, 0), e.describeCandidates())
	logger.V(2).Info("Elected leader", "holder", e.best.Name, "previousHolder", e.holder, "strategy", name,
		"term", ptr.Deref(written.Spec.LeaseTransitions, 0), "created", result == resultCreated)
	return nil
}

// bestDeparted reads the winner of a re-election from the API server. A
// leader that stops deletes its candidate and then releases the Lease; the
// two arrive on separate watches, and when the release comes first the
// cache still offers the departed candidate as the best. Naming it would
// leave the Lease leaderless for a lease duration, so the election waits
// for the deletion to reach the cache (its event wakes the Lease again). A
// first election needs no such read: no holder is leaving.
func (e *election) bestDeparted(ctx context.Context) (bool, error) {
	live, err := e.c.access.LeaseCandidates(e.best.Namespace).Get(ctx, e.best.Name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("read candidate %s before electing it: %w", e.best.Name, err)
	case live.UID == e.best.UID:
		return false, nil
	}
	e.logger.V(2).Info("The best candidate is gone from the API; electing once the cache shows it", "candidate", e.best.Name)
	e.deadline = earliest(e.deadline, e.now.Add(departedRecheck))
	return true, nil
}

// departedRecheck bounds the wait for the cache to show a departed
// candidate's deletion, should its event be lost to a relist.
const departedRecheck = time.Second

// nextTerm returns the leaseTransitions of the next election: above every
// value this Lease has had, even across its deletion, and 0 for the first
// holder of a Lease with no history. It reports false when the token is at
// its highest value and cannot go above it.
func (e *election) nextTerm() (int32, bool) {
	highest := e.rec.maxTransitions
	if e.lease != nil {
		highest = max(highest, ptr.Deref(e.lease.Spec.LeaseTransitions, 0))
	} else if !e.rec.held {
		return 0, true
	}
	if highest == math.MaxInt32 {
		return 0, false
	}
	return max(highest, 0) + 1, true
}

// steer keeps a live Lease whose holder is a candidate right: preferredHolder
// names the best candidate when that is better than the holder on merit, and
// is cleared when none is (or the preferred one is gone); the strategy is the
// one the candidates ask for now.
func (e *election) steer(ctx context.Context) error {
	current := ptr.Deref(e.lease.Spec.PreferredHolder, "")
	want := ""
	switch {
	case e.waiting:
		// A better candidate may still answer: keep a preferredHolder that
		// may still turn out right, but clear one that cannot (a deleted,
		// invalid or unresponsive candidate, one no better than the holder,
		// or one ranked below the best known alive), or the holder hands
		// over to it meanwhile.
		if slices.Contains(e.contenders, current) {
			want = current
		}
	case e.best != nil && e.best.Name != e.holder:
		want = e.best.Name
	}
	name := e.strat.Name()
	staleStrategy := ptr.Deref(e.lease.Spec.Strategy, "") != name
	if current == want && !staleStrategy {
		return nil
	}
	clone := e.lease.DeepCopy()
	clone.Spec.PreferredHolder = nil
	if want != "" {
		clone.Spec.PreferredHolder = ptr.To(want)
	}
	clone.Spec.Strategy = ptr.To(name)
	written, err := e.c.access.Leases(e.key.Namespace).Update(ctx, clone)
	if err != nil {
		return fmt.Errorf("set preferredHolder to %q and strategy to %q: %w", want, name, err)
	}
	e.wrote = true
	e.c.obs.noteWritten(e.key, e.lease, written, e.now)
	logger := klog.FromContext(ctx)
	if staleStrategy {
		logger.V(2).Info("Updated the Lease's strategy to the candidates'", "strategy", name, "was", ptr.Deref(e.lease.Spec.Strategy, ""))
	}
	switch {
	case current == want:
	case want == "":
		logger.V(2).Info("Cleared preferredHolder", "holder", e.holder, "was", current)
	default:
		e.c.opts.Metrics.Preemptions.Inc()
		e.c.events.emitChange(e.lease, e.c.access.CandidateReference(e.best), corev1.EventTypeNormal, ReasonPreferredHolderSet, "Preempt",
			"%s is better than holder %s under %s; asked the holder to hand over", want, e.holder, name)
		logger.V(2).Info("Set preferredHolder", "preferredHolder", want, "holder", e.holder, "was", current)
	}
	return nil
}

// describeCandidates lists the candidates by name: the informer's index
// returns them in random order, and an Event's note must not change (and so
// defeat its deduplication) when nothing else did. Past maxDescribed it
// names the first ones and counts the rest, so that the Event stays readable
// and within what the API accepts.
func (e *election) describeCandidates() string {
	cands := slices.Clone(e.all)
	slices.SortFunc(cands, func(a, b *coordinationv1beta1.LeaseCandidate) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Namespace, b.Namespace))
	})
	parts := make([]string, 0, min(len(cands), maxDescribed)+1)
	for _, lc := range cands[:min(len(cands), maxDescribed)] {
		parts = append(parts, fmt.Sprintf("%s(binary %s, emulation %s)", lc.Name, lc.Spec.BinaryVersion, lc.Spec.EmulationVersion))
	}
	if more := len(cands) - maxDescribed; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, ", ")
}

// maxDescribed is how many candidates an Event names.
const maxDescribed = 10

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// untilDeadline turns a deadline into a requeue delay (0: none).
func untilDeadline(now, deadline time.Time) time.Duration {
	if deadline.IsZero() {
		return 0
	}
	if d := deadline.Sub(now); d > 0 {
		return d
	}
	return time.Nanosecond
}

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

// byName orders candidates by name, so that what is reported about several
// reads the same on every reconcile.
func byName(a, b *coordinationv1beta1.LeaseCandidate) int {
	return strings.Compare(a.Name, b.Name)
}

// isConflictOrGone tells the writes that failed because the object changed
// (or went) under them: the informer brings what changed.
func isConflictOrGone(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err)
}
