package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// registrationProbe proves that one LeaseCandidate watch has delivered every
// registration that reached the server before a Lease was created, so that
// the Lease's first holder is the best of them however far behind the watch
// is.
//
// A probe is a write to a LeaseCandidate of that watch (a ping), sent after
// the controller saw the Lease. The server applied the Lease before the
// controller saw it, and the probe after, so every registration applied
// before the Lease was applied before the probe too; a watch delivers in the
// order of resourceVersions, so once it delivers an object at or past the
// probe's resourceVersion it has delivered all of them. (Across a relist the
// informer delivers the objects it lists in key order, not in that order:
// what it shows meanwhile can still miss one for the moment its delivery
// takes.)
//
// One probe serves every Lease seen before it was sent, so a burst of new
// Leases costs one probe per round trip, not one per Lease. Leases note the
// number of probes sent when they are first seen (mark); a probe numbered
// above that mark was sent after. resourceVersions are compared as numbers,
// as the API server's storage gives them; where one is not a number the
// probe cannot be recognised, and first elections go on without it.
type registrationProbe struct {
	mu sync.Mutex
	// sent counts the probes sent.
	sent uint64
	// seen is the highest resourceVersion the watch has delivered.
	seen uint64
	// flight is the probe in flight (n zero: none).
	flight probeFlight
	// proved is the number of the latest probe the watch delivered.
	proved uint64
	// opaque: the server's resourceVersions are not numbers.
	opaque bool
	// waiting are the Leases to step again when a probe is delivered.
	waiting map[types.NamespacedName]struct{}
}

// probeFlight is a probe sent at sentAt, numbered n; rv is its
// resourceVersion once its write has returned (zero before).
type probeFlight struct {
	n      uint64
	rv     uint64
	sentAt time.Time
}

// probeView is what a step knows of the probes of its Lease's watch.
type probeView struct {
	// usable: first elections wait for a probe (one watch, numeric
	// resourceVersions).
	usable bool
	// proved is the number of the latest probe delivered.
	proved uint64
}

// mark is the number of probes sent so far: a Lease seen now is covered by
// a probe numbered above it.
func (p *registrationProbe) mark() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

func (p *registrationProbe) view() probeView {
	p.mu.Lock()
	defer p.mu.Unlock()
	return probeView{usable: !p.opaque, proved: p.proved}
}

// start asks, at now, for a probe that covers the Lease key, which is
// stepped again once one is delivered. It returns the number of the probe
// to send, or false when one is in flight already: one sent less than stale
// ago, whose delivery the step waits for.
func (p *registrationProbe) start(key types.NamespacedName, now time.Time, stale time.Duration) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == nil {
		p.waiting = map[types.NamespacedName]struct{}{}
	}
	p.waiting[key] = struct{}{}
	if p.flight.n != 0 && now.Sub(p.flight.sentAt) < stale {
		return 0, false
	}
	p.sent++
	p.flight = probeFlight{n: p.sent, sentAt: now}
	return p.sent, true
}

// written records that probe n's write returned with resourceVersion rv;
// it returns the Leases to step again when that settles it (the watch
// delivered it first, or rv is not a number).
func (p *registrationProbe) written(n uint64, rv string) []types.NamespacedName {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flight.n != n {
		return nil
	}
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || v == 0 {
		p.opaque, p.flight = true, probeFlight{}
		return p.takeWaiting()
	}
	p.flight.rv = v
	return p.check()
}

// failed records that probe n's write failed: the next step sends another.
func (p *registrationProbe) failed(n uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flight.n == n {
		p.flight = probeFlight{}
	}
}

// delivered records that the watch delivered an object at resourceVersion
// rv, and returns the Leases to step again if that delivers the probe.
func (p *registrationProbe) delivered(rv string) []types.NamespacedName {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = max(p.seen, v)
	return p.check()
}

// check settles the probe in flight if the watch has delivered it; the
// caller holds the lock.
func (p *registrationProbe) check() []types.NamespacedName {
	if p.flight.rv == 0 || p.seen < p.flight.rv {
		return nil
	}
	p.proved, p.flight = p.flight.n, probeFlight{}
	return p.takeWaiting()
}

