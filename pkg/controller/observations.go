package controller

import (
	"math"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
)

// Liveness and expiry are judged on this controller's clock from what it saw
// and when, never by comparing a timestamp written by another machine with
// local time: under clock skew such a comparison expires live candidates or
// keeps dead ones. The records below hold those observations.
//
// Only the informer event handlers create, change and delete records of what
// was observed. Reconcile and the garbage collector read them, and note only
// what the controller itself did (a ping sent, a ping gone unanswered, an
// election settled). Every change of a record is a pure function from the
// record and what happened (an event, or the result of the controller's own
// write) to the next record; the methods of observations only find the
// record, under the lock, and store what the function returns. An object in
// the cache whose handler has not run yet has no record (or one of an older
// object); readers then judge it as seen just now, which is what its handler
// is about to record.

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
	// onlyCreated tells that renewedAt is the candidate's creation: it has
	// not written since. A creation shows that a process got as far as
	// registering, not that it still runs and watches its candidate.
	onlyCreated bool
	// firstSeen is when the controller first observed the candidate; with
	// renewedAt it bounds how long the candidate has gone without renewing.
	firstSeen time.Time
	// pingedAt is when the controller first tried to ping the candidate and
	// is waiting for an answer (zero if no ping is outstanding); pingSent
	// tells whether a ping write has succeeded since.
	pingedAt time.Time
	pingSent bool
	// pingRefused tells whether a ping write failed for a reason that is the
	// candidate's own (see refusedPing) since pingedAt.
	pingRefused bool
	// unresponsive is set when a ping that reached the candidate went
	// unanswered for the ping timeout; it stays set until the candidate
	// writes a new renewTime.
	unresponsive bool
	// unreachable is set when no attempt to ping the candidate succeeded
	// within the ping timeout (the API refused or failed every write): the
	// candidate is passed over until then, and pinged again after it, so
	// that an outage of the API costs an election no more than that. When
	// the writes were refused for the candidate itself, each further
	// undelivered ping doubles the wait, up to maxUnreachableBackoff. A
	// renewal clears it.
	unreachable unreachable
	// exited is set, from the kubelet's report, when the process instance
	// the candidate registers has exited (see exits.go): the candidate is
	// unresponsive until it registers another instance. It is the view's,
	// not observed here.
	exited bool
}

// unreachable is when a candidate that could not be pinged is tried again.
type unreachable struct {
	until   time.Time
	backoff time.Duration
}

// nextUnreachable is the wait before pinging again a candidate that no ping
// reached by now: the ping timeout, and when the writes were refused for the
// candidate itself, doubled at each further miss. An API that is down says
// nothing about the candidate: however long it was down, the candidate is
// asked again within a ping timeout of its coming back.
func (r *candidateRecord) nextUnreachable(now time.Time, pingTimeout time.Duration) unreachable {
	if !r.pingRefused {
		// One ping timeout past the ping's own, counted from the first
		// attempt: a controller that comes back to the candidate later
		// than that (its steps failed meanwhile, or it was paused) asks
		// again at once rather than passing over a candidate on the
		// strength of an attempt made long before.
		return unreachable{until: r.pingedAt.Add(2 * pingTimeout)}
	}
	backoff := min(max(pingTimeout, 2*r.unreachable.backoff), maxUnreachableBackoff)
	return unreachable{until: now.Add(backoff), backoff: backoff}
}

// maxUnreachableBackoff bounds the wait between attempts to ping a
// candidate that no ping write reaches (one an admission policy protects,
// say): one failed write per candidate per that much, at most.
const maxUnreachableBackoff = time.Minute

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
	case r.unresponsive || r.exited:
		return unresponsive, time.Time{}
	case !r.renewedAt.IsZero() && now.Before(r.renewedAt.Add(freshness)):
		return alive, r.renewedAt.Add(freshness)
	case !r.pingedAt.IsZero():
		return pinged, r.pingedAt.Add(pingTimeout)
	case now.Before(r.unreachable.until):
		return unresponsive, r.unreachable.until
	default:
		return unknown, time.Time{}
	}
}

// leaseRecord is what the controller observed of one Lease that candidates
// reference, and of the candidates joining it. Its parts have lifecycles of
// their own, each reset by name below. The record outlives the Lease object
// while candidates reference the Lease, so that a Lease deleted and created
// again continues its history.
type leaseRecord struct {
	leaseObject
	leaseHistory
	gathering
	pendingWrite
	// settled is noted by a step that left a live Lease as it is: while it
	// holds, a renewal of the Lease changes nothing and needs no step. Any
	// other change of the Lease clears it.
	settled bool
}

