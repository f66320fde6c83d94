package controller

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/simworld"
)

// simBuiltin is the election controller built into kube-apiserver, as
// v1.37.2 behaves (pkg/controlplane/controller/leaderelection), in the
// simulated world: a second writer of the Lease and its candidates. In
// native mode cle-controller's active replica contends for that
// controller's lock beside its own, and in a quarter of the runs
// kube-apiserver holds it now and then during the faults: it elects the
// Leases of OldestEmulationVersion by its own rules, and pings and writes
// the strategy of the others, while cle's active replica elects only those
// of cle's strategies (Options.ElectsBuiltin); cle elects every Lease again
// when it takes the lock back. It is part of the world, not of cle: its
// rules are upstream's, per Lease of the namespace, each on its own queue
// key.
//
// Upstream judges a holder's expiry by comparing the holder's renewTime with
// its own clock, so clocks must agree within LeaseDuration - RenewDeadline
// (the candidate library's documented assumption under it): in these runs
// every clock is within a second of true time. And upstream creates a
// deleted Lease again at once, naming a holder for 5 s, while an adopter's
// client-go elector that led the deleted Lease acts on until its renew
// deadline (the candidate library itself stops at the NotFound): these runs
// delete no Lease, as docs/testing.md says.
type simBuiltin struct {
	w      *simWorld
	offset time.Duration
	// acting: it holds the shared lock and elects. holds: cle's replicas
	// do not hold that lock (from the moment cle's active replica lost it
	// to when it takes it back), so they elect only cle's strategies.
	acting, holds bool
	// Its informers' copies, by namespace/name.
	leases                map[string]*coordinationv1.Lease
	cands                 map[string]*coordinationv1beta1.LeaseCandidate
	leaseWatch, candWatch *simworld.Watcher
	// stepAt is, per Lease (namespace/name), when its queued step runs
	// (none: not queued).
	stepAt map[string]time.Time
}

// Upstream's constants.
const (
	builtinRequeue       = 5 * time.Second
	builtinLeaseDuration = 5 * time.Second // leaseDurationSeconds of a Lease it elects
	builtinElection      = 5 * time.Second // how long a ping is awaited
	builtinCandidateTTL  = 30 * time.Minute
)

// builtinRun tells whether the run of seed has kube-apiserver's controller
// in its world: drawn apart from the run's own random numbers, so that the
// other runs are what they were without it.
func builtinRun(seed uint64) bool {
	return rand.New(rand.NewPCG(seed^0x5bd1e995, seed)).IntN(4) == 0
}

func (w *simWorld) addBuiltin() {
	b := &simBuiltin{
		w: w, offset: w.DurationBetween(-500*time.Millisecond, 500*time.Millisecond),
		leases: map[string]*coordinationv1.Lease{}, cands: map[string]*coordinationv1beta1.LeaseCandidate{}, stepAt: map[string]time.Time{},
	}
	b.leaseWatch = w.Watch(func(obj runtime.Object, deleted bool) {
		l := obj.(*coordinationv1.Lease)
		if deleted {
			delete(b.leases, simKey(l.Namespace, l.Name))
		} else {
			b.leases[simKey(l.Namespace, l.Name)] = l
		}
		b.enqueue(l.Namespace, l.Name)
	})
	b.candWatch = w.Watch(func(obj runtime.Object, deleted bool) {
		lc := obj.(*coordinationv1beta1.LeaseCandidate)
		if deleted {
			delete(b.cands, simKey(lc.Namespace, lc.Name))
			return
		}
		b.cands[simKey(lc.Namespace, lc.Name)] = lc
		// Upstream skips a candidate whose answer to a ping is pending.
		if lc.Spec.PingTime == nil || lc.Spec.RenewTime == nil || !lc.Spec.RenewTime.Before(lc.Spec.PingTime) {
			b.enqueue(lc.Namespace, lc.Spec.LeaseName)
		}
	})
	w.connect(b.leaseWatch, b.candWatch)
	w.builtin = b
	// Through the faults it takes the lock from cle now and then, and
	// holds it for a while.
	for t := w.DurationBetween(10*time.Second, 60*time.Second); t < simFaultPhase; t += w.DurationBetween(60*time.Second, 150*time.Second) {
		w.At(w.Start.Add(t), b.takeLock)
	}
}

