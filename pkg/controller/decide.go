package controller

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/strategy"
)

// This file is what the controller decides for one Lease: decide is a pure
// function from a snapshot of what the controller has cached and observed
// (a view) to a decision, a plain value that names candidates and holds no
// pointer into the cache. It does no I/O, reads no clock and changes
// nothing; reconcile.go builds the view, calls decide, and applies the
// decision (pings, at most one Lease write, Events, records, the next
// look). Every rule of an election lives here, and decide_test.go compares
// whole decisions in tables.

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

// view is everything decide reads about one Lease, as of one instant.
type view struct {
	key types.NamespacedName
	// lease is the Lease as cached (nil when there is none). decide never
	// changes it: writes are made on copies.
	lease *coordinationv1.Lease
	// record is what the controller observed of the Lease and its history.
	record leaseRecord
	// candidates are the LeaseCandidates that reference the Lease, expired
	// ones included, each with what the controller observed of it.
	candidates []observedCandidate
	// now is the present; judgeAt is the instant candidates' freshness is
	// judged at: when an event queued this step (or the step was due), or
	// now. The time a step waits in the queue is the controller's own
	// delay, not the candidates' silence.
	now, judgeAt time.Time
	// spread is how late the watch may deliver a write made now
	// (WatchLag.Spread: the longest the controller's own writes took to
	// show lately, or its watch's lag). A holder's Lease expires that much
	// later, and the gathering window is that much longer.
	spread time.Duration
	// holderExitedAt is when the controller read the kubelet's report that
	// the process instance that made the Lease's last renewal has exited
	// (zero: no such report). The holder's term is over then, Lease or
	// not: see exits.go.
	holderExitedAt time.Time
	// departedExited: the kubelet reported that the process of the deleted
	// Lease's holder (record.departed) has exited; its term is over.
	departedExited bool
	// builtinLeft: the strategies kube-apiserver's election controller
	// elects (strategy.Builtin) are left to it (Options.ElectsBuiltin).
	builtinLeft bool
	// probe is what is known of the registration probe of the Lease's
	// candidate watch (see registrationProbe).
	probe probeView
	// tokenFloor is what every term is numbered above; tokenBound, the
	// token bound as it is now, what a term of a Lease deleted since it
	// was last named is numbered above (see Controller.tokenBounds and
	// leaseHistory.gone).
	tokenFloor, tokenBound int32
}

// observedCandidate is a candidate as cached with its record.
type observedCandidate struct {
	lc  *coordinationv1beta1.LeaseCandidate
	rec candidateRecord
}

// decision is what one election step does.
type decision struct {
	// waiting says why no election is made now although one may be due
	// (waitNone when there is no such reason); the step runs again at next
	// or when something changes. With waitOwnWrite nothing is judged: the
	// cache still shows the Lease that the controller's last write
	// replaced.
	waiting waitReason
	// confirmAbsent: read the Lease from the API to learn whether a Lease
	// that the cache never showed still exists (see decide).
	confirmAbsent bool
	// outcome is the state of the election for cle_leases once the write
	// (if any) is made, and unwritten its state if the write fails or is
	// not made ("" forgets the Lease: no candidate is left).
	outcome, unwritten leaseState
	// forget drops what the controller said and timed about a Lease that
	// has no candidates left.
	forget bool
	// events are emitted unless they repeat the last Event of their topic;
	// resolved are the topics whose situation is over, so that their next
	// occurrence is news again.
	events   []eventIntent
	resolved []string
	// unanswered are the pings that went unanswered for the ping timeout:
	// their candidates are marked (see candidateRecord.pingTimedOut).
	unanswered []unansweredPing
	// pings are the candidates to ping, with the pingTime each gets.
	pings []pingIntent
	// probe names the candidate to ping, unless a probe is in flight, to
	// prove that the candidate watch shows every registration made before
	// the Lease was created (see registrationProbe); "": none needed.
	probe string
	// write is the one Lease write of the step, if any.
	write *leaseWrite
	// settled: the Lease is left as it is (live, or not ours to elect);
	// until something else changes, a renewal of it needs no step.
	settled bool
	// needed: the election became needed at neededSince (markNeeded), or
	// is not needed (clearNeeded), for the latency metric.
	markNeeded  bool
	neededSince time.Time
	clearNeeded bool
	// next is when to look again (zero: only when something changes).
	next time.Time
	// logs explain the decision.
	logs []logLine
}

// A decision is a plain value: it names candidates (all in the Lease's
// namespace) by name, and holds no pointer into the cache; reconcile finds
// the objects in the view it decided on.

// unansweredPing is a ping of the candidate named, first tried at pingedAt,
// that went unanswered for the ping timeout.
type unansweredPing struct {
	candidate string
	uid       types.UID
	pingedAt  time.Time
}

// waitReason is why a step that could elect waits.
type waitReason int

const (
	waitNone waitReason = iota
	// waitOwnWrite: the cache does not show the controller's last write yet.
	waitOwnWrite
	// waitStrategy: candidates not known to be alive would decide the
	// strategy; they are pinged.
	waitStrategy
	// waitDeparted: the holder of the deleted Lease may still act.
	waitDeparted
	// waitAnswer: a candidate better than any known to be alive is pinged.
	waitAnswer
	// waitUnseenHolder: the candidates were there before this controller
	// started, and a holder it could not see may still act.
	waitUnseenHolder
	// waitGathering: the first election waits for its candidates to gather.
	waitGathering
	// waitRegistrations: the first election waits for the candidate watch
	// to show every registration made before the Lease was created.
	waitRegistrations
)

func (w waitReason) String() string {
	return [...]string{"none", "own write", "strategy", "departed holder", "answer", "unseen holder", "gathering", "registrations"}[w]
}

// eventIntent is an Event decide wants said, once per change of its note.
type eventIntent struct {
	topic     string
	related   string // the candidate the Event is about; "": the Lease itself
	eventType string
	reason    string
	action    string
	note      string
	// counter is bumped, and log written, when the Event is news.
	counter counter
	log     *logLine
}

// counter names a metric an Event's news bumps.
type counter int

const (
	countNone counter = iota
	countConflict
	countInvalid
	countNoEligible
	countHolderExited
)