// leaseObject is the Lease object as last observed: reset when the Lease is
// deleted or no candidate references it any more.
type leaseObject struct {
	// observed tells whether the fields below describe a Lease object in the
	// cache; false before the first observation and after a deletion.
	observed    bool
	uid         types.UID
	holder      string
	renewTime   time.Time
	transitions int32
	// terms are the fields a renewal leaves as they are: any change of them
	// needs a step.
	terms leaseTerms
	// observedAt is when, on the local clock, the holder record last changed.
	observedAt time.Time
	// renewGap is the time between the last two renewals observed of the
	// same holder in the same term, or between their renewTimes if longer:
	// the holder's own cadence (zero until two were seen).
	renewGap time.Duration
	// stamp is the Lease's access.HolderInstanceAnnotation as it was: which
	// process made the last renewal, read (proof.ProcessOf) only when the
	// Lease is deleted, not at every renewal.
	stamp string
	// sighting is when and after how many registration probes this Lease
	// object was first seen: see registrationProbe.
	sighting sighting
}

// sighting is when a Lease object was first seen, and the mark of its
// registration probe then (set: recorded).
type sighting struct {
	set  bool
	at   time.Time
	mark uint64
}

// leaseHistory is what outlives the Lease object: kept across its deletion
// while candidates reference the Lease name, reset only when the record
// goes.
type leaseHistory struct {
	// maxTransitions is the highest leaseTransitions seen of this Lease, kept
	// across its deletion: the fencing token never goes backwards while this
	// controller remembers the Lease.
	maxTransitions int32
	// held is set once the Lease has been seen with a holder (or with a
	// history of holders): from then on an election is held at once, without
	// a gathering window.
	held bool
	// gone: the Lease was deleted (or replaced by another object) since
	// this controller last named its holder. Its holders may have counted
	// terms themselves before that, unseen (a holder that re-acquires its
	// own Lease after its renew deadline passed numbers a new term), so its
	// next term is numbered above the token bound as it is now, which is
	// above every token the controller saw (see tokenBound).
	gone bool
	// departed is the holder of the Lease when it was deleted, and until
	// when it may act by this controller's observation. It outlives a Lease
	// created again by anybody (creates carry no precondition), and is
	// replaced only by a later end or by a Lease naming that holder again:
	// until it ends, nobody else is named or preferred.
	departed departedHolder
	// longestDuration is the longest leaseDurationSeconds this Lease has
	// been seen with: a holder whose renewals this controller did not see
	// (a Lease deleted or created behind the cache) is given at least that.
	longestDuration time.Duration
	// losses are the terms that ended without their holder's release (its
	// Lease expired, or its process exited, and this controller elected
	// again) within Options.UnsteadyWindow, oldest first: see unsteadyUntil.
	losses []termLoss
}

// termLoss is a term of candidate that ended unreleased at at.
type termLoss struct {
	candidate string
	at        time.Time
}

// maxLosses bounds the losses kept per Lease.
const maxLosses = 16

// unsteadyUntil is until when candidate name, by its losses, is unsteady at
// now: unsteadyLosses of its terms ended unreleased within window, and the
// older of the last ones leaves the window then. Zero when it is steady.
func (h *leaseHistory) unsteadyUntil(name string, now time.Time, window time.Duration) time.Time {
	var recent []time.Time
	for _, l := range h.losses {
		if l.candidate == name && now.Sub(l.at) < window {
			recent = append(recent, l.at)
		}
	}
	if len(recent) < unsteadyLosses {
		return time.Time{}
	}
	return recent[len(recent)-unsteadyLosses].Add(window)
}

// departedHolder is the holder of a deleted Lease (unknownHolder when the
// deletion came with a copy too old to tell), and when its term ends on this
// controller's clock; process is its process when the last renewal said so
// and the deletion came in order after it (a copy that came with a relist
// may be older than a renewal by another process).
type departedHolder struct {
	holder  string
	until   time.Time
	process proof.Process
}

// depart is the history once holder (its process when known) may act until
// until, keeping whichever of it and an earlier departed holder ends later.
func (h leaseHistory) depart(holder string, until time.Time, process proof.Process) leaseHistory {
	if h.departed.holder == "" || until.After(h.departed.until) {
		h.departed = departedHolder{holder: holder, until: until, process: process}
	}
	return h
}

