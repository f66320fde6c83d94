package controller

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Liveness and expiry are judged on this controller's clock from what it saw
// and when, never by comparing a timestamp written by another machine with
// local time: under clock skew such a comparison expires live candidates or
// keeps dead ones. The records below hold those observations.

// candidateRecord is what the controller observed of one LeaseCandidate.
type candidateRecord struct {
	uid types.UID
	// renewTime is spec.renewTime as last observed (zero if unset); a change
	// of it is a renewal.
	renewTime time.Time
	// renewedAt is when, on the local clock, the controller saw the candidate
	// created or renewed. Zero when it was only listed at start-up, so that
	// its freshness is unknown.
	renewedAt time.Time
	// firstSeen is when the controller first observed the candidate; with
	// renewedAt it bounds how long the candidate has gone without renewing.
	firstSeen time.Time
	// pingedAt is when the controller pinged the candidate and is waiting for
	// an answer (zero if no ping is outstanding).
	pingedAt time.Time
	// unresponsive is set when a ping went unanswered for the ping timeout;
	// it stays set until the candidate writes a new renewTime.
	unresponsive bool
}

// lastRenewal is when the candidate was last known to be renewed.
func (r *candidateRecord) lastRenewal() time.Time {
	if r.renewedAt.IsZero() {
		return r.firstSeen
	}
	return r.renewedAt
}

// state judges the candidate at now: alive within freshness of its last seen
// renewal, pinged until the ping timeout (the deadline returned; the caller
// marks it unresponsive once that has passed), unresponsive, or unknown.
func (r *candidateRecord) state(now time.Time, freshness, pingTimeout time.Duration) (liveness, time.Time) {
	switch {
	case r.unresponsive:
		return unresponsive, time.Time{}
	case !r.renewedAt.IsZero() && now.Before(r.renewedAt.Add(freshness)):
		return alive, r.renewedAt.Add(freshness)
	case !r.pingedAt.IsZero():
		return pinged, r.pingedAt.Add(pingTimeout)
	default:
		return unknown, time.Time{}
	}
}

// leaseRecord is what the controller observed of one Lease's holder record.
type leaseRecord struct {
	holder      string
	renewTime   time.Time
	transitions int32
	// observedAt is when, on the local clock, the holder record last changed.
	observedAt time.Time
}

// observations are the controller's records, shared by the informer event
// handlers (which record what changed) and the workers (which judge).
type observations struct {
	mu         sync.Mutex
	candidates map[types.NamespacedName]*candidateRecord
	leases     map[types.NamespacedName]*leaseRecord
}

func newObservations() *observations {
	return &observations{
		candidates: map[types.NamespacedName]*candidateRecord{},
		leases:     map[types.NamespacedName]*leaseRecord{},
	}
}

func renewTimeOf(lc *coordinationv1beta1.LeaseCandidate) time.Time {
	if lc.Spec.RenewTime == nil {
		return time.Time{}
	}
	return lc.Spec.RenewTime.Time
}

// observeCandidate records a candidate seen by the informer at now.
// inInitialList marks objects from the first list, whose last renewal was not
// seen. It reports whether the candidate renewed (or is new).
func (o *observations) observeCandidate(lc *coordinationv1beta1.LeaseCandidate, now time.Time, inInitialList bool) bool {
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	renew := renewTimeOf(lc)
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.candidates[key]
	if !ok || r.uid != lc.UID {
		r = &candidateRecord{uid: lc.UID, renewTime: renew, firstSeen: now}
		if !inInitialList {
			r.renewedAt = now
		}
		o.candidates[key] = r
		return true
	}
	if renew.Equal(r.renewTime) {
		return false
	}
	r.renewTime = renew
	r.renewedAt = now
	r.pingedAt = time.Time{}
	r.unresponsive = false
	return true
}

func (o *observations) forgetCandidate(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.candidates, key)
}

// candidate returns a copy of the record of lc, creating one (first seen now,
// freshness unknown) if the handlers have not recorded it yet.
func (o *observations) candidate(lc *coordinationv1beta1.LeaseCandidate, now time.Time) candidateRecord {
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.candidates[key]
	if !ok || r.uid != lc.UID {
		r = &candidateRecord{uid: lc.UID, renewTime: renewTimeOf(lc), firstSeen: now}
		o.candidates[key] = r
	}
	return *r
}

// recordPing notes a ping written at now, unless the candidate renewed
// meanwhile (its renewTime no longer matches the one the ping was based on).
func (o *observations) recordPing(lc *coordinationv1beta1.LeaseCandidate, now time.Time) {
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.candidates[key]; ok && r.uid == lc.UID && r.renewTime.Equal(renewTimeOf(lc)) {
		r.pingedAt = now
	}
}

// markUnresponsive records that the ping of the candidate went unanswered,
// unless it renewed meanwhile. It reports whether the mark was made.
func (o *observations) markUnresponsive(lc *coordinationv1beta1.LeaseCandidate, pingedAt time.Time) bool {
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.candidates[key]
	if !ok || r.uid != lc.UID || !r.pingedAt.Equal(pingedAt) {
		return false
	}
	r.pingedAt = time.Time{}
	r.unresponsive = true
	return true
}

// observeLease records the holder record of a Lease seen at now. The first
// observation of a Lease counts as a renewal, as in client-go's elector: a
// holder gets a full lease duration from the moment this controller first sees
// it.
func (o *observations) observeLease(lease *coordinationv1.Lease, now time.Time) leaseRecord {
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	var renew time.Time
	if lease.Spec.RenewTime != nil {
		renew = lease.Spec.RenewTime.Time
	}
	transitions := ptr.Deref(lease.Spec.LeaseTransitions, 0)
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.leases[key]
	if !ok || r.holder != holder || !r.renewTime.Equal(renew) || r.transitions != transitions {
		r = &leaseRecord{holder: holder, renewTime: renew, transitions: transitions, observedAt: now}
		o.leases[key] = r
	}
	return *r
}

func (o *observations) forgetLease(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.leases, key)
}

// snapshot copies every candidate record, for metrics.
func (o *observations) snapshot() []candidateRecord {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]candidateRecord, 0, len(o.candidates))
	for _, r := range o.candidates {
		out = append(out, *r)
	}
	return out
}