func (b *simBuiltin) now() time.Time { return b.w.Now.Add(b.offset) }

// takeLock: kube-apiserver takes the election controller's lock once cle's
// active replica lost it: from then on cle's replicas elect only the Leases
// of cle's strategies, and kube-apiserver elects once the lock has lapsed;
// cle takes the lock back later.
func (b *simBuiltin) takeLock() {
	w := b.w
	if !w.Faulty || b.holds {
		return
	}
	w.Fault("builtin-acts")
	b.holds = true
	for _, sc := range w.ctrls {
		sc.loseSharedLock()
	}
	w.After(w.DurationBetween(0, simControllerLease), func() {
		if !w.Faulty || !b.holds {
			return
		}
		b.acting = true
		w.Tracef("kube-apiserver's election controller acts")
		for _, e := range w.elections {
			b.enqueue(e.ns, e.name)
		}
		w.After(w.DurationBetween(10*time.Second, 90*time.Second), func() {
			if b.acting {
				b.giveBack()
			}
		})
	})
}

// giveBack ends kube-apiserver's turn: cle's active replica takes the lock
// once it has lapsed.
func (b *simBuiltin) giveBack() {
	w := b.w
	b.stop()
	w.After(w.DurationBetween(0, simControllerLease), func() {
		if !b.acting {
			b.returnLock()
		}
	})
}

// returnLock: cle's replicas hold kube-apiserver's controller's lock again,
// and elect every Lease.
func (b *simBuiltin) returnLock() {
	if !b.holds {
		return
	}
	b.holds = false
	for _, sc := range b.w.ctrls {
		sc.takeSharedLock()
	}
}

// stop ends kube-apiserver's turn: its queue is dropped.
func (b *simBuiltin) stop() {
	b.acting = false
	clear(b.stepAt)
	b.w.Tracef("kube-apiserver's election controller stops acting")
}

// enqueue schedules a step of the Lease ns/name at once, unless one is due
// sooner.
func (b *simBuiltin) enqueue(ns, name string) {
	if e := b.w.electionOf(ns, name); e != nil { // else the controllers' lock
		b.schedule(e, b.w.Now)
	}
}

func (b *simBuiltin) schedule(e *simElection, t time.Time) {
	key := e.key()
	if at, ok := b.stepAt[key]; !b.acting || (ok && !t.Before(at)) {
		return
	}
	b.stepAt[key] = t
	b.w.At(t, func() {
		if at, ok := b.stepAt[key]; !b.acting || !ok || !at.Equal(t) {
			return
		}
		delete(b.stepAt, key)
		if requeue := b.step(e); requeue > 0 {
			b.schedule(e, b.w.Now.Add(requeue))
		}
	})
}

// expired is upstream's isLeaseExpired, on kube-apiserver's clock.
func (b *simBuiltin) expired(l *coordinationv1.Lease) bool {
	return l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil ||
		l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second).Before(b.now())
}