// gathering is when the Lease's candidates joined it: reset when the last
// candidate leaves.
type gathering struct {
	// firstJoin and lastJoin are when, on the local clock, the first and the
	// latest candidate of the Lease were seen joining it.
	firstJoin, lastJoin time.Time
	// inherited is set when candidates of the Lease were there when this
	// controller started (in its informer's initial list): the Lease may
	// have had a holder, and been deleted, before this controller could see
	// it (see unseenHolderUntil).
	inherited bool
}

// pendingWrite is the controller's own write of the Lease in flight: set by
// the write, reset when the cache shows a newer Lease than the one the
// write replaced (replaced, "" for a create), or when the Lease is deleted.
// A step in between would judge an outdated Lease and repeat a write that
// can only conflict. Comparing with the replaced version needs no ordering
// of resourceVersions, and holds whether the write's own event arrives
// before or after the write's response.
type pendingWrite struct {
	writing   bool
	replaced  string
	writtenAt time.Time
	// named is the holder the write named; for a create that lost to one
	// the cache does not show yet, unknownHolder.
	named string
	// writtenUID is the UID of the Lease object the write left ("" when
	// unknown): a Lease of another UID shown before it is its successor.
	writtenUID types.UID
}

// unknownHolder stands for the holder of a Lease the controller knows
// exists but has not seen.
const unknownHolder = "(unknown)"

// observations are the controller's records, shared by the informer event
// handlers (which record what changed) and the workers (which judge).
type observations struct {
	mu         sync.Mutex
	candidates map[types.NamespacedName]*candidateRecord
	leases     map[types.NamespacedName]*leaseRecord
	// tombstones keep the history of Leases whose record went (the Lease
	// deleted and no candidate left) for historyTTL, so that a Lease
	// elected again soon after (its component scaled to zero and back)
	// continues its fencing tokens. They are swept when a Lease goes.
	tombstones map[types.NamespacedName]tombstone
	historyTTL time.Duration
	// forgotten is the highest token of a tombstone dropped.
	forgotten int32
	// leaseDuration is the duration assumed for a Lease that carries none.
	leaseDuration time.Duration
	// probeMark is the mark of the registration probe of a namespace (nil:
	// none); it takes no lock of observations.
	probeMark func(namespace string) uint64
}

// sight records, in a record that observed its Lease object (of key) at
// now, when that object was first seen, unless it is recorded; the caller
// holds the lock.
func (o *observations) sight(key types.NamespacedName, r *leaseRecord, now time.Time) {
	if !r.observed || r.sighting.set {
		return
	}
	r.sighting = sighting{set: true, at: now}
	if o.probeMark != nil {
		r.sighting.mark = o.probeMark(key.Namespace)
	}
}

// tombstone is the history of a Lease whose record went, until when it is
// kept.
type tombstone struct {
	history leaseHistory
	until   time.Time
}

func newObservations(historyTTL, leaseDuration time.Duration) *observations {
	return &observations{
		leaseDuration: leaseDuration,
		candidates:    map[types.NamespacedName]*candidateRecord{},
		leases:        map[types.NamespacedName]*leaseRecord{},
		tombstones:    map[types.NamespacedName]tombstone{},
		historyTTL:    historyTTL,
	}
}

func renewTimeOf(lc *coordinationv1beta1.LeaseCandidate) time.Time {
	if lc.Spec.RenewTime == nil {
		return time.Time{}
	}
	return lc.Spec.RenewTime.Time
}

// ---- written by the event handlers ----

// observeCandidate records a candidate seen by the informer at now.
// inInitialList marks objects from the first list, whose last renewal was not
// seen. It reports whether the candidate renewed (or is new).
func (o *observations) observeCandidate(lc *coordinationv1beta1.LeaseCandidate, now time.Time, inInitialList bool) bool {
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	next, renewed := candidateSeen(o.candidates[key], lc, now, inInitialList)
	o.candidates[key] = &next
	return renewed
}