// pingIntent asks a candidate whether it is alive.
type pingIntent struct {
	candidate string
	pingTime  time.Time
	// early: no election is due yet; the ping checks ahead, whether a
	// candidate better than a live holder is alive (preemption) or whether
	// a late holder is (see pingLateHolder). Pings for due elections go
	// first (see pingBudget).
	early bool
}

// Kinds of Lease write.
const (
	writeOpen   = "open"   // no Lease before a first election: create it naming nobody
	writeCreate = "create" // no Lease: create it naming the winner
	writeElect  = "elect"  // vacant or expired: name the winner
	writeSteer  = "steer"  // live: set or clear preferredHolder, update the strategy
)

// leaseWrite is the Lease write of a step: the object to create or update
// (a copy), and what it means.
type leaseWrite struct {
	kind  string
	lease *coordinationv1.Lease
	// winner is the holder an election names, or the candidate preferred by
	// a steer ("" when a steer clears preferredHolder).
	winner string
	// confirmWinner: read the winner from the API before the write; if it is
	// gone, do not write (see reconcile's confirm).
	confirmWinner bool
	// previousHolder, previousPreferred and previousStrategy are the Lease's
	// before the write, for logs and Events.
	previousHolder, previousPreferred string
	previousStrategy                  coordinationv1.CoordinatedLeaseStrategy
	strategy                          coordinationv1.CoordinatedLeaseStrategy
	// candidates describes the candidates, for the LeaderElected Event.
	candidates string
	// first: the election names the first holder of a Lease with no
	// history (created now, or opened before: see opensFirst).
	first bool
	// lostBy is the holder whose term an election ends unreleased (its
	// Lease expired, or its process exited) though nobody asked it to hand
	// over (see askedToHandOver): see unsteadyUntil.
	lostBy string
}

// logLine is one structured log line: V(level) msg, keysAndValues.
type logLine struct {
	level int
	msg   string
	kv    []any
}

func (d *decision) log(level int, msg string, kv ...any) {
	d.logs = append(d.logs, logLine{level: level, msg: msg, kv: kv})
}

func (d *decision) event(e eventIntent) { d.events = append(d.events, e) }

func (d *decision) resolve(topic string) { d.resolved = append(d.resolved, topic) }

func (d *decision) wakeAt(t time.Time) { d.next = earliest(d.next, t) }

// decide is one election step for the Lease v describes, under the options
// o (only its durations and strategies are read).
func decide(o *Options, v *view) decision {
	var d decision
	now := v.now
	rec := &v.record
	if rec.writing && (v.lease == nil) == (rec.replaced == "") && (v.lease == nil || v.lease.ResourceVersion == rec.replaced) {
		// The cache still shows what this controller's last write replaced:
		// judging it would repeat a write that can only conflict. The
		// write's arrival wakes this Lease again.
		if wait := rec.writtenAt.Add(ownWriteWait); wait.After(now) {
			d.waiting = waitOwnWrite
			d.next = wait
			d.log(4, "Waiting for the cache to show the last write", "replaced", rec.replaced)
			return d
		}
		if v.lease == nil {
			// A Lease created (by this controller or another writer) that
			// the cache still does not show: its watch lags, or the Lease
			// was deleted before the cache caught up. Creating it again
			// could name a second holder while the first one, unseen, still
			// renews; so the API is read to tell which, and the Lease is
			// created again only once its holder's term has surely run out.
			d.waiting, d.confirmAbsent = waitOwnWrite, true
			d.next = now.Add(ownWriteWait)
			d.log(2, "The cache does not show a Lease that exists or existed; reading it from the API", "holder", rec.named)
			return d
		}
	}

	cands, nextExpiry := liveCandidates(o, v)
	d.next = nextExpiry
	if len(cands) == 0 {
		d.forget, d.clearNeeded = true, true
		return d
	}

	e := election{o: o, v: v, d: &d, all: cands}
	e.judgeLease()
	res, waiting := e.resolveStrategy()
	if waiting {
		d.waiting = waitStrategy
		d.log(2, "Candidates not known to be alive would decide the strategy; pinged, not electing until they answer or time out",
			"candidates", e.contenders)
		d.outcome, d.unwritten = e.outcome(false), e.outcome(false)
		return d
	}
	if res.Conflict {
		d.event(eventIntent{
			topic: ReasonStrategyConflict, eventType: corev1.EventTypeWarning, reason: ReasonStrategyConflict, action: "Elect",
			note:    fmt.Sprintf("Candidates at binary version %s ask for different strategies (%s); not electing until they agree", res.BinaryVersion, strategy.DescribeConflict(res.Conflicting)),
			counter: countConflict,
			log:     &logLine{level: 2, msg: "Strategy conflict; not electing", kv: []any{"binaryVersion", res.BinaryVersion, "candidates", strategy.DescribeConflict(res.Conflicting)}},
		})
		d.outcome, d.unwritten = leaseConflict, leaseConflict
		d.settled = true
		return d
	}
	d.resolve(ReasonStrategyConflict)
	if res.BinaryVersion == "" {
		// No candidate says which binary it runs, so none can say which
		// strategy the Lease follows: report each one, elect nobody.
		for _, lc := range slices.SortedFunc(slices.Values(cands), byName) {
			d.invalid(lc, "any strategy", fmt.Errorf("binaryVersion %q is not a strict semantic version", lc.Spec.BinaryVersion))
		}
		d.log(2, "No candidate has a valid binaryVersion; not electing", "candidates", len(cands))
		d.outcome, d.unwritten = leaseConflict, leaseConflict
		d.settled = true
		return d
	}
	strat, ok := o.Strategies.Get(res.Strategy)
	if left := ok && v.builtinLeft && strategy.Builtin(res.Strategy); !ok || left {
		// Another controller owns this strategy, or elects it now: no
		// pings, no writes.
		msg := "Strategy not handled here; leaving the Lease alone"
		if left {
			msg = "Strategy left to kube-apiserver's election controller while this replica does not hold the lock they share; leaving the Lease alone"
		}
		d.log(4, msg, "strategy", res.Strategy)
		d.outcome, d.unwritten = leaseUnmanaged, leaseUnmanaged
		d.settled = true
		return d
	}
	ranked, invalid := strat.Rank(cands)
	for _, inv := range invalid {
		d.invalid(inv.Candidate, "strategy "+string(strat.Name()), inv.Reason)
	}
	for _, lc := range ranked {
		d.resolve("candidate/" + lc.Name) // valid (again)
	}

	e.strat, e.ranked = strat, ranked
	e.wakeForLease()
	if e.leaseLive && !e.holderIsCandidate() {
		// A holder outside coordinated election cannot hand over: nothing to
		// ping or steer until it releases the Lease or the Lease expires.
		// Its tenure is not part of any election's latency.
		d.clearNeeded = true
		d.log(4, "Lease held by a non-candidate; waiting for release or expiry", "holder", e.holder)
		d.outcome, d.unwritten = leaseUnmanaged, leaseUnmanaged
		d.settled = true
		return d
	}
	e.judge()
	e.pingLateHolder()
	e.decideWrite()
	d.outcome, d.unwritten = e.outcome(d.write != nil && d.write.kind != writeOpen), e.outcome(false)
	return d
}