// step is upstream's reconcileElectionStep for e's Lease; it returns the
// requeue interval (0: none). Its requests complete at once.
func (b *simBuiltin) step(e *simElection) time.Duration {
	w := b.w
	now := b.now()
	var cands []*coordinationv1beta1.LeaseCandidate
	for _, name := range slices.Sorted(mapKeys(b.cands)) {
		lc := b.cands[name]
		if lc.Namespace == e.ns && lc.Spec.LeaseName == e.name && lc.Spec.RenewTime != nil && !lc.Spec.RenewTime.Add(builtinCandidateTTL).Before(now) {
			cands = append(cands, lc)
		}
	}
	if len(cands) == 0 {
		return 0
	}
	if !b.electionNeeded(b.leases[e.key()], cands, now) {
		return builtinRequeue
	}
	canVote := true
	for _, lc := range cands {
		ping, renew := lc.Spec.PingTime, lc.Spec.RenewTime
		if ping != nil && ping.Add(builtinElection).After(now) && renew.Before(ping) {
			canVote = false
			continue
		}
		if renew.Add(builtinElection).After(now) {
			continue
		}
		if ping == nil || (ping.Add(builtinElection).Before(now) && !renew.Before(ping)) {
			next := lc.DeepCopy()
			next.Spec.PingTime = &metav1.MicroTime{Time: now}
			if err, applied := w.RequestError(simworld.CandidatesGR, lc.Name); err != nil && !applied {
				return builtinRequeue
			}
			if _, err := w.writeCandidate(lc.Namespace, lc.Name, next, lc.ResourceVersion, "kube-apiserver (ping)"); err != nil {
				return builtinRequeue
			}
			canVote = false
		}
	}
	if !canVote {
		return builtinRequeue
	}
	for _, lc := range cands {
		if lc.Spec.PingTime == nil || !lc.Spec.RenewTime.Before(lc.Spec.PingTime) {
			continue
		}
		if lc.Spec.PingTime.Add(builtinElection).After(now) {
			return 0 // its answer, or the requeue of an event, comes
		}
	}
	var acked []*coordinationv1beta1.LeaseCandidate
	for _, lc := range cands {
		if lc.Spec.RenewTime.Add(builtinElection).After(now) {
			acked = append(acked, lc)
		}
	}
	if len(acked) == 0 {
		return 0 // "no available candidates"
	}
	strat, ok := builtinStrategy(acked)
	if !ok {
		return 0
	}
	elected := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
		Strategy: ptr.To(strat), LeaseDurationSeconds: ptr.To(int32(builtinLeaseDuration / time.Second)),
		RenewTime: &metav1.MicroTime{Time: now},
	}}
	if strat == coordinationv1.OldestEmulationVersion {
		best := builtinBest(acked)
		if best == nil {
			return 0
		}
		elected.Spec.HolderIdentity = ptr.To(best.Name)
	}
	if err, applied := w.RequestError(simworld.LeasesGR, e.name); err != nil && !applied {
		return 0
	}
	if _, err := w.writeLease(e, elected, "", "kube-apiserver"); err == nil {
		b.created(e)
		return builtinRequeue
	} else if !apierrors.IsAlreadyExists(err) {
		return 0
	}
	// The Lease exists: read it, and update it if need be.
	if err, _ := w.RequestError(simworld.LeasesGR, e.name); err != nil || e.lease() == nil {
		return 0
	}
	existing := e.lease().DeepCopy()
	orig := existing.DeepCopy()
	holder := existing.Spec.HolderIdentity
	if elected.Spec.HolderIdentity != nil && holder == nil {
		// Upstream dereferences the existing holder here whatever it is,
		// and its worker crashes on a Lease with no holder.
		return 0
	}
	isExpired := b.expired(existing)
	noHolder := elected.Spec.HolderIdentity != nil && *holder == ""
	expiredNewHolder := isExpired && elected.Spec.HolderIdentity != nil && *holder != *elected.Spec.HolderIdentity
	differentHolder := elected.Spec.HolderIdentity != nil && *elected.Spec.HolderIdentity != *holder
	if existing.Spec.Strategy == nil || *existing.Spec.Strategy != strat {
		existing.Spec.Strategy = ptr.To(strat)
	}
	switch {
	case noHolder || expiredNewHolder:
		existing.Spec.PreferredHolder = nil
		existing.Spec.HolderIdentity = elected.Spec.HolderIdentity
		existing.Spec.RenewTime = &metav1.MicroTime{Time: now}
		existing.Spec.LeaseDurationSeconds = ptr.To(int32(builtinLeaseDuration / time.Second))
		existing.Spec.AcquireTime = nil
	case differentHolder:
		existing.Spec.PreferredHolder = elected.Spec.HolderIdentity
	}
	if reflect.DeepEqual(existing, orig) {
		return builtinRequeue
	}
	if err, applied := w.RequestError(simworld.LeasesGR, e.name); err != nil && !applied {
		return 0
	}
	if _, err := w.writeLease(e, existing, existing.ResourceVersion, "kube-apiserver"); err != nil {
		return 0
	}
	return builtinRequeue
}