// candidateSeen is the record of lc once the informer showed it at now,
// given the record before (nil: none). A candidate with another UID is a new
// one. It reports whether the candidate renewed (or is new).
func candidateSeen(prev *candidateRecord, lc *coordinationv1beta1.LeaseCandidate, now time.Time, inInitialList bool) (candidateRecord, bool) {
	renew := renewTimeOf(lc)
	if prev == nil || prev.uid != lc.UID {
		r := candidateRecord{uid: lc.UID, renewTime: renew, firstSeen: now}
		if !inInitialList {
			r.renewedAt, r.onlyCreated = now, true
		}
		return r, true
	}
	r := *prev
	if renew.Equal(r.renewTime) {
		return r, false
	}
	r.renewTime = renew
	r.renewedAt, r.onlyCreated = now, false
	r.pingedAt, r.pingSent, r.pingRefused = time.Time{}, false, false
	r.unresponsive, r.unreachable = false, unreachable{}
	return r, true
}

func (o *observations) forgetCandidate(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.candidates, key)
}

// candidateJoined records that a candidate of the Lease key was seen at now
// (in the informer's initial list when initial is set), and the Lease itself
// if it is in the cache (lease non-nil) and not recorded yet: the Lease's
// own handler drops Leases that no candidate references.
func (o *observations) candidateJoined(key types.NamespacedName, lease *coordinationv1.Lease, now time.Time, initial bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.leaseLocked(key, now)
	*r = r.joined(lease, now, initial, o.leaseDuration)
	o.sight(key, r, now)
}

// joined is the record once a candidate of the Lease was seen at now (in the
// informer's initial list when initial is set), with the Lease as cached
// (nil: none).
func (r leaseRecord) joined(lease *coordinationv1.Lease, now time.Time, initial bool, defaultDuration time.Duration) leaseRecord {
	if r.firstJoin.IsZero() {
		r.firstJoin = now
		r.inherited = initial
	}
	r.lastJoin = now
	if lease != nil && !r.observed {
		r = r.observe(lease, now, defaultDuration)
	}
	return r
}

// observeLease records the Lease as seen by the informer at now. The first
// observation of a Lease counts as a renewal, as in client-go's elector: a
// holder gets a full lease duration from the moment this controller first
// sees it. It reports whether the change needs a reconcile: anything but a
// renewal of a settled Lease does, and so does the arrival of the
// controller's own write.
func (o *observations) observeLease(lease *coordinationv1.Lease, now time.Time) bool {
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.leaseLocked(key, now)
	next, step := r.leaseSeen(lease, now, o.leaseDuration)
	*r = next
	o.sight(key, r, now)
	return step
}

// leaseSeen is the record once the informer showed lease at now, and
// whether that needs a step (see observeLease).
//
// A Lease of another UID than the one the controller's write in flight left
// means that Lease was deleted, and another created, before the cache showed
// either (a relist after the watch expired shows only the last): the holder
// the write named may have taken its term and renewed it, unseen, until just
// before now, as for a deletion seen through a relist (see leaseDeleted).
func (r leaseRecord) leaseSeen(lease *coordinationv1.Lease, now time.Time, defaultDuration time.Duration) (leaseRecord, bool) {
	if r.writing && r.writtenUID != "" && lease.UID != "" && lease.UID != r.writtenUID {
		r.leaseHistory = r.departUnseen(r.named, now, defaultDuration)
	}
	ownWrite := r.writing && lease.ResourceVersion != r.replaced
	if ownWrite {
		r.pendingWrite = pendingWrite{}
	}
	renewalOnly := r.observed && r.holder == holderIdentity(lease) && r.transitions == ptr.Deref(lease.Spec.LeaseTransitions, 0) &&
		r.terms == termsOf(lease)
	r = r.observe(lease, now, defaultDuration)
	if renewalOnly && r.settled && !ownWrite {
		return r, false
	}
	r.settled = false
	return r, true
}