// invalid reports, once per change, that a candidate cannot take part.
func (d *decision) invalid(lc *coordinationv1beta1.LeaseCandidate, under string, reason error) {
	d.event(eventIntent{
		topic: "candidate/" + lc.Name, related: lc.Name, eventType: corev1.EventTypeWarning, reason: ReasonInvalidCandidate, action: "Elect",
		note:    fmt.Sprintf("Candidate %s cannot take part under %s: %v", lc.Name, under, reason),
		counter: countInvalid,
		log:     &logLine{level: 2, msg: "Invalid candidate", kv: []any{"candidate", lc.Name, "reason", reason}},
	})
}

// liveCandidates returns the candidates of the Lease that have renewed
// within the candidate TTL, and the earliest time one of them will expire.
func liveCandidates(o *Options, v *view) ([]*coordinationv1beta1.LeaseCandidate, time.Time) {
	var live []*coordinationv1beta1.LeaseCandidate
	var next time.Time
	for _, c := range v.candidates {
		expiry := c.rec.lastRenewal().Add(o.CandidateTTL)
		if !v.now.Before(expiry) {
			continue // expired: ignored, and garbage-collected
		}
		live = append(live, c.lc)
		next = earliest(next, expiry)
	}
	return live, next
}

// election is the state of one decide call past the strategy checks.
type election struct {
	o      *Options
	v      *view
	d      *decision
	strat  strategy.Strategy
	ranked []*coordinationv1beta1.LeaseCandidate // valid candidates, best first
	all    []*coordinationv1beta1.LeaseCandidate // every unexpired candidate

	holder    string // current holder ("" if none)
	leaseLive bool   // the Lease exists, names a holder and has not expired by local observation
	// leaseExpiry is when a live Lease expires by local observation.
	leaseExpiry time.Time
	// leaseExpiredAt is when the holder's Lease expired by local observation
	// (zero unless it has).
	leaseExpiredAt time.Time
	// lateAt is when the holder is late (see pingLateHolder): at the
	// expiry, or earlier for a holder that has missed its renewals. Zero
	// when there is no holder.
	lateAt  time.Time
	best    *coordinationv1beta1.LeaseCandidate
	waiting bool // a candidate above best may still answer
	// contenders are the candidates that may still turn out best: those
	// above best that were pinged or are awaited, and best.
	contenders []string
}

// judgeLease judges the Lease on the local clock: it is live while it names
// a holder whose record changed within the lease duration, and for as long
// again as a write may take to show (spread): a renewal the watch has yet to
// deliver, or that waits in a slow server's queue as the controller's own
// writes did lately, must not make a live holder look expired. When the
// server, not the holders, is slow, every holder is late at once; waiting
// out the server's delay keeps the controller from pinging and electing
// against them, and so from loading the server further.
func (e *election) judgeLease() {
	if e.v.lease == nil {
		return
	}
	e.holder = holderIdentity(e.v.lease)
	if e.holder == "" {
		return
	}
	expiry := e.v.record.observedAt.Add(e.leaseDuration() + e.v.spread)
	e.lateAt = expiry
	if gap := e.v.record.renewGap; gap > 0 {
		// Late once it has missed two renewals of its own cadence, and the
		// Lease expires within the ping timeout (at most half the lease
		// duration away): a holder that renews every 2 s on a 15 s Lease
		// is late 10 s after its last renewal, one that renews every 10 s
		// only at the expiry.
		early := expiry.Add(-min(e.o.PingTimeout, e.leaseDuration()/2))
		if missed := e.v.record.observedAt.Add(2*gap + e.v.spread); !missed.After(early) {
			e.lateAt = early
		}
	}
	if exited := e.v.holderExitedAt; !exited.IsZero() && e.v.now.Before(expiry) {
		// Proof of death: the process that renewed the Lease last has
		// exited, so nobody holds the term it renewed. Whatever it had in
		// flight carries its fencing token.
		e.leaseExpiredAt, e.lateAt = exited, exited
		e.d.event(eventIntent{
			topic: ReasonHolderExited, eventType: corev1.EventTypeNormal, reason: ReasonHolderExited, action: "Elect",
			note: fmt.Sprintf("The kubelet reports that the process of holder %s has exited; its term (leaseTransitions %d) is over before its Lease expires",
				e.holder, ptr.Deref(e.v.lease.Spec.LeaseTransitions, 0)),
			counter: countHolderExited,
			log:     &logLine{level: 2, msg: "The holder's process has exited; electing without waiting for its Lease to expire", kv: []any{"holder", e.holder, "expiry", expiry}},
		})
		return
	}
	if e.v.now.Before(expiry) {
		e.leaseLive, e.leaseExpiry = true, expiry
		return
	}
	e.leaseExpiredAt = expiry
}

