package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
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
// step is retried with backoff.
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := c.opts.Clock.Now()
	lease := c.leaseOf(key)

	cands, nextExpiry := c.liveCandidates(key, now)
	if len(cands) == 0 {
		c.clearNeeded(key)
		c.events.forget(key)
		return untilDeadline(now, nextExpiry), nil
	}

	res := strategy.ResolveStrategy(cands)
	if res.Conflict {
		if c.events.emit(key, lease, corev1.EventTypeWarning, ReasonStrategyConflict, "Elect",
			"Candidates at binary version %s ask for different strategies (%s); not electing until they agree", res.BinaryVersion, describeConflict(res.Conflicting)) {
			c.opts.Metrics.Conflicts.Inc()
			logger.V(2).Info("Strategy conflict; not electing", "binaryVersion", res.BinaryVersion, "candidates", describeConflict(res.Conflicting))
		}
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
		return untilDeadline(now, nextExpiry), nil
	}
	strat, ok := c.opts.Strategies.Get(res.Strategy)
	if !ok {
		// Another controller owns this strategy (or no candidate has a valid
		// binary version): no pings, no writes.
		logger.V(4).Info("Strategy not handled here; leaving the Lease alone", "strategy", res.Strategy)
		return untilDeadline(now, nextExpiry), nil
	}
	ranked, invalid := strat.Rank(cands)
	for _, inv := range invalid {
		c.reportInvalid(ctx, key, lease, inv.Candidate, "strategy "+string(strat.Name()), inv.Reason)
	}
	for _, lc := range ranked {
		c.events.resolve(key, "candidate/"+lc.Name) // valid (again)
	}

	e := election{c: c, logger: logger, key: key, now: now, lease: lease, strategy: strat.Name(), ranked: ranked, all: cands}
	e.deadline = nextExpiry
	e.observeLease()
	if e.leaseLive && !e.holderIsCandidate() {
		// A holder outside coordinated election cannot hand over: nothing to
		// ping or steer until it releases the Lease or the Lease expires.
		logger.V(4).Info("Lease held by a non-candidate; waiting for release or expiry", "holder", e.holder)
		return untilDeadline(now, e.deadline), nil
	}
	e.judge()
	if err := e.ping(ctx); err != nil {
		return 0, err
	}
	if err := e.write(ctx); err != nil {
		return 0, err
	}
	return untilDeadline(now, e.deadline), nil
}