// observe is the record with lease as its holder record, seen at now.
//
// A Lease with another UID than the one recorded was deleted and created
// again unseen: a relist after the watch expired delivers the new object
// as an update of the old one. The old one's holder is then departed as
// if its deletion had been observed through that relist (see
// leaseDeleted).
func (r leaseRecord) observe(lease *coordinationv1.Lease, now time.Time, defaultDuration time.Duration) leaseRecord {
	holder, renew, transitions := holderIdentity(lease), leaseRenewTime(lease), ptr.Deref(lease.Spec.LeaseTransitions, 0)
	if r.observed && r.uid != "" && lease.UID != "" && r.uid != lease.UID {
		r.leaseHistory = r.departRelisted(now, defaultDuration)
		r.leaseObject = leaseObject{}
		r.gone = true
	}
	if !r.shows(lease) {
		var gap time.Duration
		if r.observed && r.holder == holder && holder != "" && r.transitions == transitions {
			gap = now.Sub(r.observedAt)
			// On a slow server a renewal held up and the next one on time
			// arrive a moment apart: the holder's own renewTimes (a
			// difference on one clock) say how often it renews.
			if !renew.IsZero() && !r.renewTime.IsZero() {
				gap = max(gap, renew.Sub(r.renewTime))
			}
		}
		seen := r.sighting // the same object (another UID reset it above)
		r.leaseObject = leaseObject{observed: true, uid: lease.UID, holder: holder, renewTime: renew, transitions: transitions, observedAt: now, renewGap: gap,
			stamp: lease.Annotations[access.HolderInstanceAnnotation], sighting: seen}
	}
	r.terms = termsOf(lease)
	if holder != "" && holder == r.departed.holder {
		// The departed holder is named again: its term is this Lease's.
		r.departed = departedHolder{}
	}
	r.longestDuration = max(r.longestDuration, r.terms.duration(0))
	r.maxTransitions = max(r.maxTransitions, mayNumber(lease))
	if holder != "" || transitions > 0 || lease.Spec.AcquireTime != nil {
		r.held = true
	}
	return r
}

// mayNumber is the highest token the Lease l may go on to: its own, or one
// above when it asks its holder to hand over, which the holder does by
// counting its successor's term itself. Only the controller asks, and only
// on a Lease it has seen, so a Lease never goes more than one term beyond
// what the controller saw of it; a handover the controller never sees (the
// Lease deleted before its watch shows it) is still below the next term it
// numbers.
func mayNumber(l *coordinationv1.Lease) int32 {
	n := ptr.Deref(l.Spec.LeaseTransitions, 0)
	if holderIdentity(l) != "" && askedToHandOver(l) && n < math.MaxInt32 {
		n++
	}
	return n
}

// leaseDeleted records that the Lease is gone at now. Its history is kept
// in the record while candidates still reference it (keep); otherwise the
// record goes, leaving a tombstone.
//
// Its holder learns of the deletion only at its next renewal, and may not
// renew at all (paused, cut off), so it may act for its own lease duration
// (defaultDuration when the Lease carried none) past its last renewal. A
// deletion delivered in order follows every renewal, so that is the last
// renewal observed. One delivered by a relist (relisted: a
// DeletedFinalStateUnknown after the watch expired) comes with the last
// copy the cache had, which may be long out of date: the holder may have
// renewed, or another been named, unseen, until just before now. Then the
// term is counted from now, at the longest duration known, and a copy
// without a holder stands for an unknown one.
func (o *observations) leaseDeleted(key types.NamespacedName, keep, relisted bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.leases[key]
	if !ok {
		return
	}
	*r = r.leaseGone(relisted, now, o.leaseDuration)
	if !keep {
		o.bury(key, r, now)
	}
}

// leaseGone is the record once the Lease's deletion was seen at now
// (through a relist when relisted is set): see leaseDeleted.
func (r leaseRecord) leaseGone(relisted bool, now time.Time, defaultDuration time.Duration) leaseRecord {
	switch {
	case r.observed && relisted:
		r.leaseHistory = r.departRelisted(now, defaultDuration)
	case r.observed && r.holder != "":
		r.leaseHistory = r.depart(r.holder, r.observedAt.Add(r.terms.duration(defaultDuration)), proof.ProcessOf(r.stamp, r.holder, r.renewTime))
	}
	r.leaseObject, r.pendingWrite, r.settled = leaseObject{}, pendingWrite{}, false
	r.gone = r.gone || r.held
	return r
}

// departRelisted is the history once the recorded holder of a Lease whose
// deletion was learnt late (a relist) departed: it may have renewed, or
// another been named, unseen until just before now, so its term runs from
// now, at the longest duration known (longestDuration includes the recorded
// Lease's own), and a record without a holder stands for an unknown one.
func (r leaseRecord) departRelisted(now time.Time, defaultDuration time.Duration) leaseHistory {
	return r.departUnseen(r.holder, now, defaultDuration)
}