// wakeForLease asks to look again when the live Lease's holder would be late
// (to ping it), or when the Lease expires. Both instants include the
// allowance for how late writes show (spread), which is what writes took
// lately and ends as soon as a prompt one shows: the step also looks again
// when they would come without it, so that a holder that stopped renewing
// during a brief lag is not judged that much later than it needs to be.
func (e *election) wakeForLease() {
	if !e.leaseLive {
		return
	}
	at := e.leaseExpiry
	if e.v.now.Before(e.lateAt) && e.holderIsCandidate() {
		at = e.lateAt
	}
	e.d.wakeAt(at)
	if early := at.Add(-e.v.spread); early.After(e.v.now) {
		e.d.wakeAt(early)
	}
}

// resolveStrategy decides the Lease's strategy. A candidate not known to be
// alive decides nothing until it answers a ping: a dead candidate of a newer
// binary asking for a strategy nobody handles here, or for another one than
// the live candidates ask for, would otherwise keep the Lease leaderless (or
// elect it by the wrong rule) until the candidate TTL has it collected.
// Unresponsive candidates are left out.
//
// The candidates not known to be alive are pinged only when they would
// decide otherwise than the alternative: the candidates known to be alive;
// or, when none is and the Lease is not live (an election is due), the
// candidates below the newest binary. Those that would decide (a binary as
// new as the alternative's, or newer) are pinged, and nothing is decided
// (waiting) until each has answered (and decides) or timed out (and is left
// out). When they would decide alike, or there is no alternative, nobody is
// pinged: steady state, and a Lease whose candidates all ask for a
// strategy handled elsewhere, cost nothing.
func (e *election) resolveStrategy() (res strategy.Resolution, waiting bool) {
	type judged struct {
		lc       *coordinationv1beta1.LeaseCandidate
		state    liveness
		deadline time.Time
		rec      candidateRecord
	}
	var live, stale []*coordinationv1beta1.LeaseCandidate
	var staleJudged []judged
	for _, lc := range e.all {
		// A ping that has timed out is noted here, whatever is decided.
		state, deadline, rec := e.liveness(lc)
		switch state {
		case alive:
			live = append(live, lc)
			continue
		case pinged:
			// Whatever is decided without its answer is looked at again
			// once it has answered or timed out.
			if deadline.After(e.v.now) {
				e.d.wakeAt(deadline)
			}
		case unknown:
		default:
			// Unresponsive: left out. One that no ping reached is asked
			// again once its backoff is over, whatever is decided now:
			// when every candidate is left out, the strategy falls to the
			// unresponsive ones, and a dead one may make the Lease look
			// another controller's until then.
			if !deadline.IsZero() {
				e.d.wakeAt(deadline)
			}
			continue
		}
		stale = append(stale, lc)
		staleJudged = append(staleJudged, judged{lc, state, deadline, rec})
	}
	all := strategy.ResolveStrategy(append(slices.Clone(live), stale...))
	if all.BinaryVersion == "" {
		// Nobody but unresponsive candidates can say: they decide, for the
		// Events that say why nobody is elected.
		all = strategy.ResolveStrategy(e.all)
	}
	known := strategy.ResolveStrategy(live)
	// The alternative the candidates not known to be alive are weighed
	// against, and whether they would decide otherwise.
	alt, newer := known, 0 // the deciders' binary compared with the alternative's: >= 0 (live), > 0 (below the newest)
	if known.BinaryVersion == "" {
		var below []*coordinationv1beta1.LeaseCandidate
		for _, lc := range stale {
			if order, err := strategy.CompareVersions(lc.Spec.BinaryVersion, all.BinaryVersion); err == nil && order < 0 {
				below = append(below, lc)
			}
		}
		alt, newer = strategy.ResolveStrategy(below), 1
	}
	differs := alt.BinaryVersion != "" && (alt.Strategy != all.Strategy || alt.Conflict != all.Conflict)
	if e.leaseLive && differs {
		// They may be asked only once the Lease is no longer live (below
		// and on a non-candidate's Lease): what is decided now (a strategy
		// handled elsewhere, a conflict) is looked at again when it
		// expires, or a dead one would go on deciding until something else
		// changed.
		e.d.wakeAt(e.leaseExpiry)
	}
	if e.leaseLive && !e.holderIsCandidate() {
		// Nothing is elected or steered meanwhile, so nobody is asked; the
		// candidates known to be alive decide, when there are any, so that
		// a dead one does not make the Lease look another controller's
		// once it is free.
		if known.BinaryVersion != "" {
			return known, false
		}
		return all, false
	}
	if (known.BinaryVersion == "" && e.leaseLive) || !differs {
		return all, false
	}
	left := slices.Clone(live)
	slices.SortFunc(staleJudged, func(a, b judged) int { return byName(a.lc, b.lc) })
	for _, j := range staleJudged {
		if order, err := strategy.CompareVersions(j.lc.Spec.BinaryVersion, alt.BinaryVersion); err != nil || order < newer {
			left = append(left, j.lc) // an older (or unreadable) binary decides nothing while a newer one may live
			continue
		}
		e.await(j.lc, j.state, j.deadline, j.rec)
		e.contenders = append(e.contenders, j.lc.Name)
		waiting = true
	}
	if waiting {
		return alt, true
	}
	return strategy.ResolveStrategy(left), false
}

// pingLateHolder pings a live holder that is late: it has missed two
// renewals of its own cadence and its Lease expires within the ping
// timeout (see judgeLease). A client-go elector gives up leading after its
// renew deadline, so a holder this late is gone, cut off, or about to stop;
// asking it now means that by the expiry it has answered (it is alive and
// may be elected again) or it is known not to have, and its successor is
// elected then rather than a ping timeout later. Holders that renew on
// time are never pinged, whatever their cadence.
func (e *election) pingLateHolder() {
	if !e.leaseLive || e.v.now.Before(e.lateAt) {
		return
	}
	lc := e.liveHolder()
	if lc == nil {
		return
	}
	rec := e.recordOf(lc)
	switch {
	case rec.unresponsive:
		return
	case !rec.renewedAt.IsZero() && !rec.renewedAt.Before(e.lateAt):
		return // it answered, or renewed its candidate, since it became late
	case !rec.pingedAt.IsZero() && rec.pingSent:
		return // asked; its answer or the expiry will tell
	}
	e.ping(lc) // early: should the budget hold it back, the expiry asks again
	e.d.log(2, "The holder's Lease is about to expire unrenewed; pinging the holder", "holder", lc.Name, "lateSince", e.lateAt)
}