// reportInvalid tells, once per change, that a candidate cannot take part.
func (c *Controller) reportInvalid(ctx context.Context, key types.NamespacedName, lease *coordinationv1.Lease, lc *coordinationv1beta1.LeaseCandidate, under string, reason error) {
	if c.events.emitFor(key, "candidate/"+lc.Name, lease, corev1.EventTypeWarning, ReasonInvalidCandidate, "Elect",
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
	c        *Controller
	logger   klog.Logger
	key      types.NamespacedName
	now      time.Time
	lease    *coordinationv1.Lease
	strategy coordinationv1.CoordinatedLeaseStrategy
	ranked   []*coordinationv1beta1.LeaseCandidate // valid candidates, best first
	all      []*coordinationv1beta1.LeaseCandidate // every unexpired candidate

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
}

// observeLease judges the Lease on the local clock: it is live while it names
// a holder whose record changed within the lease duration.
func (e *election) observeLease() {
	if e.lease == nil {
		return
	}
	e.holder = ptr.Deref(e.lease.Spec.HolderIdentity, "")
	if e.holder == "" {
		return
	}
	rec := e.c.obs.observeLease(e.lease, e.now)
	expiry := rec.observedAt.Add(e.leaseDuration())
	if e.now.Before(expiry) {
		e.leaseLive = true
		e.deadline = earliest(e.deadline, expiry)
		return
	}
	e.leaseExpiredAt = expiry
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
// skipped.
func (e *election) judge() {
	c := e.c
	for _, lc := range e.ranked {
		state, deadline := e.liveness(lc)
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
			e.contenders = append(e.contenders, lc.Name)
			e.waiting = true
			e.deadline = earliest(e.deadline, deadline)
		case unresponsive:
		}
	}
}

// liveness judges one candidate; the deadline is when that judgement lapses.
func (e *election) liveness(lc *coordinationv1beta1.LeaseCandidate) (liveness, time.Time) {
	c := e.c
	if e.leaseLive && lc.Name == e.holder {
		return alive, time.Time{} // its Lease renewals prove it alive
	}
	rec := c.obs.candidate(lc, e.now)
	if lc.Name == e.holder && !e.leaseExpiredAt.IsZero() && rec.renewedAt.Before(e.leaseExpiredAt) && !rec.unresponsive {
		// A holder that let its Lease expire is suspect whatever its
		// candidate's freshness says: only a renewal after the expiry (or
		// an answered ping) shows it is alive.
		rec.renewedAt = time.Time{}
	}
	state, deadline := rec.state(e.now, c.opts.CandidateFreshness, c.opts.PingTimeout)
	if state != pinged || e.now.Before(deadline) {
		return state, deadline
	}
	if c.obs.markUnresponsive(lc, rec.pingedAt) {
		c.opts.Metrics.PingTimeouts.Inc()
		e.logger.V(2).Info("Candidate did not answer its ping; excluded until it writes again",
			"candidate", klog.KObj(lc), "pingTimeout", c.opts.PingTimeout)
	}
	return unresponsive, time.Time{}
}

func (e *election) leaseDuration() time.Duration {
	if s := ptr.Deref(e.lease.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return e.c.opts.LeaseDuration
}

// ping asks the candidates whose liveness matters to renew. The ping time is
// after the candidate's own renewTime even if its clock runs ahead of ours:
// client-go's candidates only answer a ping later than their last renewal.
func (e *election) ping(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for _, lc := range e.toPing {
		// The API keeps microseconds: compare and write at that precision,
		// or a ping within a microsecond of the renewal reads as equal to it.
		ping := e.now.Truncate(time.Microsecond)
		if lc.Spec.RenewTime != nil && !ping.After(lc.Spec.RenewTime.Time) {
			ping = lc.Spec.RenewTime.Truncate(time.Microsecond).Add(time.Microsecond)
		}
		clone := lc.DeepCopy()
		clone.Spec.PingTime = ptr.To(metav1.NewMicroTime(ping))
		if _, err := e.c.access.LeaseCandidates(lc.Namespace).Update(ctx, clone); err != nil {
			return fmt.Errorf("ping candidate %s/%s: %w", lc.Namespace, lc.Name, err)
		}
		e.c.obs.recordPing(lc, e.now)
		e.c.opts.Metrics.Pings.Inc()
		logger.V(2).Info("Pinged candidate", "candidate", klog.KObj(lc), "reason", "ranked above every candidate known to be alive")
	}
	return nil
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
	return e.elect(ctx)
}

// neededAt is when the election became needed: when the Lease expired by
// local observation, or now.
func (e *election) neededAt() time.Time {
	if e.lease != nil && e.holder != "" {
		rec := e.c.obs.observeLease(e.lease, e.now)
		if t := rec.observedAt.Add(e.leaseDuration()); t.Before(e.now) {
			return t
		}
	}
	return e.now
}

// elect creates the Lease naming the best candidate, or names it the holder of
// the vacant or expired Lease.
func (e *election) elect(ctx context.Context) error {
	c := e.c
	logger := klog.FromContext(ctx)
	now := metav1.NewMicroTime(e.now)
	leases := c.access.Leases(e.key.Namespace)
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
				Strategy:             ptr.To(e.strategy),
				LeaseDurationSeconds: ptr.To(int32(c.opts.LeaseDuration / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
				LeaseTransitions:     ptr.To[int32](0),
			},
		})
	} else {
		result = resultElected
		clone := e.lease.DeepCopy()
		clone.Spec.HolderIdentity = ptr.To(e.best.Name)
		clone.Spec.PreferredHolder = nil
		clone.Spec.Strategy = ptr.To(e.strategy)
		clone.Spec.AcquireTime = &now
		clone.Spec.RenewTime = &now
		if ptr.Deref(clone.Spec.LeaseDurationSeconds, 0) <= 0 {
			clone.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
		}
		// leaseTransitions is the fencing token: every new term gets a new one.
		clone.Spec.LeaseTransitions = ptr.To(ptr.Deref(clone.Spec.LeaseTransitions, 0) + 1)
		written, err = leases.Update(ctx, clone)
	}
	if err != nil {
		c.opts.Metrics.Elections.WithLabelValues(resultError).Inc()
		return fmt.Errorf("elect %s: %w", e.best.Name, err)
	}
	c.obs.observeLease(written, e.now)
	c.opts.Metrics.Elections.WithLabelValues(result).Inc()
	c.opts.Metrics.LeaderChanges.Inc()
	if since, ok := c.takeNeeded(e.key); ok {
		c.opts.Metrics.ElectionLatency.Observe(c.opts.Clock.Since(since).Seconds())
	}
	c.events.emitChange(written, corev1.EventTypeNormal, ReasonLeaderElected, "Elect",
		"Elected %s under %s (term %d): %s", e.best.Name, e.strategy, ptr.Deref(written.Spec.LeaseTransitions, 0), e.describeCandidates())
	logger.V(2).Info("Elected leader", "holder", e.best.Name, "previousHolder", e.holder, "strategy", e.strategy,
		"term", ptr.Deref(written.Spec.LeaseTransitions, 0), "created", result == resultCreated)
	return nil
}