// departUnseen is the history once holder ("" for an unknown one) of a Lease
// deleted unseen until now departed: its term runs from now, at the longest
// duration known.
func (r leaseRecord) departUnseen(holder string, now time.Time, defaultDuration time.Duration) leaseHistory {
	if holder == "" {
		holder = unknownHolder
	}
	return r.depart(holder, now.Add(max(defaultDuration, r.longestDuration)), proof.Process{})
}

// bury removes the record of key, keeping its history as a tombstone, and
// sweeps the tombstones past their time; the caller holds the lock.
func (o *observations) bury(key types.NamespacedName, r *leaseRecord, now time.Time) {
	delete(o.leases, key)
	for k, t := range o.tombstones {
		if !now.Before(t.until) {
			o.forget(k, t.history)
		}
	}
	if r.held {
		o.tombstones[key] = tombstone{history: r.leaseHistory, until: now.Add(o.historyTTL)}
	}
}

// forget drops the tombstone of key, whose history h was kept; the caller
// holds the lock. Its highest token stays in forgotten: the controller
// numbers every later term of any Lease above it (see tokenBound).
func (o *observations) forget(key types.NamespacedName, h leaseHistory) {
	delete(o.tombstones, key)
	o.forgotten = max(o.forgotten, h.maxTransitions)
}

// forgottenTokens is the highest token of a Lease history this controller
// dropped.
func (o *observations) forgottenTokens() int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.forgotten
}

// candidatesLeft records that the last candidate of the Lease key is gone:
// its gathering starts anew, what was observed of the Lease object is
// dropped (its own handler stops following a Lease nobody references), and
// the whole record goes if the Lease does not exist either.
func (o *observations) candidatesLeft(key types.NamespacedName, leaseExists bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.leases[key]
	if !ok {
		return
	}
	if !leaseExists {
		o.bury(key, r, now)
		return
	}
	*r = r.candidatesGone()
}

// candidatesGone is the record once the last candidate left: only the
// history stays.
func (r leaseRecord) candidatesGone() leaseRecord {
	return leaseRecord{leaseHistory: r.leaseHistory}
}

// leaseLocked returns the record of key, creating it (with the history of
// its tombstone, if it has one in time) at now; the caller holds the lock.
func (o *observations) leaseLocked(key types.NamespacedName, now time.Time) *leaseRecord {
	r, ok := o.leases[key]
	if !ok {
		r = &leaseRecord{}
		if t, ok := o.tombstones[key]; ok {
			if now.Before(t.until) {
				r.leaseHistory = t.history
				delete(o.tombstones, key)
			} else {
				o.forget(key, t.history)
			}
		}
		o.leases[key] = r
	}
	return r
}

// ---- read by reconcile and the garbage collector ----

// candidate returns a copy of the record of lc. A candidate whose handler has
// not run yet is judged as its handler will record it: created, and so seen
// renewed, now.
func (o *observations) candidate(lc *coordinationv1beta1.LeaseCandidate, now time.Time) candidateRecord {
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.candidates[key]; ok && r.uid == lc.UID {
		return *r
	}
	return candidateRecord{uid: lc.UID, renewTime: renewTimeOf(lc), firstSeen: now, renewedAt: now, onlyCreated: true}
}

// lease returns a copy of the record of the Lease key. When lease (the
// cached object, or nil) is not what the record shows yet, its handler has
// not run: the Lease is judged as seen now, as the handler will record it.
func (o *observations) lease(key types.NamespacedName, lease *coordinationv1.Lease, now time.Time) leaseRecord {
	o.mu.Lock()
	defer o.mu.Unlock()
	var r leaseRecord
	if rec, ok := o.leases[key]; ok {
		r = *rec
	} else if t, ok := o.tombstones[key]; ok && now.Before(t.until) {
		r.leaseHistory = t.history
	}
	if r.firstJoin.IsZero() {
		r.firstJoin, r.lastJoin = now, now
	}
	if lease != nil && !r.shows(lease) {
		r = r.observe(lease, now, o.leaseDuration)
	}
	o.sight(key, &r, now)
	return r
}