// takeWaiting returns the Leases waiting, in order (the steps they queue
// follow it), and forgets them.
func (p *registrationProbe) takeWaiting() []types.NamespacedName {
	keys := slices.SortedFunc(maps.Keys(p.waiting), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	clear(p.waiting)
	return keys
}

// probeFor returns the probe of the watch that delivers the candidates of
// namespace ns, or nil when there is none to rely on: candidates of one
// namespace come through more than one watch (both API modes at once), and
// a probe on one says nothing of the other.
func (c *Controller) probeFor(ns string) *registrationProbe {
	return inScope(c.probes, ns)
}

// probeMark is the mark of namespace ns's probe (see registrationProbe.mark).
func (c *Controller) probeMark(ns string) uint64 {
	if p := c.probeFor(ns); p != nil {
		return p.mark()
	}
	return 0
}

// probeView is what a step of a Lease of namespace ns knows of its probe.
func (c *Controller) probeView(ns string) probeView {
	if p := c.probeFor(ns); p != nil {
		return p.view()
	}
	return probeView{}
}

// candidateDelivered feeds the probe of the watch that delivered lc (the
// watch of its namespace) the candidate's resourceVersion. A deletion
// delivered in order carries the resourceVersion of the deletion.
func (c *Controller) candidateDelivered(lc *coordinationv1beta1.LeaseCandidate) {
	if p := c.probeFor(lc.Namespace); p != nil {
		c.wake(p.delivered(lc.ResourceVersion))
	}
}

// wake steps the Leases a delivered probe covers.
func (c *Controller) wake(keys []types.NamespacedName) {
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// sendProbe asks for a probe covering the Lease of the view, and sends one
// unless one is in flight: a ping of the candidate named (the Lease's best
// candidate, whose answer also shows it alive). A probe in flight longer
// than a ping timeout and twice the watch's lag is taken as lost. A replica
// whose own lock lapsed sends none: it is not to elect.
func (c *Controller) sendProbe(ctx context.Context, v *view, name string) error {
	p := c.probeFor(v.key.Namespace)
	lc := v.candidate(name)
	if p == nil || lc == nil {
		return nil
	}
	if hold := c.opts.Holding; hold != nil && !hold() {
		return nil
	}
	now := c.opts.Clock.Now()
	n, send := p.start(v.key, now, c.opts.PingTimeout+2*v.spread)
	if !send {
		return nil
	}
	clone := lc.DeepCopy()
	clone.Spec.PingTime = ptr.To(metav1.NewMicroTime(probeTime(lc, now)))
	written, err := c.access.LeaseCandidates(lc.Namespace).Update(ctx, clone)
	switch {
	case isConflictOrGone(err):
		// The candidate changed (or went) meanwhile: the informer
		// brings the new version, and with it the next step and probe.
		p.failed(n)
		klog.FromContext(ctx).V(4).Info("Candidate changed before the probe; probing again with the new version", "candidate", klog.KObj(lc), "err", err)
		return nil
	case err != nil:
		p.failed(n)
		return fmt.Errorf("probe the candidate watch through %s/%s: %w", lc.Namespace, lc.Name, err)
	}
	c.opts.Metrics.Probes.Inc()
	klog.FromContext(ctx).V(3).Info("Probing the candidate watch: electing once it shows this write, and with it every registration made before the Lease was created",
		"candidate", klog.KObj(lc), "probe", n)
	c.wake(p.written(n, written.ResourceVersion))
	return nil
}

// probeTime is the pingTime a probe writes: a microsecond (what the API
// keeps) past both the candidate's renewTime and its pingTime, so that the
// write changes the object (a write that changes nothing gets no new
// resourceVersion, and proves nothing) and asks the candidate to renew as a
// ping does (see election.ping), without taking back a ping pending; now
// when it has neither.
func probeTime(lc *coordinationv1beta1.LeaseCandidate, now time.Time) time.Time {
	var at time.Time
	for _, t := range []*metav1.MicroTime{lc.Spec.RenewTime, lc.Spec.PingTime} {
		if t != nil && t.After(at) {
			at = t.Time
		}
	}
	if at.IsZero() {
		return now.Truncate(time.Microsecond)
	}
	return at.Truncate(time.Microsecond).Add(time.Microsecond)
}