// steer keeps preferredHolder right on a Lease whose live holder is a
// candidate: set to the best candidate when that is better than the holder,
// cleared when the holder is the best (or the preferred one is gone).
func (e *election) steer(ctx context.Context) error {
	current := ptr.Deref(e.lease.Spec.PreferredHolder, "")
	want := ""
	switch {
	case e.waiting:
		// A better candidate may still answer: keep a preferredHolder that
		// may still turn out right, but clear one that cannot (a deleted,
		// invalid or unresponsive candidate, or one ranked below the best
		// known alive), or the holder hands over to it meanwhile.
		if current == "" || slices.Contains(e.contenders, current) {
			return nil
		}
	case e.best != nil && e.best.Name != e.holder:
		want = e.best.Name
	}
	if current == want {
		return nil
	}
	clone := e.lease.DeepCopy()
	clone.Spec.PreferredHolder = nil
	if want != "" {
		clone.Spec.PreferredHolder = ptr.To(want)
	}
	if _, err := e.c.access.Leases(e.key.Namespace).Update(ctx, clone); err != nil {
		return fmt.Errorf("set preferredHolder to %q: %w", want, err)
	}
	logger := klog.FromContext(ctx)
	if want == "" {
		logger.V(2).Info("Cleared preferredHolder", "holder", e.holder, "was", current)
		return nil
	}
	e.c.opts.Metrics.Preemptions.Inc()
	e.c.events.emitChange(e.lease, corev1.EventTypeNormal, ReasonPreferredHolderSet, "Preempt",
		"%s is better than holder %s under %s; asked the holder to hand over", want, e.holder, e.strategy)
	logger.V(2).Info("Set preferredHolder", "preferredHolder", want, "holder", e.holder, "was", current)
	return nil
}

// describeCandidates lists the candidates by name: the informer's index
// returns them in random order, and an Event's note must not change (and so
// defeat its deduplication) when nothing else did.
func (e *election) describeCandidates() string {
	cands := slices.Clone(e.all)
	slices.SortFunc(cands, func(a, b *coordinationv1beta1.LeaseCandidate) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Namespace, b.Namespace))
	})
	parts := make([]string, 0, len(cands))
	for _, lc := range cands {
		parts = append(parts, fmt.Sprintf("%s(binary %s, emulation %s)", lc.Name, lc.Spec.BinaryVersion, lc.Spec.EmulationVersion))
	}
	return strings.Join(parts, ", ")
}

func describeConflict(cs []strategy.CandidateStrategy) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s: %q", c.Name, c.Strategy))
	}
	return strings.Join(parts, ", ")
}

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