// created notes a Lease kube-apiserver created: it counts no term, so when
// terms were led before, the next holder numbers its term above only what its
// own process saw (the deletion case of docs/library.md).
func (b *simBuiltin) created(e *simElection) {
	w := b.w
	if e.anyTerm {
		e.historyLost = true
		w.Fault("token-history-lost")
	}
}

// electionNeeded is upstream's.
func (b *simBuiltin) electionNeeded(l *coordinationv1.Lease, cands []*coordinationv1beta1.LeaseCandidate, now time.Time) bool {
	if l == nil || b.expired(l) || ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		return true
	}
	for _, lc := range cands {
		if lc.Spec.RenewTime.Add(builtinCandidateTTL / 2).Before(now) {
			return true
		}
	}
	strat, ok := builtinStrategy(cands)
	if !ok || strat != coordinationv1.OldestEmulationVersion {
		return false
	}
	best := builtinBest(cands)
	return best != nil && best.Name != *l.Spec.HolderIdentity
}

// builtinStrategy is upstream's pickBestStrategy: the strategy of the
// candidates of the highest binary version, or none if they disagree.
func builtinStrategy(cands []*coordinationv1beta1.LeaseCandidate) (coordinationv1.CoordinatedLeaseStrategy, bool) {
	strat, highest := cands[0].Spec.Strategy, builtinVersion(cands[0].Spec.BinaryVersion)
	for _, lc := range cands[1:] {
		v := builtinVersion(lc.Spec.BinaryVersion)
		switch c := versionOrder(highest, v); {
		case c < 0:
			strat, highest = lc.Spec.Strategy, v
		case c == 0 && lc.Spec.Strategy != strat:
			return "", false
		}
	}
	return strat, true
}

// builtinBest is upstream's pickBestLeaderOldestEmulationVersion: the lowest
// emulation version, then binary version, then the oldest creation.
func builtinBest(cands []*coordinationv1beta1.LeaseCandidate) *coordinationv1beta1.LeaseCandidate {
	var best *coordinationv1beta1.LeaseCandidate
	for _, lc := range cands {
		if _, err := version.ParseGeneric(lc.Spec.EmulationVersion); err != nil {
			continue
		}
		if _, err := version.ParseGeneric(lc.Spec.BinaryVersion); err != nil {
			continue
		}
		if best == nil || builtinCompare(best, lc) > 0 {
			best = lc
		}
	}
	return best
}

func builtinCompare(a, b *coordinationv1beta1.LeaseCandidate) int {
	c := versionOrder(builtinVersion(a.Spec.EmulationVersion), builtinVersion(b.Spec.EmulationVersion))
	if c == 0 {
		c = versionOrder(builtinVersion(a.Spec.BinaryVersion), builtinVersion(b.Spec.BinaryVersion))
	}
	if c == 0 {
		if a.CreationTimestamp.After(b.CreationTimestamp.Time) {
			return 1
		}
		return -1
	}
	return c
}

// builtinVersion parses tolerantly, as upstream's semver.ParseTolerant; a
// version that does not parse is 0.0.0.
func builtinVersion(s string) *version.Version {
	if v, err := version.ParseGeneric(s); err == nil {
		return v
	}
	return version.MajorMinor(0, 0)
}

func versionOrder(a, b *version.Version) int {
	switch {
	case a.LessThan(b):
		return -1
	case b.LessThan(a):
		return 1
	}
	return 0
}

// builtinActs tells whether kube-apiserver's controller holds the lock now.
func (w *simWorld) builtinActs() bool { return w.builtin != nil && w.builtin.acting }