// outcome is the state of the election once this step is done, for
// cle_leases, with or without its write.
func (e *election) outcome(written bool) leaseState {
	switch {
	case e.leaseLive && e.best != nil && e.best.Name != e.holder:
		return leasePreempting
	case e.leaseLive || written: // live, or given to the winner now
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
//
// On a Lease with a history of holders, a candidate that may be alive is not
// pinged or waited for when a candidate below it that is equal on merit is
// alive: it would win only the tie-break, which matters for nothing but the
// first election of a Lease (see gatheringUntil).
func (e *election) judge() {
	holder := e.liveHolder()
	// The unsteady candidates passed over so far.
	var passedOver []*coordinationv1beta1.LeaseCandidate
	for i, lc := range e.ranked {
		if holder != nil && !strategy.Preempts(e.strat, lc, holder) {
			e.best = holder
			e.contenders = append(e.contenders, holder.Name)
			return
		}
		if holder != nil {
			if until := e.unsteadyUntil(lc, holder); !until.IsZero() {
				e.passOverUnsteady(lc, holder, until)
				passedOver = append(passedOver, lc)
				continue
			}
			if u := e.displacer(lc, passedOver); u != nil {
				e.d.log(3, "Not preferring a candidate that an unsteady one would preempt at once", "candidate", lc.Name, "unsteady", u.Name, "holder", holder.Name)
				continue
			}
		}
		state, deadline, rec := e.liveness(lc)
		if (state == unknown || state == pinged) && e.v.record.held && e.aliveEqualBelow(i) {
			continue
		}
		switch state {
		case alive:
			e.best = lc
			e.contenders = append(e.contenders, lc.Name)
			if lc.Name != e.holder {
				// It counts as alive only within the freshness window.
				e.d.wakeAt(deadline)
			}
			return
		case unknown, pinged:
			e.await(lc, state, deadline, rec)
			e.contenders = append(e.contenders, lc.Name)
			e.waiting = true
		case unresponsive:
			e.d.wakeAt(deadline) // when an unreachable one is tried again
		}
	}
}

// await asks lc, whose liveness is unknown or pinged, whether it is alive:
// it pings lc unless a ping to it is already on its way, and has the
// election looked at again when the answer is due.
func (e *election) await(lc *coordinationv1beta1.LeaseCandidate, state liveness, deadline time.Time, rec candidateRecord) {
	if state == unknown {
		e.ping(lc)
		e.d.wakeAt(e.v.now.Add(e.o.PingTimeout))
		return
	}
	if !rec.pingSent {
		e.ping(lc) // the last attempt failed
	}
	e.d.wakeAt(deadline)
}

// displacer returns the unsteady candidate passed over above lc that would
// preempt lc at once were lc to hold the Lease, or nil: one that runs older
// versions than lc (emulation, then binary), which the unsteady rule never
// holds back from it, and that may be alive (one not known to be is pinged,
// and lc waits for the answer). Naming lc would then cost two hand-overs
// where the end of the unsteady window costs one, so lc is passed over too.
// It never runs older versions than the holder (the unsteady one would then
// run older ones too, and not be held back), so the version order still
// holds.
func (e *election) displacer(lc *coordinationv1beta1.LeaseCandidate, passedOver []*coordinationv1beta1.LeaseCandidate) *coordinationv1beta1.LeaseCandidate {
	for _, u := range passedOver {
		if !strategy.Preempts(strategy.OldestEmulationVersion{}, u, lc) {
			continue
		}
		state, deadline, rec := e.liveness(u)
		switch state {
		case alive:
			e.d.wakeAt(deadline) // its freshness ends
			return u
		case unknown, pinged:
			e.await(u, state, deadline, rec)
			return u
		case unresponsive:
			e.d.wakeAt(deadline) // when an unreachable one is tried again
		}
	}
	return nil
}

// unsteadyLosses is how many terms a candidate loses unreleased within
// Options.UnsteadyWindow to be unsteady.
const unsteadyLosses = 2

// unsteadyUntil returns until when lc, better than the live holder, is not
// preferred over it because its own terms keep ending unreleased (see
// Options.UnsteadyWindow), or zero when it is preferred as usual: the rule
// is off, lc emulates an older version than the holder (the version order is
// never held back), or it lost fewer than unsteadyLosses terms within the
// window.
func (e *election) unsteadyUntil(lc, holder *coordinationv1beta1.LeaseCandidate) time.Time {
	if e.o.UnsteadyWindow <= 0 || strategy.Preempts(strategy.OldestEmulationVersion{}, lc, holder) {
		return time.Time{}
	}
	return e.v.record.unsteadyUntil(lc.Name, e.v.now, e.o.UnsteadyWindow)
}

// passOverUnsteady says why lc is not preferred over the holder until until,
// and looks again then.
func (e *election) passOverUnsteady(lc, holder *coordinationv1beta1.LeaseCandidate, until time.Time) {
	e.d.wakeAt(until)
	e.d.event(eventIntent{
		topic: "unsteady/" + lc.Name, related: lc.Name, eventType: corev1.EventTypeNormal, reason: ReasonCandidateUnsteady, action: "Prefer",
		note: fmt.Sprintf("Candidate %s ranks above holder %s, but %d of its terms ended unreleased (its Lease expired or its process exited) within %s; it is not preferred over a live holder until %s",
			lc.Name, holder.Name, unsteadyLosses, e.o.UnsteadyWindow, until.UTC().Format(time.RFC3339)),
		log: &logLine{level: 2, msg: "Not preferring an unsteady candidate over the live holder", kv: []any{"candidate", lc.Name, "holder", holder.Name, "until", until}},
	})
}

// aliveEqualBelow reports whether a candidate ranked below the i-th one is
// equal to it on merit and alive.
func (e *election) aliveEqualBelow(i int) bool {
	for _, lc := range e.ranked[i+1:] {
		if e.strat.CompareMerit(e.ranked[i], lc) != 0 {
			return false
		}
		if state, _, _ := e.peek(lc); state == alive {
			return true
		}
	}
	return false
}

// ping asks lc to renew. The ping time is just after the candidate's own
// renewTime: client-go's candidates answer a ping later than their last
// renewal, on their own clock, so a ping at this controller's time would
// make one whose clock runs behind rewrite its candidate again and again
// until its clock caught up. Liveness never reads the ping time: only a new
// renewTime counts as the answer.
func (e *election) ping(lc *coordinationv1beta1.LeaseCandidate) {
	at := e.v.now.Truncate(time.Microsecond)
	if lc.Spec.RenewTime != nil {
		// The API keeps microseconds: one after the renewal is after it.
		at = lc.Spec.RenewTime.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	e.d.pings = append(e.d.pings, pingIntent{candidate: lc.Name, pingTime: at, early: e.leaseLive})
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

// recordOf returns the record of lc in the view.
func (e *election) recordOf(lc *coordinationv1beta1.LeaseCandidate) candidateRecord {
	for _, c := range e.v.candidates {
		if c.lc == lc {
			return c.rec
		}
	}
	return candidateRecord{uid: lc.UID, renewTime: renewTimeOf(lc), firstSeen: e.v.now, renewedAt: e.v.now, onlyCreated: true}
}

// liveness judges one candidate; the deadline is when that judgement lapses.
// A ping that has gone unanswered past the timeout makes the candidate
// unresponsive (noted in the decision).
func (e *election) liveness(lc *coordinationv1beta1.LeaseCandidate) (liveness, time.Time, candidateRecord) {
	state, deadline, rec := e.peek(lc)
	if state != pinged || e.v.now.Before(deadline) {
		return state, deadline, rec
	}
	if !slices.ContainsFunc(e.d.unanswered, func(u unansweredPing) bool { return u.candidate == lc.Name }) {
		e.d.unanswered = append(e.d.unanswered, unansweredPing{candidate: lc.Name, uid: lc.UID, pingedAt: rec.pingedAt})
	}
	switch after, verdict := rec.pingTimedOut(e.v.now, e.o.PingTimeout); verdict {
	case verdictUnreachable:
		return unresponsive, after.unreachable.until, rec
	case verdictAskAgain:
		return unknown, time.Time{}, rec
	default:
		return unresponsive, time.Time{}, rec
	}
}

// peek is liveness without noting a timed-out ping: a candidate whose ping
// timed out is still pinged, with a deadline in the past.
func (e *election) peek(lc *coordinationv1beta1.LeaseCandidate) (liveness, time.Time, candidateRecord) {
	rec := e.recordOf(lc)
	if e.leaseLive && lc.Name == e.holder {
		return alive, time.Time{}, rec // its Lease renewals prove it alive
	}
	if lc.Name == e.holder && !e.leaseExpiredAt.IsZero() && rec.renewedAt.Before(e.lateAt) && !rec.unresponsive {
		// A holder that let its Lease expire is suspect whatever its
		// candidate's freshness says: only a renewal since it became late
		// (an answer to the ping pingLateHolder sent then, or to one sent
		// since) shows it is alive.
		rec.renewedAt = time.Time{}
	}
	if e.leaseLive && lc.Name != e.holder && rec.onlyCreated {
		// Under a live holder, a candidate is preferred only once it has
		// written since its creation (answered a ping, or renewed): one
		// that registered and died (a crash loop, a process killed while
		// starting) would have the holder stop its work and hand over to
		// nobody, leaving the Lease leaderless until it expires. Proof
		// costs one ping and its answer, milliseconds for a live one.
		rec.renewedAt = time.Time{}
	}
	state, deadline := rec.state(e.v.judgeAt, e.o.CandidateFreshness, e.o.PingTimeout)
	return state, deadline, rec
}

func (e *election) leaseDuration() time.Duration {
	return leaseDurationOf(e.v.lease, e.o.LeaseDuration)
}

// leaseDurationOf is the Lease's leaseDurationSeconds, or def when it has
// none (or no Lease).
func leaseDurationOf(l *coordinationv1.Lease, def time.Duration) time.Duration {
	if l != nil {
		if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
			return time.Duration(s) * time.Second
		}
	}
	return def
}

// decideWrite turns the judgement into the Lease write, if any.
func (e *election) decideWrite() {
	d := e.d
	if e.best != nil {
		d.resolve(ReasonNoEligible)
	}
	if e.leaseLive {
		d.clearNeeded = true
	} else {
		d.markNeeded, d.neededSince = true, e.neededAt()
	}
	if until := e.departedUntil(); !until.IsZero() {
		// Whoever created the Lease again (or nobody), the deleted Lease's
		// holder may still lead: naming or preferring anybody else now
		// could make two leaders.
		d.waiting = waitDeparted
		d.wakeAt(until)
		d.log(2, "The Lease was deleted while held; electing once its holder's term has run out on this controller's clock",
			"departedHolder", e.v.record.departed.holder, "until", until, "holder", e.holder, "best", e.bestName())
		return
	}
	if e.leaseLive {
		e.steer()
		if d.write == nil {
			d.settled = true
		}
		return
	}
	if e.waiting {
		d.waiting = waitAnswer // a better candidate may still answer
		return
	}
	if e.best == nil {
		d.event(eventIntent{
			topic: ReasonNoEligible, eventType: corev1.EventTypeWarning, reason: ReasonNoEligible, action: "Elect",
			note:    fmt.Sprintf("None of the %d candidates can lead: %s", len(e.all), e.describeCandidates()),
			counter: countNoEligible,
		})
		return
	}
	if e.opensFirst() {
		if e.v.lease == nil {
			e.open()
			if until := e.gatheringUntil(); !until.IsZero() {
				e.d.wakeAt(until)
			}
			return
		}
		if !e.registrationsShown() {
			// Asked for now, so that the probe travels while the
			// candidates gather.
			e.d.probe = e.best.Name
		}
	}
	if until := e.unseenHolderUntil(); !until.IsZero() {
		d.waiting = waitUnseenHolder
		d.wakeAt(until)
		d.log(2, "The Lease has no holder and no history, but its candidates were there before this controller started: a holder of a Lease deleted before then may still act; electing once a lease duration has passed",
			"until", until, "best", e.best.Name)
		return
	}
	if until := e.gatheringUntil(); !until.IsZero() {
		d.waiting = waitGathering
		d.wakeAt(until)
		d.log(2, "Gathering candidates before the first election", "candidates", len(e.all), "until", until, "best", e.best.Name)
		return
	}
	if until := e.registrationsUntil(); !until.IsZero() {
		d.waiting = waitRegistrations
		d.wakeAt(until)
		d.log(3, "Electing once the candidate watch shows every registration made before the Lease was created", "until", until, "best", e.best.Name)
		return
	}
	e.elect()
}

// opensFirst reports whether the first election of this Lease opens it: a
// Lease that has never had a holder, with a gathering window, is created
// naming nobody, and its first holder is named only once the candidate
// watch is known to show every registration that reached the server before
// that creation (see registrationProbe). On a server that falls behind,
// the watch shows registrations seconds after they were made, and the
// gathering window cannot tell how many are still on their way: the
// holderless Lease marks where the election began, and the probe proves
// that nobody registered before it is missing. One more write per Lease,
// once in its life; a Lease that existed before (created by somebody
// else, or released) is not created again.
func (e *election) opensFirst() bool {
	return e.o.ElectionGather > 0 && !e.v.record.held && e.v.probe.usable
}

// registrationsShown reports whether a probe sent after the Lease object
// was first seen has been delivered.
func (e *election) registrationsShown() bool {
	s := e.v.record.sighting
	return !e.v.probe.usable || (s.set && e.v.probe.proved > s.mark)
}

// registrationsUntil returns, for a first election that opened its Lease,
// when it stops waiting for the probe (zero: it does not wait): once a
// probe is delivered, or, should none be (the candidates cannot be written
// to, or the watch has stalled), a ping timeout and twice the watch's lag
// after the Lease was first seen, when the election goes on with the
// candidates it sees.
func (e *election) registrationsUntil() time.Time {
	if !e.opensFirst() || e.registrationsShown() {
		return time.Time{}
	}
	s := e.v.record.sighting
	until := s.at.Add(e.o.PingTimeout + 2*e.v.spread)
	if !s.set || !e.v.now.Before(until) {
		e.d.log(2, "The candidate watch was not shown to hold every registration made before the Lease was created; electing with the candidates it shows",
			"best", e.best.Name)
		// No probe either: the election's write goes at once, on what
		// this step judged.
		e.d.probe = ""
		return time.Time{}
	}
	return until
}

// open creates the Lease of a first election naming nobody (see
// opensFirst).
func (e *election) open() {
	e.d.write = &leaseWrite{
		kind: writeOpen, strategy: e.strat.Name(), candidates: e.describeCandidates(),
		lease: &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.v.key.Namespace, Name: e.v.key.Name},
			Spec: coordinationv1.LeaseSpec{
				// Empty rather than unset: kube-apiserver's controller
				// elects a Lease with an empty holder, and fails on one
				// with none.
				HolderIdentity:       ptr.To(""),
				Strategy:             ptr.To(e.strat.Name()),
				LeaseDurationSeconds: ptr.To(int32(e.o.LeaseDuration / time.Second)),
			},
		},
	}
	e.d.log(2, "Opening the first election: creating the Lease naming nobody", "candidates", len(e.all), "best", e.best.Name)
}

// bestName is the best candidate's name, or "" while there is none.
func (e *election) bestName() string {
	if e.best == nil {
		return ""
	}
	return e.best.Name
}

// gatheringUntil returns when the gathering window before the first election
// of a Lease closes, or zero when it is closed. Candidates that start
// together register milliseconds apart; electing the first one to register
// would make a worse candidate lead until the better one is steered to. So a
// Lease that has never had a holder waits for the window, measured from the
// first candidate seen, and closed early once no candidate has joined for a
// fraction of it. A loaded server delivers registrations made together as
// far apart as its writes take to show in the watch, so the window, and its
// early close, are that spread longer: nothing when the server keeps up. A
// Lease with a history of holders is elected at once.
func (e *election) gatheringUntil() time.Time {
	gather := e.o.ElectionGather
	rec := &e.v.record
	if gather <= 0 || rec.held {
		return time.Time{}
	}
	lag := e.v.spread
	until := rec.firstJoin.Add(gather + lag)
	if quiet := rec.lastJoin.Add(gather/gatherQuietFraction + lag); quiet.Before(until) {
		until = quiet
	}
	if !e.v.now.Before(until) {
		return time.Time{}
	}
	return until
}

// unseenHolderUntil returns, for a Lease that does not exist, or exists
// without a holder or any history of one, and whose candidates were already
// there when this controller started, when a holder it could not see has
// surely stopped acting: the Lease may have been deleted while held just
// before this controller started (during a failover, say), and created
// again empty (kubectl, GitOps), and its holder acts on until its renewals
// fail. That is Options.UnseenHolderWait (by default a lease duration), or
// the longest lease duration this Lease was seen with if that is longer,
// after the controller first saw the candidates. A Lease this controller
// saw, or whose candidates all came later, does not wait.
func (e *election) unseenHolderUntil() time.Time {
	rec := &e.v.record
	wait := e.o.UnseenHolderWait
	if wait <= 0 || !rec.inherited || rec.held || rec.departed.holder != "" {
		return time.Time{}
	}
	if until := rec.firstJoin.Add(max(wait, rec.longestDuration)); e.v.now.Before(until) {
		return until
	}
	return time.Time{}
}

// departedUntil returns, while the term of the holder of a deleted Lease
// has not run out by this controller's observation, when it does (see
// leaseDeleted); zero once it has, or when the Lease names that holder
// again. The holder may go on acting until then: it learns of the deletion
// only at its next renewal, and may not renew at all (paused, cut off).
func (e *election) departedUntil() time.Time {
	dep := e.v.record.departed
	if dep.holder == "" || (e.v.lease != nil && e.holder == dep.holder) || e.v.departedExited {
		return time.Time{}
	}
	if e.v.now.Before(dep.until) {
		return dep.until
	}
	return time.Time{}
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
	return e.v.now
}

// elect creates the Lease naming the best candidate, or names it the holder of
// the vacant or expired Lease. Either way leaseTransitions, the fencing token,
// goes above every value this Lease has had that this controller saw.
func (e *election) elect() {
	d := e.d
	term, ok := e.nextTerm()
	if !ok {
		// The fencing token cannot go up any more, and a holder named under
		// a token already used could act alongside the one that used it.
		// No write (the API rejects the overflow anyway) and no retry
		// (nothing the candidates do can help): only an operator can reset
		// the token, by lowering or deleting the Lease and restarting the
		// controller, which otherwise remembers the highest token seen.
		d.event(eventIntent{
			topic: ReasonTermsExhausted, eventType: corev1.EventTypeWarning, reason: ReasonTermsExhausted, action: "Elect",
			note: fmt.Sprintf("Cannot elect %s: leaseTransitions has reached %d, the highest fencing token there is", e.best.Name, int32(math.MaxInt32)),
			log:  &logLine{level: 0, msg: "Not electing: the Lease's fencing token cannot go higher", kv: []any{"best", e.best.Name, "leaseTransitions", int32(math.MaxInt32)}},
		})
		return
	}
	d.resolve(ReasonTermsExhausted)
	now := metav1.NewMicroTime(e.v.now)
	name := e.strat.Name()
	w := &leaseWrite{
		winner: e.best.Name, confirmWinner: e.v.record.held, previousHolder: e.holder, strategy: name,
		candidates: e.describeCandidates(), first: !e.v.record.held,
	}
	if e.v.lease == nil {
		w.kind = writeCreate
		w.lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.v.key.Namespace, Name: e.v.key.Name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(e.best.Name),
				Strategy:             ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(e.o.LeaseDuration / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
				LeaseTransitions:     ptr.To(term),
			},
		}
	} else {
		w.kind = writeElect
		clone := e.v.lease.DeepCopy()
		w.previousPreferred, w.previousStrategy = ptr.Deref(clone.Spec.PreferredHolder, ""), ptr.Deref(clone.Spec.Strategy, "")
		clone.Spec.HolderIdentity = ptr.To(e.best.Name)
		clone.Spec.PreferredHolder = nil
		clone.Spec.Strategy = ptr.To(name)
		clone.Spec.AcquireTime = &now
		clone.Spec.RenewTime = &now
		// The duration the Lease carries is the last holder's (client-go's
		// release writes 1s); the new holder gets the controller's until
		// it writes its own with its first renewal.
		clone.Spec.LeaseDurationSeconds = ptr.To(int32(e.o.LeaseDuration / time.Second))
		clone.Spec.LeaseTransitions = ptr.To(term)
		// The last holder's stamp says which process renewed; the naming
		// is no renewal of that process's.
		proof.Unstamp(clone)
		w.lease = clone
		if e.holder != "" && !e.leaseExpiredAt.IsZero() && !askedToHandOver(e.v.lease) {
			w.lostBy = e.holder
		}
	}
	d.write = w
}