// shows reports whether the record's holder record is that of lease.
func (r *leaseRecord) shows(lease *coordinationv1.Lease) bool {
	return r.observed && r.holder == holderIdentity(lease) && r.renewTime.Equal(leaseRenewTime(lease)) &&
		r.transitions == ptr.Deref(lease.Spec.LeaseTransitions, 0)
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

// ---- what the controller itself did ----

// notePing records an attempt to ping lc at now, whether the write
// succeeded, and whether it was refused for the candidate itself, unless the
// candidate renewed meanwhile (its renewTime no longer matches the one the
// ping was based on). The ping timeout runs from the first attempt, so a
// candidate that cannot be pinged is given up on in time.
func (o *observations) notePing(lc *coordinationv1beta1.LeaseCandidate, now time.Time, sent, refused bool) {
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.candidates[key]; ok {
		*r = r.pingTried(lc, now, sent, refused)
	}
}

// pingTried is the record after an attempt at now to ping lc, which the
// record is of unless the candidate was re-created or renewed meanwhile (the
// ping was based on an older renewTime): then nothing changes.
func (r candidateRecord) pingTried(lc *coordinationv1beta1.LeaseCandidate, now time.Time, sent, refused bool) candidateRecord {
	if r.uid != lc.UID || !r.renewTime.Equal(renewTimeOf(lc)) {
		return r
	}
	if r.pingedAt.IsZero() {
		r.pingedAt = now
	}
	r.pingSent = r.pingSent || sent
	r.pingRefused = r.pingRefused || refused
	return r
}

// noteUnanswered records, at now, that the ping of the candidate key (of
// UID uid) first tried at pingedAt went unanswered for pingTimeout, unless
// it renewed or was pinged anew meanwhile (see pingTimedOut). It returns the
// record before the mark and the verdict, and whether the mark was made.
func (o *observations) noteUnanswered(key types.NamespacedName, uid types.UID, pingedAt, now time.Time, pingTimeout time.Duration) (candidateRecord, pingVerdict, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.candidates[key]
	if !ok || r.uid != uid || !r.pingedAt.Equal(pingedAt) {
		return candidateRecord{}, 0, false
	}
	before := *r
	next, verdict := r.pingTimedOut(now, pingTimeout)
	*r = next
	return before, verdict, true
}

// pingVerdict is what a ping unanswered for the ping timeout says of its
// candidate.
type pingVerdict int

const (
	// verdictUnresponsive: the ping reached the candidate, which did not
	// answer: it is passed over until it writes again.
	verdictUnresponsive pingVerdict = iota + 1
	// verdictUnreachable: no ping reached the candidate (the API refused or
	// failed every write): it is passed over until its unreachable.until,
	// then pinged again.
	verdictUnreachable
	// verdictAskAgain: no ping reached the candidate, and the first attempt
	// is too old to say anything (the controller's steps failed or it was
	// paused since): it is pinged again now.
	verdictAskAgain
)

// pingTimedOut is the one rule for a ping that went unanswered for the ping
// timeout: the record once the ping is over, and what it says of the
// candidate. The caller has checked that the ping, first tried at
// r.pingedAt, timed out by now.
func (r candidateRecord) pingTimedOut(now time.Time, pingTimeout time.Duration) (candidateRecord, pingVerdict) {
	verdict := verdictUnresponsive
	if r.pingSent {
		r.unresponsive = true
	} else {
		r.unreachable = r.nextUnreachable(now, pingTimeout)
		verdict = verdictUnreachable
		if !now.Before(r.unreachable.until) {
			verdict = verdictAskAgain
		}
	}
	r.pingedAt, r.pingSent, r.pingRefused = time.Time{}, false, false
	return r, verdict
}

// noteSettled records that reconcile left the Lease, as the record shows it,
// as it is.
func (o *observations) noteSettled(key types.NamespacedName, lease *coordinationv1.Lease) {
	if lease == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.leases[key]; ok {
		*r = r.settledAs(lease)
	}
}

// settledAs is the record once a step left lease as it is: settled, if the
// record still shows that Lease.
func (r leaseRecord) settledAs(lease *coordinationv1.Lease) leaseRecord {
	if r.shows(lease) && r.terms == termsOf(lease) {
		r.settled = true
	}
	return r
}

// noteWritten records the controller's write of the Lease at now, which
// replaced the cached Lease replaced (nil for a create). A Lease whose last
// candidate left meanwhile has no record, and gets none back.
func (o *observations) noteWritten(key types.NamespacedName, replaced, written *coordinationv1.Lease, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.leases[key]; ok {
		*r = r.written(replaced, written, now)
	}
}

// noteNumbered records that a write numbering a term token of the Lease key
// was sent at now: whether it applied or not, no later term gets it.
func (o *observations) noteNumbered(key types.NamespacedName, token int32, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.leaseLocked(key, now)
	r.maxTransitions, r.held = max(r.maxTransitions, token), true
}

// written is the record once the controller's write of written, replacing
// replaced (nil for a create), succeeded at now.
func (r leaseRecord) written(replaced, written *coordinationv1.Lease, now time.Time) leaseRecord {
	r.pendingWrite = pendingWrite{writing: true, writtenAt: now, named: holderIdentity(written), writtenUID: written.UID}
	if replaced != nil {
		r.replaced = replaced.ResourceVersion
	}
	r.settled = false
	r.longestDuration = max(r.longestDuration, termsOf(written).duration(0))
	r.maxTransitions = max(r.maxTransitions, mayNumber(written))
	r.held = r.held || holderIdentity(written) != ""
	if holderIdentity(written) != "" && (replaced == nil || ptr.Deref(written.Spec.LeaseTransitions, 0) != ptr.Deref(replaced.Spec.LeaseTransitions, 0)) {
		r.gone = false // a term this controller numbered: the object counts on from it
	}
	return r
}

// noteLoss records that holder's term of the Lease key ended at now without
// its release, keeping the losses of the last window (see
// Options.UnsteadyWindow).
func (o *observations) noteLoss(key types.NamespacedName, holder string, now time.Time, window time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rec, ok := o.leases[key]
	if !ok || window <= 0 {
		return
	}
	kept := make([]termLoss, 0, len(rec.losses)+1)
	for _, l := range rec.losses {
		if now.Sub(l.at) < window {
			kept = append(kept, l)
		}
	}
	kept = append(kept, termLoss{candidate: holder, at: now})
	rec.losses = kept[max(0, len(kept)-maxLosses):]
}

// noteCreateLost records that a create of the Lease at now failed because
// the Lease exists, though the cache does not show it: until it does, the
// Lease is treated as held by someone unknown (see noteLeaseAbsent).
func (o *observations) noteCreateLost(key types.NamespacedName, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.leases[key]; ok {
		*r = r.createLost(now)
	}
}

// createLost is the record once a create of the Lease failed at now because
// the Lease exists unseen.
func (r leaseRecord) createLost(now time.Time) leaseRecord {
	if !r.observed {
		r.pendingWrite = pendingWrite{writing: true, writtenAt: now, named: unknownHolder}
	}
	return r
}

// noteLeaseAbsent records that the API, read at now, has no Lease that the
// cache never showed although a create of it succeeded (or lost to another):
// it was deleted before the cache caught up. Its holder may have renewed it
// until the deletion, which happened before now, with a lease duration of
// its own that the cache never showed, so it is treated as a holder that
// departed at now with the longest of wait and the durations this Lease was
// seen with (see departedUntil).
func (o *observations) noteLeaseAbsent(key types.NamespacedName, now time.Time, wait time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.leases[key]; ok {
		*r = r.absent(now, wait)
	}
}

// absent is the record once the API, read at now, showed no Lease although
// the controller's create of it succeeded or lost (see noteLeaseAbsent).
func (r leaseRecord) absent(now time.Time, wait time.Duration) leaseRecord {
	if !r.writing || r.replaced != "" || r.observed {
		return r
	}
	r.leaseHistory = r.depart(r.named, now.Add(max(wait, r.longestDuration)), proof.Process{})
	r.pendingWrite = pendingWrite{}
	return r
}

func holderIdentity(lease *coordinationv1.Lease) string {
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// leaseTerms are the fields of a Lease that its holder's renewals keep.
type leaseTerms struct {
	preferred, strategy string
	durationSeconds     int32
}

// duration is the Lease's leaseDurationSeconds, or def when it has none.
func (t leaseTerms) duration(def time.Duration) time.Duration {
	if t.durationSeconds > 0 {
		return time.Duration(t.durationSeconds) * time.Second
	}
	return def
}

func termsOf(lease *coordinationv1.Lease) leaseTerms {
	return leaseTerms{
		preferred:       ptr.Deref(lease.Spec.PreferredHolder, ""),
		strategy:        string(ptr.Deref(lease.Spec.Strategy, "")),
		durationSeconds: ptr.Deref(lease.Spec.LeaseDurationSeconds, 0),
	}
}

func leaseRenewTime(lease *coordinationv1.Lease) time.Time {
	if lease.Spec.RenewTime == nil {
		return time.Time{}
	}
	return lease.Spec.RenewTime.Time
}