// askedToHandOver reports whether the Lease names a preferredHolder other
// than its holder. A holder so asked may hand over by letting its Lease
// expire, or by exiting (client-go electors without ReleaseOnCancel, pkg/lock
// adopters without ElectorContext, components that exit on losing their
// lead): its term then ends as asked, not unreleased, and it is no loss.
func askedToHandOver(l *coordinationv1.Lease) bool {
	preferred := ptr.Deref(l.Spec.PreferredHolder, "")
	return preferred != "" && preferred != holderIdentity(l)
}

// nextTerm returns the leaseTransitions of the next election: above every
// value this Lease has had that the controller saw, even across its
// deletion, above the highest token any of its candidates records
// (access.HighestTokenAnnotation: what they held or saw, which outlives the
// Lease and this controller's memory of it), and above the token floor
// (every token handed out before this controller started, and of the
// histories it dropped: see tokenBound), and, for a Lease deleted since it
// was last named, above the bound as it is now; 1 for the first holder of a
// Lease with no history on a controller that found no bound. The candidate library leads with this count as its
// fencing token (a naming with acquireTime equal to renewTime counts the
// term), so one term is one number from the election on. It reports false
// when the token is at its highest value and cannot go above it.
func (e *election) nextTerm() (int32, bool) {
	highest := e.v.tokenFloor
	for _, c := range e.v.candidates {
		highest = max(highest, access.HighestToken(c.lc.Annotations))
	}
	if e.v.lease != nil {
		highest = max(highest, e.v.record.maxTransitions, ptr.Deref(e.v.lease.Spec.LeaseTransitions, 0))
	} else if e.v.record.held {
		highest = max(highest, e.v.record.maxTransitions)
	}
	if e.v.record.gone || (e.v.lease == nil && e.v.record.held) {
		highest = max(highest, e.v.tokenBound)
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
func (e *election) steer() {
	current := ptr.Deref(e.v.lease.Spec.PreferredHolder, "")
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
	if current == want && ptr.Deref(e.v.lease.Spec.Strategy, "") == name {
		return
	}
	clone := e.v.lease.DeepCopy()
	clone.Spec.PreferredHolder = nil
	if want != "" {
		// The best, or (while waiting, maybe with no best yet) a contender.
		clone.Spec.PreferredHolder = ptr.To(want)
	}
	clone.Spec.Strategy = ptr.To(name)
	e.d.write = &leaseWrite{
		kind: writeSteer, lease: clone, winner: want, previousHolder: e.holder,
		previousPreferred: current, previousStrategy: ptr.Deref(e.v.lease.Spec.Strategy, ""), strategy: name,
	}
}

// candidate is the candidate of the view named name (nil: none), for the
// names a decision carries.
func (v *view) candidate(name string) *coordinationv1beta1.LeaseCandidate {
	for _, c := range v.candidates {
		if c.lc.Name == name {
			return c.lc
		}
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

// ownWriteWait bounds how long a step waits for the cache to show the
// controller's own write of a Lease; the informer delivers it in
// milliseconds, unless a relist skipped it.
const ownWriteWait = 5 * time.Second

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

// byName orders candidates by name, so that what is reported about several
// reads the same on every step.
func byName(a, b *coordinationv1beta1.LeaseCandidate) int {
	return strings.Compare(a.Name, b.Name)
}
